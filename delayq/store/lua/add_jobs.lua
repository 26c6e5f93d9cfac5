-- add_jobs: put jobs on a queue's schedule and wake a looping run if one is now due soonest.
--
-- KEYS[1]  the queue's schedule (sorted set: member = job id, score = due epoch seconds)
-- KEYS[2]  the queue's wake-up list, which `delayq run --loop` blocks on
-- ARGV     score1, id1, score2, id2, ... (at most a few thousand pairs per call)
--
-- Returns the number of members added.
--
-- Atomic so that "is the new job the head of the schedule?" is answered against the
-- schedule that includes it: a looping run sleeping until the old head wakes at once when a
-- sooner job arrives, and is not woken for jobs behind the head.
local earliest = nil
local added = 0
local pairs = {}
for i = 1, #ARGV, 2 do
    local score = tonumber(ARGV[i])
    if earliest == nil or score < earliest then
        earliest = score
    end
    pairs[#pairs + 1] = ARGV[i]
    pairs[#pairs + 1] = ARGV[i + 1]
    if #pairs == 1000 then
        added = added + redis.call('ZADD', KEYS[1], unpack(pairs))
        pairs = {}
    end
end
if #pairs > 0 then
    added = added + redis.call('ZADD', KEYS[1], unpack(pairs))
end
local head = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
if earliest ~= nil and head[2] ~= nil and tonumber(head[2]) >= earliest then
    redis.call('LPUSH', KEYS[2], '1')
    redis.call('LTRIM', KEYS[2], 0, 0)
end
return added
