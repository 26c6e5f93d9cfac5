"""What a new user met in the first hour at the command line and the API: empty filters,
due times without a zone or before the run's window, what `init` and `cancel` say, and
messages that name the option and the fix."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from typer.testing import Result

from tests.test_cli import (
    delayq,  # noqa: F401 - a fixture
    stored,  # noqa: F401 - a fixture
)

H = "tests.sample_handlers.jobs"
Invoke = Callable[..., Result]


def _refused(result: Result) -> str:
    assert result.exit_code == 2, result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("delayq: error: "), result.stderr
    assert result.stdout == ""
    return lines[0]


@pytest.mark.parametrize(
    "args",
    [
        ("list", "--status", ""),
        ("list", "--status", ","),
        ("list", "--status", "failed,"),
        ("peek", "--queue", ""),
        ("list", "--queue", ""),
        ("list", "--ext", ""),
        ("list", "--class", ""),
        ("purge", "--older-than", "1d", "--status", ""),
        ("requeue", "--status", ",", "--all"),
    ],
)
def test_an_empty_filter_is_refused_not_read_as_everything(
    delayq: Invoke,  # noqa: F811
    args: tuple[str, ...],
) -> None:
    assert delayq("add", H, "echo").exit_code == 0
    _refused(delayq(*args))
