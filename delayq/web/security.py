"""What keeps the page safe: headers on every response (a CSP without unsafe-inline, no
framing, no sniffing), a bounded form reader, and a stateless session: a random nonce and its
HMAC under the token, so nothing is stored and a new DELAYQ_WEB_TOKEN logs everybody out. The
CSRF token is a second HMAC of the nonce, so a form posted from another site cannot carry it."""

from __future__ import annotations

import hashlib
import hmac
import secrets
from urllib.parse import parse_qsl

from starlette.datastructures import MutableHeaders
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..errors import BadInput

SESSION_COOKIE = "delayq_session"
MAX_FORM_BYTES = 64 * 1024  # the largest form is a search's filters; anything more is abuse
MAX_FORM_FIELDS = 20

# Every script and style is a file delayq serves: no inline code can run, whatever a job's
# params hold, even if one value ever slipped past escaping.
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
)
SECURITY_HEADERS = {
    "content-security-policy": CONTENT_SECURITY_POLICY,
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "referrer-policy": "no-referrer",
    "cross-origin-opener-policy": "same-origin",
    "cache-control": "no-store",
}


def security_headers(app: ASGIApp) -> ASGIApp:
    """ASGI middleware adding SECURITY_HEADERS to every HTTP response."""

    async def with_headers(scope: Scope, receive: Receive, send: Send) -> None:
        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                MutableHeaders(scope=message).update(SECURITY_HEADERS)
            await send(message)

        await app(scope, receive, send_with_headers if scope["type"] == "http" else send)

    return with_headers


def _sign(token: str, purpose: str, nonce: str) -> str:
    return hmac.new(token.encode(), f"{purpose}:{nonce}".encode(), hashlib.sha256).hexdigest()


def new_session(token: str) -> str:
    """A session cookie value for someone who just gave the right token."""
    nonce = secrets.token_hex(16)
    return f"{nonce}.{_sign(token, 'session', nonce)}"


def session_nonce(request: Request, token: str | None) -> str | None:
    """The nonce of the request's valid session, or None when it is not logged in."""
    if token is None:
        return None
    nonce, _, signature = request.cookies.get(SESSION_COOKIE, "").partition(".")
    if not nonce or not hmac.compare_digest(signature, _sign(token, "session", nonce)):
        return None
    return nonce


def csrf_token(token: str, nonce: str) -> str:
    """The value every form of this session must post back."""
    return _sign(token, "csrf", nonce)


def is_right_token(given: str, token: str) -> bool:
    return hmac.compare_digest(given.encode(), token.encode())


async def read_form(request: Request) -> dict[str, str]:
    """An urlencoded form post's fields, refusing big, malformed or repeated input; read once
    (the body is a stream) and kept for a second look."""
    if hasattr(request.state, "form"):
        return dict(request.state.form)
    content_type = request.headers.get("content-type", "").split(";")[0].strip()
    if content_type != "application/x-www-form-urlencoded":
        raise BadInput("a form post must be application/x-www-form-urlencoded")
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM_BYTES:
            raise BadInput(f"a form post may be at most {MAX_FORM_BYTES} bytes")
    try:
        pairs = parse_qsl(body.decode("utf-8"), max_num_fields=MAX_FORM_FIELDS, errors="strict")
    except (UnicodeDecodeError, ValueError):
        raise BadInput("the form post is not valid UTF-8 urlencoded text") from None
    fields = dict(pairs)
    if len(fields) != len(pairs):
        raise BadInput("a form field is given twice")
    request.state.form = fields
    return dict(fields)
