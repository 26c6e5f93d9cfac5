-- add_jobs: put jobs on a queue's schedule and wake a looping run if one is now due soonest.
--
-- KEYS[1]  the queue's schedule (sorted set: member = job id, score = due epoch seconds)
-- KEYS[2]  the queue's wake-up list, which `delayq run --loop` blocks on
-- ARGV[1]  "NX" to leave members already there as they are (a rebuild from the table: a
--          member there was put there after the table was read, by a producer's add or a
--          `--replace` moving it, so its score is newer), "" to set every score
-- ARGV[2]  "score1 id1 score2 id2 ...": one argument, so that thousands of jobs cost the
--          caller no work per job to send (a rebuild's batch is written so by the database)
--
-- Returns the number of members added.
--
-- Atomic so that "is the new job the head of the schedule?" is answered against the
-- schedule that includes it: a looping run sleeping until the old head wakes at once when a
-- sooner job arrives, and is not woken for jobs behind the head.
local flags = {}
if ARGV[1] ~= '' then
    flags = {ARGV[1]}
end
local earliest = nil
local added = 0
local pairs = {unpack(flags)}
local full = #flags + 1000
for score, id in string.gmatch(ARGV[2], '(%S+) (%S+)') do
    local due = tonumber(score)
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
if #pairs > #flags then
    added = added + redis.call('ZADD', KEYS[1], unpack(pairs))
end
local head = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
if earliest ~= nil and head[2] ~= nil and tonumber(head[2]) >= earliest then
    redis.call('LPUSH', KEYS[2], '1')
    redis.call('LTRIM', KEYS[2], 0, 0)
end
return added
