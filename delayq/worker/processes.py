"""`delayq run --processes P`: P runner processes under one parent, for handlers that burn CPU
and to use every core; each child is a plain `delayq run` with the same options, and claims
stay exclusive between them as between any overlapping runs. The parent only supervises: it
forwards SIGTERM and SIGINT, replaces a child that died (killed, crashed, stuck), and gives up
with a non-zero exit when children keep dying. It holds no job and no connection, so killing
it loses nothing. Each child beats on a pipe of its own (liveness.py); one silent longer than
it promised (a job stuck beyond its time limit's reach, a process frozen in C code) is killed
with SIGKILL and replaced, and its jobs come back by their leases as after any kill -9.
"""

from __future__ import annotations

import logging
import os
import select
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from types import FrameType

from ..store.watchdog import stop_with_parent
from .interrupts import STOP_SIGNALS, routing
from .liveness import BEAT_EVERY

logger = logging.getLogger(__name__)

# More deaths than this within the window: something is wrong beyond one bad job.
MAX_DEATHS = 5
DEATH_WINDOW = 60.0
POLL = 0.1
# Exit codes of a child that ended as asked: done, or stopped by the signal we forwarded.
CLEAN_EXITS = frozenset({0, *(128 + sig for sig in STOP_SIGNALS)})
# Before its first beat a child imports, connects and checks the index: allow it this long.
STARTUP = 60.0
# Added to every promise: the child skips beats that move it less than BEAT_EVERY, and the
# parent looks for silent children only every POLL (beats wake it sooner).
SLACK = BEAT_EVERY + POLL + 0.5


class Child:
    """A runner process and the read end of its liveness pipe."""

    def __init__(self, process: subprocess.Popen[bytes], beats: int) -> None:
        self.process = process
        self.beats = beats
        self.last_beat = time.monotonic()
        self.silent_until = self.last_beat + STARTUP  # monotonic: past this it is stuck
        self.killed = False  # by us, for its silence
        self.ended = False  # its pipe reached its end: the child has exited, or is exiting
        self._partial = b""
        os.set_blocking(beats, False)

    def read_beats(self) -> None:
        """Take in the beats written since the last look; the latest promise counts."""
        try:
            data = os.read(self.beats, 65536)
        except BlockingIOError:
            return
        self.ended = self.ended or not data
        lines = (self._partial + data).split(b"\n")
        self._partial = lines.pop()
        if lines:
            self.last_beat = time.monotonic()
            try:
                self.silent_until = self.last_beat + float(lines[-1]) + SLACK
            except ValueError:
                logger.warning("runner process %d beat %r; ignored", self.process.pid, lines[-1])

    def close(self) -> None:
        os.close(self.beats)


class Supervisor:
    """Keeps `count` children running until they finish or a signal stops them; `command`
    gives a child's command line, told the descriptor it beats on."""

    def __init__(self, command: Callable[[int], Sequence[str]], count: int) -> None:
        self.command = command
        self.count = count
        self.children: list[Child] = []
        self.deaths: list[float] = []  # when children died, within the last DEATH_WINDOW
        self.signum: int | None = None

    def run(self) -> int:
        """The exit code for the parent, once the children ended."""
        with routing(dict.fromkeys(STOP_SIGNALS, self._forward)):
            try:
                self.children = [self._spawn() for _ in range(self.count)]
                return self._watch()
            finally:
                for child in self.children:
                    child.close()

    def _watch(self) -> int:
        worst = 0
        while self.children:
            self._wait()
            self._kill_the_silent()
            for child in [child for child in self.children if child.process.poll() is not None]:
                self.children.remove(child)
                child.close()
                code = child.process.returncode
                if self.signum is None and _died(code):
                    now = time.monotonic()
                    self.deaths = [at for at in self.deaths if at >= now - DEATH_WINDOW] + [now]
                    if len(self.deaths) > MAX_DEATHS:
                        logger.error("runner processes keep dying (exit %s); giving up", code)
                        self._stop_all(signal.SIGTERM)
                        return 1
                    if not child.killed:  # a kill of ours was logged when it was made
                        logger.warning(
                            "runner process %d died (exit %s); starting another",
                            child.process.pid,
                            code,
                        )
                    self.children.append(self._spawn())
                    continue
                worst = max(worst, 128 - code if code < 0 else code)  # killed by signal N: 128 + N
        return 128 + self.signum if self.signum is not None else worst

    def _wait(self) -> None:
        """Up to POLL, or until a child beats or exits: its pipe's end wakes the parent at
        once, so a drain split over children ends when the last one does. With no pipe left
        to read, select only sleeps."""
        select.select([child.beats for child in self.children if not child.ended], [], [], POLL)

    def _kill_the_silent(self) -> None:
        """SIGKILL each child silent past what it promised: its main thread is stuck where
        nothing inside the process can free it. Also while stopping, or the parent would
        wait for it forever."""
        for child in self.children:
            child.read_beats()
            silent = not child.killed and time.monotonic() > child.silent_until
            if silent and child.process.poll() is None:
                logger.error(
                    "runner process %d made no progress for %.1fs, past its job's time limit "
                    "and the grace; %s",
                    child.process.pid,
                    time.monotonic() - child.last_beat,
                    "killed it" if self.signum is not None else "killed it; starting another",
                )
                child.process.kill()
                child.killed = True

    def _spawn(self) -> Child:
        beats, beat_end = os.pipe()
        try:
            # A group of its own: Ctrl-C on a terminal reaches only the parent, which forwards
            # it once (a second SIGINT would make a child abandon the job it is running).
            process = subprocess.Popen(
                list(self.command(beat_end)),
                preexec_fn=_own_group_stopped_with_parent,
                pass_fds=(beat_end,),
            )
        except BaseException:
            os.close(beats)
            raise
        finally:
            os.close(beat_end)  # the child's alone, so its death reads as the end of the pipe
        return Child(process, beats)

    def _forward(self, signum: int, frame: FrameType | None) -> None:
        self.signum = signum
        self._stop_all(signum)

    def _stop_all(self, signum: int) -> None:
        for child in self.children:
            if child.process.poll() is None:
                child.process.send_signal(signum)


def _own_group_stopped_with_parent() -> None:
    """In the child, before exec: a process group of its own (what Popen's process_group
    does from Python 3.11 on), then stopped with the parent."""
    os.setpgid(0, 0)
    stop_with_parent()


def _died(code: int) -> bool:
    """Killed by a signal, or ended by an error (exit 1: a server it lost, threads stuck).
    A usage error (2) would only repeat itself, so it is not restarted."""
    return code < 0 or code not in CLEAN_EXITS | {2}
