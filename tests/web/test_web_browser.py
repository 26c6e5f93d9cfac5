"""`delayq web` as an operator meets it: the real console script serving on a port, refusing
bad options with one line, and headless Chromium (Debian's `chromium` and `chromium-driver`,
driven by selenium) going through overview → failed job → log in → retry → the new attempt.

Without a browser the browser test skips, except under CI=true, where it fails: CI must
prove the page works in one. Screenshots go to tests/screenshots/ (not committed).
"""

from __future__ import annotations

import importlib.util
import itertools
import shutil
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from delayq.store.table.model import Job, Status
from tests.conftest import IN_CI, ROOT
from tests.faults.test_processes import start
from tests.support.invoke import invoke
from tests.support.servers import free_port
from tests.support.waiting import wait_for

H = "tests.sample_handlers.jobs"
TOKEN = "correct-horse-battery-staple"
SCREENSHOTS = ROOT / "tests" / "screenshots"  # git ignores it there
CHROMIUM = ("chromium", "chromium-browser")
CHROMEDRIVER = "chromedriver"


def answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, ConnectionError):
        return False


def serve(cli_env: dict[str, str], **extra: str) -> str:
    """`delayq web` started on a free port; its base URL once it answers."""
    port = free_port()
    start(cli_env, "web", "--port", str(port), **extra)
    url = f"http://127.0.0.1:{port}"
    wait_for(lambda: answers(url + "/"), 30, "delayq web to answer")
    return url


@pytest.mark.parametrize(
    ("args", "wrong"),
    [
        (["--host", "0.0.0.0;rm -rf /"], "--host"),
        (["--host", "\u202eevil"], "--host"),
        (["--root-path", "no-slash"], "--root-path"),
        (["--root-path", "/a\x1bb"], "--root-path"),
        (["--port", "0"], "--port"),
        (["--port", "99999"], "--port"),
    ],
)
def test_bad_options_are_one_line_and_exit_2(cli_env, args, wrong):
    result = invoke(cli_env, "web", *args)

    assert result.exit_code == 2
    assert result.stdout == ""
    assert len(result.stderr.splitlines()) == 1 and wrong in result.stderr


def test_a_short_token_is_refused_before_serving(cli_env):
    result = invoke({**cli_env, "DELAYQ_WEB_TOKEN": "short"}, "web")

    assert result.exit_code == 2
    assert result.stderr.strip() == "delayq: error: DELAYQ_WEB_TOKEN must be at least 16 characters"


@pytest.mark.parametrize(("token", "mode"), [(None, "read-only"), (TOKEN, "actions enabled")])
def test_it_says_where_it_listens_and_whether_actions_are_on(queue, cli_env, token, mode):
    port = free_port()
    extra = {"DELAYQ_WEB_TOKEN": token} if token else {}
    process = start(cli_env, "web", "--port", str(port), **extra)
    wait_for(lambda: answers(f"http://127.0.0.1:{port}/"), 30, "delayq web to answer")

    process.terminate()  # what it printed is all it will: it prints before it serves
    line = process.communicate(timeout=30)[0].decode()
    assert line.startswith(f"delayq web: listening on http://127.0.0.1:{port}/ ({mode}"), line
    assert "DELAYQ_WEB_TOKEN" in line and TOKEN not in line


def test_a_port_in_use_is_one_line_and_exit_1(cli_env):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        result = invoke(cli_env, "web", "--port", str(taken.getsockname()[1]))

    assert result.exit_code == 1
    assert result.stdout == ""
    assert len(result.stderr.splitlines()) == 1 and "cannot listen" in result.stderr


def test_the_console_script_serves_the_page_on_loopback(queue, cli_env, log):
    queue.add(H, "record", {"log": log}, queue="mail", delay=3600)
    url = serve(cli_env)

    with urllib.request.urlopen(url + "/") as response:
        page = response.read().decode()
        assert "default-src 'none'" in response.headers["content-security-policy"]
    assert '<tr data-queue="mail">' in page
    assert "read-only" in page  # no DELAYQ_WEB_TOKEN: no login
    with urllib.request.urlopen(url + "/static/refresh.js") as response:
        assert "data-refresh" in response.read().decode()


def test_behind_a_proxy_links_carry_the_root_path_and_forwarded_https_secures_the_cookie(
    queue, cli_env
):
    url = serve(cli_env, DELAYQ_WEB_TOKEN=TOKEN)  # --root-path below: a second server
    port = free_port()
    start(cli_env, "web", "--port", str(port), "--root-path", "/ops/", DELAYQ_WEB_TOKEN=TOKEN)
    proxied = f"http://127.0.0.1:{port}"
    wait_for(lambda: answers(proxied + "/"), 30, "delayq web --root-path to answer")

    with urllib.request.urlopen(proxied + "/") as response:
        assert 'href="/ops/static/style.css"' in response.read().decode()
    login = urllib.request.Request(
        proxied + "/login",
        data=f"token={TOKEN}".encode(),
        headers={"X-Forwarded-Proto": "https"},  # from 127.0.0.1: a trusted proxy
    )
    cookie = _session_cookie(login)
    assert "Path=/ops/" in cookie and "Secure" in cookie
    plain = _session_cookie(urllib.request.Request(url + "/login", data=f"token={TOKEN}".encode()))
    assert "Secure" not in plain


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any) -> None:
        return None


def _session_cookie(request: urllib.request.Request) -> str:
    try:
        urllib.request.build_opener(_NoRedirect).open(request)
    except urllib.error.HTTPError as answer:
        assert answer.code == 303
        return str(answer.headers["set-cookie"])
    raise AssertionError("the login did not redirect")


@pytest.fixture
def browser() -> Iterator[Any]:
    """Headless Chromium from the system's packages, or a skip (a failure under CI=true)."""
    binary = next(filter(None, map(shutil.which, CHROMIUM)), None)
    driver_path = shutil.which(CHROMEDRIVER)
    if binary is None or driver_path is None or importlib.util.find_spec("selenium") is None:
        missing = "chromium, chromium-driver and selenium (bin/test installs them)"
        if IN_CI:
            pytest.fail(f"CI must run the browser test: install {missing}")
        pytest.skip(f"no browser: install {missing}")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage"):
        options.add_argument(argument)  # no sandbox: CI runs as root, where Chromium needs it
    options.add_argument("--window-size=1280,800")
    driver = webdriver.Chrome(service=Service(executable_path=driver_path), options=options)
    driver.implicitly_wait(0)
    SCREENSHOTS.mkdir(exist_ok=True)
    yield driver
    driver.quit()


def test_an_operator_retries_a_failed_job_in_a_real_browser(queue, cli_env, log, browser, request):
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.common.by import By

    failed = queue.add(H, "fail_for_good", {"log": log, "n": "browser"}, queue="billing")
    queue.run()
    queue.add(H, "record", {"log": log}, queue="billing", delay=3600)
    url = serve(cli_env, DELAYQ_WEB_TOKEN=TOKEN)
    shot = request.node.name.replace("[", "-").rstrip("]")

    # The page swaps its live part every few seconds (static/refresh.js): an element found a
    # moment ago may be gone, so each look and click is tried again until it holds.
    def text_of(selector: str) -> str | None:
        try:
            return str(browser.find_element(By.CSS_SELECTOR, selector).text)
        except WebDriverException:
            return None

    def shows(selector: str, text: str) -> bool:
        return text in (text_of(selector) or "")

    def clicked(by: str, value: str) -> bool:
        try:
            browser.find_element(by, value).click()
        except WebDriverException:
            return False
        return True

    def click(by: str, value: str) -> None:
        wait_for(lambda: clicked(by, value), 20, f"{value} to be clickable")

    browser.get(url + "/")
    wait_for(lambda: shows('tr[data-queue="billing"]', "billing"), 20, "the overview")
    failed_figure = 'tr[data-queue="billing"] .failed-hour'
    wait_for(lambda: text_of(failed_figure) == "1", 20, "1 failed in the last hour")
    wait_for(lambda: text_of('tr[data-queue="billing"] .later') == "1", 20, "1 due later")
    browser.save_screenshot(str(SCREENSHOTS / f"{shot}-overview.png"))

    click(By.CSS_SELECTOR, 'tr[data-queue="billing"] .failed-hour a')
    wait_for(lambda: shows("#results", str(failed)), 20, "the failed jobs of the queue")
    click(By.LINK_TEXT, str(failed))
    wait_for(lambda: shows("#message", "NoRetry"), 20, "the job's error")
    assert not browser.find_elements(By.ID, "retry")  # not logged in: no actions

    click(By.ID, "login")
    wait_for(lambda: bool(browser.find_elements(By.ID, "token")), 20, "the login form")
    browser.find_element(By.ID, "token").send_keys(TOKEN)
    click(By.ID, "submit-login")
    wait_for(lambda: bool(browser.find_elements(By.ID, "logout")), 20, "being logged in")

    browser.get(f"{url}/jobs/{failed}")
    wait_for(lambda: bool(browser.find_elements(By.ID, "retry")), 20, "the retry button")
    click(By.ID, "retry")
    wait_for(lambda: shows("#status", "pending"), 20, "the new attempt's page")
    browser.save_screenshot(str(SCREENSHOTS / f"{shot}-retried.png"))

    attempts = list(Job.select().where(Job.chain_id == failed))
    assert [(row.status, row.retry_times) for row in attempts] == [(Status.PENDING, 1)]
    assert browser.current_url == f"{url}/jobs/{attempts[0].id}"
    wait_for(lambda: shows("#chain .current", str(attempts[0].id)), 20, "the chain's new row")


def test_the_overview_refreshes_itself_and_cancel_asks_first(queue, cli_env, log, browser):
    from selenium.common.exceptions import NoAlertPresentException, WebDriverException
    from selenium.webdriver.common.by import By

    job_id = queue.add(H, "record", {"log": log}, queue="mail", delay=3600)
    url = serve(cli_env, DELAYQ_WEB_TOKEN=TOKEN)

    def text_of(selector: str) -> str | None:
        try:
            return str(browser.find_element(By.CSS_SELECTOR, selector).text)
        except WebDriverException:
            return None

    browser.get(url + "/")
    wait_for(lambda: text_of('tr[data-queue="mail"] .later') == "1", 20, "1 job later")
    marker = browser.execute_script("return window.performance.timeOrigin")
    queue.add(H, "record", {"log": log}, queue="mail", delay=7200)
    wait_for(lambda: text_of('tr[data-queue="mail"] .later') == "2", 30, "the page to refresh")
    assert browser.execute_script("return window.performance.timeOrigin") == marker  # no reload

    browser.get(url + "/login")
    browser.find_element(By.ID, "token").send_keys(TOKEN)
    browser.find_element(By.ID, "submit-login").click()
    wait_for(lambda: bool(browser.find_elements(By.ID, "logout")), 20, "being logged in")
    browser.get(f"{url}/jobs/{job_id}")

    def answer_cancel(accept: bool) -> bool:
        try:
            browser.find_element(By.ID, "cancel").click()
            alert = browser.switch_to.alert
        except (NoAlertPresentException, WebDriverException):
            return False
        assert alert.text == f"Cancel job {job_id}?"
        alert.accept() if accept else alert.dismiss()
        return True

    wait_for(lambda: answer_cancel(accept=False), 20, "the confirmation, dismissed")
    assert queue.show(job_id)["status"] == "pending"
    wait_for(lambda: answer_cancel(accept=True), 20, "the confirmation, accepted")
    wait_for(lambda: text_of("#status") == "cancelled", 20, "the cancelled job's page")
    assert queue.show(job_id)["status"] == "cancelled"


# Measured in the page in one script, so that a refresh of the live part cannot come between.
MEASURE_CHART = """
const figure = document.getElementById("throughput");
if (!figure) return null;
const box = (el) => { const r = el.getBoundingClientRect();
  return {left: r.left, right: r.right, top: r.top, bottom: r.bottom, height: r.height}; };
const colour = (el, pseudo, property) => getComputedStyle(el, pseudo)[property];
return {
  figure: box(figure),
  svg: box(figure.querySelector("svg")),
  ticks: [...figure.querySelectorAll("g.axis text")].map((t) => ({text: t.textContent, ...box(t)})),
  failed: [...figure.querySelectorAll("rect.failed")].map((r) => box(r).height),
  succeeded: [...figure.querySelectorAll("rect.succeeded")].map((r) => box(r).height),
  keys: Object.fromEntries([...figure.querySelectorAll(".key")].map((k) =>
    [k.textContent, colour(k, "::before", "backgroundColor")])),
  late: [...document.querySelectorAll("#upcoming .late")].map((span) => span.innerText),
  fills: Object.fromEntries(["succeeded", "failed"].map((kind) => {
    const rect = figure.querySelector(`rect.${kind}`);
    return [kind, rect && colour(rect, null, "fill")];
  })),
};
"""


def test_the_throughput_chart_has_a_time_axis_and_a_legend_in_a_real_browser(
    queue, cli_env, log, browser, request
):
    for n in range(3):
        queue.add(H, "record", {"log": log, "n": n}, queue="mail")
    queue.add(H, "fail_for_good", {"log": log}, queue="mail")
    queue.run()
    # And for "Up next" in the screenshot: a job 10 minutes late, one due in an hour.
    queue.add(H, "record", {"log": log}, queue="mail", delay=0, now=time.time() - 600)
    queue.add(H, "fail", {"log": log}, queue="mail", delay=3600)
    url = serve(cli_env)
    shot = request.node.name.replace("[", "-").rstrip("]")

    browser.get(url + "/")
    wait_for(lambda: browser.execute_script(MEASURE_CHART) is not None, 20, "the chart")
    chart = browser.execute_script(MEASURE_CHART)
    browser.save_screenshot(str(SCREENSHOTS / f"{shot}-overview.png"))

    # A time axis: round times of day, each readable and inside the chart, none overlapping.
    ticks = chart["ticks"]
    assert len(ticks) == 6 and all(len(tick["text"]) == 5 for tick in ticks), ticks
    for tick in ticks:
        assert tick["height"] >= 9, tick  # not squeezed into illegibility
        assert chart["figure"]["left"] <= tick["left"] and tick["right"] <= chart["figure"]["right"]
        assert chart["svg"]["top"] <= tick["top"] and tick["bottom"] <= chart["svg"]["bottom"]
    for left, right in itertools.pairwise(ticks):
        assert left["right"] < right["left"], (left, right)
    # Failures drawn, in the colour the legend gives them, apart from the successes'.
    assert max(chart["failed"]) > 5 and max(chart["succeeded"]) > 5, chart
    assert chart["keys"]["failed"] == chart["fills"]["failed"]
    assert chart["keys"]["succeeded"] == chart["fills"]["succeeded"]
    assert chart["fills"]["failed"] != chart["fills"]["succeeded"]
    assert [text[: len("late by 10.")] for text in chart["late"]] == ["late by 10."], chart
