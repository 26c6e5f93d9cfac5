"""`delayq run --processes P`: P runner processes under one parent, for handlers that burn CPU
and to use every core. Each child is a plain `delayq run` with the same options; claims
stay exclusive between them as between any overlapping runs.

The parent only supervises: it forwards SIGTERM and SIGINT, starts a fresh child in place of
one that died (killed, crashed, stuck), and gives up with a non-zero exit when children keep
dying. It holds no job and no connection, so killing it loses nothing its children hold.
"""

from __future__ import annotations

import ctypes
import logging
import signal
import subprocess
import time
from collections import deque
from collections.abc import Sequence
from types import FrameType

logger = logging.getLogger(__name__)

# More deaths than this within the window: something is wrong beyond one bad job.
MAX_DEATHS = 5
DEATH_WINDOW = 60.0
POLL = 0.1
# Exit codes of a child that ended as asked: done, or stopped by the signal we forwarded.
CLEAN_EXITS = frozenset({0, 128 + signal.SIGTERM, 128 + signal.SIGINT})
PR_SET_PDEATHSIG = 1  # prctl(2)


class Supervisor:
    """Keeps `count` children running `command` until they finish or a signal stops them."""

    def __init__(self, command: Sequence[str], count: int) -> None:
        self.command = list(command)
        self.count = count
        self.children: list[subprocess.Popen[bytes]] = []
        self.deaths: deque[float] = deque()
        self.signum: int | None = None

    def run(self) -> int:
        """Run the children to the end; the exit code for the parent."""
        previous = {
            sig: signal.signal(sig, self._forward) for sig in (signal.SIGTERM, signal.SIGINT)
        }
        try:
            self.children = [self._spawn() for _ in range(self.count)]
            return self._watch()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _watch(self) -> int:
        worst = 0
        while self.children:
            time.sleep(POLL)
            for child in [child for child in self.children if child.poll() is not None]:
                self.children.remove(child)
                code = child.returncode
                if self.signum is None and _died(code):
                    if self._too_many_deaths():
                        logger.error("runner processes keep dying (exit %s); giving up", code)
                        self._stop_all(signal.SIGTERM)
                        return 1
                    logger.warning(
                        "runner process %d died (exit %s); starting another", child.pid, code
                    )
                    self.children.append(self._spawn())
                    continue
                worst = max(worst, _exit_code(code))
        return 128 + self.signum if self.signum is not None else worst

    def _spawn(self) -> subprocess.Popen[bytes]:
        # A group of its own: Ctrl-C on a terminal reaches only the parent, which forwards
        # it once (a second SIGINT would make a child abandon the job it is running).
        return subprocess.Popen(self.command, process_group=0, preexec_fn=_stop_with_parent)

    def _too_many_deaths(self) -> bool:
        now = time.monotonic()
        self.deaths.append(now)
        while self.deaths and self.deaths[0] < now - DEATH_WINDOW:
            self.deaths.popleft()
        return len(self.deaths) > MAX_DEATHS

    def _forward(self, signum: int, frame: FrameType | None) -> None:
        self.signum = signum
        self._stop_all(signum)

    def _stop_all(self, signum: int) -> None:
        for child in self.children:
            if child.poll() is None:
                child.send_signal(signum)


def _stop_with_parent() -> None:
    """In the child, before exec: SIGTERM it when the parent dies, even by kill -9, so no
    runner is left behind without its supervisor (Linux; elsewhere a no-op)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        pass


def _died(code: int) -> bool:
    """Killed by a signal, or ended by an error (exit 1: a server it lost, threads stuck).
    A usage error (2) would only repeat itself, so it is not restarted."""
    return code < 0 or code not in CLEAN_EXITS | {2}


def _exit_code(code: int) -> int:
    return 128 - code if code < 0 else code
