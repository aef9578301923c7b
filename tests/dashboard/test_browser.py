"""The dashboard in a real headless browser against a live broker with traffic.

Goal: every page loads and shows the broker's state; an operator resolves a dead transaction
from the page (after a confirmation that shows its message) and a consumer receives it; a lookup
by key finds a message; a consumer group's lag falls as it consumes; topics are created and
deleted through their confirmation; a stopped broker shows as down with a readable banner.
Method: a broker subprocess (transactions die after 2 unanswered check-backs), a producer thread
sending ~20 messages/s, the official client for the rest, ``txmq dashboard`` as a subprocess,
and Debian's Chromium driven by Playwright. A screenshot of each page is saved (conftest.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from rocketmq import TransactionResolution

from tests.dashboard.conftest import Traffic, artifacts_dir
from tests.integration import clients
from txmq.client.admin import call
from txmq.dashboard.background import dashboard_process

DEADLINE_S = 40.0


def wait_for(what: str, cond: Callable[[], bool], timeout_s: float = DEADLINE_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.25)  # sleep: polling a condition with a bounded deadline


def shot(page: Any, name: str) -> None:
    page.screenshot(path=str(artifacts_dir() / f"{name}.png"), full_page=True)


def reload_until(page: Any, url: str, selector: str, what: str) -> None:
    def present() -> bool:
        page.goto(url)
        return bool(page.locator(selector).count())

    wait_for(what, present)


def test_overview_and_lag_falling(live: Any, browser: Any) -> None:
    broker, dash = live
    ep = broker.endpoints
    call(ep, "TopicCreate", {"name": "clicks", "queues": 4, "type": "normal"})
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    with Traffic(ep, "clicks", 2000) as traffic:
        # Three samples make two rates, the fewest a line needs.
        reload_until(page, dash.url + "/", "svg.traffic polyline", "the overview's charts")
        assert page.locator("[data-state=up]").count() == 1
        assert "Disk" in page.inner_text("main")
        wait_for("traffic", lambda: traffic.sent >= 60 and traffic.received >= 30)
        page.goto(dash.url + "/")
        shot(page, "overview")
    readers = clients.consumer(ep, "readers", "clicks")
    try:
        reload_until(page, dash.url + "/groups", "tr[data-group=readers]", "the readers group")
        shot(page, "groups")
        page.goto(dash.url + "/groups/readers")
        before = int(page.inner_text("#group-lag"))
        assert before == traffic.sent
        assert len(clients.drain(readers, 20, 30)) >= 20
        page.goto(dash.url + "/groups/readers")
        after = int(page.inner_text("#group-lag"))
        assert after <= before - 20, (before, after)
        shot(page, "group")
    finally:
        readers.shutdown()
    broker.stop()
    reload_until(page, dash.url + "/", "[data-state=down]", "the broker shown down")
    page.goto(dash.url + "/topics")
    assert "is down (unreachable)" in page.inner_text("[role=alert]")
    shot(page, "broker-down")


def test_resolve_a_dead_transaction_lookup_and_topics(live: Any, browser: Any) -> None:
    broker, dash = live
    ep = broker.endpoints
    call(ep, "TopicCreate", {"name": "orders", "queues": 2, "type": "transaction"})
    never = clients.Checker(lambda m: TransactionResolution.TRANSACTION_RESOLUTION_UNSPECIFIED)
    producer = clients.producer(ep, ("orders",), never)
    buyer = clients.consumer(ep, "buyers", "orders")
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    try:
        tx = producer.begin_transaction()
        producer.send(
            clients.message("orders", b'{"order": 42, "sku": "A-1"}', keys="order-42"), tx
        )
        # A second one stays pending: its producer leaves, so no check-back is ever sent.
        call(ep, "TopicCreate", {"name": "payments", "queues": 1, "type": "transaction"})
        gone = clients.producer(ep, ("payments",), never)
        gone.send(clients.message("payments", b"pay 7", keys="pay-7"), gone.begin_transaction())
        gone.shutdown()
        reload_until(page, dash.url + "/transactions", "#dead tr[data-txn]", "a dead transaction")
        assert "payments" in page.inner_text("#pending")
        shot(page, "transactions")
        page.locator("#dead tr[data-txn] button.ok").first.click()
        assert '"order": 42' in page.inner_text("pre.body")  # the confirmation shows the message
        shot(page, "confirm-commit")
        page.click("#confirm-button")
        assert "The transaction was committed" in page.inner_text("[role=status]")
        got = clients.drain(buyer, 1, 30)
        assert [m.body for m in got] == [b'{"order": 42, "sku": "A-1"}']
    finally:
        buyer.shutdown()
        producer.shutdown()
    look_up_by_key(page, dash.url)
    create_and_delete_a_topic(page, dash.url)


def look_up_by_key(page: Any, url: str) -> None:
    page.goto(url + "/messages")
    page.fill("input[name=key]", "order-42")
    page.select_option("select[name=view]", "json")
    page.click("#lookup button")
    assert "1 message(s)" in page.inner_text("main")
    assert '"sku": "A-1"' in page.inner_text("pre.body")
    shot(page, "messages")
    page.select_option("select[name=view]", "hex")
    page.click("#lookup button")
    assert "7b 22 6f 72" in page.inner_text("pre.body")  # {"or


def create_and_delete_a_topic(page: Any, url: str) -> None:
    page.goto(url + "/topics")
    page.fill("#create-topic input[name=name]", "made-in-browser")
    page.select_option("#create-topic select[name=type]", "fifo")
    page.click("#create-topic button")
    assert "Create topic made-in-browser?" in page.inner_text("h1")
    page.click("#confirm-button")
    assert "The topic was created." in page.inner_text("[role=status]")
    row = page.locator("tr[data-topic=made-in-browser]")
    assert "fifo" in row.inner_text()
    shot(page, "topics")
    # A forged confirmation deletes nothing: from another site it is refused outright, and
    # even with this dashboard's Origin a made-up token is not valid.
    forged = {"name": "made-in-browser", "token": "0" * 64}
    elsewhere = page.request.post(
        url + "/topics/delete", form=forged, headers={"Origin": "http://attacker.example"}
    )
    assert elsewhere.status == 403
    same_site = page.request.post(url + "/topics/delete", form=forged, headers={"Origin": url})
    assert "The confirmation was not valid" in same_site.text()
    page.goto(url + "/topics")
    row = page.locator("tr[data-topic=made-in-browser]")
    assert row.count() == 1
    row.locator("button.danger").click()
    assert "Delete topic made-in-browser?" in page.inner_text("h1")
    page.click("#confirm-button")
    assert "The topic was deleted" in page.inner_text("[role=status]")
    assert page.locator("tr[data-topic=made-in-browser]").count() == 0


def test_dead_letters_and_a_member_down(live: Any, browser: Any, tmp_path: Any) -> None:
    """A message its consumer never acks goes to the group's DLQ after 3 deliveries (FAST): the
    group page shows it. A second dashboard watching two members, one of them nothing, shows
    that one down and the other up."""
    broker, dash = live
    ep = broker.endpoints
    call(ep, "TopicCreate", {"name": "jobs", "queues": 1, "type": "normal"})
    producer = clients.producer(ep, ("jobs",))
    producer.send(clients.message("jobs", b"poison", keys="bad-1"))
    producer.shutdown()
    worker = clients.consumer(ep, "workers", "jobs")
    try:
        attempts: list[int] = []

        def fail_once_more() -> bool:
            attempts.extend(m.delivery_attempt for m in worker.receive(1, 1))  # never acked
            return max(attempts, default=0) >= 3

        wait_for("the third delivery", fail_once_more)
    finally:
        worker.shutdown()
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    reload_until(page, dash.url + "/groups/workers", "#dlq a", "the dead letter on the page")
    assert "bad-1" in page.inner_text("#dlq") and "poison" in page.inner_text("#dlq")
    shot(page, "group-dlq")
    page.click("#dlq a")  # lookup by id: the dead letter's message
    assert "1 message(s)" in page.inner_text("main") and "poison" in page.inner_text("pre.body")
    with dashboard_process(f"{ep},127.0.0.1:9", log=tmp_path / "two.log") as url:
        reload_until(page, url + "/", "[data-state=down]", "the missing member shown down")
        assert page.locator("[data-state=up]").count() == 1
        assert "127.0.0.1:9" in page.inner_text("section[data-member='127.0.0.1:9']")
        page.goto(url + "/topics")  # pages read from the member that answers
        assert "jobs" in page.inner_text("#topics")
        shot(page, "topics-two-members")
