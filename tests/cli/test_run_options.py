"""What `delayq run` builds from its flags, and the flags a `--processes` child is started
with: every option the parent was given reaches the child as it was given."""

from __future__ import annotations

from dataclasses import fields
from typing import Any

import pytest

from delayq.cli import running
from delayq.config import Settings
from delayq.errors import BadInput
from delayq.worker.options import RunOptions
from delayq.worker.report import RunReport
from tests.support.invoke import invoke


def built(monkeypatch: pytest.MonkeyPatch, env: dict[str, str], *args: str) -> tuple[Any, ...]:
    """The run options and outputs `delayq run ARGS` builds, running nothing."""
    seen: list[tuple[Any, ...]] = []

    def capture(options: Any, outputs: Any, printer: Any, liveness_fd: Any) -> RunReport:
        seen.append((options, outputs))
        return RunReport()

    monkeypatch.setattr(running, "_run_here", capture)
    result = invoke(env, "run", *args)
    assert result.exit_code == 0, result.stderr
    return seen[0]


def test_a_child_reads_back_every_option_its_parent_was_given(monkeypatch, cli_env, tmp_path):
    given = [
        *("--queue=-dash", "-q", "b", "--queues", "c:3,d", "--limit", "7", "--since", "2h"),
        *("--max-seconds", "1.25", "--concurrency", "4", "--grace", "0.00001"),
        *("--loop", "--for", "90s", "-v", "--json", "--log-file", str(tmp_path / "log")),
        *("--log-level", "info", "--log-json", "--metrics-file", str(tmp_path / "metrics")),
        *("--metrics-interval", "1m", "--on-failure", "tests.sample_handlers.hooks.record"),
    ]
    options, outputs = built(monkeypatch, cli_env, *given)
    defaults = built(monkeypatch, cli_env)
    for record, default in zip((options, outputs), defaults, strict=True):
        names = [field.name for field in fields(record)]
        unset = [name for name in names if getattr(record, name) == getattr(default, name)]
        assert not unset, f"give {unset} a value other than the default above"

    child = built(monkeypatch, cli_env, *options.argv(), *outputs.argv())

    assert child == (options, outputs)
    assert options.queues == ("-dash", "b", "c", "d")
    assert dict(options.weights) == {"c": 3, "d": 1}


def test_options_left_out_take_the_settings_and_given_ones_replace_them():
    settings = Settings()
    options = RunOptions.build(since="1h", concurrency=3)

    applied = options.applied_to(settings)

    assert (applied.since, applied.concurrency) == (3600.0, 3)
    assert (applied.max_seconds, applied.grace) == (settings.max_seconds, settings.grace)


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"limit": 0}, "--limit must be at least 1"),
        ({"concurrency": 0}, "--concurrency must be between 1 and 1000"),
        ({"duration": "1s"}, "--for needs --loop"),
        ({"weights": {"a": 101}}, "queue a: a weight is a whole number from 1 to 100"),
    ],
)
def test_options_are_checked_when_built(given, message):
    with pytest.raises(BadInput, match=message):
        RunOptions.build(**given)
