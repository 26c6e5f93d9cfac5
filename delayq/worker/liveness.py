"""A runner's sign of progress to its supervisor (`delayq run --processes P`): the child's
main thread writes how long it may stay silent, and the parent (processes.py) kills a child
silent longer. It beats where it makes progress: between jobs, and as it starts each job,
promising that job's time limit plus the grace. A process frozen whole (C code holding the
GIL) or a main thread stuck beyond the time limit's reach falls silent; nothing inside can end
that, the parent's SIGKILL can, and the jobs come back by their leases.
"""

from __future__ import annotations

import logging
import os
import time

logger = logging.getLogger(__name__)

# A beat that moves the promised deadline by less than this is not worth a system call; the
# parent allows the same slack on its side.
BEAT_EVERY = 0.5


class Liveness:
    """The write end of a pipe to the supervisor, one line per beat: the seconds the runner
    may stay silent from now on."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.open = True  # until the parent is found gone
        self.promised_until = float("-inf")  # monotonic, as last written
        os.set_blocking(fd, False)  # a parent that does not read must not stop the run

    def promise(self, silence: float) -> None:
        # A shorter promise than the last is written too, so a stuck job is noticed at its
        # own limit.
        now = time.monotonic()
        if not self.open or abs(now + silence - self.promised_until) < BEAT_EVERY:
            return
        try:
            os.write(self.fd, f"{silence:.3f}\n".encode())
            self.promised_until = now + silence
        except BlockingIOError:
            pass  # the pipe is full of beats the parent has yet to read
        except OSError as exc:  # the parent is gone: it can no longer act on a beat
            logger.debug("liveness pipe closed (%s); no more beats", exc)
            self.open = False
