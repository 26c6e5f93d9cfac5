-- mirror_flow: write a queue's flow settings (paused or not, since when) into Redis, where the
-- claim reads them, unless Redis holds a later change already.
--
-- KEYS[1]  the queue's flow hash (fields: version, paused_at, resumed_at, rate_count,
--          rate_period, concurrency; '' for none)
-- ARGV[1]  the settings' version, as the table numbers its changes
-- ARGV[2]  paused_at, epoch seconds, or '' when the queue runs
-- ARGV[3]  resumed_at, epoch seconds, or '' when it never resumed
-- ARGV[4]  rate_count, the most job starts in any rate_period, or '' for no rate limit
-- ARGV[5]  rate_period, seconds, or '' for no rate limit
-- ARGV[6]  concurrency, its concurrency limit: the most of its jobs running at once, or ''
--          for no such limit
--
-- Returns 1 if written, 0 if the hash held this version or a later one.
--
-- Atomic because a command mirroring a change and a run putting back what the table said a
-- moment before may write at once: the version decides, so the later change stays.
local known = redis.call('HGET', KEYS[1], 'version')
if known and tonumber(known) >= tonumber(ARGV[1]) then
    return 0
end
redis.call('HSET', KEYS[1], 'version', ARGV[1], 'paused_at', ARGV[2], 'resumed_at', ARGV[3],
    'rate_count', ARGV[4], 'rate_period', ARGV[5], 'concurrency', ARGV[6])
return 1
