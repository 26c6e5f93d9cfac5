"""Turning a job's (class, method) into a callable — the only place that imports user code —
and which handler a row names, for the places that count or report a job without calling it.

Nothing is imported unless its dotted path lies under a DELAYQ_HANDLERS prefix, and only code
defined under one runs: the callable, the class defining a method (walking the MRO), and any
constructor or metaclass `__call__` creating the handler runs. So a path through a module
attribute (`allowed.os.system`), to a re-exported foreign function, or to a class with a
foreign constructor (a subclass of `subprocess.Popen`) is refused.
"""

from __future__ import annotations

import importlib
import inspect
import json
import os
import types
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..errors import BadInput, ConfigError, HandlerNotAllowed
from ..store.index import UNNAMED
from ..store.table import is_php, read_call, read_payload
from .allowlist import EMPTY_ALLOWLIST, check_allowlist, find_spec

Handler = Callable[[Any], Any]
HandlerName = tuple[str, str]  # (class, method) as the job's params name them


def handler_of(params: str, php_classes: Mapping[str, str]) -> HandlerName:
    """(class, method) that a row's params name, a PHP class mapped by `php_classes`, even
    when the row cannot be called: a PHP class with no mapping as PHP wrote it, and UNNAMED
    for a name the params do not give. Never raises."""
    try:
        return read_call(params, php_classes)[:2]
    except BadInput:
        payload = _named_fields(params)
    names = (payload.get("class"), payload.get("method"))
    class_path, method = (name if isinstance(name, str) else UNNAMED for name in names)
    return class_path, method


def _named_fields(params: str) -> dict[str, Any]:
    """The params object of a row that cannot be called, read as leniently as it can be: JSON
    data nested too deep for a call can still be parsed for its names."""
    try:
        payload = read_payload(params) if is_php(params) else json.loads(params)
    except (BadInput, TypeError, ValueError, RecursionError):
        return {}
    return payload if isinstance(payload, dict) else {}


def resolve(class_path: str, method: str, allowed: Sequence[str]) -> Handler:
    """The callable for `class_path.method`, or HandlerNotAllowed / BadInput saying why not.

    A plain function on a class is an instance method: the class is created with no
    arguments first (the runner caches what it resolves). The attribute found is bound
    here, not looked up again, so no foreign `__getattr__` or `__getattribute__` runs.
    """
    owner, target = locate(class_path, method, allowed)
    if inspect.isclass(owner) and inspect.isfunction(target):
        try:
            instance = owner()
        except TypeError as exc:
            raise BadInput(
                f"handler class {class_path!r} cannot be created without arguments: {exc}"
            ) from None
        target = target.__get__(instance, owner)
    elif inspect.isclass(owner) and isinstance(target, staticmethod | classmethod):
        target = target.__get__(None, owner)
    if not callable(target):
        raise BadInput(f"handler {class_path}.{method} is not callable")
    return target


def locate(class_path: str, method: str, allowed: Sequence[str]) -> tuple[Any, Any]:
    """(owner, attribute as stored) for a handler, importing only allowed modules: no user
    code but the imports runs, so `delayq add` can check a handler up front."""
    check_allowed(class_path, method, allowed)
    owner = import_prefix(class_path, classes_only=True)
    found = _attribute(owner, method, f"{class_path}.{method}")
    _check_defined_under(found, owner, class_path, method, allowed)
    return owner, found


def check_allowed(class_path: str, method: str, allowed: Sequence[str]) -> None:
    """Refuse, without importing anything, a path outside the allowlist or of a bad shape."""
    check_shape(class_path, method)
    if not allowed:
        raise HandlerNotAllowed(EMPTY_ALLOWLIST)
    check_allowlist(allowed)
    if not _is_under(class_path, allowed):
        raise HandlerNotAllowed(
            f"DELAYQ_HANDLERS ({','.join(allowed)}) does not allow {class_path!r}; add its prefix"
        )


def check_shape(class_path: str, method: str) -> None:
    """Refuse a handler path that could never be allowed, whatever the allowlist."""
    if not all(_is_plain_name(part) for part in [*class_path.split("."), method]):
        raise HandlerNotAllowed(
            f"handler {class_path!r}.{method!r} must be a dotted path of plain names "
            "(no dots at the ends, no leading underscores)"
        )


def import_prefix(prefix: str, classes_only: bool = False) -> Any:
    """Import a DELAYQ_HANDLERS entry (a module, or a class inside one), or raise BadInput
    saying why not: `delayq doctor` tells a typo from a missing deploy this way. A handler's
    path must reach its class through classes only (`classes_only`)."""
    owner: Any
    owner, rest = _import_longest(prefix)
    for name in rest:
        owner = _attribute(owner, name, prefix)
        if classes_only and not inspect.isclass(owner):
            raise HandlerNotAllowed(
                f"handler class {prefix!r}: {name!r} is not a class; "
                "name a module or a class defined in one"
            )
    return owner


def check_imports(allowed: Sequence[str], path: Sequence[Path]) -> None:
    """Refuse, with ConfigError, an allowlist entry that does not import here: asked by
    `delayq run` before it claims anything, since a worker started from the wrong directory
    or with a typo in DELAYQ_HANDLERS would fail every job it claims and still exit 0."""
    for prefix in allowed:
        try:
            import_prefix(prefix)
        except BadInput as exc:
            top = prefix.split(".")[0]
            reason = _not_found_in(top, path) if find_spec(top) is None else str(exc)
            message = f"DELAYQ_HANDLERS entry {prefix!r} does not import: {reason}"
            raise ConfigError(message) from None


def _not_found_in(top: str, path: Sequence[Path]) -> str:
    """Where a top-level module was looked for, as the operator can change it."""
    listed = ", ".join(str(directory.resolve()) for directory in path) or "not set"
    return (
        f"no module {top!r} in the working directory ({os.getcwd()}), DELAYQ_PATH ({listed}) "
        "or the installed packages; start delayq in your application's directory or list "
        "that directory in DELAYQ_PATH (`path` in delayq.toml)"
    )


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
    raise BadInput(
        f"handler {class_path!r} is not importable; start delayq in the directory that holds "
        "it, or list that directory in DELAYQ_PATH (path in delayq.toml) or PYTHONPATH"
    )


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
    """Refuse a handler whose call would run code defined outside the allowlist."""
    function = found.__func__ if isinstance(found, staticmethod | classmethod) else found
    module_name = getattr(function, "__module__", None)
    what = f"handler {class_path}.{method}"
    outside = f"outside DELAYQ_HANDLERS ({','.join(allowed)})"
    if inspect.ismodule(function) or not _is_under(module_name, allowed):
        where = module_name or "an unknown module"
        raise HandlerNotAllowed(f"{what} is defined in {where!r}, {outside}")
    if inspect.isclass(owner):
        if not _is_under(owner.__module__, allowed):
            raise HandlerNotAllowed(f"handler class {class_path!r} is defined {outside}")
        _check_special(owner, method, allowed, what)
        if inspect.isfunction(found):
            _check_creation(owner, allowed, f"handler class {class_path!r}")
    if inspect.isclass(function):
        _check_creation(function, allowed, what)
    elif not (inspect.isfunction(function) or inspect.ismethod(function)):
        _check_special(type(function), "__call__", allowed, what)


def _check_creation(cls: type, allowed: Sequence[str], what: str) -> None:
    """Creating `cls` runs its metaclass's `__call__`, then `__new__` and `__init__` as its
    MRO finds them: each must be the builtin default or defined under the allowlist."""
    if _definer(type(cls), "__call__") is not type:
        _check_special(type(cls), "__call__", allowed, f"{what} (its metaclass)")
    for name in ("__new__", "__init__"):
        if _definer(cls, name) is not object:
            _check_special(cls, name, allowed, what)


def _check_special(cls: type, name: str, allowed: Sequence[str], what: str) -> None:
    """Refuse unless the class in `cls`'s MRO that defines `name` lives under the allowlist."""
    definer = _definer(cls, name)
    if definer is None or not _is_under(definer.__module__, allowed):
        where = f"{definer.__module__}.{definer.__qualname__}" if definer else "no class"
        raise HandlerNotAllowed(
            f"{what} would run {name} of {where}, outside DELAYQ_HANDLERS ({','.join(allowed)})"
        )


def _definer(cls: type, name: str) -> type | None:
    """The class in `cls`'s MRO whose own body defines `name`, as attribute lookup finds it."""
    return next((klass for klass in inspect.getmro(cls) if name in vars(klass)), None)
