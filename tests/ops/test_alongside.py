"""ops/alongside.py: work on helper threads, each on a connection of its own, while the caller
draws the next items; a helper's error stops the rest and reaches the caller; the helpers'
connections close as they end."""

from __future__ import annotations

import threading

import pytest

from delayq.ops.alongside import alongside
from tests.support.waiting import wait_for


def connection_id(queue) -> int:
    return int(queue.db.execute_sql("SELECT CONNECTION_ID()").fetchone()[0])


def open_connections(queue) -> set[int]:
    rows = queue.db.execute_sql("SELECT ID FROM information_schema.PROCESSLIST").fetchall()
    return {int(row[0]) for row in rows}


@pytest.mark.parametrize("backend", ["mariadb"], indirect=True)
def test_each_helper_works_on_a_connection_of_its_own_closed_as_it_ends(queue, backend):
    mine = connection_id(queue)
    both_working = threading.Barrier(2, timeout=10)

    def work(item: int) -> tuple[int, int]:
        if item < 2:
            both_working.wait()  # the first two pieces run at once, on two threads
        return item * 10, connection_id(queue)

    done = list(alongside(queue.table, range(8), work, 2, lambda took: 0.0, "test-alongside"))

    assert sorted(piece.item for piece in done) == list(range(8))
    assert all(piece.result[0] == piece.item * 10 and piece.took >= 0 for piece in done)
    theirs = {piece.result[1] for piece in done}
    assert len(theirs) == 2 and mine not in theirs
    # the server drops a closed connection from its process list a moment after the client
    # has gone
    wait_for(lambda: not theirs & open_connections(queue), 10, "the helpers' connections to close")
    assert connection_id(queue) == mine  # the caller's own connection is left alone


def test_a_helper_s_error_stops_the_rest_and_is_raised_to_the_caller(queue):
    worked: list[int] = []
    drawn: list[int] = []

    def items():
        for item in range(1000):
            drawn.append(item)
            yield item

    def work(item: int) -> int:
        if item == 3:
            raise ValueError("piece 3 went wrong")
        worked.append(item)
        return item

    with pytest.raises(ValueError, match="piece 3 went wrong"):
        list(alongside(queue.table, items(), work, 2, lambda took: 0.0, "test-alongside"))

    assert 3 not in worked and len(drawn) < 1000  # it stopped drawing soon after
    assert not [name for name in map(str, threading.enumerate()) if "test-alongside" in name]


def test_the_caller_s_error_waits_for_the_pieces_begun(queue):
    started = threading.Event()
    finished: list[int] = []

    def items():
        yield 1
        started.wait(10)
        raise KeyError("reading failed")

    def work(item: int) -> int:
        started.set()
        finished.append(item)
        return item

    with pytest.raises(KeyError, match="reading failed"):
        list(alongside(queue.table, items(), work, 2, lambda took: 0.0, "test-alongside"))

    assert finished == [1]
    assert not [name for name in map(str, threading.enumerate()) if "test-alongside" in name]
