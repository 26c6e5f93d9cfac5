"""The Starlette application: routes, and the one mapping of delayq's errors to HTTP statuses
(bad input 400, unknown job 404, backend down 503)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from ..errors import BackendUnavailable, BadInput, DelayqError, JobNotFound
from ..ops.printing import printable
from . import actions, pages
from .rendering import error_page
from .security import security_headers
from .throttle import LoginThrottle

if TYPE_CHECKING:
    from ..queue import Queue

ERROR_STATUSES: dict[type[DelayqError], int] = {
    BadInput: 400,
    JobNotFound: 404,
    BackendUnavailable: 503,
}

# A path is the visitor's text: shown escaped and cut, so a long one cannot flood the page.
MAX_PATH_SHOWN = 200
NO_PAGE = "there is no page at {path}; the pages are /, /jobs and /jobs/ID, with ID a job's number"


def create_app(queue: Queue, *, token: str | None = None) -> Starlette:
    """The page over `queue`; `token` (DELAYQ_WEB_TOKEN) enables logging in and the actions."""
    routes = [
        Route("/", pages.overview, name="overview"),
        Route("/jobs", pages.search, name="search"),
        Route("/jobs/{job_id:int}", pages.detail, name="detail"),
        Route("/login", actions.login, name="login", methods=["GET", "POST"]),
        Route("/logout", actions.logout, methods=["POST"]),
        Route("/jobs/{job_id:int}/retry", actions.retry, methods=["POST"]),
        Route("/jobs/{job_id:int}/cancel", actions.cancel, methods=["POST"]),
        Route("/queues/{name}/pause", actions.pause, methods=["POST"]),
        Route("/queues/{name}/resume", actions.resume, methods=["POST"]),
        Route("/requeue", actions.requeue_preview, methods=["GET"]),
        Route("/requeue", actions.requeue, methods=["POST"]),
        Mount("/static", app=StaticFiles(packages=[("delayq.web", "static")]), name="static"),
    ]
    app = Starlette(
        routes=routes,
        middleware=[Middleware(security_headers)],
        exception_handlers={DelayqError: _error_page, HTTPException: _http_error_page},
    )
    app.state.queue = queue
    app.state.token = token
    app.state.login_throttle = LoginThrottle()
    return app


def _error_page(request: Request, exc: Exception) -> Response:
    status = next((code for cls, code in ERROR_STATUSES.items() if isinstance(exc, cls)), 500)
    return error_page(request, status, str(exc))


def _http_error_page(request: Request, exc: Exception) -> Response:
    """Starlette's own refusals (no such path, wrong method) in the site's layout."""
    assert isinstance(exc, HTTPException)
    if exc.status_code != 404:
        page = error_page(request, exc.status_code, printable(exc.detail))
        page.headers.update(exc.headers or {})  # a 405's Allow
        return page
    path = printable(request.url.path)[:MAX_PATH_SHOWN]
    return error_page(request, 404, NO_PAGE.format(path=path))
