"""The allowlist itself (DELAYQ_HANDLERS): which entries it may hold, checked before any job
is added or run; handlers.py decides what one job may call under it. An entry must name the
application's own code: the standard library, delayq, the packages it runs on (and what they
need) and packaging tools are refused, since allowing `subprocess` or `os` would let a job row
call anything there. Other installed packages are accepted: an application is often
pip-installed into the environment it runs in.
"""

from __future__ import annotations

import functools
import importlib.util
import re
import site
import sys
import sysconfig
from collections.abc import Sequence
from importlib import metadata
from importlib.machinery import ModuleSpec
from pathlib import Path

from ..errors import ConfigError

EMPTY_ALLOWLIST = (
    "DELAYQ_HANDLERS is empty, so no handler may run; set it (or `handlers` in delayq.toml) "
    "to your handler modules' prefixes, e.g. DELAYQ_HANDLERS=billing.jobs"
)
OWN_PACKAGE = __name__.split(".")[0]
# Installed, but never an application's handlers: what installs and builds packages.
PACKAGING_TOOLS = ("pip", "setuptools", "wheel", "uv", "pkg_resources", "_distutils_hack")


def check_allowlist(allowed: Sequence[str]) -> None:
    """Refuse, with ConfigError, an allowlist no job could run under or one that names code
    that is not the application's. A run checks this before it claims anything: with an empty
    allowlist every due job would fail for good while the run itself reported success."""
    if not allowed:
        raise ConfigError(EMPTY_ALLOWLIST)
    for prefix in allowed:
        check_entry(prefix)


@functools.lru_cache(maxsize=256)
def check_entry(prefix: str) -> None:
    """Refuse an entry naming the standard library, delayq or a package it runs on; found
    without importing it, so a refused entry runs none of its code. Cached: `add` checks the
    allowlist for every job."""
    top = prefix.split(".")[0]
    refusal = (
        f"DELAYQ_HANDLERS entry {prefix!r} names {{}}, not your handlers; "
        "list only your own handler modules"
    )
    if top == OWN_PACKAGE:
        raise ConfigError(refusal.format("delayq itself"))
    if top in sys.stdlib_module_names or top in sys.builtin_module_names:
        raise ConfigError(refusal.format("a standard library module"))
    where = _location(top)
    if where is None:
        return  # not importable here: doctor and add say so, naming PYTHONPATH
    site_paths = [*site.getsitepackages(), site.getusersitepackages()]
    site_paths += [sysconfig.get_paths()[name] for name in ("purelib", "platlib")]
    if any(where.is_relative_to(Path(path).resolve()) for path in site_paths if path):
        if _is_delayqs_stack(top):
            raise ConfigError(refusal.format(f"a package delayq runs on ({where})"))
        return  # another installed package: the application itself may be one
    # Asked only now: a virtualenv's site-packages lies under its platstdlib path.
    stdlib = [sysconfig.get_paths()[name] for name in ("stdlib", "platstdlib")]
    if any(where.is_relative_to(Path(path).resolve()) for path in stdlib):
        raise ConfigError(refusal.format("a standard library module"))


def find_spec(top: str) -> ModuleSpec | None:
    """The spec of top-level module `top`, found without importing it; None if there is none."""
    try:
        return importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return None


def _location(top: str) -> Path | None:
    spec = find_spec(top)
    if spec is None:
        return None
    places: list[str | None] = [*(spec.submodule_search_locations or []), spec.origin]
    found = (place for place in places if place and place not in ("built-in", "frozen"))
    return next((Path(place).resolve() for place in found), None)


def _is_delayqs_stack(top: str) -> bool:
    """Whether the installed top-level package `top` belongs to delayq's own dependencies
    (followed through theirs) or to the packaging tools."""
    if top in PACKAGING_TOOLS:
        return True
    owners = metadata.packages_distributions().get(top, [])
    return any(_canonical(owner) in _delayqs_distributions() for owner in owners)


@functools.cache
def _delayqs_distributions() -> frozenset[str]:
    seen: set[str] = set()
    todo = [OWN_PACKAGE, *PACKAGING_TOOLS]
    while todo:
        name = _canonical(todo.pop())
        if name in seen:
            continue
        seen.add(name)
        try:
            requirements = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue
        todo += [_requirement_name(r) for r in requirements if "extra ==" not in r]
    return frozenset(seen)


def _requirement_name(requirement: str) -> str:
    return re.split(r"[\s;<>=!~\[(]", requirement.strip(), maxsplit=1)[0]


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()
