"""Helper threads in a process that uses signals: every thread delayq starts (docs/internals.md
lists them) blocks the signals the main thread must receive."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable

# The signals whose handlers must run in the main thread, at once.
MAIN_THREAD_SIGNALS = {signal.SIGALRM, signal.SIGTERM, signal.SIGINT}


def keep_signals_off_this_thread() -> None:
    """Block the run's signals in a helper thread (call it first thing in the thread). The
    kernel delivers a signal to any thread not blocking it; Python runs the handler in the
    main thread either way, but a main thread asleep in a handler (`time.sleep`, a socket
    read) wakes only if the signal reaches it, so a hung handler's time limit never fired."""
    signal.pthread_sigmask(signal.SIG_BLOCK, MAIN_THREAD_SIGNALS)


class Periodic:
    """A helper thread that calls `action` every `interval` seconds from `start` (or the
    `with` block's start) until `stop` (or its end), then `finish` (say, closing the
    thread's own database connection)."""

    def __init__(
        self, name: str, interval: float, action: Callable[[], None], finish: Callable[[], object]
    ) -> None:
        self.interval = interval
        self.action = action
        self.finish = finish
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)

    def __enter__(self) -> Periodic:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        if not self.thread.is_alive():
            self.thread.start()

    def stop(self) -> None:
        self.stopped.set()
        if self.thread.is_alive():
            self.thread.join()

    def _run(self) -> None:
        keep_signals_off_this_thread()
        try:
            while not self.stopped.wait(self.interval):
                self.action()
        finally:
            self.finish()
