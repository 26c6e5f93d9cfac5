-- delayq: the durable job table (MySQL / MariaDB). `delayq init` creates the same table on
-- any configured backend; tests/test_schema.py checks that the two agree.
--
-- status: 1 pending, 2 running (a run holds its lease), 10 success, 20 failed,
--         30 cancelled, 40 missed (due longer ago than a run's --since window).
-- Times: run_at and lease_until are epoch seconds. delayq writes created/modified in UTC.
-- A row written without run_at is due at its `created`, read in this server's time zone
-- (what DEFAULT current_timestamp() and NOW() write in a session that keeps that zone).
-- Producers that write rows themselves set params, ext_string and run_at, then
-- ZADD delay_queue_job <run_at> <id>; every other column has a default.

CREATE TABLE IF NOT EXISTS `delay_queue` (
  `id` bigint NOT NULL AUTO_INCREMENT,
  `params` text NOT NULL,                        -- {"class": ..., "method": ..., "data": ...}
  `message` text DEFAULT NULL,                   -- result text or error
  `ext_string` varchar(255) NOT NULL DEFAULT '', -- business key for lookup and cancel
  `retry_times` int NOT NULL DEFAULT 0,          -- 0 on the first attempt
  `status` smallint NOT NULL DEFAULT 1,
  `created` datetime NOT NULL DEFAULT current_timestamp(),
  `modified` datetime NOT NULL DEFAULT current_timestamp(),
  `run_at` double DEFAULT NULL,                  -- due time; NULL: due at `created`
  `queue` varchar(64) NOT NULL DEFAULT 'default',
  `chain_id` bigint DEFAULT NULL,                -- first attempt of a retry chain
  `lease_until` double DEFAULT NULL,             -- while running: when the lease lapses
  `lease_token` varchar(32) DEFAULT NULL,        -- which run holds the lease
  `lost_leases` int NOT NULL DEFAULT 0,          -- runs that died holding this job
  `timeout` double DEFAULT NULL,                 -- handler time limit; NULL: DELAYQ_TIMEOUT
  `every` double DEFAULT NULL,                   -- recurring period; NULL: runs once
  `schedule` varchar(255) DEFAULT NULL,          -- recurring cron expression and time zone
  `retry_policy` varchar(255) DEFAULT NULL,      -- JSON: retries, delays, deferrals; NULL: default
  `unindexed` smallint DEFAULT NULL,             -- 1: added in a caller's transaction, not yet indexed
  PRIMARY KEY (`id`),
  KEY `job_status_queue_run_at` (`status`, `queue`, `run_at`),
  KEY `job_ext_string` (`ext_string`),
  KEY `job_chain_id` (`chain_id`),
  KEY `job_status_modified` (`status`, `modified`),
  KEY `job_unindexed` (`unindexed`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

-- Pending rows by queue, kept by the triggers below as rows enter and leave status 1,
-- whoever writes them: `delayq status` reads it instead of counting millions of rows.
-- Each connection adds to its own count row (`slot`: its id modulo 64); a queue's count is
-- the sum of its rows.
-- delayq's multi-row INSERTs set @delayq_counted and add their rows in one statement.
-- Run `delayq init` after this file on a table that already holds rows: it counts them.
CREATE TABLE IF NOT EXISTS `delay_queue_counts` (
  `queue` varchar(64) NOT NULL,
  `slot` smallint NOT NULL,
  `pending` bigint NOT NULL DEFAULT 0,
  PRIMARY KEY (`queue`, `slot`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

-- Per-queue settings, a row per queue once it was first paused or limited (`delayq pause`,
-- `delayq limit`): paused since paused_at (NULL: runs), last resumed at resumed_at, both epoch
-- seconds; at most rate_count job starts in any rate_period seconds, and at most concurrency
-- of its jobs running at once (NULL: no limit). Runs
-- read a copy in Redis, put back from here when Redis loses it; version orders the changes.
CREATE TABLE IF NOT EXISTS `delay_queue_settings` (
  `queue` varchar(64) NOT NULL,
  `paused_at` double DEFAULT NULL,
  `resumed_at` double DEFAULT NULL,
  `version` bigint NOT NULL DEFAULT 0,
  `modified` datetime NOT NULL DEFAULT current_timestamp(),
  `rate_count` int DEFAULT NULL,
  `rate_period` double DEFAULT NULL,
  `concurrency` int DEFAULT NULL,
  PRIMARY KEY (`queue`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

-- Per-key locks (`delayq add --lock KEY`), a row per lock key while a job holds it: job_id
-- holds it while it runs under a live lease, or while reserved_until (epoch seconds) has not
-- passed when the lock was handed to it and it waits to be claimed. A row whose job holds
-- nothing any more is taken over by the next job that asks.
CREATE TABLE IF NOT EXISTS `delay_queue_locks` (
  `lock_key` varchar(191) NOT NULL,
  `job_id` bigint NOT NULL,
  `reserved_until` double DEFAULT NULL,
  `modified` datetime NOT NULL DEFAULT current_timestamp(),
  PRIMARY KEY (`lock_key`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

-- The triggers that keep pending counts (delay_queue_counts, above). With binary logging on,
-- a user without SUPER may create (or drop) them only where the server has
-- log_bin_trust_function_creators=1 (error 1419 otherwise): leave out the rest of this file
-- there, and the counts table above; delayq then counts pending rows on the index at each
-- look. `delayq init` does the same by itself (docs/deploying.md#privileges).
DROP TRIGGER IF EXISTS `delay_queue_pending_insert`;
DROP TRIGGER IF EXISTS `delay_queue_pending_delete`;
DROP TRIGGER IF EXISTS `delay_queue_pending_left`;
DROP TRIGGER IF EXISTS `delay_queue_pending_entered`;
-- Each INSERT inside an IF, so that a row that neither enters nor leaves PENDING (a run's
-- outcome, a purged row, a row add_many counts itself) costs the server the test alone; the
-- `;` inside needs the mysql client's DELIMITER (a driver that runs this file takes the
-- DELIMITER lines as the client does).
DELIMITER //
CREATE TRIGGER `delay_queue_pending_insert` AFTER INSERT ON `delay_queue` FOR EACH ROW
  IF NEW.status = 1 AND @delayq_counted IS NULL THEN
    INSERT INTO `delay_queue_counts` (queue, slot, pending)
    VALUES (NEW.queue, MOD(CONNECTION_ID(), 64), 1)
    ON DUPLICATE KEY UPDATE pending = pending + (1);
  END IF//
CREATE TRIGGER `delay_queue_pending_delete` AFTER DELETE ON `delay_queue` FOR EACH ROW
  IF OLD.status = 1 THEN
    INSERT INTO `delay_queue_counts` (queue, slot, pending)
    VALUES (OLD.queue, MOD(CONNECTION_ID(), 64), -1)
    ON DUPLICATE KEY UPDATE pending = pending + (-1);
  END IF//
CREATE TRIGGER `delay_queue_pending_left` AFTER UPDATE ON `delay_queue` FOR EACH ROW
  IF OLD.status = 1 AND NOT (NEW.status = 1 AND NEW.queue = OLD.queue) THEN
    INSERT INTO `delay_queue_counts` (queue, slot, pending)
    VALUES (OLD.queue, MOD(CONNECTION_ID(), 64), -1)
    ON DUPLICATE KEY UPDATE pending = pending + (-1);
  END IF//
CREATE TRIGGER `delay_queue_pending_entered` AFTER UPDATE ON `delay_queue` FOR EACH ROW
  IF NEW.status = 1 AND NOT (OLD.status = 1 AND NEW.queue = OLD.queue) THEN
    INSERT INTO `delay_queue_counts` (queue, slot, pending)
    VALUES (NEW.queue, MOD(CONNECTION_ID(), 64), 1)
    ON DUPLICATE KEY UPDATE pending = pending + (1);
  END IF//
DELIMITER ;
