<?php
// A producer written the way the seed's PHP code writes jobs (its addDelayQueue), for
// tests/store/table/test_php_producer.py: params from serialize(), an INSERT, then a ZADD of
// time() + delay; and its cancel by business key: find the row, ZREM its id, status 30.
//
//   php producer.php add    MYSQL_JSON REDIS_JSON CLASS METHOD DATA_JSON DELAY EXT  -> prints the id
//   php producer.php cancel MYSQL_JSON REDIS_JSON EXT                               -> prints the count
//
// MYSQL_JSON: {"host", "port", "dbname", "user", "password"}; REDIS_JSON: {"host", "port", "db"}.
// DATA_JSON is decoded into PHP arrays, so data reaches serialize() as a PHP producer's would.

function connections(string $mysql, string $redis): array
{
    $m = json_decode($mysql, true, 512, JSON_THROW_ON_ERROR);
    $pdo = new PDO(
        "mysql:host={$m['host']};port={$m['port']};dbname={$m['dbname']};charset=utf8",
        $m['user'],
        $m['password'],
        [PDO::ATTR_ERRMODE => PDO::ERRMODE_EXCEPTION]
    );
    $r = json_decode($redis, true, 512, JSON_THROW_ON_ERROR);
    $client = new Redis();
    $client->connect($r['host'], (int) $r['port']);
    $client->select((int) $r['db']);
    return [$pdo, $client];
}

function addDelayQueue(PDO $pdo, Redis $redis, string $class, string $method, $data, int $delay, string $ext): int
{
    $params = serialize(['class' => $class, 'method' => $method, 'data' => $data]);
    $now = date('Y-m-d H:i:s');
    $insert = $pdo->prepare(
        'INSERT INTO delay_queue (params, ext_string, retry_times, status, created, modified) '
        . 'VALUES (?, ?, 0, 1, ?, ?)'
    );
    $insert->execute([$params, $ext, $now, $now]);
    $id = (int) $pdo->lastInsertId();
    $redis->zAdd('delay_queue_job', time() + $delay, (string) $id);
    return $id;
}

function cancelDelayQueue(PDO $pdo, Redis $redis, string $ext): int
{
    $find = $pdo->prepare('SELECT id FROM delay_queue WHERE ext_string = ? AND status = 1');
    $find->execute([$ext]);
    $count = 0;
    foreach ($find->fetchAll(PDO::FETCH_COLUMN) as $id) {
        $redis->zRem('delay_queue_job', (string) $id);
        $update = $pdo->prepare('UPDATE delay_queue SET status = 30, modified = ? WHERE id = ?');
        $update->execute([date('Y-m-d H:i:s'), $id]);
        $count += $update->rowCount();
    }
    return $count;
}

[$pdo, $redis] = connections($argv[2], $argv[3]);
if ($argv[1] === 'add') {
    $data = json_decode($argv[6], true, 512, JSON_THROW_ON_ERROR);
    echo addDelayQueue($pdo, $redis, $argv[4], $argv[5], $data, (int) $argv[7], $argv[8]), "\n";
} elseif ($argv[1] === 'cancel') {
    echo cancelDelayQueue($pdo, $redis, $argv[4]), "\n";
} else {
    fwrite(STDERR, "usage: producer.php add|cancel ...\n");
    exit(2);
}
