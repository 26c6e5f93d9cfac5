"""The metrics file (metrics.py's text) for node_exporter's textfile collector: written
atomically, a temporary file beside it then os.replace, so the collector never reads half a
file; for a looping run, rewritten every few seconds by a thread of its own."""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

from ..base.threads import Periodic
from ..errors import ConfigError

logger = logging.getLogger(__name__)


def write_file(path: str | Path, body: bytes) -> None:
    """Replace the file at `path` with `body`, whole."""
    path = Path(path)
    with _refusing(path):
        # The temporary name does not end in .prom, so the collector never picks it up.
        fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(body)
                handle.flush()
                os.fsync(handle.fileno())
            os.chmod(temp, 0o644)  # mkstemp makes it 0600; node_exporter runs as another user
            os.replace(temp, path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temp)
            raise


class Rewriter(Periodic):
    """A thread that rewrites the file every `interval` seconds while a loop runs, so the
    collector sees counters move without waiting for the run to end. A failed write is
    logged and tried again next time: metrics never stop the jobs."""

    def __init__(
        self,
        path: str | Path,
        interval: float,
        render: Callable[[], bytes],
        finish: Callable[[], object],
    ) -> None:
        def rewrite() -> None:
            try:
                write_file(path, render())
            except Exception as exc:  # noqa: BLE001 - the run goes on; the next write may work
                logger.warning("could not rewrite the metrics file: %s", exc)

        super().__init__("delayq-metrics", interval, rewrite, finish)


def check_writable(path: str | Path) -> None:
    """Raise ConfigError now if the file could not be replaced after the run: a run that
    finds out only then has already run its jobs, and exits 2 all the same."""
    path = Path(path)
    with _refusing(path):
        if path.is_dir():
            raise IsADirectoryError(21, "it is a directory")
        fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        os.close(fd)
        os.unlink(temp)


@contextlib.contextmanager
def _refusing(path: Path) -> Iterator[None]:
    try:
        yield
    except ValueError:  # a NUL in the path
        raise ConfigError(f"--metrics-file {str(path)!r} is not a path") from None
    except OSError as exc:
        raise ConfigError(
            f"--metrics-file {str(path)!r} cannot be written: {exc.strerror or exc}"
        ) from None
