"""HAProxy in front of MySQL servers of a test's or a benchmark's own, as a DBA runs it: one
server takes every connection while its health check passes, the others are `backup`; a
server marked down has its connections cut. Each server's check is an HTTP server on a free
port, a thread here, answering 200 while `healthy(server)` (for a Galera node: Synced, what
a clustercheck script behind xinetd answers), 503 otherwise."""

from __future__ import annotations

import contextlib
import http.server
import shutil
import signal
import subprocess
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

import pymysql

from tests.support.mysql_servers import DATABASE, PASSWORD, USER, MariaDB
from tests.support.servers import free_port
from tests.support.waiting import wait_for

HEALTH_EVERY_MS = 500  # HAProxy's check interval; a server is down after two failed checks


def haproxy() -> str:
    return shutil.which("haproxy") or "/usr/sbin/haproxy"


def running(server: MariaDB) -> bool:
    """The check of a server that is healthy as long as it runs."""
    return server.process is not None and server.process.poll() is None


class HAProxy:
    """haproxy on a free port: every connection to the first server while its check passes,
    else to the next backup."""

    def __init__(
        self,
        workdir: Path,
        servers: Sequence[MariaDB],
        healthy: Callable[[MariaDB], bool] = running,
    ) -> None:
        self.workdir = workdir
        self.servers = list(servers)
        self.port = free_port()
        self.checks = [HealthCheck(server, healthy) for server in self.servers]
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """delayq's database through the proxy (see tests/support/mysql_servers.py's login)."""
        return f"mysql://{USER}:{PASSWORD}@127.0.0.1:{self.port}/{DATABASE}"

    def config(self) -> str:
        lines = "\n".join(
            f"    server mysql{index + 1} 127.0.0.1:{server.port} check port {check.port}"
            + (" backup" if index else "")
            for index, (server, check) in enumerate(zip(self.servers, self.checks, strict=True))
        )
        return (
            "global\n    maxconn 2000\n"
            "defaults\n    mode tcp\n    timeout connect 2s\n    timeout check 2s\n"
            "    timeout client 8h\n    timeout server 8h\n    retries 3\n    option redispatch\n"
            f"listen mysql\n    bind 127.0.0.1:{self.port}\n    option httpchk GET /\n"
            f"    default-server inter {HEALTH_EVERY_MS} fall 2 rise 2"
            " on-marked-down shutdown-sessions\n" + lines + "\n"
        )

    def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        config = self.workdir / "haproxy.cfg"
        config.write_text(self.config())
        with open(self.workdir / "haproxy.log", "ab") as log:
            self.process = subprocess.Popen(
                [haproxy(), "-db", "-f", str(config)], stdout=log, stderr=log
            )
        wait_for(self._passes_to_a_server, 30, "HAProxy to pass connections to a server")

    def _passes_to_a_server(self) -> bool:
        assert self.process is not None
        if self.process.poll() is not None:
            log = (self.workdir / "haproxy.log").read_text(errors="replace")[-2000:]
            raise AssertionError(f"haproxy exited:\n{log}")
        with contextlib.suppress(pymysql.MySQLError):
            pymysql.connect(
                host="127.0.0.1", port=self.port, user=USER, password=PASSWORD, connect_timeout=2
            ).close()
            return True
        return False

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        self.process = None
        for check in self.checks:
            check.close()


class HealthCheck:
    """An HTTP server on a free port that answers 200 while `healthy(server)`, else 503."""

    def __init__(self, server: MariaDB, healthy: Callable[[MariaDB], bool]) -> None:
        self.server = server

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - the http.server name
                ok = healthy(server)
                with contextlib.suppress(OSError):  # HAProxy gave up on a slow answer
                    self.send_response(200 if ok else 503)
                    self.end_headers()
                    self.wfile.write(b"healthy\n" if ok else b"not healthy\n")

            def log_message(self, *args: object) -> None:
                pass  # a request every half second would only be noise

        self.http = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = int(self.http.server_address[1])
        threading.Thread(target=self.http.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.http.shutdown()
        self.http.server_close()
