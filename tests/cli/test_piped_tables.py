"""Tables for pipes: `status`, `list` and `peek` piped into grep or cron mail print plain
aligned columns, with no box-drawing rule under the header; on a terminal (a pseudo-terminal
from script(1)) the rule is still there. Every command runs as a real `delayq` process."""

from __future__ import annotations

import pytest

from tests.cli.test_progress import on_a_terminal
from tests.faults.test_processes import delayq
from tests.ops.test_printing import HOSTILE, SHOWN, hidden_characters

H = "tests.sample_handlers.jobs"
BOX_DRAWING = range(0x2500, 0x2580)
# The header words of each table, with `|` for a space inside one, and which are right-aligned.
LIST_COLUMNS = ("id status queue call ext try run_at message", "id try")
PEEK_COLUMNS = ("id queue due call ext status", "id")
STATUS_COLUMNS = (
    "queue due later running success failed cancelled missed",
    "due later running success failed cancelled missed",
)


def box_drawing(text: str) -> list[str]:
    return [char for char in text if ord(char) in BOX_DRAWING]


def column_spans(header: str, names: str) -> list[tuple[int, int]]:
    """Where each header word sits on the header line, as (start, end) offsets."""
    spans, position = [], 0
    for name in names.split():
        word = name.replace("|", " ")
        start = header.index(word, position)
        spans.append((start, start + len(word)))
        position = start + len(word)
    return spans


def assert_aligned(lines: list[str], names: str, right: str) -> None:
    """Every row starts each left-aligned cell (unless empty) where its header starts, and
    ends each right-aligned cell where its header ends, with a space before and after it."""
    header, *rows = lines
    assert rows, lines
    spans = column_spans(header, names)
    for row in rows:
        for name, (start, end) in zip(names.split(), spans, strict=True):
            if name in right.split():
                assert row[end - 1] != " " and row[end : end + 1] in ("", " "), (name, row)
            else:
                blank = not row[start:end].strip()  # an empty cell, as a pending job's message
                assert blank or row[start] != " ", (name, row)
                assert start == 0 or row[start - 1] == " ", (name, row)


@pytest.fixture
def jobs(queue):
    """A job due now, one due in an hour and one whose ext is hostile, each with an ext."""
    queue.add(H, "echo", 1, ext="order-1")
    queue.add(H, "echo", 2, ext="order-2", delay=3600)
    queue.add(H, "echo", HOSTILE, ext=HOSTILE, delay=7200)
    return queue


def piped(cli_env: dict[str, str], *args: str) -> list[str]:
    """`delayq ARGS` with stdout a pipe: its lines, after checking it exited 0."""
    result = delayq(cli_env, *args)
    assert result.returncode == 0, result.stderr
    text = result.stdout.decode()
    assert not box_drawing(text), text
    assert not hidden_characters(text), text
    return text.splitlines()


@pytest.mark.parametrize(
    ("command", "columns"), [("list", LIST_COLUMNS), ("peek", PEEK_COLUMNS)], ids=["list", "peek"]
)
def test_piped_job_tables_are_plain_aligned_and_escaped(cli_env, jobs, command, columns):
    lines = piped(cli_env, command)

    assert lines[0].split() == columns[0].split()
    assert len(lines) == 4  # the header and a row per job, no rule between them
    assert_aligned(lines, *columns)
    assert any(SHOWN in line for line in lines)


def test_piped_status_prints_both_tables_plain_and_aligned(cli_env, jobs):
    lines = piped(cli_env, "status")

    assert lines[0].startswith("last run: ")
    blank = lines.index("")
    counts, timing = lines[1:blank], lines[blank + 1 :]
    assert counts[0].split() == STATUS_COLUMNS[0].split()
    assert_aligned(counts, *STATUS_COLUMNS)
    assert counts[1].split() == ["default", "1", "2", "0", "0", "0", "0", "0"]
    assert timing[0].split() == [
        *("queue", "oldest", "due", "late", "next", "due", "failed", "1h"),
        *("terminal", "retried"),
    ]
    assert_aligned(timing, "queue oldest|due late next|due failed|1h", "late next|due failed|1h")


@pytest.mark.parametrize(
    "args",
    [["run", "-v"], ["run", "-v", "--json"], ["--help"], ["run", "--help"], ["doctor"]],
    ids=["run-v", "run-v-json", "help", "run-help", "doctor"],
)
def test_other_piped_output_draws_no_boxes(cli_env, jobs, args):
    result = delayq(cli_env, *args)

    assert result.returncode == 0, result.stderr
    assert result.stdout, result.stderr
    assert not box_drawing(result.stdout.decode() + result.stderr.decode())


def test_on_a_terminal_the_header_rule_stays(cli_env, jobs):
    result = on_a_terminal(cli_env, "list")

    assert result.returncode == 0, result.stdout
    assert "─" in result.stdout
    assert "order-2" in result.stdout
