"""bench.drain's table of alternated drains, bench.threads' table of one thread against many
and bench.profile's reading of py-spy's stacks: pure functions over made-up measurements, so
that a wrong ratio or a step given the wrong samples fails here rather than in a table
someone quotes."""

from __future__ import annotations

from bench.drain import Drained, table
from bench.profile import step_of, steps
from bench.threads import table as threads_table


def test_ratios_against_the_first_tree_per_variant_and_each_variant_against_bare():
    found = {
        ("90de023", ""): [Drained(5000, 100.0, 20.0, 0.0), Drained(5400, 90.0, 22.0, 0.0)],
        ("this checkout", ""): [Drained(6000, 80.0, 20.0, 0.0), Drained(6480, 81.0, 22.0, 0.0)],
        ("this checkout", "-c 8"): [Drained(6240, 85.0, 18.0, 0.0, busy_cores=1.5)],
    }
    rows = table(found, "90de023").splitlines()
    old, new, eight = rows[1].split(), rows[2].split(), rows[3].split()
    assert old[1:4] == ["bare", "5,200", "1.000"]
    # medians 6,240 against 5,200 jobs/s, 80.5 against 95.0 µs of CPU
    assert new[2:5] == ["bare", "6,240", "1.200"] and new[5:7] == ["80.5", "0.847"]
    # the first tree has no -c 8: no ratio to it, but one to this tree's own bare run
    assert eight[4:7] == ["6,240", "-", "85.0"] and eight[-2:] == ["1.000", "1.50"]


def test_a_sample_goes_to_the_innermost_frame_that_names_a_step():
    frames = [
        "SequentialDrain.pump (delayq/worker/drains.py:216)",
        "Caller.execute (delayq/worker/calls.py:78)",
        "incr (bench/handlers.py:36)",
        "Redis.execute_command (redis/client.py:605)",
    ]
    assert step_of(frames) == "the call (the handler's INCR)"
    assert step_of(frames[:2]) == "the drain's own loop"
    # a name alone is not enough: the file must match too
    assert step_of(["Cursor.execute (pymysql/cursors.py:153)"]) is None


def test_samples_by_thread_the_main_one_apart():
    raw = "\n".join(
        [
            "thread (1): MainThread;Drain.drain (delayq/worker/drains.py:78);"
            "SequentialDrain.pump (delayq/worker/drains.py:216);"
            "Journal.write_many (delayq/store/index/journal.py:52) 7",
            "thread (2): delayq-bookkeeper_0;_WorkItem.run (concurrent/futures/thread.py:58);"
            "OutcomeBuffer._commit (delayq/worker/group_commits.py:104);"
            "tally_of (delayq/worker/group_commits.py:190) 3",
            "thread (1);<module> (delayq/__init__.py:6) 2",
        ]
    )
    assert steps(raw, main_only=True) == {
        "journal write (one send)": 7,
        "process start, pass set-up and exit": 2,
    }
    assert steps(raw, main_only=False)["[bookkeeper] metrics and minutes (tallies)"] == 3


def test_many_threads_against_one_per_runner_from_medians():
    found = {
        ("delayq", 1): [5000.0, 5600.0, 5200.0],
        ("delayq", 8): [3250.0, 3000.0, 3500.0],
        ("huey", 1): [3500.0],
        ("huey", 8): [2100.0],
        ("bare threads", 1): [18000.0, 20000.0],
        ("bare threads", 8): [11000.0, 12000.0],
    }
    rows = threads_table(found, 8).splitlines()
    assert rows[0].split()[1:] == ["1", "thread", "8", "threads", "ratio"]
    assert rows[1].split() == ["delayq", "5,200", "3,250", "0.625"]
    assert rows[2].split() == ["huey", "3,500", "2,100", "0.600"]
    assert rows[3].split() == ["bare", "threads", "19,000", "11,500", "0.605"]
