-- claim_due: take up to ARGV[2] due members out of a queue's schedule.
--
-- KEYS[1]  the queue's schedule (sorted set: member = job id, score = due epoch seconds)
-- KEYS[2]  the queue's in-flight claims (sorted set: member = job id, score = claim time)
-- KEYS[3]  the queue's flow hash (flow.py): its `paused_at` is '' while the queue runs
-- ARGV[1]  now, epoch seconds; members with score <= now are due
-- ARGV[2]  the most members to take
--
-- Returns a flat array {id1, score1, id2, score2, ...}, oldest first: empty while the queue
-- is paused; 0 if Redis lost the flow hash, which the run puts back from the table first.
--
-- Atomic because several runs claim from the same schedule at once: reading the due members
-- and removing them in one script means no two runs ever receive the same member. The
-- claims are noted until the run has leased the rows in the table, so that the orphan sweep
-- can tell a job in flight from one the index lost. A pause is read here, in the same step,
-- so that no run claims from a queue once `delayq pause` has returned.
local paused = redis.call('HGET', KEYS[3], 'paused_at')
if not paused then
    return 0
elseif paused ~= '' then
    return {}
end
local taken = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'WITHSCORES', 'LIMIT', 0, ARGV[2])
local members = {}
local claims = {}
for i = 1, #taken, 2 do
    members[#members + 1] = taken[i]
    claims[#claims + 1] = ARGV[1]
    claims[#claims + 1] = taken[i]
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
return taken
