"""Turning a job's (class, method) into a callable — the only place that imports user code.

Nothing is imported unless its dotted path lies under a DELAYQ_HANDLERS prefix, and the
callable found must itself be defined under one: a path that walks through a module attribute
(`allowed.os.system`) or reaches a re-exported foreign function is refused.
"""

from __future__ import annotations

import importlib
import inspect
import types
from collections.abc import Callable, Sequence
from typing import Any

from ..errors import BadInput, ConfigError, HandlerNotAllowed

Handler = Callable[[Any], Any]
EMPTY_ALLOWLIST = (
    "DELAYQ_HANDLERS is empty, so no handler may run; set it (or `handlers` in delayq.toml) "
    "to your handler modules' prefixes, e.g. DELAYQ_HANDLERS=billing.jobs"
)


def check_allowlist(allowed: Sequence[str]) -> None:
    """Refuse, with ConfigError, an allowlist no job could run under.

    A run checks this before it claims anything: with an empty allowlist every due job would
    fail for good, one by one, while the run itself reported success.
    """
    if not allowed:
        raise ConfigError(EMPTY_ALLOWLIST)


def resolve(class_path: str, method: str, allowed: Sequence[str]) -> Handler:
    """The callable for `class_path.method`, or HandlerNotAllowed / BadInput saying why not.

    A plain function on a class is an instance method: the class is created with no
    arguments first, once per call of resolve (the runner caches what it resolves).
    """
    owner, found = locate(class_path, method, allowed)
    if inspect.isclass(owner) and inspect.isfunction(found):
        target = getattr(_instantiate(owner, class_path), method)
    else:
        target = getattr(owner, method)
    if not callable(target):
        raise BadInput(f"handler {class_path}.{method} is not callable")
    return target


def locate(class_path: str, method: str, allowed: Sequence[str]) -> tuple[Any, Any]:
    """(owner, attribute as stored) for a handler, importing only allowed modules.

    Runs no user code but the imports, so `delayq add` can check a handler up front.
    """
    check_allowed(class_path, method, allowed)
    module, rest = _import_longest(class_path)
    owner: Any = module
    for name in rest:
        owner = _attribute(owner, name, class_path)
        if not inspect.isclass(owner):
            raise HandlerNotAllowed(
                f"handler class {class_path!r}: {name!r} is not a class; "
                "name a module or a class defined in one"
            )
    found = _attribute(owner, method, f"{class_path}.{method}")
    _check_defined_under(found, owner, class_path, method, allowed)
    return owner, found


def check_allowed(class_path: str, method: str, allowed: Sequence[str]) -> None:
    """Refuse, without importing anything, a path outside the allowlist or of a bad shape."""
    parts = class_path.split(".")
    if not all(_is_plain_name(part) for part in parts) or not _is_plain_name(method):
        raise HandlerNotAllowed(
            f"handler {class_path!r}.{method!r} must be a dotted path of plain names "
            "(no dots at the ends, no leading underscores)"
        )
    if not allowed:
        raise HandlerNotAllowed(EMPTY_ALLOWLIST)
    if not any(class_path == prefix or class_path.startswith(prefix + ".") for prefix in allowed):
        raise HandlerNotAllowed(
            f"DELAYQ_HANDLERS ({','.join(allowed)}) does not allow {class_path!r}; add its prefix"
        )


def import_prefix(prefix: str) -> None:
    """Import a DELAYQ_HANDLERS entry (a module, or a class inside one), or raise BadInput
    saying why not: `delayq doctor` tells a typo from a missing deploy this way."""
    module, rest = _import_longest(prefix)
    owner: Any = module
    for name in rest:
        owner = _attribute(owner, name, prefix)


def _is_plain_name(name: str) -> bool:
    return name.isidentifier() and not name.startswith("_")


def _import_longest(class_path: str) -> tuple[types.ModuleType, list[str]]:
    parts = class_path.split(".")
    for cut in range(len(parts), 0, -1):
        name = ".".join(parts[:cut])
        try:
            return importlib.import_module(name), parts[cut:]
        except ModuleNotFoundError as exc:
            # Only "this very module does not exist" means try a shorter path; a missing
            # import *inside* the handler module is the handler's own error.
            if exc.name is None or not (name == exc.name or name.startswith(exc.name + ".")):
                raise BadInput(f"handler module {name!r} failed to import: {exc}") from None
        except Exception as exc:
            raise BadInput(
                f"handler module {name!r} failed to import: {type(exc).__name__}: {exc}"
            ) from None
    raise BadInput(f"handler {class_path!r} is not importable; is it on PYTHONPATH?")


def _attribute(owner: Any, name: str, path: str) -> Any:
    try:
        if inspect.isclass(owner):
            return inspect.getattr_static(owner, name)
        return getattr(owner, name)
    except AttributeError:
        raise BadInput(f"handler {path!r} does not exist") from None


def _is_under(module_name: object, allowed: Sequence[str]) -> bool:
    return isinstance(module_name, str) and any(
        module_name == prefix or module_name.startswith(prefix + ".") for prefix in allowed
    )


def _check_defined_under(
    found: Any, owner: Any, class_path: str, method: str, allowed: Sequence[str]
) -> None:
    function = found.__func__ if isinstance(found, staticmethod | classmethod) else found
    module_name = getattr(function, "__module__", None)
    if inspect.ismodule(function) or not _is_under(module_name, allowed):
        raise HandlerNotAllowed(
            f"handler {class_path}.{method} is defined in {module_name or 'an unknown module'!r},"
            f" outside DELAYQ_HANDLERS ({','.join(allowed)})"
        )
    if inspect.isclass(owner) and not _is_under(owner.__module__, allowed):
        raise HandlerNotAllowed(
            f"handler class {class_path!r} is defined outside DELAYQ_HANDLERS ({','.join(allowed)})"
        )


def _instantiate(owner: type, class_path: str) -> Any:
    try:
        return owner()
    except TypeError as exc:
        raise BadInput(
            f"handler class {class_path!r} cannot be created without arguments: {exc}"
        ) from None
