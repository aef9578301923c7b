"""The operator verbs from the dashboard (docs/operations.md), in a real headless browser.

Goal: an operator grows a topic and resets a consumer group's position through their
confirmation pages: the first says from how many queues to how many, the second shows every
queue's old and new offset before anything moves; after the confirmation the topic has the new
queues and a live official-client consumer receives the group's messages again; a shrink is
refused with the broker's reason and changes nothing.
Method: a broker subprocess, ``txmq dashboard`` as a subprocess, the unmodified official client,
and Debian's Chromium driven by Playwright (conftest.py). Screenshots of the confirmations.
"""

from __future__ import annotations

import time
from typing import Any

from tests.dashboard.test_browser import shot
from tests.integration import clients
from txmq.client.admin import call


def test_grow_a_topic_and_rewind_a_group_from_the_page(live: Any, browser: Any) -> None:
    broker, dash = live
    ep = broker.endpoints
    call(ep, "TopicCreate", {"name": "wide", "queues": 2, "type": "normal"})
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto(dash.url + "/topics")
    row = page.locator("tr[data-topic=wide]")
    row.locator("input[name=queues]").fill("4")
    row.locator("form.grow button").click()
    assert "Grow topic wide from 2 to 4 queues?" in page.inner_text("h1")
    shot(page, "confirm-grow")
    page.click("#confirm-button")
    assert "The topic grew" in page.inner_text("[role=status]")
    assert call(ep, "TopicDescribe", {"name": "wide"})["queues"][-1]["queue"] == 3
    shrink = page.request.post(
        dash.url + "/topics/update", form={"name": "wide", "queues": "1"},
        headers={"Origin": dash.url},
    )  # fmt: skip
    assert shrink.status == 400 and "only grows" in shrink.text()
    assert len(call(ep, "TopicDescribe", {"name": "wide"})["queues"]) == 4

    producer = clients.producer(ep, ("wide",))
    for i in range(6):
        producer.send(clients.message("wide", f"w{i}".encode()))
    producer.shutdown()
    reader = clients.consumer(ep, "readers", "wide")
    try:
        assert len(clients.drain(reader, 6, 30)) == 6
        page.goto(dash.url + "/groups/readers")
        page.select_option("#reset-group select[name=topic]", "wide")
        page.fill("#reset-group input[name=to]", "earliest")
        page.click("#reset-group button")
        assert "Reset group readers on wide to earliest?" in page.inner_text("h1")
        plan = page.inner_text("#plan")
        assert plan.count("txmq") == 4, plan  # every queue of the one broker, old and new
        shot(page, "confirm-reset")
        page.click("#confirm-button")
        assert "position moved" in page.inner_text("[role=status]")
        again = clients.drain(reader, 6, 30)  # the same consumer, never restarted
        assert sorted(m.body for m in again) == [f"w{i}".encode() for i in range(6)]
    finally:
        reader.shutdown()


def test_redrive_a_dead_letter_from_the_page(live: Any, browser: Any) -> None:
    broker, dash = live
    ep = broker.endpoints
    call(ep, "TopicCreate", {"name": "jobs", "queues": 1, "type": "normal"})
    producer = clients.producer(ep, ("jobs",))
    producer.send(clients.message("jobs", b"poison", keys="bad-1"))
    producer.shutdown()
    worker = clients.consumer(ep, "workers", "jobs")
    try:
        deadline = time.monotonic() + 60
        while call(ep, "GroupDetail", {"group": "workers"})["dlq_size"] < 1:
            assert time.monotonic() < deadline, "the poison never died"
            worker.receive(1, 1)  # received, never acked: 3 attempts (FAST), then the DLQ
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.goto(dash.url + "/groups/workers")
        page.click("#redrive-group button")
        assert "Send 1 dead letters of group workers back?" in page.inner_text("h1")
        assert "bad-1" in page.inner_text("#letters")
        shot(page, "confirm-redrive")
        page.click("#confirm-button")
        assert "went back to their topics" in page.inner_text("[role=status]")
        got = clients.drain(worker, 1, 30)  # the same consumer, now acking
        assert [m.body for m in got] == [b"poison"] and got[0].delivery_attempt == 1
    finally:
        worker.shutdown()
