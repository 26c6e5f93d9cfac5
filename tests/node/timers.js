// A producer written as seed 003's are, for tests/api/test_listen.py: a per-user timer is a key
// carrying its ids (`send_message-<userId>-<type>`), set with a TTL in a Redis database of its
// own, `SET key 1 EX seconds` through ioredis; a DEL cancels it.
//
//   node timers.js REDIS_URL set KEY SECONDS
//   node timers.js REDIS_URL del KEY
const Redis = require('ioredis');

async function main() {
  const [url, action, key, seconds] = process.argv.slice(2);
  const redis = new Redis(url);
  try {
    if (action === 'set') {
      await redis.set(key, 1, 'EX', Number(seconds));
    } else if (action === 'del') {
      await redis.del(key);
    } else {
      throw new Error('usage: timers.js REDIS_URL set KEY SECONDS | del KEY');
    }
  } finally {
    redis.disconnect();
  }
}

main().catch((error) => {
  console.error(error.message);
  process.exit(1);
});
