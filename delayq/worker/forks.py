"""A handler that forks: the child is a copy of the runner, with its batch, its leases and
its connections, and must never carry on as one. Wherever control comes back to delayq from
a handler, a process whose pid is not the runner's leaves at once.
"""

from __future__ import annotations

import os


def leave_if_forked(runner_pid: int) -> None:
    # os._exit, not sys.exit: no atexit hooks, no buffers flushed, no finally blocks, so the
    # child writes nothing the runner owns (no commit, no Redis command, no half a log line).
    if os.getpid() != runner_pid:
        os._exit(0)
