"""`python -m bench.rss OUT CMD...`: run CMD and write its peak RSS in KiB to the file OUT;
exits with CMD's exit code.

Why a separate small process: Linux carries a process's peak RSS across exec from the memory
it was forked with, so a command spawned straight from the benchmark (hundreds of MiB after
loading a backlog) would report the benchmark's peak, not its own. Spawned from this small
process, it reports max(this process, itself), which is its own.
"""

from __future__ import annotations

import os
import subprocess
import sys


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print("usage: python -m bench.rss OUT CMD...", file=sys.stderr)
        return 2
    out, command = argv[0], argv[1:]
    proc = subprocess.Popen(command)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    with open(out, "w") as file:
        file.write(f"{usage.ru_maxrss}\n")
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
