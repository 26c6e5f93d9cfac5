"""The embedded Redis servers and their keepers that live under a directory, found in /proc.

Other processes on the machine run redis-servers too (other suites, the shared test server);
only those whose working directory (a server's is its home) or keeper arguments lie under
the given directory count, so a check never mistakes or touches anyone else's.
"""

from __future__ import annotations

import os
from pathlib import Path

KEEPER_SCRIPT = "watchdog.py"


def is_alive(pid: int) -> bool:
    """A process that exists and is not a zombie waiting for its parent."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def embedded_processes_under(base: Path) -> dict[int, str]:
    """Live embedded redis-servers and keepers of homes under `base`: pid -> command line."""
    base_text = str(base.resolve())
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            words = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
            cwd = os.readlink(entry / "cwd")
        except OSError:
            continue
        is_server = words[0].split(" ")[0].endswith("redis-server") and _under(cwd, base_text)
        is_keeper = any(word.endswith(KEEPER_SCRIPT) for word in words[:3]) and any(
            _under(word, base_text) for word in words
        )
        if (is_server or is_keeper) and is_alive(int(entry.name)):
            found[int(entry.name)] = " ".join(words).strip()
    return found


def _under(path: str, base: str) -> bool:
    # A deleted directory reads back as "PATH (deleted)"; it is still under `base`.
    path = path.removesuffix(" (deleted)")
    return path == base or path.startswith(base + os.sep)
