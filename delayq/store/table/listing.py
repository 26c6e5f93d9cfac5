"""The rows `list` shows and `requeue` repeats, chosen by a filter: a `RowFilter` says which
(every field left empty matches everything), `filtered` is its SELECT, and a `Listing` reads
it newest first, a page at a time. ops/overview.py's JobFilter checks what an operator typed
and makes the RowFilter; it also checks the exact class, which SQL only narrows down."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from peewee import SQL, ModelSelect, NodeList, Value

from .model import Job, Table, tuples, utc_stamp


@dataclass(frozen=True)
class RowFilter:
    """Which rows to read: in `statuses`, of `queue`, with business key `ext`, whose params
    may name `class_path`, last changed from `changed_from` to before `changed_to` (epoch
    seconds)."""

    statuses: tuple[int, ...] = ()
    queue: str | None = None
    ext: str | None = None
    class_path: str | None = None
    changed_from: float | None = None
    changed_to: float | None = None


def filtered(table: Table, rows: RowFilter) -> ModelSelect[Job]:
    """The SELECT of the rows `rows` matches, the class narrowed down by LIKE."""
    Job = table.model
    query = Job.select()
    if rows.statuses:
        query = query.where(Job.status.in_(list(rows.statuses)))
    if rows.queue is not None:
        query = query.where(Job.queue == rows.queue)
    if rows.ext is not None:
        query = query.where(Job.ext_string == rows.ext)
    if rows.changed_from is not None:
        query = query.where(Job.modified >= utc_stamp(rows.changed_from))
    if rows.changed_to is not None:
        query = query.where(Job.modified < utc_stamp(rows.changed_to))
    windowed = (rows.changed_from, rows.changed_to) != (None, None)
    if windowed and not rows.statuses:
        # A time window over every status as ranges of the (status, modified) SQL index, one
        # per status present (a loose index scan finds them, unknown numbers included):
        # without a status, MySQL would walk the primary key past every row outside it.
        present = [status for (status,) in tuples(Job.select(Job.status).distinct())]
        query = query.where(Job.status.in_(present))
    if rows.class_path is not None:
        # params is JSON (or a PHP producer's serialize() text), and json_extract differs by
        # database and fails on other text: LIKE narrows, the caller checks exactly.
        as_json = json.dumps(rows.class_path, ensure_ascii=False)
        query = query.where(_like(Job.params, as_json) | _like(Job.params, f'"{rows.class_path}";'))
    return query


def _like(column: Any, text: str) -> NodeList:
    escaped = text.replace("!", "!!").replace("%", "!%").replace("_", "!_")
    return NodeList((column, SQL("LIKE"), Value(f"%{escaped}%"), SQL("ESCAPE '!'")))


class Listing:
    """The rows of one table that filters match, read a page at a time."""

    def __init__(self, table: Table) -> None:
        self.table = table

    def newest(self, rows: RowFilter, before_id: int | None, limit: int) -> list[Job]:
        """At most `limit` rows `rows` matches, newest first, all with ids below `before_id`
        (None: from the newest)."""
        Job = self.table.model
        query = filtered(self.table, rows)
        if before_id is not None:
            query = query.where(Job.id < before_id)
        return list(query.order_by(Job.id.desc()).limit(limit))
