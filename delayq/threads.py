"""Helper threads in a process that uses signals: delayq's own threads (the bookkeeper, the
heartbeat, the insert helper) block the signals the main thread must receive.
"""

from __future__ import annotations

import signal

# The signals whose handlers must run in the main thread, at once.
MAIN_THREAD_SIGNALS = {signal.SIGALRM, signal.SIGTERM, signal.SIGINT}


def keep_signals_off_this_thread() -> None:
    """Block the run's signals in a helper thread (call it first thing in the thread).

    The kernel delivers a process's signal to any thread that does not block it. Python
    runs the handler in the main thread either way, but a main thread asleep in a handler
    (`time.sleep`, a socket read) is only woken if the signal reaches it: delivered to a
    helper thread, a hung handler's time limit never fired.
    """
    signal.pthread_sigmask(signal.SIG_BLOCK, MAIN_THREAD_SIGNALS)
