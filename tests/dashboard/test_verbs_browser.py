"""The operator verbs from the dashboard (docs/operations.md), in a real headless browser.

Goal: an operator grows a topic and resets a consumer group's position through their
confirmation pages: the first says from how many queues to how many, the second shows every
queue's old and new offset before anything moves; after the confirmation the topic has the new
queues and a live official-client consumer receives the group's messages again; a shrink is
refused with the broker's reason and changes nothing; a group's delete is refused while its
consumer runs and, once it stopped, confirmed from its page, after which the group is gone.
Method: a broker subprocess, ``txmq dashboard`` as a subprocess, the unmodified official client,
and Debian's Chromium driven by Playwright (conftest.py). Screenshots of the confirmations.
"""

from __future__ import annotations

import time
from typing import Any

from tests.dashboard.test_browser import shot
from tests.integration import clients
from tests.integration.conftest import wait_until
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


def test_delete_a_group_from_the_page(live: Any, browser: Any) -> None:
    """Refused with the broker's reason while its consumer runs; once it stopped, the
    confirmation says what goes and what stays, and the group is gone from the list."""
    broker, dash = live
    ep = broker.endpoints
    call(ep, "TopicCreate", {"name": "old", "queues": 2, "type": "normal"})
    producer = clients.producer(ep, ("old",))
    for i in range(3):
        producer.send(clients.message("old", f"o{i}".encode()))
    producer.shutdown()
    retired = clients.consumer(ep, "retired", "old")
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    try:
        assert len(clients.drain(retired, 3, 30)) == 3
        page.goto(dash.url + "/groups/retired")
        page.click("#delete-group button")
        assert "live consumers" in page.inner_text("main")
    finally:
        retired.shutdown()

    def stopped() -> bool:
        found = call(ep, "ClientList", {"group": "retired"})["clients"]
        return not any(c["connected"] for c in found)

    wait_until(stopped, 10, "the consumer's stream closed")
    page.goto(dash.url + "/groups/retired")
    page.click("#delete-group button")
    assert "Delete consumer group retired?" in page.inner_text("h1")
    assert "%DLQ%retired" in page.inner_text("main")
    shot(page, "confirm-delete-group")
    page.click("#confirm-button")
    assert "deleted on every broker" in page.inner_text("[role=status]")
    assert "retired" not in [g["group"] for g in call(ep, "GroupList", {})["groups"]]
