"""Derived state never outranks the table: a model-based test (Hypothesis's stateful testing)
on real servers that interleaves every way a job gets in, cancels, retries, one-shot runs and
loop passes, pauses and limits, Redis's data flushed or lost a key at a time, Redis restarted,
the kept counts lost, reconcile, corrections at once, and clock steps; after each step it
checks that no job started early, twice or later than the docs' bound, and that `status`
and `peek` show what the table holds (machine.py has the rules, checks.py the bounds).

The CI size, DEFAULT_EXAMPLES examples of DEFAULT_STEPS steps on each backend, takes about
a minute and a half in all on a 2-core machine when nothing fails; a failure found is shrunk
for at most CI_SHRINKING seconds a backend and reported alone, so a failing run stays within
three minutes too. A longer run, which reports every distinct violation it finds, fully
shrunk, is a command:

    DELAYQ_MODEL_EXAMPLES=500 DELAYQ_MODEL_STEPS=60 .venv/bin/python -m pytest -p no:xdist \
        tests/model

`DELAYQ_MODEL_WITHOUT=flush_redis,peek_is_the_tables_next_rows` leaves rules or checks out
(their names in machine.py), to look past one violation for the next, and
`DELAYQ_MODEL_ONLY=add,run,advance_and_run,flush_redis` keeps only the rules named (and every
check), to search a few of them harder. A failure prints the
shrunk steps that lead to it; it is kept in .pytest_cache/hypothesis-model and tried first
by the next run.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis.database import DirectoryBasedExampleDatabase
from hypothesis.internal.conjecture import engine
from hypothesis.stateful import run_state_machine_as_test

from tests.conftest import ROOT
from tests.model.machine import narrowed
from tests.model.world import Servers, World

DEFAULT_EXAMPLES = 25
DEFAULT_STEPS = 30
CI_SHRINKING = 40  # seconds; Hypothesis's own limit is 300, and has no setting


def _size(ci: bool) -> settings:
    return settings(
        max_examples=int(os.environ.get("DELAYQ_MODEL_EXAMPLES") or DEFAULT_EXAMPLES),
        stateful_step_count=int(os.environ.get("DELAYQ_MODEL_STEPS") or DEFAULT_STEPS),
        report_multiple_bugs=not ci,
        deadline=None,  # a step is real server work: its time says nothing
        suppress_health_check=list(HealthCheck),
        # No explain phase: it replays each failure many more times, and the shrunk steps
        # say enough.
        phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink],
        # Kept with pytest's own cache (ignored by git): a failure found is tried first again.
        database=DirectoryBasedExampleDatabase(str(ROOT / ".pytest_cache" / "hypothesis-model")),
    )


def _names(variable: str) -> set[str]:
    return {name for name in os.environ.get(variable, "").split(",") if name}


def test_derived_state_never_outranks_the_table(
    model_servers: Servers, tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ci = not os.environ.get("DELAYQ_MODEL_EXAMPLES")
    if ci and hasattr(engine, "MAX_SHRINKING_SECONDS"):  # an internal: gone, the limit is 300
        monkeypatch.setattr(engine, "MAX_SHRINKING_SECONDS", CI_SHRINKING)
    machine = narrowed(_names("DELAYQ_MODEL_WITHOUT"), _names("DELAYQ_MODEL_ONLY"))
    world = World(model_servers, tmp_path)
    try:
        run_state_machine_as_test(lambda: machine(world), settings=_size(ci))
    finally:
        world.close()
