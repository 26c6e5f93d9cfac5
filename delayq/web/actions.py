"""The pages that write: logging in with DELAYQ_WEB_TOKEN, and retry, cancel, requeue, pause and
resume, each
a POST carrying the session's CSRF token and each the one Queue call the CLI makes, so the
same rules and atomicity hold. Without a token every action answers 403: the page only reads."""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from ..store.table import Status
from .pages import job_filter, search_fields
from .rendering import error_page, render, root_path
from .security import SESSION_COOKIE, csrf_token, is_right_token, new_session, read_form
from .security import session_nonce as nonce_of

log = logging.getLogger(__name__)

NO_TOKEN = "actions are off: start `delayq web` with DELAYQ_WEB_TOKEN set to enable them"
TOO_MANY = "too many wrong tokens from this address: try again in {} seconds"
SESSION_SECONDS = 12 * 3600
REQUEUE_FIELDS = ("ext", "handler", "queue", "since", "from", "to")
Action = Callable[[Request], Awaitable[Response]]


def guarded(action: Action) -> Action:
    """`action` run only for a POST that may act: a token is configured, the session is
    logged in and the form carries its CSRF token; any other gets the refusal page."""

    @functools.wraps(action)
    async def checked(request: Request) -> Response:
        token = request.app.state.token
        if token is None:
            return error_page(request, 403, message=NO_TOKEN)
        nonce = nonce_of(request, token)
        if nonce is None:
            return error_page(request, 403, message="log in first: your session ended")
        form = await read_form(request)
        if not is_right_token(form.get("csrf", ""), csrf_token(token, nonce)):
            return error_page(request, 403, message="the form is stale; reload the page")
        return await action(request)

    return checked


async def login(request: Request) -> Response:
    """GET: the form; POST: the token, checked against the address's recent wrong ones."""
    token = request.app.state.token
    if token is None:
        return error_page(request, 403, message=NO_TOKEN)
    if request.method == "GET":
        return render(request, "login.html")
    throttle = request.app.state.login_throttle
    address = request.client.host if request.client else "unknown"
    wait = throttle.retry_after(address)
    if wait is not None:
        log.warning("login refused from %r: too many wrong tokens, retry in %ss", address, wait)
        refused = error_page(request, 429, message=TOO_MANY.format(wait))
        refused.headers["Retry-After"] = str(wait)
        return refused
    form = await read_form(request)
    if not is_right_token(form.get("token", ""), token):
        count = throttle.failed(address)
        log.warning("failed login from %r: wrong token (%d in the last minute)", address, count)
        return render(request, "login.html", 403, failed=True)
    throttle.succeeded(address)
    response = RedirectResponse(f"{root_path(request)}/", 303)
    response.set_cookie(
        SESSION_COOKIE,
        new_session(token),
        max_age=SESSION_SECONDS,
        path=f"{root_path(request)}/",
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )
    return response


@guarded
async def logout(request: Request) -> Response:
    response = RedirectResponse(f"{root_path(request)}/", 303)
    response.delete_cookie(SESSION_COOKIE, path=f"{root_path(request)}/")
    return response


@guarded
async def retry(request: Request) -> Response:
    queue = request.app.state.queue
    attempt_id = await run_in_threadpool(queue.retry, request.path_params["job_id"])
    return RedirectResponse(f"{root_path(request)}/jobs/{attempt_id}", 303)


@guarded
async def cancel(request: Request) -> Response:
    job_id = request.path_params["job_id"]
    await run_in_threadpool(request.app.state.queue.cancel, job_id)
    return RedirectResponse(f"{root_path(request)}/jobs/{job_id}", 303)


@guarded
async def pause(request: Request) -> Response:
    await run_in_threadpool(request.app.state.queue.pause, request.path_params["name"])
    return RedirectResponse(f"{root_path(request)}/", 303)


@guarded
async def resume(request: Request) -> Response:
    await run_in_threadpool(request.app.state.queue.resume, request.path_params["name"])
    return RedirectResponse(f"{root_path(request)}/", 303)


async def requeue_preview(request: Request) -> Response:
    """What a requeue of the search's failed jobs would retry, and a button to do it."""
    given = search_fields(request)
    given.pop("before_id", None)
    given.pop("status", None)  # a requeue retries failed chains, whatever the search showed
    filters = job_filter(given, (Status.FAILED,))
    result = await run_in_threadpool(request.app.state.queue.requeue, filters, dry_run=True)
    return render(request, "requeue.html", given=given, result=result, done=False)


@guarded
async def requeue(request: Request) -> Response:
    form = await read_form(request)
    given = {name: value for name, value in form.items() if name in REQUEUE_FIELDS and value}
    filters = job_filter(given, (Status.FAILED,))
    result = await run_in_threadpool(request.app.state.queue.requeue, filters)
    return render(request, "requeue.html", given=given, result=result, done=True)
