"""Allowed classes built on code from outside the allowlist (`subprocess`, foreign_base):
a handler here may only run code defined here, never a constructor or method it inherits."""

from __future__ import annotations

import subprocess
from typing import Any

from tests.sample_handlers.foreign_base import NotingBase, NotingCall, NotingMeta, NotingNew


class Spawner(subprocess.Popen):
    """Adds nothing: calling it would run Popen's constructor on the job's data."""


class WrappedPopen(subprocess.Popen):
    def run(self, data: Any) -> Any:
        return data


class InheritsInit(NotingBase):
    def run(self, data: Any) -> str:
        return "ran"


class InheritsNew(NotingNew):
    def run(self, data: Any) -> str:
        return "ran"


class Metered(metaclass=NotingMeta):
    def run(self, data: Any) -> str:
        return "ran"


class OwnInit(NotingBase):
    """Replaces the foreign constructor with its own, which never calls it."""

    def __init__(self) -> None:
        self.ready = True

    def run(self, data: Any) -> str:
        return "ran" if self.ready else "not ready"


class Borrows(OwnInit):
    """Its `describe` is NotingBase's."""


class Caller(NotingCall):
    """An instance of it is callable through NotingCall.__call__."""


caller = Caller()
