-- claim_due: take up to ARGV[2] due members out of a queue's schedule.
--
-- KEYS[1]  the queue's schedule (sorted set: member = job id, score = due epoch seconds)
-- KEYS[2]  the queue's in-flight claims (sorted set: member = job id, score = claim time)
-- KEYS[3]  the queue's flow hash (flow.py): its `paused_at` is '' while the queue runs; its
--          `rate_count` and `rate_period` are '' (or absent) while it has no rate limit, its
--          `concurrency` while it has no concurrency limit
-- KEYS[4]  the queue's start grants (sorted set: score = claim time), kept only while it
--          has a rate limit
-- KEYS[5]  the queue's running slots (sorted set: member = job id, score = when its lease
--          lapses), kept only while it has a concurrency limit
-- ARGV[1]  now, epoch seconds; members with score <= now are due
-- ARGV[2]  the most members to take
-- ARGV[3]  start slack, seconds: how long after its claim a rate-limited job may still start
-- ARGV[4]  the most members to take if the queue has a limit: those the run can start at once
-- ARGV[5]  when the leases the run is about to take lapse, epoch seconds: a slot is held
--          until then, unless the run renews or frees it
--
-- Returns a flat array {id1, score1, id2, score2, ...}, oldest first: empty while the queue
-- is paused; 0 if Redis lost the flow hash, which the run puts back from the table first.
-- A limited queue's answer is {that array, flags}: flags 1 for a rate limit, plus 2 for a
-- concurrency limit, so that the run knows to start what it took at once.
--
-- Atomic because several runs claim from the same schedule at once: reading the due members
-- and removing them in one script means no two runs ever receive the same member. The
-- claims are noted until the run has leased the rows in the table, so that the orphan sweep
-- can tell a job in flight from one the index lost. A pause is read here, in the same step,
-- so that no run claims from a queue once `delayq pause` has returned; and a rate limit is
-- counted here, so that runs on every host share one sliding window: a grant counts for its
-- period plus the start slack (a run hands back a job it could not start within the slack),
-- so no period-long window of start times ever holds more than rate_count starts. A
-- concurrency limit is counted here too: a slot is taken with the claim and held until the
-- run frees it (the job ended or went back) or its lease lapses (the run died), whichever
-- comes first, so a killed run's slots come free exactly when its leases do.
local flow = redis.call('HMGET', KEYS[3], 'paused_at', 'rate_count', 'rate_period', 'concurrency')
if not flow[1] then
    return 0
elseif flow[1] ~= '' then
    return {}
end
local limit = tonumber(ARGV[2])
local rate_count = tonumber(flow[2])
local concurrency_limit = tonumber(flow[4])
local now = tonumber(ARGV[1])
local flags = 0
if rate_count then
    flags = 1
    local span = tonumber(flow[3]) + tonumber(ARGV[3])
    redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', string.format('%.6f', now - span))
    limit = math.min(limit, tonumber(ARGV[4]), rate_count - redis.call('ZCARD', KEYS[4]))
end
if concurrency_limit then
    flags = flags + 2
    redis.call('ZREMRANGEBYSCORE', KEYS[5], '-inf', '(' .. ARGV[1])
    limit = math.min(limit, tonumber(ARGV[4]), concurrency_limit - redis.call('ZCARD', KEYS[5]))
end
if flags > 0 and limit <= 0 then
    return {{}, flags}
end
local taken = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'WITHSCORES', 'LIMIT', 0, limit)
local members = {}
local claims = {}
local grants = {}
local slots = {}
for i = 1, #taken, 2 do
    members[#members + 1] = taken[i]
    claims[#claims + 1] = ARGV[1]
    claims[#claims + 1] = taken[i]
    if rate_count then
        -- the claim time in the member too: a job handed back and claimed again is a new start
        grants[#grants + 1] = ARGV[1]
        grants[#grants + 1] = taken[i] .. '@' .. ARGV[1]
    end
    if concurrency_limit then
        slots[#slots + 1] = ARGV[5]
        slots[#slots + 1] = taken[i]
    end
    if #members == 500 then
        redis.call('ZREM', KEYS[1], unpack(members))
        redis.call('ZADD', KEYS[2], unpack(claims))
        members = {}
        claims = {}
    end
end
if #members > 0 then
    redis.call('ZREM', KEYS[1], unpack(members))
    redis.call('ZADD', KEYS[2], unpack(claims))
end
for i = 1, #grants, 1000 do
    redis.call('ZADD', KEYS[4], unpack(grants, i, math.min(i + 999, #grants)))
end
for i = 1, #slots, 1000 do
    redis.call('ZADD', KEYS[5], unpack(slots, i, math.min(i + 999, #slots)))
end
if flags > 0 then
    return {taken, flags}
end
return taken
