"""`delayq web` over HTTP (Starlette's TestClient, real table and Redis on both backends):
what the pages show, escaping of every value a job's writer chose, the security headers,
paging, login, CSRF, and actions that change rows exactly as the CLI's do."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
import time
from html.parser import HTMLParser
from typing import Any

import pytest
import redis

pytest.importorskip("starlette", reason="the web extra is not installed")

from starlette.testclient import TestClient  # noqa: E402

from delayq.ops.overview import JobFilter  # noqa: E402
from delayq.store.table.listing import filtered  # noqa: E402
from delayq.store.table.model import Job, Status, utc_stamp  # noqa: E402
from delayq.web import create_app  # noqa: E402
from delayq.web.charts import HEIGHT, WIDTH, Bin, lateness_chart, throughput_chart, time_axis  # noqa: E402
from delayq.web.rendering import SUMMARY_CHARS  # noqa: E402
from delayq.web.security import CONTENT_SECURITY_POLICY  # noqa: E402
from delayq.web.throttle import FAILURES, MAX_ADDRESSES, WINDOW, LoginThrottle  # noqa: E402
from tests.support.callers import open_transaction  # noqa: E402
from tests.support.topologies import web_topology_line  # noqa: E402
from tests.support.waiting import wait_for  # noqa: E402

NOW = 1_800_000_000.0
H = "tests.sample_handlers.jobs"
TOKEN = "correct-horse-battery-staple"
HOSTILE = '<script>alert(1)</script>"onerror=alert(2) \u202eevil\x1b[31m\x07'


def test_the_test_client_has_the_http_client_it_asks_for():
    """Newer Starlettes' TestClient wants httpx2 and warns when it finds httpx alone: the
    test extra installs it (older Starlettes use httpx, and ask for nothing)."""
    shown = "import warnings; warnings.simplefilter('always'); import starlette.testclient"
    result = subprocess.run([sys.executable, "-c", shown], capture_output=True, text=True)

    assert result.returncode == 0, result.stderr
    assert "httpx2" not in result.stderr, result.stderr


def client_of(queue: Any, token: str | None = TOKEN, **kwargs: Any) -> TestClient:
    return TestClient(create_app(queue, token=token), **kwargs)


def logged_in(queue: Any) -> TestClient:
    client = client_of(queue)
    response = client.post("/login", data={"token": TOKEN}, follow_redirects=False)
    assert response.status_code == 303
    return client


def csrf_of(page: str) -> str:
    found = re.search(r'name="csrf" value="([0-9a-f]{64})"', page)
    assert found, "no CSRF token on the page"
    return found.group(1)


def failed_job(queue: Any, log: str, n: str = "1", handler: str = "fail") -> int:
    job_id = queue.add(H, handler, {"log": log, "n": n}, now=NOW)
    queue.run(now=NOW)
    return job_id


def failed_for_good(queue: Any, log: str, n: str = "1") -> int:
    """A job that failed with NoRetry: its chain ends failed, no automatic retry pending."""
    return failed_job(queue, log, n, handler="fail_for_good")


def test_the_overview_shows_each_queues_figures(queue, log):
    # The page asks at the clock's time, as an operator does: one job due, one in an hour.
    queue.add(H, "record", {"log": log}, queue="mail", delay=0)
    queue.add(H, "record", {"log": log}, queue="mail", delay=3600)
    response = client_of(queue, token=None).get("/")

    assert response.status_code == 200
    row = re.search(r'<tr data-queue="mail">(.*?)</tr>', response.text, re.S)
    assert row, response.text
    assert re.search(r'class="n due">1<', row.group(1))
    assert re.search(r'class="n later">1<', row.group(1))
    assert "read-only" in response.text


def test_the_overview_names_the_redis_topology_in_one_line(queue):
    line = web_topology_line(queue)
    fragment = client_of(queue, token=None).get("/?fragment=1").text

    # The test server has no replica: a primary alone, as `delayq doctor` says it.
    assert line == "Redis: a primary with no replica"
    assert 'id="topology"' not in fragment  # the refreshed part asks Redis for none of it


def test_the_overview_still_answers_where_redis_refuses_info(backend, make_queue):
    admin = redis.Redis.from_url(backend["redis_url"])
    # A user that may do all but INFO, as on a managed service that renames it; named for
    # this process, as the server may be shared with other test runs.
    user = f"no-info-{os.getpid()}"
    admin.acl_setuser(
        user,
        enabled=True,
        passwords=["+pw"],
        keys=["*"],
        channels=["*"],
        commands=["+@all", "-info"],
    )
    try:
        queue = make_queue(redis_url=backend["redis_url"].replace("://", f"://{user}:pw@", 1))
        line = web_topology_line(queue)
    finally:
        admin.acl_deluser(user)
        admin.close()

    assert line == "Redis: not known (INFO is refused)"


def test_every_response_carries_the_security_headers(queue):
    client = client_of(queue)
    for path in ("/", "/jobs", "/static/style.css", "/jobs/999", "/login"):
        headers = client.get(path).headers
        assert headers["content-security-policy"] == CONTENT_SECURITY_POLICY, path
        assert "unsafe-inline" not in headers["content-security-policy"]
        assert headers["x-content-type-options"] == "nosniff"
        assert headers["x-frame-options"] == "DENY"


def test_pages_have_no_inline_script_or_style(queue, log):
    job_id = failed_job(queue, log)
    client = logged_in(queue)
    for path in ("/", "/jobs", f"/jobs/{job_id}", "/login"):
        page = client.get(path).text
        assert re.findall(r"<script(?![^>]*\bsrc=)", page) == [], path
        assert " style=" not in page and "<style" not in page, path
        assert re.search(r"\son[a-z]+=", page) is None, path


def test_hostile_values_are_escaped_and_shown_visibly_everywhere(queue, log):
    job_id = queue.add(H, "fail", {"log": log, "n": HOSTILE}, ext=HOSTILE[:60], now=NOW)
    queue.run(now=NOW)
    planted = Job.create(  # a producer writing rows itself may name any class
        params=json.dumps({"class": HOSTILE, "method": HOSTILE, "data": [HOSTILE]}),
        message=HOSTILE,
        ext_string=HOSTILE,
        status=Status.FAILED,
    )
    client = client_of(queue)
    paths = ("/", "/jobs", f"/jobs/{job_id}", f"/jobs/{planted.id}")
    pages = [client.get(path).text for path in paths]
    pages.append(client.get("/jobs", params={"ext": HOSTILE[:60]}).text)
    for page in pages:
        assert "<script>alert" not in page
        assert '"onerror' not in page
        assert "\u202e" not in page and "\x1b" not in page and "\x07" not in page
    detail = pages[2]
    assert "&lt;script&gt;alert(1)&lt;/script&gt;&#34;onerror=alert(2) \\u202eevil\\x1b" in detail


def test_job_detail_shows_params_error_and_the_retry_chain(queue, log):
    first = failed_job(queue, log, n="7")
    queue.run(now=NOW + 15)  # the automatic retry fails too
    page = client_of(queue).get(f"/jobs/{first}").text

    assert "ValueError: boom 7" in page
    assert "&#34;n&#34;: &#34;7&#34;" in page  # pretty JSON, escaped
    chain = re.search(r'<table id="chain">(.*?)</table>', page, re.S)
    assert chain and len(re.findall(r"<tr class=", chain.group(1))) == 3


def test_a_long_multi_line_message_shows_collapsed_to_its_first_line(queue, log):
    job_id = failed_for_good(queue, log)
    trace = "".join(
        f'  File "x.py", line {n}, in <script>alert({n})</script>\x1b[2J\n' for n in range(1020)
    )
    message = f"ValueError: <script>bad</script>\u202e\nTraceback (most recent call last):\n{trace}"
    assert len(message) > 60_000
    Job = queue.table.model
    assert Job.update(message=message).where(Job.id == job_id).execute() == 1
    page = client_of(queue).get(f"/jobs/{job_id}").text

    shown = re.search(
        r'<details id="message"><summary><code>(.*?)</code></summary>\s*<pre>(.*?)</pre>',
        page,
        re.S,
    )
    assert shown, "the message is not collapsed"
    assert shown.group(1) == "ValueError: &lt;script&gt;bad&lt;/script&gt;\\u202e"
    assert shown.group(2).count("\n") == message.count("\n")  # every line, preformatted
    assert "&lt;script&gt;alert(1019)&lt;/script&gt;\\x1b[2J" in shown.group(2)
    assert "<script>" not in page and "\x1b" not in page and "\u202e" not in page
    # A short one-line message (a row written without a traceback) is shown as it is.
    short = failed_job(queue, log)
    assert Job.update(message="ValueError: boom").where(Job.id == short).execute() == 1
    assert "<details" not in client_of(queue).get(f"/jobs/{short}").text

    assert Job.update(message="x" * 60_000).where(Job.id == job_id).execute() == 1
    page = client_of(queue).get(f"/jobs/{job_id}").text
    assert f"<summary><code>{'x' * SUMMARY_CHARS}…</code></summary>" in page
    assert "x" * 60_000 in page


def test_an_unknown_job_is_404_and_a_bad_search_is_400_with_one_line(queue):
    client = client_of(queue)
    assert client.get("/jobs/424242").status_code == 404
    for query in (
        {"status": "exploded"},
        {"since": "forever"},
        {"queue": "no spaces allowed"},
        {"ext": "nul\x00byte"},
        {"id": "12abc"},
        {"id": "\u00b2"},
        {"before_id": "-1"},
        {"ext": "x" * 5000},
    ):
        response = client.get("/jobs", params=query, follow_redirects=False)
        assert response.status_code == 400, query
        message = re.search(r'<p class="error" id="error">(.*?)</p>', response.text, re.S)
        assert message and "\n" not in message.group(1), query


def test_unknown_jobs_and_paths_get_the_sites_own_page_with_404(queue):
    client = client_of(queue)
    for path in ("/jobs/99999", "/jobs/abc", "/nowhere", "/jobs/%3Cscript%3Ealert(1)"):
        response = client.get(path)
        assert response.status_code == 404, path
        assert response.headers["content-type"].startswith("text/html"), path
        assert 'href="/static/style.css"' in response.text, path  # the layout of every page
        assert "<h1>Not found</h1>" in response.text, path
        message = re.search(r'<p class="error" id="error">(.*?)</p>', response.text, re.S)
        assert message and "\n" not in message.group(1), path
        assert "<script>" not in response.text, path
    assert "no job with id 99999" in client.get("/jobs/99999").text
    assert "/jobs/ID" in client.get("/jobs/abc").text
    wrong_method = client.get("/logout")
    assert wrong_method.status_code == 405 and "POST" in wrong_method.headers["allow"]
    assert 'href="/static/style.css"' in wrong_method.text


def test_only_a_logged_in_visitor_is_offered_the_requeue(queue, log):
    failed_for_good(queue, log)
    search = {"handler": H, "status": "failed"}
    for visitor in (client_of(queue), client_of(queue, token=None)):
        assert 'id="requeue"' not in visitor.get("/jobs", params=search).text
    assert 'id="requeue"' in logged_in(queue).get("/jobs", params=search).text

    # A preview reached without logging in says how to, rather than showing no button.
    preview = client_of(queue).get("/requeue", params={"handler": H}).text
    hint = re.search(r'<p id="log-in-to-requeue">(.*?)</p>', preview, re.S)
    assert hint and 'href="/login"' in hint.group(1), preview
    read_only = client_of(queue, token=None).get("/requeue", params={"handler": H}).text
    assert "DELAYQ_WEB_TOKEN" in read_only and 'id="confirm-requeue"' not in read_only


def test_search_by_a_range_of_last_change_in_utc_pages_and_refuses_bad_ranges(queue, log):
    ids = [queue.add(H, "record", {"log": log, "n": str(n)}, now=NOW) for n in range(60)]
    Job = queue.table.model
    for n, job_id in enumerate(ids):  # job n last changed on 2026-11-01 at n minutes past 10
        stamp = utc_stamp(1_793_527_200.0 + 60 * n)
        assert Job.update(modified=stamp).where(Job.id == job_id).execute() == 1
    client = client_of(queue)

    page = client.get("/jobs", params={"from": "2026-11-01T10:05", "to": "2026-11-01T10:58"}).text
    shown = [int(job_id) for job_id in re.findall(r'href="/jobs/(\d+)"', page)]
    assert shown == ids[57:7:-1]  # jobs 5 to 57 match: a full page, newest first
    more = re.search(r'id="older" href="/jobs\?([^"]*)"', page)
    assert more, "no link to the next page"
    rest = client.get("/jobs?" + more.group(1).replace("&amp;", "&")).text
    assert [int(i) for i in re.findall(r'href="/jobs/(\d+)"', rest)] == ids[7:4:-1]
    whole_day = client.get("/jobs", params={"from": "2026-11-01", "to": "2026-11-02"}).text
    assert len(re.findall(r'href="/jobs/(\d+)"', whole_day)) == 50

    before = list(Job.select().order_by(Job.id).dicts())
    for query in (
        {"from": "2026-11-02", "to": "2026-11-01"},
        {"from": "2026-11-01", "to": "2026-11-01"},
        {"from": "yesterday"},
        {"to": "99999-01-01"},
        "from=2026-11-01T10%3A00%ED%A0%80",  # a lone surrogate, UTF-8 encoded
        {"to": "2026-11-01\x1b[2J"},
    ):
        response = client.get("/jobs", params=query) if isinstance(query, dict) else None
        response = response or client.get(f"/jobs?{query}")
        assert response.status_code == 400, query
        (message,) = re.findall(r'<p class="error" id="error">(.*?)</p>', response.text, re.S)
        assert "\n" not in message and "\x1b" not in response.text
    assert list(Job.select().order_by(Job.id).dicts()) == before


@pytest.mark.parametrize(
    ("statuses", "width", "index"),
    # A day of failed jobs (about 290 rows), or an hour of any status (about 60): the
    # (status, modified) ranges of the statuses present.
    [((Status.FAILED,), 86400, "job_status_modified"), ((), 3600, "job_status_modified")],
    ids=["one-status", "any-status"],
)
def test_a_time_range_search_reads_an_index_on_modified(queue, backend, statuses, width, index):
    if not backend["database_url"].startswith("mysql"):
        pytest.skip("EXPLAIN's format is MariaDB's")
    job_id = queue.add(H, "record", {"n": "0"}, now=NOW)
    Job = queue.table.model
    name = Job._meta.table_name
    columns = [field.column_name for field in Job._meta.sorted_fields if field.name != "id"]
    copied = ", ".join(
        "ELT(1 + MOD(seq, 5), 1, 2, 10, 20, 30)"
        if column == "status"
        else "(modified - INTERVAL seq MINUTE)"
        if column == "modified"
        else column
        for column in columns
    )
    # 20,000 rows over five statuses and two weeks, so the plan is the one a full table gets.
    queue.db.execute_sql(
        f"INSERT INTO {name} ({', '.join(columns)}) SELECT {copied} FROM {name}, seq_1_to_20000"
        f" WHERE id = %s",
        (job_id,),
    )
    queue.db.execute_sql(f"ANALYZE TABLE {name}").fetchall()
    day_ago = NOW - 86400
    filters = JobFilter(statuses=statuses, changed_from=day_ago - width, changed_to=day_ago)
    query = filtered(queue.table, filters.selection(NOW))
    sql, params = query.order_by(Job.id.desc()).limit(50).sql()
    cursor = queue.db.execute_sql("EXPLAIN " + sql, params)
    columns = [column[0] for column in cursor.description]
    (row,) = [dict(zip(columns, line, strict=True)) for line in cursor.fetchall()]
    assert row["type"] == "range", row
    assert row["key"] == index, row


def test_search_pages_by_id_newest_first_and_filters(queue, log):
    ids = [queue.add(H, "record", {"log": log}, ext=f"order-{n % 2}", now=NOW) for n in range(120)]
    client = client_of(queue)

    def ids_on(page: str) -> list[int]:
        return [int(found) for found in re.findall(r'<td class="n"><a href="/jobs/(\d+)"', page)]

    first = client.get("/jobs", params={"ext": "order-1"}).text
    assert ids_on(first) == sorted(ids[1::2], reverse=True)[:50]
    older = re.search(r'id="older" href="([^"]+)"', first)
    assert older
    second = client.get(older.group(1).replace("&amp;", "&")).text
    assert ids_on(second) == sorted(ids[1::2], reverse=True)[50:60]
    assert 'id="older"' not in second
    assert (
        client.get("/jobs", params={"id": ids[3]}, follow_redirects=False).headers["location"]
        == f"/jobs/{ids[3]}"
    )


def test_without_a_token_there_is_no_login_and_every_action_is_refused(queue, log):
    job_id = failed_job(queue, log)
    client = client_of(queue, token=None)
    before = queue.history(job_id)

    assert client.get("/login").status_code == 403
    assert client.post("/login", data={"token": ""}).status_code == 403
    assert client.post(f"/jobs/{job_id}/retry", data={"csrf": "x"}).status_code == 403
    assert queue.history(job_id) == before
    assert 'id="retry"' not in client.get(f"/jobs/{job_id}").text


def test_a_wrong_token_does_not_log_in(queue):
    client = client_of(queue)
    for wrong in ("", TOKEN[:-1], TOKEN + "x", "\u00e9" * 30):
        response = client.post("/login", data={"token": wrong}, follow_redirects=False)
        assert response.status_code == 403
        assert "delayq_session" not in response.cookies


def from_address(app: Any, host: str) -> TestClient:
    """A client of `app` whose requests come from `host`, as uvicorn would report it."""

    async def with_address(scope: Any, receive: Any, send: Any) -> None:
        await app(dict(scope, client=(host, 40000)), receive, send)

    return TestClient(with_address)


def test_repeated_wrong_tokens_from_one_address_are_refused_and_logged(queue, caplog):
    app = create_app(queue, token=TOKEN)
    guesser, operator = from_address(app, "203.0.113.7"), from_address(app, "198.51.100.2")
    caplog.set_level("WARNING", logger="delayq.web.actions")
    for n in range(FAILURES):
        assert guesser.post("/login", data={"token": f"guess{n}"}).status_code == 403

    for token in ("guess-again", TOKEN):  # the right token too: the guesser cannot tell
        refused = guesser.post("/login", data={"token": token}, follow_redirects=False)
        assert refused.status_code == 429
        assert 1 <= int(refused.headers["Retry-After"]) <= WINDOW
        assert "delayq_session" not in refused.cookies
        assert "guess" not in refused.text and TOKEN not in refused.text
    assert operator.post("/login", data={"token": TOKEN}, follow_redirects=False).status_code == 303

    lines = [record.getMessage() for record in caplog.records]
    failed = [line for line in lines if line.startswith("failed login from '203.0.113.7'")]
    assert len(failed) == FAILURES
    assert sum(line.startswith("login refused from '203.0.113.7'") for line in lines) == 2
    assert all("\n" not in line and "guess" not in line and TOKEN not in line for line in lines)


def test_the_throttle_forgets_failures_older_than_its_window():
    now = [1000.0]
    throttle = LoginThrottle(failures=2, window=60, clock=lambda: now[0])
    assert throttle.failed("a") == 1
    now[0] += 30
    assert throttle.failed("a") == 2
    assert throttle.retry_after("a") == 30
    assert throttle.retry_after("b") is None
    now[0] += 30  # the first failure ages out
    assert throttle.retry_after("a") is None
    assert throttle.failed("a") == 2
    throttle.succeeded("a")
    assert throttle.retry_after("a") is None and throttle.failed("a") == 1


def test_the_throttle_tracks_a_bounded_number_of_addresses():
    throttle = LoginThrottle(clock=lambda: 0.0)
    for n in range(MAX_ADDRESSES + 50):
        throttle.failed(f"10.0.{n // 256}.{n % 256}")
    assert len(throttle._failed) == MAX_ADDRESSES
    assert throttle.failed("10.0.0.0") == 1  # the oldest made room for the newest


def test_retry_needs_a_session_and_its_csrf_token(queue, log):
    job_id = failed_job(queue, log)
    client = logged_in(queue)
    csrf = csrf_of(client.get(f"/jobs/{job_id}").text)
    before = queue.history(job_id)

    anonymous = client_of(queue)
    assert anonymous.post(f"/jobs/{job_id}/retry", data={"csrf": csrf}).status_code == 403
    assert client.post(f"/jobs/{job_id}/retry", data={"other": "1"}).status_code == 403
    assert client.post(f"/jobs/{job_id}/retry", data={"csrf": "0" * 64}).status_code == 403
    assert client.post(f"/jobs/{job_id}/retry", data={"csrf": "\u00e9"}).status_code == 403
    forged = client_of(queue, cookies={"delayq_session": "abc.def"})
    assert forged.post(f"/jobs/{job_id}/retry", data={"csrf": csrf}).status_code == 403
    assert queue.history(job_id) == before  # nothing written by any of them


def test_retry_adds_the_new_attempt_and_shows_it(queue, log):
    job_id = failed_for_good(queue, log)
    client = logged_in(queue)
    before = len(queue.history(job_id))
    csrf = csrf_of(client.get(f"/jobs/{job_id}").text)

    response = client.post(f"/jobs/{job_id}/retry", data={"csrf": csrf}, follow_redirects=False)
    assert response.status_code == 303
    chain = queue.history(job_id)
    assert len(chain) == before + 1
    assert chain[-1]["status"] == "pending"
    assert response.headers["location"] == f"/jobs/{chain[-1]['id']}"
    page = client.get(response.headers["location"]).text
    assert 'id="status" class="pending"' in page


def test_cancel_cancels_a_pending_job(queue, log):
    job_id = queue.add(H, "record", {"log": log}, delay=60, now=NOW)
    client = logged_in(queue)
    page = client.get(f"/jobs/{job_id}").text
    assert 'data-confirm="Cancel job' in page  # the browser asks before it posts

    client.post(f"/jobs/{job_id}/cancel", data={"csrf": csrf_of(page)})
    assert queue.show(job_id)["status"] == "cancelled"
    assert queue.index.schedule.size("default") == 0


def test_requeue_previews_then_retries_the_failed_jobs_of_a_search(queue, log):
    failing = [failed_for_good(queue, log, n=str(n)) for n in range(3)]
    other = queue.add(H, "fail_for_good", {"log": log}, ext="other", now=NOW)
    queue.run(now=NOW)
    client = logged_in(queue)

    preview = client.get("/requeue", params={"handler": H, "queue": "default"}).text
    assert re.search(r'id="would-requeue">4 failed chains', preview)
    narrowed = client.get("/requeue", params={"ext": "other"}).text
    assert re.search(r'id="would-requeue">1 failed chains', narrowed)
    assert client.get("/requeue").status_code == 400  # a bulk write needs a narrower search
    data = {"csrf": csrf_of(narrowed), "ext": "other"}
    done = client.post("/requeue", data=data).text
    assert 'id="requeued">Requeued 1 chains' in done
    assert queue.history(other)[-1]["status"] == "pending"
    assert all(queue.history(job_id)[-1]["status"] == "failed" for job_id in failing)


class HiddenFields(HTMLParser):
    """The name and value of every hidden input, as a browser would read them back."""

    def __init__(self) -> None:
        super().__init__()
        self.fields: dict[str, str] = {}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if tag == "input" and found.get("type") == "hidden":
            self.fields[found["name"] or ""] = found["value"] or ""


def test_requeue_confirmation_carries_a_hostile_search_back_unchanged(queue, log):
    ext = 'x"><script>alert(1)</script><input name="ext" value="'
    job_id = queue.add(H, "fail_for_good", {"log": log}, ext=ext, now=NOW)
    queue.run(now=NOW)
    client = logged_in(queue)

    preview = client.get("/requeue", params={"ext": ext, "handler": H}).text
    assert "<script>" not in preview
    assert 'value="x&#34;&gt;&lt;script&gt;alert(1)&lt;/script&gt;' in preview
    parser = HiddenFields()
    parser.feed(preview)
    assert parser.fields.keys() == {"csrf", "ext", "handler"}  # no field injected
    assert parser.fields["ext"] == ext
    assert parser.fields["handler"] == H
    assert queue.history(job_id)[-1]["status"] == "failed"  # the preview wrote nothing

    done = client.post("/requeue", data=parser.fields).text
    assert 'id="requeued">Requeued 1 chains' in done
    assert queue.history(job_id)[-1]["status"] == "pending"


def test_a_hostile_form_post_is_refused_and_writes_nothing(queue, log):
    job_id = failed_job(queue, log)
    client = logged_in(queue)
    csrf = csrf_of(client.get(f"/jobs/{job_id}").text)
    url = f"/jobs/{job_id}/retry"
    form = {"content-type": "application/x-www-form-urlencoded"}

    assert client.post(url, content=b"csrf=" + b"a" * 70_000, headers=form).status_code == 400
    assert client.post(url, content=b"csrf=\xff\xfe", headers=form).status_code == 400
    assert client.post(url, content=f"csrf={csrf}&csrf=1", headers=form).status_code == 400
    many = "&".join(f"f{n}=1" for n in range(50)) + f"&csrf={csrf}"
    assert client.post(url, content=many, headers=form).status_code == 400
    assert client.post(url, json={"csrf": csrf}).status_code == 400
    assert len(queue.history(job_id)) == 2  # the failure and its automatic retry


def test_no_secret_reaches_a_page(queue, log):
    failed_job(queue, log)
    # Only the header names the servers; these URLs are shown, never connected to.
    queue.settings = dataclasses.replace(
        queue.settings,
        database_url="mysql://shop:db-pass-1234@db.internal/shop?password=q-pass-5678",
        redis_url="redis://:redis-pass-9012@cache.internal:6379/0",
    )
    client = logged_in(queue)
    page = client.get("/").text
    assert "mysql://shop:***@db.internal/shop?password=***" in page
    for secret in ("db-pass-1234", "q-pass-5678", "redis-pass-9012"):
        assert all(secret not in client.get(path).text for path in ("/", "/jobs/1")), secret
    for path in ("/", "/jobs", "/jobs/1", "/login", "/requeue?ext=x"):
        assert TOKEN not in client.get(path).text, path
    assert TOKEN not in repr(queue.settings.with_overrides(web_token=TOKEN))


def test_links_and_the_cookie_follow_the_root_path_of_a_reverse_proxy(queue, log):
    job_id = failed_job(queue, log)
    client = client_of(queue, root_path="/ops/delayq")
    response = client.post("/login", data={"token": TOKEN}, follow_redirects=False)
    assert response.headers["location"] == "/ops/delayq/"
    assert "Path=/ops/delayq/" in response.headers["set-cookie"]
    assert "HttpOnly" in response.headers["set-cookie"]
    # The test client asks for /jobs/..., not /ops/delayq/jobs/... as a proxied browser does.
    client.cookies.set("delayq_session", response.cookies["delayq_session"])
    assert "SameSite=strict" in response.headers["set-cookie"].replace("Strict", "strict")
    page = client.get(f"/jobs/{job_id}").text
    assert 'href="/ops/delayq/static/style.css"' in page
    assert f'action="/ops/delayq/jobs/{job_id}/retry"' in page


def test_a_fragment_is_the_live_part_alone(queue, log):
    job_id = failed_job(queue, log)
    client = client_of(queue)
    for path in ("/?fragment=1", f"/jobs/{job_id}?fragment=1"):
        fragment = client.get(path).text
        assert "<html" not in fragment and "<table" in fragment, path


def test_the_charts_draw_what_the_last_runs_did_from_the_per_minute_aggregates(queue, log):
    # One minute's bin holds the whole run: it does not start in a minute's last seconds.
    wait_for(lambda: time.time() % 60 < 45, 20, "a minute with time left in it")
    for n in range(3):
        queue.add(H, "record", {"log": log, "n": n}, queue="mail", delay=0)
    queue.add(H, "fail_for_good", {"log": log}, queue="mail", delay=0)
    queue.run()  # at the clock's time: the aggregates count this minute
    client = client_of(queue)

    for window, bins in (("hour", 60), ("day", 48)):
        page = client.get("/", params={"window": window}).text
        throughput = re.search(r'<figure id="throughput">(.*?)</figure>', page, re.S)
        assert throughput, page
        shown = throughput.group(1)
        columns = re.findall(r'<g class="column"><title>([^<]*)</title>(.*?)</g>', shown, re.S)
        assert len(columns) == bins, window
        busy = [(label, parts) for label, parts in columns if " 0 finished" not in label]
        assert len(busy) == 1 and busy[0][0].endswith(" UTC: 4 finished, 3 succeeded, 1 failed")
        # Stacked: failures drawn on top of successes, a quarter of the column's height.
        heights = dict(
            re.findall(r'<rect class="(succeeded|failed)" [^>]*height="([0-9.]+)"', busy[0][1])
        )
        assert float(heights["failed"]) * 3 == pytest.approx(float(heights["succeeded"]), abs=0.2)
        legend = re.search(r"<figcaption>(.*?)</figcaption>", throughput.group(1), re.S)
        assert legend and re.search(r'class="key succeeded">succeeded<', legend.group(1))
        assert re.search(r'class="key failed">failed<', legend.group(1)), legend.group(1)
        # A time axis under both charts: round times of day, UTC, as the tooltips say.
        for figure in ("throughput", "lateness"):
            chart = re.search(rf'<figure id="{figure}">(.*?)</figure>', page, re.S)
            assert chart and len(re.findall(r"<text [^>]*>\d\d:\d0</text>", chart.group(1))) >= 4
        assert re.search(r'<polyline class="p99" points="[0-9.]+,[0-9.]+"', page), window
        row = re.search(r'<tr data-queue="mail">(.*?)</tr>', page, re.S)
        assert row and re.search(r'class="n p99">[0-9.]+(ms|s|m|h)<', row.group(1)), window
    assert client.get("/", params={"window": "week"}).status_code == 400


def test_the_time_axis_marks_round_times_where_they_fall_in_the_window():
    # An hour of minute bins from 08:03 UTC: ticks every 10 minutes, 08:10 at the 7th minute.
    start = 1_800_000_000.0 // 3600 * 3600 + 3 * 60
    hour = [Bin(start + 60 * n, 0, 0, None, None) for n in range(60)]
    day = [Bin(start + 1800 * n, 0, 0, None, None) for n in range(48)]

    ticks = time_axis(hour, "hour")
    assert [tick.label for tick in ticks] == ["08:10", "08:20", "08:30", "08:40", "08:50", "09:00"]
    assert [tick.x for tick in ticks] == [70.0, 170.0, 270.0, 370.0, 470.0, 570.0]
    labels = [tick.label for tick in time_axis(day, "day")]
    assert labels == ["09:00", "12:00", "15:00", "18:00", "21:00", "00:00", "03:00", "06:00"]
    assert all(0 <= tick.x <= WIDTH for tick in time_axis(day, "day"))
    assert time_axis([], "hour") == []


def test_throughput_stacks_failures_on_successes():
    chart = throughput_chart([Bin(0.0, 4, 1, None, None), Bin(60.0, 2, 2, None, None)])

    first, second = ({part.kind: part for part in column.parts} for column in chart.columns)
    assert chart.top == 4.0
    assert (first["succeeded"].height, first["failed"].height) == (90.0, 30.0)
    assert first["failed"].y + first["failed"].height == first["succeeded"].y  # on top
    assert (second["succeeded"].height, second["failed"].height) == (0.0, 60.0)
    assert second["failed"].y == HEIGHT - 60.0


def test_a_lateness_line_at_the_top_of_its_chart_is_drawn_at_zero_not_minus_zero():
    # 120 - 120 * v / v is -1.4e-14 for v = 0.0007 s: formatted, that was "-0.0".
    chart = lateness_chart([Bin(0.0, 1, 0, 0.0007, 0.0007)])

    for name, points in chart.lines.items():
        x, y = points.split(",")
        assert y == "0.0" and float(x) > 0, name
    assert HEIGHT - HEIGHT * 0.0007 / 0.0007 < 0


def test_without_aggregates_the_overview_says_so(queue):
    page = client_of(queue).get("/").text

    assert 'id="no-aggregates"' in page
    assert '<rect class="bar"' not in page


def test_the_overviews_index_only_figures_match_status(queue, log):
    from delayq.ops.overview import LIVE_STATUSES, status_report

    for name in ("default", "mail"):
        queue.add(H, "record", {"log": log}, queue=name, delay=0)
        queue.add(H, "record", {"log": log}, queue=name, delay=600)
        queue.add(H, "fail_for_good", {"log": log}, queue=name, delay=0)
    queue.add(H, "record", {"log": log}, queue="mail", delay=0)
    queue.run(limit=4)
    now = queue.index.clock.now()
    full = queue.status(now=now)

    live = status_report(queue.table, queue.index, now, LIVE_STATUSES)
    fields = ("pending", "pending_due", "running", "failed", "failed_last_hour", "failed_retried")
    for name, stats in full.queues.items():
        for field in (*fields, "oldest_due_id", "next_due_at", "scheduled"):
            assert getattr(live.queues[name], field) == getattr(stats, field), (name, field)
    assert sum(stats.failed_last_hour for stats in live.queues.values()) >= 1
    assert sum(stats.pending_due for stats in live.queues.values()) >= 1


def upcoming_rows(page: str) -> dict[int, str]:
    """{job id: its row's HTML} of the overview's "Up next" table."""
    table = re.search(r'<table id="upcoming">(.*?)</table>', page, re.S)
    assert table, page
    return {
        int(job_id): row
        for job_id, row in re.findall(r'<tr data-job="(\d+)">(.*?)</tr>', table.group(1), re.S)
    }


def test_up_next_names_each_handler_and_says_how_late_an_overdue_job_is(queue, log):
    now = time.time()
    overdue = queue.add(H, "record", {"log": log}, queue="mail", delay=0, now=now - 600)
    later = queue.add(H, "fail", {"log": log}, queue="mail", delay=3600)
    broken = queue.add(H, "record", {"log": log}, queue="mail", delay=1800)
    Job.update(params="not json").where(Job.id == broken).execute()

    rows = upcoming_rows(client_of(queue).get("/").text)

    assert set(rows) == {overdue, later, broken}
    assert re.search(r'class="handler">tests\.sample_handlers\.jobs\.record<', rows[overdue])
    assert re.search(r'class="handler">tests\.sample_handlers\.jobs\.fail<', rows[later])
    assert re.search(r'class="handler">\(unreadable\)<', rows[broken])
    # 600 s before the page asked, plus the moments the test took: "late by 10.0m" or so.
    assert re.search(r'class="late">late by 10\.[0-9]m<', rows[overdue]), rows[overdue]
    assert 'class="late"' not in rows[later] + rows[broken]


def test_up_next_shows_a_job_added_in_a_caller_transaction_as_not_yet_indexed(backend, queue, log):
    indexed = queue.add(H, "record", {"log": log}, delay=300)
    transaction = open_transaction("dbapi", backend["database_url"])
    try:
        waiting = queue.add(H, "record", {"log": log}, delay=60, using=transaction.using)
        transaction.commit()
    finally:
        transaction.close()

    rows = upcoming_rows(client_of(queue).get("/").text)

    assert set(rows) == {indexed, waiting}
    assert 'class="unindexed">(not yet indexed)<' in rows[waiting]
    assert "not yet indexed" not in rows[indexed]


def test_the_overview_splits_failures_into_retried_and_failed_for_good_as_status_does(queue, log):
    failed_job(queue, log, n="1")  # given a retry: its chain goes on
    failed_job(queue, log, n="2")
    failed_for_good(queue, log, n="3")  # NoRetry: its chain ends here
    stats = queue.status().queues["default"]

    page = client_of(queue).get("/").text

    row = re.search(r'<tr data-queue="default">(.*?)</tr>', page, re.S)
    assert row, page
    assert (stats.failed_retried, stats.failed_terminal) == (2, 1)
    assert re.search(r'class="n failed-retried">2<', row.group(1)), row.group(1)
    assert re.search(r'class="n failed-terminal">1<', row.group(1)), row.group(1)
    assert re.search(r"<th[^>]*>Failed for good</th>", page)
    assert not re.search(r"<th[^>]*>Failed</th>", page)  # no total that mixes the two
