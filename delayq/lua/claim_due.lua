-- claim_due: take up to ARGV[2] due members out of a queue's schedule.
--
-- KEYS[1]  the queue's schedule (sorted set: member = job id, score = due epoch seconds)
-- ARGV[1]  now, epoch seconds; members with score <= now are due
-- ARGV[2]  the most members to take
--
-- Returns a flat array {id1, score1, id2, score2, ...}, oldest first.
--
-- Atomic because several runs claim from the same schedule at once: reading the due members
-- and removing them in one script means no two runs ever receive the same member.
local taken = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'WITHSCORES', 'LIMIT', 0, ARGV[2])
local members = {}
for i = 1, #taken, 2 do
    members[#members + 1] = taken[i]
    if #members == 500 then
        redis.call('ZREM', KEYS[1], unpack(members))
        members = {}
    end
end
if #members > 0 then
    redis.call('ZREM', KEYS[1], unpack(members))
end
return taken
