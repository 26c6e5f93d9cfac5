"""Running the typer app in-process against a test backend, with stdout and stderr apart."""

from __future__ import annotations

from typer.testing import CliRunner, Result

from delayq.cli import app


def invoke(env: dict[str, str], *args: str) -> Result:
    """`delayq ARGS` with `env` as the environment (the cli_env fixture)."""
    return CliRunner().invoke(app, list(args), env=env, catch_exceptions=False)
