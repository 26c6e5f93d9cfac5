-- restore_jobs: put back a batch of a queue's pending jobs while the schedule is rebuilt from
-- the table, and wake a looping run if one is now due soonest.
--
-- KEYS[1]  the queue's schedule (sorted set: member = job id, score = due epoch seconds)
-- KEYS[2]  the queue's wake-up list, which `delayq run --loop` blocks on
-- ARGV[1]  "score1 id1 score2 id2 ...": one argument, which the table wrote as it read the
--          rows, so that a batch of thousands costs no work per entry on the way here
--
-- Returns the number of members added.
--
-- NX: a member already there was put there after the table was read (a producer's add, or a
-- `--replace` moving it), so its score is newer than the batch's.
local earliest = nil
local added = 0
local pairs = {'NX'}
for score, id in string.gmatch(ARGV[1], '(%S+) (%S+)') do
    local due = tonumber(score)
    if earliest == nil or due < earliest then
        earliest = due
    end
    pairs[#pairs + 1] = score
    pairs[#pairs + 1] = id
    if #pairs == 1001 then
        added = added + redis.call('ZADD', KEYS[1], unpack(pairs))
        pairs = {'NX'}
    end
end
if #pairs > 1 then
    added = added + redis.call('ZADD', KEYS[1], unpack(pairs))
end
local head = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
if added > 0 and head[2] ~= nil and tonumber(head[2]) >= earliest then
    redis.call('LPUSH', KEYS[2], '1')
    redis.call('LTRIM', KEYS[2], 0, 0)
end
return added
