"""Settings: the one frozen bundle of configuration, and the only reader of DELAYQ_* and the
file. Precedence: explicit arguments, the environment, the config file, Settings' defaults."""

from __future__ import annotations

import importlib
import os
import re
import sys
from collections.abc import Mapping
from contextlib import suppress
from dataclasses import dataclass, fields, replace
from dataclasses import field as dataclass_field
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from .base.durations import parse_duration
from .errors import BadInput, ConfigError

MIN_WEB_TOKEN = 16
MAX_CONCURRENCY = 1000
# DELAYQ_HORIZON's bounds: a run raises it a twelfth of it ahead, and looks every 10 s.
MIN_HORIZON = 600.0
MAX_HORIZON = 10 * 365 * 86400.0
CONFIG_FILE = "delayq.toml"
QUEUE_NAME = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")
PHP_CLASS_NAME = re.compile(r"^\\?[A-Za-z_][A-Za-z0-9_]*(\\[A-Za-z_][A-Za-z0-9_]*)*$")
DEFAULT_QUEUE = "default"


@dataclass(frozen=True)
class Settings:
    """Every setting, with its default: the one place a default is written."""

    database_url: str | None = None  # None: SQLite under home (the embedded default)
    redis_url: str | None = None  # None: a Redis server embedded under home
    handlers: tuple[str, ...] = ()  # module prefixes whose code jobs may call; empty allows nothing
    home: Path = Path(".delayq")
    embedded_idle: float = 600.0  # seconds without a client before the embedded Redis stops
    path: tuple[Path, ...] = ()  # directories handlers are imported from, besides the cwd
    lease: float = 60.0  # seconds a claimed job stays ours without a heartbeat
    batch_size: int = 500  # jobs claimed per Redis call and per guarded UPDATE
    since: float = 86400.0  # how far back `run` looks; older due jobs become `missed`
    # How far ahead Redis holds each queue's jobs; later ones wait in the table alone.
    horizon: float = 3600.0
    max_seconds: float = 50.0  # a run claims nothing new after this, so cron runs do not pile up
    timeout: float = 300.0  # a handler running longer than this fails with JobTimeout
    concurrency: int = 1  # jobs in flight in one run: 1 calls handlers on the main thread
    grace: float = 25.0  # on SIGTERM, how long jobs in flight may take to finish
    php_classes: tuple[tuple[str, str], ...] = ()  # (PHP class, Python dotted path) pairs
    # What logs in to `delayq web`'s actions (None: the page is read-only); never in a repr.
    web_token: str | None = dataclass_field(default=None, repr=False)
    on_failure: str | None = None  # dotted path of a function called after each failed attempt
    # Where failed attempts are reported (the `sentry` extra); it holds a key.
    sentry_dsn: str | None = dataclass_field(default=None, repr=False)

    def validate(self) -> Settings:
        """Return self, or raise ConfigError naming the variable that is wrong."""
        for name in ("timeout", "embedded_idle"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"DELAYQ_{name.upper()} must be more than 0 seconds")
        self._check_durations()
        if not 1 <= self.batch_size <= 5000:
            raise ConfigError("DELAYQ_BATCH_SIZE must be between 1 and 5000")
        if not 1 <= self.concurrency <= MAX_CONCURRENCY:
            raise ConfigError(f"DELAYQ_CONCURRENCY must be between 1 and {MAX_CONCURRENCY}")
        for directory in self.path:
            if not directory.is_dir():
                raise ConfigError(
                    f"DELAYQ_PATH entry {str(directory)!r} is not a directory; list the "
                    "directories that hold your handler modules"
                )
        self._check_hooks()
        for prefix in self.handlers:
            if not all(part.isidentifier() for part in prefix.split(".")):
                raise ConfigError(f"DELAYQ_HANDLERS entry {prefix!r} is not a dotted module path")
        return self

    def _check_durations(self) -> None:
        if self.lease < 2:
            raise ConfigError("DELAYQ_LEASE must be at least 2 seconds")
        if not MIN_HORIZON <= self.horizon <= MAX_HORIZON:
            raise ConfigError("DELAYQ_HORIZON must be between 10 minutes and 10 years")

    def _check_hooks(self) -> None:
        if self.web_token is not None and len(self.web_token.strip()) < MIN_WEB_TOKEN:
            raise ConfigError(f"DELAYQ_WEB_TOKEN must be at least {MIN_WEB_TOKEN} characters")
        hook = self.on_failure  # a dotted path of at least two identifiers
        names = hook.split(".") if isinstance(hook, str) and len(hook) <= 255 else []
        if hook is not None and not (len(names) >= 2 and all(n.isidentifier() for n in names)):
            raise ConfigError(
                f"DELAYQ_ON_FAILURE {str(self.on_failure)[:100]!r} must be a dotted path to a "
                "function of at most 255 characters, e.g. billing.alerts.job_failed"
            )

    def with_overrides(self, **overrides: Any) -> Settings:
        """A copy with the given non-None fields replaced, coerced and validated."""
        given = {key: value for key, value in overrides.items() if value is not None}
        return replace(self, **_coerce(given)).validate()


DEFAULTS: Mapping[str, Any] = {field.name: field.default for field in fields(Settings)}


def load_settings(
    environ: Mapping[str, str] | None = None, config_path: str | Path | None = None
) -> Settings:
    """Settings from the config file overlaid by DELAYQ_* variables."""
    environ = os.environ if environ is None else environ
    values = _read_file(config_path or environ.get("DELAYQ_CONFIG"))
    for name in DEFAULTS:
        if raw := environ.get(f"DELAYQ_{name.upper()}"):  # an empty variable counts as unset
            values[name] = raw
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


SECRET_PARAMETERS = ("password", "sentinel_password", "passwd", "pass", "secret", "token")
_SECRET_PARAMETER = re.compile(rf"([?&](?:{'|'.join(SECRET_PARAMETERS)})=)[^&]*", re.IGNORECASE)


def redact_url(url: str | None) -> str:
    """The URL with its password, and any password given as a query parameter, shown as ***.
    Not parsed as a URL, where a raw # ? / or @ in a password ends the user:password part
    early: a password parameter's value runs to the next &, all up to the last @ left after
    that is user and password, and only the user name is kept."""
    if not url:
        return "(embedded)"
    scheme, separator, rest = url.partition("://")
    if not separator:
        scheme, rest = "", url
    # Without a scheme (`root:pw@host/db`) the same parts are read, so that a value that is
    # no URL at all is shown as it is, to be corrected, and only a password in it is hidden.
    rest = _SECRET_PARAMETER.sub(r"\1***", rest)
    userinfo, at, rest = rest.rpartition("@")
    if at:
        user, colon, _ = userinfo.partition(":")
        rest = f"{user}:***@{rest}" if colon else f"{user}@{rest}"
    return f"{scheme}{separator}{rest}"


def url_secrets(url: str | None) -> set[str]:
    """Every spelling of the secrets in `url` an error message might repeat: the password
    as written and decoded, read both strictly and as redact_url reads it, and the values
    of password parameters."""
    if not url:
        return set()
    found: set[str] = set()
    userinfo, at, _ = url.partition("://")[2 if "://" in url else 0].rpartition("@")
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
        # tomli before Python 3.11; imported only now, so a run without a file does without it
        toml = importlib.import_module("tomllib" if sys.version_info >= (3, 11) else "tomli")
        data = toml.loads(candidate.read_text())
    except (OSError, ValueError) as exc:  # TOMLDecodeError is a ValueError
        raise ConfigError(f"cannot read config file {str(candidate)!r}: {exc}") from None
    if unknown := sorted(set(data) - set(DEFAULTS)):
        raise ConfigError(f"config file {str(candidate)!r} has unknown keys: {', '.join(unknown)}")
    path = data.get("path")
    if isinstance(path, str | list):
        # A file's directories are taken from where the file is, wherever delayq starts
        # (DELAYQ_CONFIG may name one elsewhere); DELAYQ_PATH's from the working directory.
        items = path.split(os.pathsep) if isinstance(path, str) else path
        data["path"] = [_beside(candidate, item) for item in items]
    return data


def _beside(config_file: Path, item: Any) -> Any:
    if not isinstance(item, str) or not item.strip():
        return item  # left for _directories to refuse or skip
    return str(config_file.parent / Path(item).expanduser())  # an absolute one stays as it is


def _coerce(values: dict[str, Any]) -> dict[str, Any]:
    out = dict(values)
    if "handlers" in out:
        out["handlers"] = _split_handlers(out["handlers"])
    if "php_classes" in out:
        out["php_classes"] = _php_classes(out["php_classes"])
    if "home" in out:
        out["home"] = Path(out["home"]).expanduser()
    if "path" in out:
        out["path"] = _directories(out["path"])
    for name in ("embedded_idle", "lease", "since", "horizon", "max_seconds", "timeout", "grace"):
        if name in out:
            try:
                out[name] = parse_duration(out[name], name)
            except BadInput as exc:
                raise ConfigError(f"DELAYQ_{name.upper()}: {exc}") from None
    for name in ("batch_size", "concurrency"):
        if name in out:
            out[name] = _integer(name, out[name])
    return out


def _integer(name: str, value: Any) -> int:
    if isinstance(value, int | str) and not isinstance(value, bool):
        with suppress(ValueError):
            return int(value)
    raise ConfigError(f"DELAYQ_{name.upper()} must be a whole number")


def _directories(value: Any) -> tuple[Path, ...]:
    """DELAYQ_PATH's `dir:dir` (os.pathsep), or the file's list of strings, as paths."""
    items = value.split(os.pathsep) if isinstance(value, str) else value
    if not isinstance(items, list | tuple) or not all(
        isinstance(item, str | os.PathLike) for item in items
    ):
        raise ConfigError("DELAYQ_PATH must be a list of directories")
    if any("\0" in str(item) for item in items):
        raise ConfigError("DELAYQ_PATH contains a NUL character")
    return tuple(Path(item).expanduser() for item in items if str(item).strip())


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
    for php, python in pairs:
        if not PHP_CLASS_NAME.match(php) or not all(
            part.isidentifier() for part in python.split(".")
        ):
            raise ConfigError(
                f"DELAYQ_PHP_CLASSES entry {php}={python} must map a PHP class name to a "
                "Python dotted path, e.g. App\\Jobs\\Refund=shop.jobs.Refund"
            )
    return tuple((php.lstrip("\\"), python) for php, python in pairs)
