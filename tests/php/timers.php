<?php
// A producer written the way seed 000's PHP code sets its timers, for tests/api/test_listen.py:
// the key is Class@method@arg@..., set with SETEX in the timers' Redis database; its cancel
// helper DELs the same key.
//
//   php timers.php REDIS_JSON set CLASS METHOD TTL ARG...
//   php timers.php REDIS_JSON del CLASS METHOD ARG...
//
// REDIS_JSON: {"host", "port", "db"}.

function timerKey(string $class, string $method, array $args): string
{
    return implode('@', array_merge([$class, $method], $args));
}

$r = json_decode($argv[1], true, 512, JSON_THROW_ON_ERROR);
$redis = new Redis();
$redis->connect($r['host'], (int) $r['port']);
$redis->select((int) $r['db']);
if ($argv[2] === 'set') {
    $redis->setex(timerKey($argv[3], $argv[4], array_slice($argv, 6)), (int) $argv[5], '');
} elseif ($argv[2] === 'del') {
    $redis->del(timerKey($argv[3], $argv[4], array_slice($argv, 5)));
} else {
    fwrite(STDERR, "usage: timers.php REDIS_JSON set|del ...\n");
    exit(2);
}
