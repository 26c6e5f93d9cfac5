"""The pages that only read: every queue with what runs next, the job search paged by id, one
job with its retry chain. Each asks the Queue what the CLI asks, so the two never disagree;
`?fragment=1` answers a page's live part alone, for static/refresh.js to swap in."""

from __future__ import annotations

from typing import TYPE_CHECKING
from urllib.parse import urlencode, urlsplit

import redis
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from ..base.durations import parse_duration, parse_utc_instant
from ..errors import BadInput
from ..ops.doctor import topology_words
from ..ops.minutes import Minute, per_minute
from ..ops.overview import LIVE_STATUSES, JobFilter, StatusReport, status_report
from ..store.backend_errors import backend_errors
from ..store.index import SCHEME as SENTINEL
from ..store.index import servers
from ..store.table import Status
from . import charts
from .rendering import render, root_path

if TYPE_CHECKING:
    from ..queue import Queue

PAGE_SIZE = 50
SEARCH_FIELDS = ("id", "ext", "handler", "status", "queue", "since", "from", "to", "before_id")
MAX_FIELD = 1000  # longer than any ext (255) or class path a search could match


def overview(request: Request) -> Response:
    queue = request.app.state.queue
    window = request.query_params.get("window", "hour")
    if window not in charts.WINDOWS:
        raise BadInput(f"window must be one of {', '.join(charts.WINDOWS)}")
    report, read = _read_overview(queue, window)
    bins = charts.bins_of(read, window)
    # The Redis servers only on a whole page: the refreshed part asks for none of it.
    fragment = _is_fragment(request)
    return render(
        request,
        "overview_live.html" if fragment else "overview.html",
        topology=None if fragment else redis_topology(queue),
        report=report,
        upcoming=queue.peek(),  # as many as `delayq peek` shows
        window=window,
        lateness=charts.lateness_by_queue(read, report.now - 3600),
        throughput=charts.throughput_chart(bins),
        late=charts.lateness_chart(bins),
        axis=charts.time_axis(bins, window),
        chart=charts,
    )


@backend_errors
def _read_overview(queue: Queue, window: str) -> tuple[StatusReport, list[Minute]]:
    """The queues' live figures (SQL index ranges only) and the window's per-minute aggregates."""
    report = status_report(queue.table, queue.index, queue.index.clock.now(), LIVE_STATUSES)
    return report, per_minute(queue, minutes=charts.WINDOWS[window][0])


@backend_errors
def redis_topology(queue: Queue) -> str:
    """The Redis servers delayq writes to, in `delayq doctor`'s words: one INFO (and CONFIG
    GET) of each server written to, none of its replicas, whose lag the primary reports."""
    try:
        words = topology_words(servers(queue.index.client))
    except redis.ResponseError:  # some managed services refuse INFO; the page works without
        return "not known (INFO is refused)"
    through_sentinel = urlsplit(queue.settings.redis_url or "").scheme == SENTINEL
    return f"{words}, named by the sentinels" if through_sentinel else words


def search(request: Request) -> Response:
    given = search_fields(request)
    if "id" in given:
        return RedirectResponse(f"{root_path(request)}/jobs/{_positive(given['id'], 'id')}", 303)
    filters = job_filter(given)
    before_id = _positive(given["before_id"], "before_id") if "before_id" in given else None
    rows = request.app.state.queue.list_jobs(filters, limit=PAGE_SIZE, before_id=before_id)
    next_page = urlencode(dict(given, before_id=rows[-1]["id"])) if len(rows) == PAGE_SIZE else None
    return render(
        request,
        "search.html",
        given=given,
        rows=rows,
        next_page=next_page,
        requeue_query=urlencode({k: v for k, v in given.items() if k != "before_id"}),
        statuses=[status.word for status in Status],
    )


def detail(request: Request) -> Response:
    queue = request.app.state.queue
    job_id = request.path_params["job_id"]
    template = "detail_live.html" if _is_fragment(request) else "detail.html"
    return render(request, template, job=queue.show(job_id), chain=queue.history(job_id))


def search_fields(request: Request) -> dict[str, str]:
    """The search's non-empty fields from the query string, checked for size and text."""
    fields = ((name, request.query_params.get(name, "").strip()) for name in SEARCH_FIELDS)
    given = {name: value for name, value in fields if value}
    for name, value in given.items():
        if len(value) > MAX_FIELD:
            raise BadInput(f"{name} is longer than {MAX_FIELD} characters")
    return given


def job_filter(given: dict[str, str], statuses: tuple[Status, ...] = ()) -> JobFilter:
    """The JobFilter a search's fields describe; JobFilter itself refuses hostile text."""
    if set(given) <= {"status", "before_id"} and statuses:
        # As the CLI's requeue: a bulk write over every failed chain needs a narrower search.
        raise BadInput("narrow the search (ext, handler, queue or a time) before a requeue")
    if "status" in given:
        try:
            statuses = (Status.from_word(given["status"]),)
        except KeyError:
            known = ", ".join(status.word for status in Status)
            raise BadInput(f"status must be one of {known}") from None
    since = parse_duration(given["since"], "since") if "since" in given else None
    changed_from = parse_utc_instant(given["from"], "from") if "from" in given else None
    changed_to = parse_utc_instant(given["to"], "to") if "to" in given else None
    if changed_from is not None and changed_to is not None and changed_from >= changed_to:
        raise BadInput("from must be before to")
    return JobFilter(
        statuses=statuses,
        queue=given.get("queue"),
        ext=given.get("ext"),
        class_path=given.get("handler"),
        since=since,
        changed_from=changed_from,
        changed_to=changed_to,
    )


def _positive(text: str, name: str) -> int:
    if not (text.isascii() and text.isdigit()) or not 0 < int(text) < 2**63:
        raise BadInput(f"{name} must be a job id: a whole number above 0")
    return int(text)


def _is_fragment(request: Request) -> bool:
    return request.query_params.get("fragment") == "1"
