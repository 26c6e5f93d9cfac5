-- add_jobs: put jobs on a queue's schedule and wake a looping run if one is now due soonest.
--
-- KEYS[1]  the queue's schedule (sorted set: member = job id, score = due epoch seconds)
-- KEYS[2]  the queue's wake-up list, which `delayq run --loop` blocks on
-- KEYS[3]  the queue's horizon (hash, store/index/horizons.py): a job due after its `limit` stays
--          off the schedule, and an entry it had is taken away (its row moved past the limit)
-- ARGV[1]  "NX" to leave members already there as they are (a walk of the table: a member
--          there was put there after the table was read, by a producer's add, so its score
--          is newer), "" to set every score
-- ARGV[2]  "score1 id1 score2 id2 ...": one argument, so that thousands of jobs cost the
--          caller no work per job to send (a rebuild's batch is written so by the database)
--
-- Returns {members added, 1 if the queue has a horizon else 0}: a queue without one is one
-- no run has walked since Redis lost its keys (or a new one), which the caller makes sure
-- the runs know of (store/index/schedule.py).
--
-- The limit is read here, in the same script as the ZADD, because a walk raising it writes
-- the new limit before it reads the table: an add either sees the new limit or wrote its row
-- before the walk read it.
--
-- Atomic so that "is the new job the head of the schedule?" is answered against the
-- schedule that includes it: a looping run sleeping until the old head wakes at once when a
-- sooner job arrives, and is not woken for jobs behind the head.
local flags = {}
if ARGV[1] ~= '' then
    flags = {ARGV[1]}
end
local limit = tonumber(redis.call('HGET', KEYS[3], 'limit'))
local earliest = nil
local added = 0
local pairs = {unpack(flags)}
local full = #flags + 1000
local beyond = {}
for score, id in string.gmatch(ARGV[2], '(%S+) (%S+)') do
    local due = tonumber(score)
    if limit ~= nil and due > limit then
        if #flags == 0 then
            beyond[#beyond + 1] = id
            if #beyond == 1000 then
                redis.call('ZREM', KEYS[1], unpack(beyond))
                beyond = {}
            end
        end
    else
        if earliest == nil or due < earliest then
            earliest = due
        end
        pairs[#pairs + 1] = score
        pairs[#pairs + 1] = id
        if #pairs == full then
            added = added + redis.call('ZADD', KEYS[1], unpack(pairs))
            pairs = {unpack(flags)}
        end
    end
end
if #pairs > #flags then
    added = added + redis.call('ZADD', KEYS[1], unpack(pairs))
end
if #beyond > 0 then
    redis.call('ZREM', KEYS[1], unpack(beyond))
end
local head = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
if earliest ~= nil and head[2] ~= nil and tonumber(head[2]) >= earliest then
    redis.call('LPUSH', KEYS[2], '1')
    redis.call('LTRIM', KEYS[2], 0, 0)
end
if limit == nil then
    return {added, 0}
end
return {added, 1}
