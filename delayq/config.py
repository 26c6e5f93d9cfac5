"""Settings: the one frozen bundle of configuration, and the only reader of DELAYQ_* and the file.

Precedence: explicit arguments, then the environment, then the config file, then DEFAULTS.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from .durations import parse_duration
from .errors import BadInput, ConfigError

DEFAULTS: dict[str, Any] = {
    "database_url": None,  # None: SQLite under home (the embedded default)
    "redis_url": None,  # None: a Redis server embedded under home
    "handlers": (),  # module prefixes whose code jobs may call; empty allows nothing
    "home": ".delayq",
    "lease": 60.0,  # seconds a claimed job stays ours without a heartbeat
    "batch_size": 500,  # jobs claimed per Redis call and per guarded UPDATE
    "since": 86400.0,  # how far back `run` looks; older due jobs become `missed`
    "max_seconds": 50.0,  # a run claims nothing new after this, so cron runs do not pile up
    "timeout": 300.0,  # a handler running longer than this fails with JobTimeout
    "concurrency": 1,  # jobs in flight in one run: 1 calls handlers on the main thread
    "grace": 25.0,  # on SIGTERM, how long jobs in flight may take to finish
    "php_classes": (),  # (PHP class name, Python dotted path) pairs, for PHP producers' jobs
}
MAX_CONCURRENCY = 1000
ENV_PREFIX = "DELAYQ_"
CONFIG_FILE = "delayq.toml"
QUEUE_NAME = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")
PHP_CLASS_NAME = re.compile(r"^\\?[A-Za-z_][A-Za-z0-9_]*(\\[A-Za-z_][A-Za-z0-9_]*)*$")
DEFAULT_QUEUE = "default"


@dataclass(frozen=True)
class Settings:
    database_url: str | None = None
    redis_url: str | None = None
    handlers: tuple[str, ...] = ()
    home: Path = Path(".delayq")
    lease: float = 60.0
    batch_size: int = 500
    since: float = 86400.0
    max_seconds: float = 50.0
    timeout: float = 300.0
    concurrency: int = 1
    grace: float = 25.0
    php_classes: tuple[tuple[str, str], ...] = ()

    def validate(self) -> Settings:
        """Return self, or raise ConfigError naming the variable that is wrong."""
        if self.timeout <= 0:
            raise ConfigError("DELAYQ_TIMEOUT must be more than 0 seconds")
        if self.lease < 2:
            raise ConfigError("DELAYQ_LEASE must be at least 2 seconds")
        if not 1 <= self.batch_size <= 5000:
            raise ConfigError("DELAYQ_BATCH_SIZE must be between 1 and 5000")
        if not 1 <= self.concurrency <= MAX_CONCURRENCY:
            raise ConfigError(f"DELAYQ_CONCURRENCY must be between 1 and {MAX_CONCURRENCY}")
        for prefix in self.handlers:
            if not all(part.isidentifier() for part in prefix.split(".")):
                raise ConfigError(f"DELAYQ_HANDLERS entry {prefix!r} is not a dotted module path")
        return self

    def with_overrides(self, **overrides: Any) -> Settings:
        """A copy with the given non-None fields replaced, coerced and validated."""
        given = {key: value for key, value in overrides.items() if value is not None}
        return replace(self, **_coerce(given)).validate()


def load_settings(
    environ: Mapping[str, str] | None = None, config_path: str | Path | None = None
) -> Settings:
    """Settings from the config file overlaid by DELAYQ_* variables."""
    environ = os.environ if environ is None else environ
    values: dict[str, Any] = dict(DEFAULTS)
    values.update(_read_file(config_path or environ.get(ENV_PREFIX + "CONFIG")))
    for field in fields(Settings):
        raw = environ.get(ENV_PREFIX + field.name.upper())
        if raw is not None and raw != "":
            values[field.name] = raw
    return Settings(**_coerce(values)).validate()


def validate_queue_name(name: str) -> str:
    """`name`, if it can be a queue name (it becomes part of a Redis key)."""
    if not isinstance(name, str) or not QUEUE_NAME.fullmatch(name):
        raise BadInput(f"queue name {name!r} must be 1-64 characters of A-Z a-z 0-9 _ . : -")
    return name


def validate_text(value: str, name: str) -> str:
    """`value`, if it is a non-empty value a filter or key can hold: text that encodes as
    UTF-8 (argv bytes that are not UTF-8 reach Python as lone surrogates) and no NUL."""
    if not isinstance(value, str):
        raise BadInput(f"{name} must be text")
    if value == "":
        raise BadInput(f"{name} is empty; give a value or leave the option out")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise BadInput(f"{name} is not valid UTF-8") from None
    if "\0" in value:
        raise BadInput(f"{name} contains a NUL character")
    return value


SECRET_PARAMETERS = ("password", "passwd", "pass", "secret", "token")
_SECRET_PARAMETER = re.compile(rf"([?&](?:{'|'.join(SECRET_PARAMETERS)})=)[^&]*", re.IGNORECASE)


def redact_url(url: str | None) -> str:
    """The URL with its password, and any password given as a query parameter, shown as ***.

    Read without trusting the URL to be well formed: a password holding a raw # ? / or @
    makes a URL parser end the user:password part early and take the rest for the host,
    the port or the query. So a password parameter's value runs to the next & whatever it
    holds, everything up to the last @ left after that is user and password, and only the
    user name is kept.
    """
    if not url:
        return "(embedded)"
    scheme, separator, rest = url.partition("://")
    if not separator:
        return "***"  # not a URL at all: nothing in it can be told apart from a secret
    rest = _SECRET_PARAMETER.sub(r"\1***", rest)
    userinfo, at, rest = rest.rpartition("@")
    if at:
        user, colon, _ = userinfo.partition(":")
        rest = f"{user}:***@{rest}" if colon else f"{user}@{rest}"
    return f"{scheme}://{rest}"


def url_secrets(url: str | None) -> set[str]:
    """Every spelling of the secrets in `url` an error message might repeat: the password
    as written and decoded, read both strictly and as redact_url reads it, and the values
    of password parameters."""
    if not url or "://" not in url:
        return {url} if url else set()
    found: set[str] = set()
    userinfo, at, _ = url.partition("://")[2].rpartition("@")
    if at and ":" in userinfo:
        found.add(userinfo.partition(":")[2])
    try:
        strict = urlsplit(url).password
    except ValueError:
        strict = None
    if strict:
        found.add(strict)
    for match in _SECRET_PARAMETER.finditer(url):
        found.add(url[len(match.group(1)) + match.start() : match.end()])
    return {form for secret in found for form in (secret, unquote(secret)) if len(form) >= 3}


def hide_secrets(text: str, *urls: str | None) -> str:
    """`text` with every secret of `urls` replaced by ***, longest first, so that no
    password reaches output or logs through a driver's error message."""
    for secret in sorted(set().union(*map(url_secrets, urls)), key=len, reverse=True):
        text = text.replace(secret, "***")
    return text


def _read_file(path: str | Path | None) -> dict[str, Any]:
    candidate = Path(path) if path else Path(CONFIG_FILE)
    if not candidate.is_file():
        if path:
            raise ConfigError(f"DELAYQ_CONFIG names {str(candidate)!r}, which does not exist")
        return {}
    try:
        import tomllib  # only when there is a file to read

        data = tomllib.loads(candidate.read_text())
    except (OSError, ValueError) as exc:  # TOMLDecodeError is a ValueError
        raise ConfigError(f"cannot read config file {str(candidate)!r}: {exc}") from None
    known = {field.name for field in fields(Settings)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ConfigError(f"config file {str(candidate)!r} has unknown keys: {', '.join(unknown)}")
    return data


def _coerce(values: dict[str, Any]) -> dict[str, Any]:
    out = dict(values)
    if "handlers" in out:
        out["handlers"] = _split_handlers(out["handlers"])
    if "php_classes" in out:
        out["php_classes"] = _php_classes(out["php_classes"])
    if "home" in out:
        out["home"] = Path(out["home"]).expanduser()
    for name in ("lease", "since", "max_seconds", "timeout", "grace"):
        if name in out:
            out[name] = _number(name, out[name])
    for name in ("batch_size", "concurrency"):
        if name in out:
            out[name] = _integer(name, out[name])
    return out


def _integer(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ConfigError(f"{ENV_PREFIX}{name.upper()} must be a whole number")
    try:
        return int(value)
    except ValueError:
        raise ConfigError(f"{ENV_PREFIX}{name.upper()} must be a whole number") from None


def _split_handlers(value: Any) -> tuple[str, ...]:
    items = value.split(",") if isinstance(value, str) else list(value)
    return tuple(item.strip() for item in items if item and item.strip())


def _php_classes(value: Any) -> tuple[tuple[str, str], ...]:
    """`App\\Jobs\\Refund=shop.jobs.Refund,...` (or a table in the file) as checked pairs."""
    if isinstance(value, str):
        items = [item.strip() for item in value.split(",") if item.strip()]
        pairs = [tuple(part.strip() for part in item.partition("=")[::2]) for item in items]
    elif isinstance(value, Mapping):
        pairs = [(str(php), str(python)) for php, python in value.items()]
    else:
        pairs = [tuple(pair) for pair in value]
    checked = []
    for php, python in pairs:
        if not PHP_CLASS_NAME.match(php) or not all(
            part.isidentifier() for part in python.split(".")
        ):
            raise ConfigError(
                f"DELAYQ_PHP_CLASSES entry {php}={python} must map a PHP class name to a "
                "Python dotted path, e.g. App\\Jobs\\Refund=shop.jobs.Refund"
            )
        checked.append((php.lstrip("\\"), python))
    return tuple(checked)


def _number(name: str, value: Any) -> float:
    try:
        return parse_duration(value, name)
    except BadInput as exc:
        raise ConfigError(f"{ENV_PREFIX}{name.upper()}: {exc}") from None
