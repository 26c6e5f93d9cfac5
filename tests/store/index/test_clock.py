"""One clock for everyone: due times are compared with Redis's TIME, so a host whose clock
runs ahead does not run jobs early, and one that lags does not run them late."""

from __future__ import annotations

import time

import pytest

from delayq.store.index.clock import clock_offset


def test_a_server_clock_ahead_or_behind_gives_that_offset():
    assert clock_offset(1000.0, 1030.0005, 1000.001) == pytest.approx(30.0)
    assert clock_offset(1000.0, 970.0005, 1000.001) == pytest.approx(-30.0)


def test_an_offset_within_the_readings_uncertainty_counts_as_none():
    # A 0.8 ms difference measured over a 1 ms round trip is noise, not skew.
    assert clock_offset(1000.0, 1000.0013, 1000.001) == 0.0


def test_queue_time_follows_the_redis_servers_clock(queue):
    queue.index.clock.now()  # its first reading measures the offset
    before = time.time()
    seconds, micros = queue.index.client.time()
    now = queue.index.clock.now()
    after = time.time()
    server = seconds + micros / 1e6

    # Taken in this order, the readings bracket each other however long each step took:
    # the queue's time is no earlier than the server's TIME before it and, this machine's
    # clock being the server's, no offset moves it outside the local readings around it.
    assert server - 1e-6 <= now
    assert before <= now <= after
