"""How a page becomes HTML: one Jinja2 environment autoescaping everything, the templates'
filters, and `render`, which adds what every page needs (root path, login, CSRF token).
`visible` spells control and format characters as escapes, so a job's writer can neither
inject markup nor reorder what the operator reads (an RTL override, an escape sequence)."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from functools import cache
from typing import Any

from jinja2 import Environment, PackageLoader, select_autoescape
from starlette.requests import Request
from starlette.responses import HTMLResponse

from ..errors import BadInput
from ..ops.printing import printable
from ..store.index import UNREADABLE
from ..store.table import JobRow, read_payload
from .security import csrf_token, session_nonce

# A job's message longer than one line (a traceback) or than this shows collapsed to its
# first line, cut here, in a <details> the operator opens: no script, so the CSP holds.
SUMMARY_CHARS = 200

NO_ROW = "(no row)"  # a schedule entry whose row is gone, as `delayq peek` says

# An error page's heading: what the visitor reads first, so it names the kind of refusal.
HEADINGS = {
    400: "Not understood",
    403: "Not allowed",
    404: "Not found",
    405: "Not allowed",
    429: "Too many tries",
    503: "Unavailable",
}


@cache
def templates() -> Environment:
    env = Environment(
        loader=PackageLoader("delayq.web", "templates"),
        autoescape=select_autoescape(default=True, default_for_string=True),
    )
    env.filters.update(
        visible=visible, clock=clock, seconds=seconds, pretty=pretty_json, handler=handler
    )
    env.globals["SUMMARY_CHARS"] = SUMMARY_CHARS
    return env


def render(request: Request, name: str, status_code: int = 200, **context: Any) -> HTMLResponse:
    """Template `name` with what every page needs: the root path and the login state."""
    token = request.app.state.token
    nonce = session_nonce(request, token)
    template = templates().get_template(name)
    html = template.render(
        root=root_path(request),
        actions_enabled=token is not None,
        logged_in=nonce is not None,
        csrf=csrf_token(token, nonce) if token and nonce else "",
        where=request.app.state.queue.describe(),
        **context,
    )
    return HTMLResponse(html, status_code)


def error_page(request: Request, status_code: int, message: str) -> HTMLResponse:
    """The site's error page: the layout of every page, a heading for the status, one line."""
    heading = HEADINGS.get(status_code, "Not done")
    return render(request, "error.html", status_code, heading=heading, message=message)


def root_path(request: Request) -> str:
    """Where the page is mounted behind a reverse proxy (`--root-path`), without a final /."""
    return str(request.scope.get("root_path", "")).rstrip("/")


def visible(value: object) -> str:
    """`value` with control and format characters as escapes; line breaks stay, so tracebacks
    and pretty JSON read as written."""
    text = "" if value is None else str(value)
    return "\n".join(printable(line) for line in text.split("\n"))


def clock(epoch: float | None) -> str:
    """An epoch as UTC date and time to the second, or a dash."""
    if epoch is None:
        return "–"
    return datetime.fromtimestamp(float(epoch), timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def seconds(value: float | None) -> str:
    """A duration as the shortest honest figure: 4.2s, 17m, 3.1h."""
    if value is None:
        return "–"
    for unit, size in (("h", 3600.0), ("m", 60.0)):
        if value >= size:
            return f"{value / size:.1f}{unit}"
    return f"{value:.1f}s"


def handler(row: JobRow | None) -> str:
    """What a row calls, "class.method" as its writer named them (a PHP producer's class
    too, as the job's page shows it), or one word when its params name none."""
    if row is None:
        return NO_ROW
    try:
        payload = read_payload(row.params)
    except BadInput:
        return UNREADABLE
    class_path, method = payload.get("class"), payload.get("method")
    if not isinstance(class_path, str) or not isinstance(method, str):
        return UNREADABLE
    return f"{class_path}.{method}"


def pretty_json(value: Any) -> str:
    """Params data as indented JSON, non-ASCII kept (escaped for display by `visible`)."""
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)
