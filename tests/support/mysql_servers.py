"""A MariaDB primary and a replica of their own for a test, each a mariadbd on a free
127.0.0.1 port with its own data directory, replicating by GTID (semi-synchronously or not),
and one address that moves: a relay (tests.support.servers.Proxy) that a failover points at the
promoted replica. Killing, promoting and stopping them touches nobody else's data.

The relay rather than HAProxy: the test decides when the address moves, so a measurement
starts at a known moment, and it needs no package beyond MariaDB's own; HAProxy's health
checks cannot tell a primary from a replica anyway, so a failover tool would move it too."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
from pathlib import Path

import pymysql

from tests.support.servers import Proxy, free_port
from tests.support.waiting import wait_for

USER, PASSWORD = "delayq", "delayq-ha"  # delayq's own login: no SUPER, so read_only binds it
DATABASE = "delayq_ha"
SEMI_SYNC_TIMEOUT_MS = 60_000  # a primary never falls back to asynchronous in a test


def mariadbd() -> str:
    return shutil.which("mariadbd") or "/usr/sbin/mariadbd"


class MariaDB:
    """One mariadbd on 127.0.0.1:`port` with binary logs, GTID strict mode and row events."""

    user = "root"  # the system user it runs as

    def __init__(self, workdir: Path, server_id: int, *options: str) -> None:
        self.workdir = workdir
        self.server_id = server_id
        self.options = options
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def datadir(self) -> Path:
        return self.workdir / "data"

    def install(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        command = ["mariadb-install-db", "--no-defaults", f"--datadir={self.datadir}"]
        command += ["--auth-root-authentication-method=normal", "--skip-test-db"]
        command.append(f"--user={self.user}")
        subprocess.run(command, check=True, capture_output=True, timeout=120, env=self.env())

    def start(self) -> None:
        # Its warnings before the error log opens (max_open_files) would only be noise.
        self.process = subprocess.Popen(
            self.command(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=self.env()
        )
        wait_for(self._answers, 60, f"mariadbd on port {self.port} to answer")

    def env(self) -> dict[str, str]:
        """Its environment: temporary files in its own directory, which the user it runs as
        owns (CI's TMPDIR is root's alone, and a Galera node runs as mysql)."""
        return {**os.environ, "TMPDIR": str(self.workdir)}

    def own_files_and_port(self) -> list[str]:
        """mariadbd and the options that make it this test's own: no option files, its
        directory, its port on 127.0.0.1."""
        return [
            mariadbd(),
            "--no-defaults",
            f"--user={self.user}",
            f"--datadir={self.datadir}",
            f"--tmpdir={self.workdir}",
            f"--socket={self.workdir / 'mysqld.sock'}",
            f"--pid-file={self.workdir / 'mysqld.pid'}",
            f"--log-error={self.workdir / 'error.log'}",
            f"--port={self.port}",
            "--bind-address=127.0.0.1",
            f"--server-id={self.server_id}",
        ]

    def command(self) -> list[str]:
        return [
            *self.own_files_and_port(),
            "--log-bin=binlog",
            "--log-slave-updates",
            "--binlog-format=ROW",
            "--gtid-strict-mode=1",
            "--innodb-buffer-pool-size=64M",
            "--innodb-flush-log-at-trx-commit=1",
            "--sync-binlog=1",
            # delayq init creates triggers; with binary logs on, a login without SUPER may
            # only do so when the server trusts it to (what a DBA sets for such a login).
            "--log-bin-trust-function-creators=1",
            *self.options,
        ]

    def _answers(self) -> bool:
        assert self.process is not None
        if self.process.poll() is not None:
            log = (self.workdir / "error.log").read_text(errors="replace")[-2000:]
            raise AssertionError(f"mariadbd on port {self.port} exited:\n{log}")
        with contextlib.suppress(pymysql.MySQLError):
            self.connect().close()
            return True
        return False

    def connect(self) -> pymysql.Connection:
        return pymysql.connect(
            host="127.0.0.1", port=self.port, user="root", autocommit=True, connect_timeout=3
        )

    def execute(self, *statements: str) -> list[tuple[object, ...]]:
        """Run the statements as root; the rows of the last."""
        conn = self.connect()
        try:
            with conn.cursor() as cursor:
                for statement in statements:
                    cursor.execute(statement)
                return list(cursor.fetchall())
        finally:
            conn.close()

    def kill(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(30)
        self.process = None

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        self.process = None


class ReplicatedMariaDB:
    """A primary and a replica (semi-synchronous, AFTER_SYNC: a commit is acknowledged once
    the replica has it; or asynchronous), the replica reading the binary log through a relay
    the test can hold (a replica falling behind), and `address`, the relay delayq reaches
    the primary through, moved by `promote`. `stop` ends every server and relay, and
    removes their data directories."""

    def __init__(self, workdir: Path, semi_sync: bool) -> None:
        self.semi_sync = semi_sync
        primary_options = (
            (
                "--rpl-semi-sync-master-enabled=1",
                "--rpl-semi-sync-master-wait-point=AFTER_SYNC",
                f"--rpl-semi-sync-master-timeout={SEMI_SYNC_TIMEOUT_MS}",
                "--rpl-semi-sync-slave-enabled=1",  # for when it is a replica again
            )
            if semi_sync
            else ()
        )
        replica_options = (
            (
                "--rpl-semi-sync-slave-enabled=1",
                "--rpl-semi-sync-master-wait-point=AFTER_SYNC",
                f"--rpl-semi-sync-master-timeout={SEMI_SYNC_TIMEOUT_MS}",
            )
            if semi_sync
            else ()
        )
        self.primary = MariaDB(workdir / "primary", 1, *primary_options)
        self.replica = MariaDB(workdir / "replica", 2, "--read-only=1", *replica_options)
        self.link: Proxy | None = None  # the replica's link to the primary
        self.address: Proxy | None = None  # where delayq connects

    @property
    def url(self) -> str:
        assert self.address is not None
        return f"mysql://{USER}:{PASSWORD}@127.0.0.1:{self.address.port}/{DATABASE}"

    def start(self) -> None:
        self.primary.install()
        # The replica starts from a copy of the fresh data directory: both at GTID 0, as a
        # replica cloned from a backup is.
        self.replica.workdir.mkdir(parents=True, exist_ok=True)
        shutil.copytree(self.primary.datadir, self.replica.datadir)
        self.primary.start()
        self.replica.start()
        self.link = Proxy(("127.0.0.1", self.primary.port))
        self.replica.execute(
            f"CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT={self.link.port}, "
            "MASTER_USER='root', MASTER_PASSWORD='', MASTER_USE_GTID=slave_pos, "
            "MASTER_CONNECT_RETRY=1",
            "START SLAVE",
        )
        self.primary.execute(
            f"CREATE DATABASE {DATABASE}",
            f"CREATE USER '{USER}'@'127.0.0.1' IDENTIFIED BY '{PASSWORD}'",
            f"GRANT ALL ON {DATABASE}.* TO '{USER}'@'127.0.0.1'",
        )
        if self.semi_sync:
            wait_for(self._semi_sync_on, 30, "the primary to see its semi-synchronous replica")
        self.wait_in_sync()
        self.address = Proxy(("127.0.0.1", self.primary.port))

    def _semi_sync_on(self) -> bool:
        rows = self.primary.execute("SHOW STATUS LIKE 'Rpl_semi_sync_master_status'")
        return rows == [("Rpl_semi_sync_master_status", "ON")]

    def wait_in_sync(self, timeout: float = 30) -> None:
        """Until the replica has applied everything the primary logged so far."""
        ((position,),) = self.primary.execute("SELECT @@gtid_binlog_pos")
        ((done,),) = self.replica.execute(f"SELECT MASTER_GTID_WAIT('{position}', {timeout})")
        assert done == 0, f"the replica did not reach {position} in {timeout}s"

    def lag(self) -> None:
        """The replica receives nothing more from now on (its link stalls), as a replica
        falling behind an asynchronous primary: what the primary commits meanwhile dies
        with it."""
        assert self.link is not None
        self.link.hold()

    def kill_primary(self) -> None:
        self.primary.kill()

    def switch_over(self) -> None:
        """A clean switchover's first half: the primary refuses writes (read_only; delayq's
        login has no SUPER), and the replica catches up with it."""
        self.primary.execute("SET GLOBAL read_only = 1")
        self.wait_in_sync()

    def promote(self) -> None:
        """The replica applies what it received, stops replicating and takes writes; the
        address moves to it (every link through the old one dropped)."""
        assert self.address is not None and self.link is not None
        self.link.cut()  # what the held link still carries is lost with the old primary
        wait_for(self._relay_applied, 30, "the replica to apply its relay log")
        self.replica.execute("STOP SLAVE", "RESET SLAVE ALL", "SET GLOBAL read_only = 0")
        self.address.move(("127.0.0.1", self.replica.port))

    def _relay_applied(self) -> bool:
        conn = self.replica.connect()
        try:
            with conn.cursor(pymysql.cursors.DictCursor) as cursor:
                cursor.execute("SHOW SLAVE STATUS")
                status = cursor.fetchone()
        finally:
            conn.close()
        return status is None or "has read all relay log" in status["Slave_SQL_Running_State"]

    def database(self, server: MariaDB) -> pymysql.Connection:
        """A connection to delayq's database on `server`, as root."""
        conn = server.connect()
        conn.select_db(DATABASE)
        return conn

    def stop(self) -> None:
        for relay in (self.address, self.link):
            if relay is not None:
                relay.close()
        for server in (self.primary, self.replica):
            server.stop()
            # Over 100 MB each (InnoDB's redo log); the error logs beside them stay.
            shutil.rmtree(server.datadir, ignore_errors=True)
