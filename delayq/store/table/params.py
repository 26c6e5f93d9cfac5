"""A job's `params` read back: delayq's JSON object, or the PHP serialize() array the seed's
producers write (`a:3:{s:5:"class";...}`, read with the `php` extra's phpserialize), its
class names mapped to Python by DELAYQ_PHP_CLASSES. Reading never raises anything but
BadInput: a bad row fails its own job, never the run.
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from ...errors import BadInput
from ..backend_errors import one_line

# serialize() of an array or an object; no JSON text starts like this.
PHP_SERIALIZED = re.compile(r"^[aO]:\d+:")
# How deeply a job's data may nest lists and objects: Python's JSON parser and encoder recurse,
# so a few thousand levels raise RecursionError; checked at add and again before each call.
DATA_MAX_DEPTH = 100


class Call(NamedTuple):
    """What a job calls: a Python dotted path, a method name, and the data to pass."""

    class_path: str
    method: str
    data: Any


def is_php(params: str) -> bool:
    return isinstance(params, str) and PHP_SERIALIZED.match(params) is not None


def read_call(params: str, php_classes: Mapping[str, str]) -> Call:
    """The call a row's params describe, PHP class names mapped to Python; or BadInput."""
    payload = read_payload(params)
    class_path, method = payload.get("class"), payload.get("method")
    if not isinstance(class_path, str) or not isinstance(method, str):
        raise BadInput('bad params: "class" and "method" must be strings')
    if "data" not in payload:
        # Required, as docs/producers.md says and the seed's producers always write it
        # (serialize(['class' => ..., 'method' => ..., 'data' => ...])): a row without it is a
        # producer's mistake (a misspelt key), which calling the handler with None would hide.
        raise BadInput('bad params: no "data"; write "data": null for a call without any')
    if is_php(params):
        class_path = python_class(class_path, php_classes)
    return Call(class_path, method, payload.get("data"))


def read_payload(params: str) -> dict[str, Any]:
    """The params as an object ({"class", "method", "data"}), from JSON or PHP; or BadInput."""
    payload = _unserialize(params) if is_php(params) else _parse_json(params)
    if not isinstance(payload, dict):
        kind = "the PHP value is not an array with keys" if is_php(params) else "not a JSON object"
        raise BadInput(f"bad params: {kind}")
    # PHP arrays nest with "{" too, so the cheap test on the text holds for both.
    if may_nest_deeper(params) and nests_deeper(payload.get("data")):
        raise BadInput(f"bad params: {too_deep()}")
    return payload


def _parse_json(params: str) -> Any:
    try:
        return json.loads(params)
    except RecursionError:
        raise BadInput(f"bad params: {too_deep()}") from None
    except (TypeError, ValueError) as exc:
        raise BadInput(f"bad params: not JSON ({exc})") from None


def too_deep() -> str:
    return f"data nests lists and objects more than {DATA_MAX_DEPTH} levels deep"


def may_nest_deeper(text: str) -> bool:
    """A cheap test on the params' text that rules out deep nesting for most jobs."""
    return text.count("[") + text.count("{") > DATA_MAX_DEPTH


def nests_deeper(data: Any) -> bool:
    """Whether `data` nests lists and objects more than DATA_MAX_DEPTH levels deep; walked
    without recursion, since the data it is asked about is the data that would overflow."""
    stack: list[tuple[Any, int]] = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict):
            value = list(value.values())
        if isinstance(value, list | tuple):
            if depth > DATA_MAX_DEPTH:
                return True
            stack.extend((item, depth + 1) for item in value)
    return False


def payload_or_empty(params: str) -> dict[str, Any]:
    """The params object for showing a row, or {} when they cannot be read."""
    try:
        return read_payload(params)
    except BadInput:
        return {}


def python_class(php_name: str, php_classes: Mapping[str, str]) -> str:
    """The Python dotted path a PHP class name stands for. A name without a backslash is
    taken as a Python path already (a producer may write those)."""
    name = php_name.lstrip("\\")
    if name in php_classes:
        return php_classes[name]
    if "\\" in name:
        # Not "bad params": mapping the class and a retry of the job fixes it.
        raise BadInput(
            f"PHP class {name!r} has no Python handler: map it in DELAYQ_PHP_CLASSES "
            f"({name}=your.module.Class)"
        )
    return name


def _unserialize(params: str) -> Any:
    try:
        import phpserialize  # only where PHP producers write jobs: the `php` extra
    except ImportError:
        raise BadInput(
            "params are PHP-serialized; install delayq[php] (phpserialize) to read them"
        ) from None
    try:
        stream = io.BytesIO(params.encode("utf-8"))
        value = phpserialize.load(
            stream,
            charset="utf-8",
            errors="strict",  # its default would let bytes that are not UTF-8 through
            decode_strings=True,
            array_hook=_php_array,
            object_hook=_php_object,
        )
    # What phpserialize raises on text it cannot read (RecursionError: nesting too deep).
    except (ValueError, TypeError, RecursionError) as exc:
        raise BadInput(
            f"bad params: malformed PHP serialize() text ({one_line(exc)[:200]})"
        ) from None
    if stream.read(1):
        raise BadInput("bad params: text follows the PHP-serialized value (cut or joined?)")
    return value


def _php_array(pairs: Sequence[tuple[Any, Any]]) -> list[Any] | dict[str, Any]:
    """A PHP array as JSON would carry it: keys 0..n-1 in order make a list, anything else
    an object with text keys (what PHP's json_encode makes of it)."""
    keys = [key for key, _ in pairs]
    if any(isinstance(key, bool) or not isinstance(key, int | str) for key in keys):
        raise ValueError("an array key is neither an integer nor a string")
    if keys == list(range(len(keys))):
        return [value for _, value in pairs]
    return {str(key): value for key, value in pairs}


def _php_object(class_name: str, members: dict[Any, Any]) -> dict[str, Any]:
    """A PHP object as its properties; protected and private ones are serialized with a
    NUL-delimited prefix (`\\0*\\0name`), which is dropped."""
    return {str(name).rpartition("\0")[2]: value for name, value in members.items()}
