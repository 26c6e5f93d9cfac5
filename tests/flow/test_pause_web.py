"""Pausing and resuming from the web page: the overview shows which queues are paused and
since when; a logged-in visitor's button, with the session's CSRF token, pauses and resumes
through the same Queue call as the command line; no one else can."""

from __future__ import annotations

import re

import pytest

import delayq

pytest.importorskip("starlette")

from tests.web.test_web import client_of, csrf_of, logged_in  # noqa: E402

H = "tests.sample_handlers.jobs"


def row_of(page: str, name: str) -> str:
    found = re.search(rf'<tr data-queue="{name}">(.*?)</tr>', page, re.S)
    assert found, page
    return found.group(1)


def test_a_logged_in_visitor_pauses_and_resumes_a_queue_from_the_overview(
    queue: delayq.Queue, log: str
) -> None:
    queue.add(H, "record", {"log": log}, queue="mail", delay=0)
    client = logged_in(queue)
    page = client.get("/").text
    assert 'action="/queues/mail/pause"' in row_of(page, "mail")

    paused = client.post("/queues/mail/pause", data={"csrf": csrf_of(page)}, follow_redirects=False)

    assert paused.status_code == 303 and list(queue.paused()) == ["mail"]
    page = client.get("/").text
    assert "paused since" in row_of(page, "mail")
    assert 'action="/queues/mail/resume"' in row_of(page, "mail")
    assert '<span class="paused">(paused)</span>' in page  # its job, up next
    client.post("/queues/mail/resume", data={"csrf": csrf_of(page)})
    assert queue.paused() == {}
    assert "paused since" not in row_of(client.get("/").text, "mail")


def test_pausing_needs_a_session_and_its_csrf_token(queue: delayq.Queue, log: str) -> None:
    queue.add(H, "record", {"log": log}, queue="mail", delay=0)
    client = logged_in(queue)
    csrf = csrf_of(client.get("/").text)
    anonymous = client_of(queue)
    assert anonymous.post("/queues/mail/pause", data={"csrf": csrf}).status_code == 403
    assert client.post("/queues/mail/pause", data={"csrf": "0" * 64}).status_code == 403
    assert client_of(queue, token=None).post("/queues/mail/pause").status_code == 403
    assert 'action="/queues/mail/pause"' not in client_of(queue, token=None).get("/").text
    assert queue.paused() == {}


def test_a_bad_queue_name_in_the_path_is_400_and_pauses_nothing(
    queue: delayq.Queue, log: str
) -> None:
    queue.add(H, "record", {"log": log}, queue="mail", delay=0)
    client = logged_in(queue)
    csrf = csrf_of(client.get("/").text)
    assert client.post("/queues/bad%20name/pause", data={"csrf": csrf}).status_code == 400
    assert queue.paused() == {}
