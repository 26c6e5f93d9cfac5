"""The state machine: every way a job gets in, every change a user makes, every run, and every
loss of derived state, as Hypothesis rules on real servers; after each step, the checks of
checks.py against the table.

The model's clock. Every Queue call that takes `now=` gets the model's clock, which starts at
Redis's clock and moves only by the `advance` rule (a second to an hour a step), so the
horizon's walks, the orphan sweep's 30 s, leases and retries all come round within a few
steps, without waiting. Producers and runners may be off it by up to SKEW either way (a host
whose clock stepped between two of its once-a-minute readings of Redis's, docs/internals.md,
"One clock"). A loop pass (`run_loop`) reads Redis's clock itself, so it is a step only while
the model's clock has not run ahead of Redis's.

What the model remembers is what the bounds depend on: each job's calls (from the handler's
log), the rows whose schedule entry was lost on purpose (the orphan sweep's 30 s apply to
them), and whether the kept counts were lost and not yet corrected.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Callable
from typing import Any

from hypothesis import note
from hypothesis import strategies as st
from hypothesis.stateful import RULE_MARKER as RULE  # what @rule marks a method with
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

import delayq
from delayq import JobSpec
from delayq.config import DEFAULT_QUEUE
from delayq.errors import JobNotFound
from delayq.store.index.keys import DEFAULT_QUEUE_KEY
from delayq.store.table.counts import COUNTS_TABLE
from delayq.worker.recovery import ORPHAN_GRACE, SWEEP_LIMIT
from tests.model import checks, producers
from tests.model.handlers import calls
from tests.model.truth import PENDING, RUNNING, Truth
from tests.model.world import HANDLER, QUEUE_KEY_KINDS, World, queue_keys, world_keys

SKEW = 1.0  # seconds a host's clock may be off the model's (see the module's docstring)
LOOP_FOR = 0.3  # seconds of a loop pass
CLI_ADDS = 1  # `delayq add` processes an example may start (each costs most of a second)
BULK = SWEEP_LIMIT + 50  # jobs of the one large add an example may make

QUEUE_NAMES = (DEFAULT_QUEUE, "mail", "sms")
QUEUES = st.sampled_from(QUEUE_NAMES)
# Due in: at once, around the orphan sweep's 30 s, around the 10-minute horizon, or later.
DELAYS = st.sampled_from([0.0, 1.0, 29.0, 31.0, 300.0, 599.0, 601.0, 1800.0, 7200.0]) | st.floats(
    0, 7200
)
SKEWS = st.sampled_from([0.0, -SKEW, SKEW]) | st.floats(-SKEW, SKEW)
STEPS = st.sampled_from([1.0, 5.0, 31.0, 61.0, 121.0, 301.0, 551.0, 601.0, 3600.0]) | st.floats(
    0.5, 3600
)
KEYS = st.sampled_from(["order:1", "order:2"])  # business keys of adds and --replace
LOCK_NAMES = ("merchant:7", "merchant:9")
LOCKS = st.sampled_from(LOCK_NAMES)
# Jobs a cancel or a retry names: the ids an example's rows have, most of the time.
JOB_IDS = st.integers(1, 40)
SERIES = "series:1"  # the business key of recurring jobs: cancel --ext ends them
JOBS = st.lists(st.tuples(QUEUES, DELAYS), min_size=2, max_size=5)


class DerivedState(RuleBasedStateMachine):
    """One example: empty servers, a long-lived Queue (producer and runner, "host 0"),
    another runner ("host 1"), and the rules below, in any order."""

    def __init__(self, world: World) -> None:
        super().__init__()
        self.world = world
        world.reset()
        self.q = world.open_queue()
        self.q.init()
        self.hosts = [self.q, world.open_queue()]
        # A producer whose Redis link the model holds (on MariaDB's side only).
        self.held = world.open_queue(held=True) if world.proxy is not None else None
        self.truth = Truth(self.q.db)
        self.now = self.q.index.clock.now()
        self.calls: Counter[int] = Counter()
        self.grace: dict[int, float] = {}  # row id: the extra lateness its loss allows
        self.counts_trusted = True
        self.cli_adds = 0
        self.bulk_added = False
        self.advanced = 0.0  # seconds the model's clock was moved on by steps

    def teardown(self) -> None:
        for host in self.hosts:
            host.close()
        if self.held is not None:
            self.held.close()

    @initialize(delays=st.tuples(DELAYS, DELAYS, DELAYS))
    def start(self, delays: tuple[float, float, float]) -> None:
        """A job in each queue, through the long-lived Queue, as an application's first."""
        for queue, delay in zip(QUEUE_NAMES, delays, strict=True):
            self.q.add(HANDLER, "record", self._data(), delay=delay, queue=queue, now=self.now)

    # Ways in.

    @rule(producer=st.sampled_from(["long-lived", "fresh"]), queue=QUEUES, delay=DELAYS)
    def add(self, producer: str, queue: str, delay: float) -> None:
        """`add` through the long-lived Queue or a Queue opened for it alone."""
        self._produce(producer, lambda q: q.add(HANDLER, "record", self._data(), delay=delay,
                                                 queue=queue, now=self.now))  # fmt: skip

    @rule(queue=QUEUES, delay=DELAYS, skew=SKEWS)
    def add_failing_with_one_retry(self, queue: str, delay: float, skew: float) -> None:
        """A job whose handler fails, with one retry 10 s after, by a producer off by `skew`."""
        data = self._data(fail=True)
        self.q.add(HANDLER, "record", data, delay=delay, queue=queue, retries=1,
                   retry_delays=["10s"], now=self.now + skew)  # fmt: skip

    @rule(jobs=JOBS)
    def add_many(self, jobs: list[tuple[str, float]]) -> None:
        """`add_many` of a few jobs, in any queues."""
        self.q.add_many([self._spec(queue, delay) for queue, delay in jobs], now=self.now)

    @precondition(lambda self: not self.bulk_added)
    @rule(queue=QUEUES)
    def add_bulk(self, queue: str) -> None:
        """BULK jobs due within the next minute in one add_many, which counts its own rows
        (docs/internals.md, "At millions of jobs"): more than the orphan sweep reads in one
        go (SWEEP_LIMIT)."""
        self.bulk_added = True
        specs = [self._spec(queue, n * 60.0 / BULK) for n in range(BULK)]
        self.q.add_many(specs, now=self.now)

    @rule(jobs=st.lists(st.tuples(QUEUES, DELAYS), min_size=1, max_size=2), commit=st.booleans())
    def add_in_transaction(self, jobs: list[tuple[str, float]], commit: bool) -> None:
        """`add_many(using=)` in the application's transaction, committed or rolled back."""
        specs = [self._spec(queue, delay) for queue, delay in jobs]
        producers.add_in_transaction(self.q, self.world, specs, self.now, commit)

    @rule(queue=QUEUES, delay=DELAYS, zadd=st.booleans())
    def add_foreign(self, queue: str, delay: float, zadd: bool) -> None:
        """Another producer's INSERT and ZADD (docs/producers.md), or its INSERT alone."""
        job_id = producers.add_foreign(self.world, queue, self.now + delay, zadd)
        if not zadd:  # "a run re-indexes a pending row ... once it has been due for 30 s"
            self.grace[job_id] = ORPHAN_GRACE

    @rule(producer=st.sampled_from(["long-lived", "fresh"]), queue=QUEUES, ext=KEYS,
          delay=DELAYS, skew=SKEWS)  # fmt: skip
    def add_replace(self, producer: str, queue: str, ext: str, delay: float, skew: float) -> None:
        """`add(replace=True)`: the pending job of `ext` moved, or a new one."""
        self._produce(producer, lambda q: q.add(HANDLER, "record", self._data(), delay=delay,
                                                 queue=queue, ext=ext, replace=True,
                                                 now=self.now + skew))  # fmt: skip

    @precondition(lambda self: self.held is not None)
    @rule(queue=QUEUES, ext=KEYS, first=DELAYS, second=DELAYS)
    def replace_at_once(self, queue: str, ext: str, first: float, second: float) -> None:
        """Two `add(replace=True)` of one key at once (producers.replace_at_once)."""
        assert self.held is not None
        due = (self.now + first, self.now + second)
        producers.replace_at_once(self.world, (self.held, self.q), queue, ext, due, self.now)

    @rule(queue=QUEUES, every=st.sampled_from([60.0, 600.0, 3600.0]), delay=DELAYS)
    def add_recurring(self, queue: str, every: float, delay: float) -> None:
        """A recurring job (`every`), of the one series `cancel_by_ext` can end."""
        self.q.add(HANDLER, "record", self._data(), delay=delay, queue=queue, every=every,
                   ext=SERIES, now=self.now)  # fmt: skip

    @rule(queue=QUEUES, lock=LOCKS, delay=DELAYS)
    def add_locked(self, queue: str, lock: str, delay: float) -> None:
        """A job with a per-key lock (`lock=`)."""
        self.q.add(HANDLER, "record", self._data(), delay=delay, queue=queue, lock=lock,
                   now=self.now)  # fmt: skip

    @precondition(lambda self: self.cli_adds < CLI_ADDS)
    @rule(queue=QUEUES, delay=DELAYS, ext=st.sampled_from(["", "order:1"]),
          lock=st.sampled_from([None, "merchant:7"]))  # fmt: skip
    def add_through_cli(self, queue: str, delay: float, ext: str, lock: str | None) -> None:
        """`delayq add --at`, with `--ext --replace` or `--lock` or neither."""
        self.cli_adds += 1
        producers.add_through_cli(self.world, queue, self.now + delay, ext, lock)

    # What users change.

    @rule(job=JOB_IDS)
    def cancel(self, job: int) -> None:
        """`cancel` by id (of any status; an id no row has is refused)."""
        with contextlib.suppress(JobNotFound):
            self.q.cancel(job, now=self.now)

    @rule(ext=st.sampled_from(["order:1", "order:2", SERIES]), queue=st.none() | QUEUES)
    def cancel_by_ext(self, ext: str, queue: str | None) -> None:
        """`cancel --ext`, in one queue or all."""
        self.q.cancel(ext=ext, queue=queue, now=self.now)

    @rule(job=JOB_IDS, delay=st.sampled_from([0.0, 30.0, 900.0]))
    def retry(self, job: int, delay: float) -> None:
        """`delayq retry`: never refused here, as no attempt runs between steps."""
        with contextlib.suppress(JobNotFound):
            self.q.retry(job, delay=delay, now=self.now)

    @rule(queue=QUEUES, change=st.sampled_from(["pause", "resume", "rate", "concurrency", "none"]))
    def change_flow(self, queue: str, change: str) -> None:
        """`pause`, `resume`, or `limit`: 3 starts a minute, 1 at once, or no limit."""
        if change == "pause":
            self.q.pause(queue, now=self.now)
        elif change == "resume":
            self.q.resume(queue, now=self.now)
        elif change == "rate":
            self.q.limit(queue, rate="3/m", now=self.now)
        elif change == "concurrency":
            self.q.limit(queue, concurrency=1, now=self.now)
        else:
            self.q.limit(queue, rate=None, concurrency=None, now=self.now)

    # Runs.

    @rule(host=st.sampled_from([0, 1]), skew=SKEWS)
    def run(self, host: int, skew: float) -> None:
        """A one-shot pass (`delayq run`) on host 0 or 1, its clock off by `skew`."""
        self._run(host, skew)

    @rule(seconds=STEPS, host=st.sampled_from([0, 1]))
    def advance_and_run(self, seconds: float, host: int) -> None:
        """The clock moves on, and a cron run comes."""
        self._advance(seconds)
        self._run(host, 0.0)

    @rule(after=st.sampled_from([0.0, 1.0, 29.0]), host=st.sampled_from([0, 1]))
    def run_when_next_due(self, after: float, host: int) -> None:
        """The clock moves on to `after` seconds past the next pending row's due time, and a
        run comes: a job late by less than the orphan sweep's 30 s is seen only so."""
        later = [row.run_at for row in self.truth.pending() if row.run_at > self.now]
        if later:
            self._advance(min(later) - self.now + after)
        self._run(host, 0.0)

    @precondition(lambda self: self.advanced <= SKEW)
    @rule()
    def loop_pass(self) -> None:
        """`delayq run --loop` for LOOP_FOR seconds on host 1. It reads Redis's clock, so
        it is a step only while the model's clock has not run ahead of it (by the steps
        alone: a precondition must not depend on how long an example took); the model's
        clock then catches up with Redis's."""
        clock = self.hosts[1].index.clock
        started_at = clock.now()
        self.hosts[1].run_loop(duration=LOOP_FOR)
        ended_at = clock.now()
        self.now = max(self.now, ended_at)
        self._check_calls(ended_at)
        self._check_none_late(started_at)

    @rule(seconds=STEPS)
    def advance(self, seconds: float) -> None:
        """The model's clock moves on."""
        self._advance(seconds)

    # Derived state lost, and brought back.

    @rule()
    def flush_redis(self) -> None:
        """FLUSHALL."""
        self.world.redis.flushall()

    @rule()
    def restart_redis(self) -> None:
        """Redis restarted: empty on MariaDB's side, from its append-only file embedded."""
        self.world.restart_redis()

    @rule(key=st.sampled_from(world_keys(LOCK_NAMES)))
    def lose_a_key(self, key: str) -> None:
        """One of delayq's keys that are not a queue's deleted (an eviction, a DEL by hand)."""
        self._lose(key)

    @rule(queue=QUEUES, kind=st.sampled_from(QUEUE_KEY_KINDS))
    def lose_a_queue_key(self, queue: str, kind: str) -> None:
        """One of a queue's keys deleted: its schedule, horizon, flow settings, rate grants,
        running slots or wake-up list."""
        self._lose(queue_keys(queue)[kind])

    @rule(pick=st.integers(0, 15))
    def lose_another_key(self, pick: int) -> None:
        """A key of a kind world.py does not name (a tally, a newer version's) deleted."""
        known = set(world_keys(LOCK_NAMES))
        known.update(key for queue in QUEUE_NAMES for key in queue_keys(queue).values())
        others = sorted(key.decode() for key in self.world.redis.scan_iter(count=1000))
        if others := [key for key in others if key not in known]:
            key = others[pick % len(others)]
            note(f"lost {key!r}")
            self._lose(key)

    def _lose(self, key: str) -> None:
        self.world.redis.delete(key)
        queue = _queue_of_schedule(key)
        if queue is not None:  # "re-indexed by the next run once it has been due for 30 s"
            for row in self.truth.pending():
                if row.queue == queue:
                    self.grace[row.id] = self.grace.get(row.id, 0.0) + ORPHAN_GRACE

    @rule(queue=QUEUES)
    def lose_counts(self, queue: str) -> None:
        """The kept pending counts of a queue lost (where delayq keeps them)."""
        if self.world.has_table(COUNTS_TABLE):
            self.world.execute(f"DELETE FROM {COUNTS_TABLE} WHERE queue = %s", (queue,))
            # Wrong until a correction: "A TRUNCATE fires no trigger: init or reconcile after one"
            self.counts_trusted = False

    @rule(how=st.sampled_from(["reconcile", "init"]))
    def correct_counts(self, how: str) -> None:
        """`delayq reconcile`, or `delayq init` again: each corrects the kept counts."""
        if how == "reconcile":
            self.q.reconcile()
        else:
            self.q.init(now=self.now)
        self.counts_trusted = True

    @rule(kinds=st.sampled_from([("reconcile", "reconcile"), ("init", "reconcile")]))
    def correct_at_once(self, kinds: tuple[str, str]) -> None:
        """Two count corrections on two hosts at once (producers.correct_at_once)."""
        producers.correct_at_once(self.world, self.hosts, kinds, self.now)
        self.counts_trusted = True

    # The checks after every step.

    @invariant()
    def status_counts_are_the_tables(self) -> None:
        report = self.q.status(now=self.now)
        checks.check_status(
            report.queues,
            self.truth.count_by_queue(PENDING),
            self.truth.count_by_queue(RUNNING),
            self.counts_trusted,
        )

    @invariant()
    def peek_is_the_tables_next_rows(self) -> None:
        pending = self.truth.pending()
        full = self.q.peek(len(pending) + checks.PEEK_FIRST)
        checks.check_peek(full, self.q.peek(checks.PEEK_FIRST), pending, self.world.redis)

    # Helpers.

    def _advance(self, seconds: float) -> None:
        self.now += seconds
        self.advanced += seconds

    def _run(self, host: int, skew: float) -> None:
        at = self.now + skew
        self.hosts[host].run(now=at)
        self._check_calls(at)
        self._check_none_late(at)

    def _check_calls(self, now: float) -> None:
        """The calls since the last check: none before its row's due time at `now`, and no
        job called twice in the example."""
        every = calls(self.world.log)
        new = every[sum(self.calls.values()) :]
        checks.check_none_early(new, self.truth.due_of(sorted(set(new))), now)
        self.calls.update(new)
        checks.check_none_twice(self.calls)

    def _check_none_late(self, now: float) -> None:
        checks.check_none_late(
            self.truth.pending(), now, self.truth.flows(), self.grace, self.world.redis
        )

    def _produce(self, producer: str, add: Callable[[delayq.Queue], Any]) -> None:
        """Add through the long-lived Queue, or a Queue opened for this add alone."""
        if producer == "long-lived":
            add(self.q)
            return
        fresh = self.world.open_queue()
        try:
            add(fresh)
        finally:
            fresh.close()

    def _data(self, fail: bool = False) -> dict[str, Any]:
        return {"log": self.world.log, "fail": True} if fail else {"log": self.world.log}

    def _spec(self, queue: str, delay: float) -> JobSpec:
        return JobSpec(HANDLER, "record", self._data(), delay=delay, queue=queue)


def _queue_of_schedule(key: str) -> str | None:
    """The queue whose schedule (sorted set) `key` is, or None for any other key."""
    if key == DEFAULT_QUEUE_KEY:
        return DEFAULT_QUEUE
    prefix = f"{DEFAULT_QUEUE_KEY}:"
    return key.removeprefix(prefix) if key.startswith(prefix) else None


def narrowed(without: set[str], only: set[str]) -> type[DerivedState]:
    """The machine less the rules and checks named in `without` (DELAYQ_MODEL_WITHOUT) and,
    if `only` names any (DELAYQ_MODEL_ONLY), less every rule it does not name: a plain
    method shadows each one left out."""
    rules = {name for name in dir(DerivedState) if hasattr(getattr(DerivedState, name), RULE)}
    unknown = (without | only) - set(dir(DerivedState))
    if unknown:
        raise ValueError(f"no rule or check of the model is named {sorted(unknown)}")
    left_out = without | (rules - only if only else set())
    if not left_out:
        return DerivedState
    return type("DerivedState", (DerivedState,), {name: _left_out for name in left_out})


def _left_out(self: DerivedState) -> None:
    """A rule or check left out."""
