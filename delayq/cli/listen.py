"""`delayq listen`: the bridge (delayq/listen.py) that adopts another system's Redis key
timers as delayq jobs, running until stopped or until the timers' Redis stays away."""

from __future__ import annotations

import signal
import sys
from typing import Annotated

import typer

from ..base.durations import parse_duration
from ..config import DEFAULT_QUEUE, redact_url
from .app import Command, QueueOption, app, open_queue


@app.command(cls=Command)
def listen(
    source: Annotated[str, typer.Option("--from", help="The timers' Redis: redis://host:6379/DB.")],
    match: Annotated[
        list[str] | None,
        typer.Option(
            "--match",
            help="GLOB=module.Class.method: keys matching GLOB call it (repeatable); "
            "without it, keys Class@method@arg@...",
        ),
    ] = None,
    queue_name: QueueOption = DEFAULT_QUEUE,
    retry_for: Annotated[
        str, typer.Option("--retry-for", help="Exit 1 when the timers' Redis stays away this long.")
    ] = "1m",
) -> None:
    """Adopt timers kept as Redis keys with a TTL as delayq jobs, one pending job per key,
    due when it expires; prints how many it adopted each time it (re)connects."""
    from ..bridges.keyspace import Match, open_bridge  # the bridge only for this command

    matches = [Match.parse(text) for text in match or []]
    patience = parse_duration(retry_for, "--retry-for")
    bridge = open_bridge(open_queue(), source, matches, queue_name)
    signal.signal(signal.SIGTERM, lambda number, _frame: sys.exit(128 + number))
    try:
        bridge.serve(patience, lambda count: _announce(count, source))
    except KeyboardInterrupt:
        raise typer.Exit(128 + signal.SIGINT) from None


def _announce(count: int, source: str) -> None:
    typer.echo(f"delayq listen: adopted {count} timer(s) from {redact_url(source)}; listening")
