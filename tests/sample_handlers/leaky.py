"""An allowed module that re-exports dangerous names: a path through it must still be refused."""

import os  # noqa: F401 - reachable as leaky.os, which the allowlist must not follow
import subprocess  # noqa: F401
from os import system  # noqa: F401
from subprocess import getoutput  # noqa: F401

ALIAS = eval  # noqa: S307 - a builtin bound under an allowed name
