"""The journal must survive kill -9: every outcome written before the process died is in
Redis afterwards, however many writes were still on their way."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
import redis

from delayq.store.index.keys import queue_key
from delayq.store.index.parts import Index
from tests.conftest import ROOT

WRITER = """
import os, signal, sys, time
import redis
from delayq.store.index.parts import Index
from delayq.store.index.keys import queue_key
client = redis.Redis.from_url(sys.argv[1])
index = Index(client)
for job_id in range(1000):
    index.journal.write("default", job_id, '[10, "", false, 1.0]')
while client.hlen(queue_key("default", "journal")) < 1000:
    time.sleep(0.01)  # until Redis has applied these
# Keep Redis busy for a moment on another connection, so the next writes wait unread in
# its socket when this process dies: it is busy once a PING goes unanswered.
busy = client.connection_pool.get_connection()
busy.send_command("EVAL", BUSY_LOOP, 0)
probe = redis.Redis.from_url(sys.argv[1], socket_timeout=0.05)
ends = time.monotonic() + 0.4  # the busy loop's length: past it, waiting is pointless
while time.monotonic() < ends:
    try:
        probe.ping()
    except redis.TimeoutError:
        break
for job_id in range(1000, 2000):
    index.journal.write("default", job_id, '[10, "", false, 1.0]')
os.kill(os.getpid(), signal.SIGKILL)  # no close, no flush: the sockets are the kernel's now
""".replace(
    "BUSY_LOOP",
    repr(
        "local t = redis.call('TIME')[1] * 1e6 + redis.call('TIME')[2] "
        "while redis.call('TIME')[1] * 1e6 + redis.call('TIME')[2] < t + 400000 do end"
    ),
)


@pytest.mark.slow
def test_journal_writes_all_land_when_the_process_is_killed_right_after(backend):
    client = redis.Redis.from_url(backend["redis_url"])
    client.delete(queue_key("default", "journal"))
    done = subprocess.run(
        [sys.executable, "-c", WRITER, backend["redis_url"]], cwd=ROOT, timeout=60
    )
    assert done.returncode == -9
    deadline = time.monotonic() + 5
    while client.hlen(queue_key("default", "journal")) < 2000 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert client.hlen(queue_key("default", "journal")) == 2000


def test_the_journal_connection_goes_back_to_the_pool_answering_again(backend):
    client = redis.Redis.from_url(backend["redis_url"])
    index = Index(client)
    index.journal.write("default", 7, "x")
    index.journal.close()

    # The pool's connections answer as usual after the journal's replies were turned off.
    assert client.hget(queue_key("default", "journal"), "7") == b"x"
    assert client.ping() is True
