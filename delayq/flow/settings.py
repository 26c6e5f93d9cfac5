"""Each queue's flow settings from end to end: changed (pause, resume, limit) in the table first
and then in their Redis mirror, where every run's claim reads them; read back for the operator
as the table holds them; and read back for a run (settings_of, restore), from the mirror, put
back from the table first wherever Redis lost it, so a lost mirror never reads as "running".

The SQL is store/table/queue_settings.py's and the Redis keys store/index/flow.py's; this
module decides the order they are written in. The Queue's pause, resume and limit methods
call it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ..config import validate_queue_name
from ..errors import BadInput
from ..store.index import Flow, Index
from ..store.table import RUNNING, UNCHANGED, Leases, QueueFlow, QueueSettings, Table, Unchanged
from .limits import parse_concurrency_limit, parse_rate

# A write of the settings table (QueueSettings.pause, .resume): (settings, queues, now) -> their
# settings now.
SettingsChange = Callable[[QueueSettings, Sequence[str], float], dict[str, QueueFlow]]


def pause(
    table: Table, index: Index, names: Sequence[str], now: float | None = None
) -> dict[str, QueueFlow]:
    """Pause queues `names` from `now` (None: Redis's clock); each one's settings."""
    return _change(table, index, QueueSettings.pause, names, now)


def resume(
    table: Table, index: Index, names: Sequence[str], now: float | None = None
) -> dict[str, QueueFlow]:
    """Resume those of queues `names` that are paused, as of `now`; each one's settings."""
    return _change(table, index, QueueSettings.resume, names, now)


def limit(
    table: Table,
    index: Index,
    names: Sequence[str],
    rate: str | None | Unchanged = UNCHANGED,
    concurrency_limit: int | None | Unchanged = UNCHANGED,
    now: float | None = None,
) -> dict[str, QueueFlow]:
    """Limit queues `names` to `rate` ("10/s") and to `concurrency_limit` jobs running at
    once; None lifts that limit, UNCHANGED leaves it as it is. Each one's settings."""
    if isinstance(rate, Unchanged) and isinstance(concurrency_limit, Unchanged):
        raise BadInput("give rate= or concurrency= (None lifts that limit)")
    parsed_rate = rate if rate is None or isinstance(rate, Unchanged) else parse_rate(rate)
    if concurrency_limit is not None and not isinstance(concurrency_limit, Unchanged):
        concurrency_limit = parse_concurrency_limit(concurrency_limit)

    def write(rows: QueueSettings, queues: Sequence[str], at: float) -> dict[str, QueueFlow]:
        settings = rows.limit(queues, at, parsed_rate, concurrency_limit)
        if not isinstance(concurrency_limit, Unchanged):
            # Before the claims can count them: the jobs running already hold slots.
            for queue in queues:
                running = [] if concurrency_limit is None else Leases(table).running_leases(queue)
                index.flow.reset_slots(queue, running)
        return settings

    return _change(table, index, write, names, now)


def _change(
    table: Table,
    index: Index,
    write: SettingsChange,
    names: Sequence[str],
    now: float | None,
) -> dict[str, QueueFlow]:
    """Write the change to the queues' settings in the table, then mirror it into Redis."""
    queues = _queues(names)
    # Forgotten first: whatever fails from here on, a claim finds no mirror and asks the
    # table, which holds the change as soon as it commits.
    index.flow.forget(queues)
    settings = write(QueueSettings(table), queues, index.clock.now() if now is None else now)
    index.flow.mirror(settings)
    return settings


def limited(table: Table) -> dict[str, QueueFlow]:
    """{queue: its settings} of every queue with a rate or concurrency limit, as the table
    holds them."""
    return {queue: flow for queue, flow in QueueSettings(table).flows().items() if flow.limited}


def paused(table: Table) -> dict[str, QueueFlow]:
    """{queue: its settings} of every paused queue, as the table holds them."""
    return {queue: flow for queue, flow in QueueSettings(table).flows().items() if flow.paused}


def unknown(table: Table, index: Index, names: Sequence[str]) -> list[str]:
    """Those of queues `names` no job has used and no pause has named: neither registered,
    nor holding a schedule entry or a pending row, nor in the settings table."""
    queues = _queues(names)
    known = set(index.registry.known_queues()) | set(QueueSettings(table).flows())
    return [
        name
        for name in queues
        if name not in known
        and not index.schedule.size(name)
        and not QueueSettings(table).holds_jobs(name)
    ]


def _queues(names: Sequence[str]) -> list[str]:
    if not names:
        raise BadInput("name at least one queue")
    return [validate_queue_name(name) for name in dict.fromkeys(names)]


def settings_of(table: Table, flow: Flow, queue: str) -> QueueFlow:
    """The queue's flow settings as Redis mirrors them, put back from the table first if
    Redis lost them."""
    found = flow.read([queue])[queue]
    return found if found is not None else restore(table, flow, [queue])[queue]


def restore(table: Table, flow: Flow, queues: Sequence[str]) -> dict[str, QueueFlow]:
    """Put the queues' settings back into Redis from the table (a queue without a row: its
    defaults), then return what Redis holds: a change mirrored meanwhile wins. A
    concurrency-limited queue whose settings Redis lost lost its running slots with them:
    they come back from its running rows first, before any claim can count them."""
    kept = QueueSettings(table).flows(queues)
    lost = [queue for queue, found in flow.read(queues).items() if found is None]
    for queue in lost:
        if kept.get(queue, RUNNING).concurrency is not None:
            flow.hold_slots(queue, Leases(table).running_leases(queue))
    flow.mirror({queue: kept.get(queue, RUNNING) for queue in queues})
    found = flow.read(queues)
    return {queue: found[queue] or kept.get(queue, RUNNING) for queue in queues}
