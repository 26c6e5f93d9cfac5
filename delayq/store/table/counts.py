"""Counts a look can afford at any depth. Pending counts kept as rows change, so that
`status`, the web page and `metrics` answer in O(queues) at millions of rows: the
`delay_queue_counts` table, which triggers on `delay_queue` keep.

Triggers, not delayq's own writes, keep it: every writer counts, the seed's PHP producers and
an operator's SQL included, in the transaction that changes the row. A row counts where it
enters or leaves PENDING (an INSERT, an UPDATE of its status or queue, a DELETE); the other
statuses are counted from the table's SQL indexes when asked (ops/overview.py). Each
connection adds to a count row of its own (its `slot` column: its connection id modulo
COUNT_ROWS), so writers on many connections do not wait on one hot row; a queue's count is
the sum of its count rows.

A database user without the TRIGGER privilege (or, with binary logging, without SUPER or
log_bin_trust_function_creators) gets no triggers, and no counts table either: `init` says so
in one line naming what would allow them, and counts are read from the SQL index, as exact
and slower. A TRUNCATE fires no trigger: `init` and `reconcile` correct the counts (`correct`),
one at a time under a named lock, without stopping writers.

And, for the rest: the statuses present and a range counted up to a bound, then estimated.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from weakref import WeakKeyDictionary

from peewee import DatabaseError, ModelSelect, fn

from .jobs import Jobs
from .model import TABLE_NAME, Job, Status, Table, tuples
from .mutexes import run_exclusive
from .privileges import allowing_triggers, trigger_needs

COUNTS_TABLE = "delay_queue_counts"
# A queue's count rows at most: a connection adds to the one its id falls on.
COUNT_ROWS = 64
TRIGGERS = (
    "delay_queue_pending_insert",
    "delay_queue_pending_delete",
    "delay_queue_pending_left",
    "delay_queue_pending_entered",
)

ADDED = f"added {COUNTS_TABLE} and the triggers that keep pending counts"
UPGRADED = "replaced the triggers that count pending rows with cheaper ones"
# How doctor's line begins with the triggers, and `init`'s and doctor's without them.
KEPT_BY_TRIGGERS = f"pending counts are kept by triggers in {COUNTS_TABLE} as rows change"
WITHOUT_TRIGGERS = "pending counts are read from the table's index at each look"
KEPT_EARLIER = "kept the earlier triggers that count pending rows"
# The mutex two corrections (two `reconcile`, two `init`) take turns under.
CORRECTING = f"{COUNTS_TABLE}:correct"
# A session variable a writer sets while its INSERTs' pending rows are counted by itself, for
# INSERTs of at least COUNTED_FROM rows.
COUNTED_BY_WRITER = "@delayq_counted"
COUNTED_FROM = 500
_PENDING = int(Status.PENDING)
# When a row leaves PENDING, or enters it, through an UPDATE (its status, or its queue).
_LEFT = f"OLD.status = {_PENDING} AND NOT (NEW.status = {_PENDING} AND NEW.queue = OLD.queue)"
_ENTERED = f"NEW.status = {_PENDING} AND NOT (OLD.status = {_PENDING} AND NEW.queue = OLD.queue)"


_INSTALLED: WeakKeyDictionary[Table, bool] = WeakKeyDictionary()


# Without triggers, each queue's pending rows are counted up to this many, then estimated.
EXACT_PENDING = 10_000


class Counts:
    """The counts a look can afford: pending rows by queue from the counts table (its triggers
    installed, kept and corrected here), the statuses present, a range counted to a bound."""

    def __init__(self, table: Table) -> None:
        self.table = table

    @contextmanager
    def counted(self, rows: int) -> Iterator[Counter[str] | None]:
        """Around INSERTs of `rows` rows in an open transaction, on MySQL with the triggers
        there: a Counter the writer fills with the pending rows it inserted, by queue, which one
        statement adds at the end, the insert trigger leaving those rows alone. None elsewhere
        (SQLite, no triggers, or fewer than COUNTED_FROM rows, where the three statements this
        takes would cost more than the triggers): the triggers count, as for any writer."""
        if rows < COUNTED_FROM or not self.table.mysql or not _installed_once(self.table):
            yield None
            return
        by_queue: Counter[str] = Counter()
        db = self.table.db
        db.execute_sql(f"SET {COUNTED_BY_WRITER} = 1")
        try:
            yield by_queue
            if added := {queue: n for queue, n in by_queue.items() if n}:
                values = ", ".join([f"(%s, MOD(CONNECTION_ID(), {COUNT_ROWS}), %s)"] * len(added))
                db.execute_sql(
                    f"INSERT INTO `{COUNTS_TABLE}` (queue, slot, pending) VALUES {values} "
                    "ON DUPLICATE KEY UPDATE pending = pending + VALUES(pending)",
                    [value for queue in sorted(added) for value in (queue, added[queue])],
                )
        finally:
            db.execute_sql(f"SET {COUNTED_BY_WRITER} = NULL")  # the connection's next writes count

    def installed(self) -> bool:
        """Whether all the triggers that keep the counts are there and leave the rows a writer
        counts itself alone (an insert trigger that counts every row would count delayq's own
        INSERTs twice), as this version's or an earlier one's."""
        found = _trigger_bodies(self.table)
        if not set(TRIGGERS) <= set(found):
            return False
        return not self.table.mysql or COUNTED_BY_WRITER in found[TRIGGERS[0]]

    def install(self) -> list[str]:
        """Create the counts table and its triggers where they are missing or an earlier
        version's, then count what the table holds; one line per change. Where the server does
        not let this user create triggers, one line saying how counts are read instead and what
        would allow the triggers, and nothing made: no counts table no trigger keeps."""
        if self.installed() and _current(self.table):
            return [f"corrected pending counts: {words}" for words in _corrected(self.table)]
        upgrading = self.installed()
        made_table = _create_counts(self.table)
        made: list[str] = []
        try:
            _drop_triggers(self.table)
            for name, statement in zip(TRIGGERS, _triggers(self.table.mysql), strict=True):
                self.table.db.execute_sql(statement)
                made.append(name)
        except DatabaseError as exc:
            _take_back(self.table, made, made_table)
            if (allowing := allowing_triggers(self.table, exc)) is None:
                raise
            return [_refused(self.table, allowing)]
        finally:
            _INSTALLED.pop(self.table, None)
        if upgrading:
            # Rows written between the drop and the create were not counted: corrected here.
            drift = _corrected(self.table)
            return [UPGRADED] + [f"corrected pending counts: {words}" for words in drift]
        self.correct()
        return [ADDED]

    def keeping(self) -> tuple[bool, str]:
        """Whether triggers keep the pending counts, and how the counts are kept, in words for
        doctor: by triggers, or read from the SQL index with what would let `init` make them."""
        if self.installed():
            earlier = (
                "" if _current(self.table) else "; `delayq init` replaces them with cheaper ones"
            )
            return True, KEPT_BY_TRIGGERS + earlier
        return False, (
            f"{WITHOUT_TRIGGERS} (estimated beyond 10000 a queue): no triggers keep them; "
            + trigger_needs(self.table)
        )

    def correct(self) -> dict[str, int]:
        """Bring the kept counts to what the table holds, and return by how much each queue's was
        off: rows written before the triggers existed, a TRUNCATE (which fires none), a count
        edited by hand. Writers go on meanwhile: the difference between the table and the counts
        is read in one statement, one snapshot, so it is the error whatever commits after it, and
        it is added, not written over. Two corrections at once (two `reconcile`, two `init`) take
        turns under a named lock, writers take none: the second reads after the first's addition
        committed, and adds nothing the first added."""
        return run_exclusive(self.table, CORRECTING, lambda: _add_drift(self.table))

    def pending_by_queue(self) -> dict[str, int]:
        """{queue: pending rows} of the queues that have any (`pending_counts`)."""
        return self.pending_counts()[0]

    def pending_counts(self) -> tuple[dict[str, int], set[str]]:
        """{queue: pending rows} of the queues that have any, and the queues whose figure is the
        database's estimate: the kept counts when the triggers are there (exact, O(queues)),
        else each queue's range of the (status, queue, run_at) SQL index counted up to
        EXACT_PENDING rows and estimated beyond (a count of ten million rows takes 1.6 s)."""
        if self.installed():
            return {name: count for name, count in _kept(self.table).items() if count}, set()
        Job = self.table.model
        found: dict[str, int] = {}
        estimated: set[str] = set()
        for name in Jobs(self.table).queues_of(Status.PENDING):
            rows = Job.select(Job.id).where(Job.status == Status.PENDING, Job.queue == name)
            found[name], exact = self.bounded_count(rows, EXACT_PENDING)
            if not exact:
                estimated.add(name)
        return found, estimated

    def statuses_present(self) -> list[int]:
        """The status numbers rows have, a loose scan of the (status, ...) SQL indexes: one lookup a
        status, unknown numbers included."""
        Job = self.table.model
        found: list[int] = []
        while True:
            query = Job.select(fn.MIN(Job.status))
            if found:
                query = query.where(Job.status > found[-1])
            if (status := query.scalar()) is None:
                return found
            found.append(int(status))

    def bounded_count(self, rows: ModelSelect[Job], exact_up_to: int) -> tuple[int, bool]:
        """(how many `rows`, whether exact): counted up to `exact_up_to`, beyond that MySQL's
        estimate of the range (its EXPLAIN, from index dives); SQLite counts them all."""
        if not self.table.mysql:
            return int(rows.count()), True
        counted = int(rows.limit(exact_up_to + 1).count())
        if counted <= exact_up_to:
            return counted, True
        sql, params = rows.sql()
        cursor = self.table.db.execute_sql(f"EXPLAIN {sql}", params)
        columns = [column[0].lower() for column in cursor.description]
        estimate = max(int(row[columns.index("rows")] or 0) for row in cursor.fetchall())
        return max(estimate, counted), False


def _mysql_trigger(name: str, event: str, row: str, delta: int, when: str) -> str:
    # The INSERT inside an IF: a row that neither enters nor leaves PENDING (a run's outcome,
    # a purged finished row, a row add_many counts itself) then costs the server the test
    # alone, where an INSERT ... SELECT ... WHERE that adds nothing still costs about 4 us a
    # row, a tenth of what purge spends on each row it deletes. The `;` inside means
    # schema.sql needs the mysql client's DELIMITER.
    values = f"VALUES ({row}.queue, MOD(CONNECTION_ID(), {COUNT_ROWS}), {delta})"
    return f"CREATE TRIGGER `{name}` AFTER {event} ON `{TABLE_NAME}` FOR EACH ROW " + (
        f"IF {when} THEN INSERT INTO `{COUNTS_TABLE}` (queue, slot, pending) {values} "
        f"ON DUPLICATE KEY UPDATE pending = pending + ({delta}); END IF"
    )


def _sqlite_trigger(name: str, event: str, row: str, delta: int, when: str) -> str:
    return (
        f'CREATE TRIGGER "{name}" AFTER {event} ON "{TABLE_NAME}" FOR EACH ROW WHEN {when} '
        f'BEGIN INSERT INTO "{COUNTS_TABLE}" (queue, slot, pending) VALUES ({row}.queue, 0, '
        f"{delta}) ON CONFLICT (queue, slot) DO UPDATE SET pending = pending + ({delta}); END"
    )


def _triggers(mysql: bool) -> list[str]:
    make = _mysql_trigger if mysql else _sqlite_trigger
    # delayq's multi-row INSERTs count their rows themselves, in one statement (`counted`):
    # a row the trigger need not count costs the server a third less.
    inserted = f"NEW.status = {_PENDING}" + (f" AND {COUNTED_BY_WRITER} IS NULL" if mysql else "")
    return [
        make(TRIGGERS[0], "INSERT", "NEW", 1, inserted),
        make(TRIGGERS[1], "DELETE", "OLD", -1, f"OLD.status = {_PENDING}"),
        make(TRIGGERS[2], "UPDATE", "OLD", -1, _LEFT),
        make(TRIGGERS[3], "UPDATE", "NEW", 1, _ENTERED),
    ]


def _create_counts(table: Table) -> bool:
    """Create the counts table unless it is there; whether it was made now."""
    if table.db.table_exists(COUNTS_TABLE):
        return False
    if table.mysql:
        table.db.execute_sql(
            f"CREATE TABLE IF NOT EXISTS `{COUNTS_TABLE}` ("
            "`queue` varchar(64) NOT NULL, `slot` smallint NOT NULL, "
            "`pending` bigint NOT NULL DEFAULT 0, PRIMARY KEY (`queue`, `slot`)"
            ") ENGINE=InnoDB DEFAULT CHARSET=utf8mb4"
        )
    else:
        table.db.execute_sql(
            f'CREATE TABLE IF NOT EXISTS "{COUNTS_TABLE}" (queue VARCHAR(64) NOT NULL, '
            "slot SMALLINT NOT NULL, pending BIGINT NOT NULL DEFAULT 0, PRIMARY KEY (queue, slot))"
        )
    return True


def _installed_once(table: Table) -> bool:
    """`installed`, asked once per Table: a writer that counts its own rows stays right
    whether the triggers are there or not, it only saves them work."""
    known = _INSTALLED.get(table)
    if known is None:
        known = _INSTALLED[table] = Counts(table).installed()
    return known


def _trigger_bodies(table: Table) -> dict[str, str]:
    if table.mysql:
        query = (
            "SELECT TRIGGER_NAME, ACTION_STATEMENT FROM information_schema.TRIGGERS "
            "WHERE TRIGGER_SCHEMA = DATABASE() AND EVENT_OBJECT_TABLE = %s"
        )
    else:
        query = "SELECT name, sql FROM sqlite_master WHERE type = 'trigger' AND tbl_name = ?"
    return {str(name): str(body) for name, body in table.db.execute_sql(query, (TABLE_NAME,))}


def _current(table: Table) -> bool:
    """Whether the installed triggers are this version's: on MySQL, triggers that test before
    they write (earlier ones ran an INSERT ... SELECT for every row)."""
    found = _trigger_bodies(table)
    return not table.mysql or all(
        found[name].lstrip().upper().startswith("IF ") for name in TRIGGERS
    )


def _take_back(table: Table, made: list[str], made_table: bool) -> None:
    """Drop what a failed `install` made: the triggers it created and the counts table if it
    created it, so no trigger counts some moves and not others and no table sits beside
    `delay_queue` that nothing keeps. Earlier triggers it could not drop stay, and keep
    counting."""
    for name in made:
        table.db.execute_sql(f"DROP TRIGGER IF EXISTS {_quoted(table, name)}")
    if made_table and not set(TRIGGERS) & set(_trigger_bodies(table)):
        # A user without DROP leaves it: empty, and read by nothing while no triggers are there.
        with suppress(DatabaseError):
            table.db.execute_sql(f"DROP TABLE {_quoted(table, COUNTS_TABLE)}")


def _refused(table: Table, allowing: str) -> str:
    """`init`'s line when the server refused the triggers: how counts are kept now (still by
    an earlier version's triggers, or read from the SQL index), and what would allow them."""
    again = "then run `delayq init` again"
    if Counts(table).installed():
        return f"{KEPT_EARLIER}: {allowing}, {again}"
    return f"{WITHOUT_TRIGGERS} (estimated beyond 10000 a queue): {allowing}, {again}"


def is_notice(line: str) -> bool:
    """Whether an `install` line says what the server refused (said at every `init`, a
    notice), not a change made."""
    return line.startswith((WITHOUT_TRIGGERS, KEPT_EARLIER))


def _add_drift(table: Table) -> dict[str, int]:
    drift = _drift(table)
    upsert = (
        "ON DUPLICATE KEY UPDATE pending = pending + VALUES(pending)"
        if table.mysql
        else "ON CONFLICT (queue, slot) DO UPDATE SET pending = pending + excluded.pending"
    )
    mark = "%s" if table.mysql else "?"
    for name, error in drift.items():
        table.db.execute_sql(
            f"INSERT INTO {_quoted(table, COUNTS_TABLE)} (queue, slot, pending) "
            f"VALUES ({mark}, 0, {mark}) {upsert}",
            (name, error),
        )
    return drift


def _drift(table: Table) -> dict[str, int]:
    """{queue: pending rows less kept count} where they differ. One statement sees one
    snapshot whatever the isolation level (delayq's sessions read committed); each table's
    rows are grouped by its own collation, and the names compared as bytes, as a UNION of
    two collations is refused."""
    name = "CAST(queue AS BINARY)" if table.mysql else "queue"
    rows = table.db.execute_sql(
        f"SELECT 1, {name}, COUNT(*) FROM {_quoted(table, TABLE_NAME)} "
        f"WHERE status = {_PENDING} GROUP BY queue UNION ALL "
        f"SELECT -1, {name}, SUM(pending) FROM {_quoted(table, COUNTS_TABLE)} GROUP BY queue"
    ).fetchall()
    drift: Counter[str] = Counter()
    for sign, queue, count in rows:
        text = queue.decode() if isinstance(queue, (bytes, bytearray)) else str(queue)
        drift[text] += int(sign) * int(count or 0)
    return {queue: error for queue, error in drift.items() if error}


def added(line: str) -> bool:
    """Whether an `install` line says the counts were added (rather than why not)."""
    return line == ADDED


def _corrected(table: Table) -> list[str]:
    drift = Counts(table).correct()
    words = ", ".join(f"{name} {error:+d}" for name, error in sorted(drift.items()))
    return [words] if drift else []


def _drop_triggers(table: Table) -> None:
    for name in TRIGGERS:
        table.db.execute_sql(f"DROP TRIGGER IF EXISTS {_quoted(table, name)}")


def _kept(table: Table) -> dict[str, int]:
    rows = table.db.execute_sql(
        f"SELECT queue, SUM(pending) FROM {_quoted(table, COUNTS_TABLE)} GROUP BY queue"
    ).fetchall()
    return {str(name): int(count) for name, count in rows}


def _counted(table: Table) -> dict[str, int]:
    Job = table.model
    query = (
        Job.select(Job.queue, fn.COUNT(Job.id))
        .where(Job.status == Status.PENDING)
        .group_by(Job.queue)
    )
    return {str(name): int(count) for name, count in tuples(query)}


def _quoted(table: Table, name: str) -> str:
    return f"`{name}`" if table.mysql else f'"{name}"'
