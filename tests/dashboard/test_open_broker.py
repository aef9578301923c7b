"""The dashboard in front of a broker without ACL, over plain HTTP: it says the broker is open,
answers 404 in its own words for names the broker does not know, shows times as dates, takes
``--endpoints HOST:P1;HOST:P2`` like every command, and a confirmation expires.

Method: a real broker (no ACL), the official client, ``txmq dashboard`` as a subprocess and
``http.client`` visitors (tests/dashboard/visitor.py).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.dashboard.visitor import Visitor
from tests.integration import clients
from tests.integration.conftest import FAST, ROOT, BrokerProcess, wait_until
from txmq.client.admin import call
from txmq.dashboard.background import dashboard_process

UTC_DATE = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} UTC")


@pytest.fixture(scope="module")
def open_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    broker = BrokerProcess(tmp_path_factory.mktemp("open") / "broker", list(FAST))
    broker.start()
    try:
        call(broker.endpoints, "TopicCreate", {"name": "orders", "queues": 1})
        producer = clients.producer(broker.endpoints, ("orders",))
        try:
            producer.send(clients.message("orders", b"order 1", keys="order-1"))
        finally:
            producer.shutdown()
        yield broker
    finally:
        broker.stop()


@pytest.fixture
def dash(open_broker: BrokerProcess, tmp_path: Path) -> Iterator[str]:
    with dashboard_process(open_broker.endpoints, log=tmp_path / "dashboard.log") as url:
        yield url


def test_the_pages_say_the_broker_is_open(dash: str) -> None:
    v = Visitor(dash)
    for path in ("/", "/topics", "/transactions", "/messages"):
        r = v.get(path)
        assert r.status == 200, path
        assert 'id="open-broker"' in r.body and "This broker has no ACL" in r.text, path
    page = v.get("/login")
    assert "there is nothing to sign in to" in page.text
    keys = {"token": page.token("sign-in"), "access_key": "anyone", "secret_key": "anything-at-all"}
    r = v.post("/login", keys)
    assert r.status == 400 and "This broker has no ACL: it checks no keys" in r.text
    assert 'id="who"' not in v.get("/").body  # no session was made of it


def test_unknown_names_answer_404_in_one_sentence(dash: str) -> None:
    v = Visitor(dash)
    r = v.get("/groups/nope")
    assert r.status == 404
    assert r.text.count("Consumer group 'nope' does not exist on this broker.") == 1
    assert r.text.count("nope") == 2, r.text  # the heading and the sentence, nothing doubled
    r = v.get("/messages?id=0A0B0C0D0E0F")
    assert r.status == 404 and "No message with id '0A0B0C0D0E0F' on this broker." in r.text
    r = v.get("/messages?key=order-1&topic=nope")
    assert r.status == 404 and "Topic 'nope' does not exist on this broker." in r.text
    r = v.post("/transactions/nope/resolve", {"action": "commit"})
    assert r.status == 404
    assert "Transaction 'nope' is unknown to this broker" in r.text
    for path in ("/no-such-page", "/static/nope.css"):
        r = v.get(path)
        assert r.status == 404 and "There is no such page on this dashboard." in r.text, path


def test_times_are_dates(dash: str) -> None:
    found = Visitor(dash).get("/messages?key=order-1")
    assert found.status == 200 and "order 1" in found.text
    for row in ("born", "stored"):
        cell = re.search(rf'<td class="{row}">([^<]*)</td>', found.body)
        assert cell is not None and UTC_DATE.fullmatch(cell.group(1)), cell


def test_a_confirmation_expires(open_broker: BrokerProcess, tmp_path: Path) -> None:
    """With a 1 ms validity the token has expired by the time the form is posted back (two
    HTTP round trips later); the default validity is tested in test_security.py."""
    call(open_broker.endpoints, "TopicCreate", {"name": "short-lived", "queues": 1})
    args = ("--form-ttl-s", "0.001")
    with dashboard_process(open_broker.endpoints, log=tmp_path / "d.log", extra_args=args) as url:
        v = Visitor(url)
        step_one = v.post("/topics/delete", {"name": "short-lived"})
        token = step_one.token("confirm")
        assert v.get("/topics").status == 200
        r = v.post("/topics/delete", {"name": "short-lived", "token": token})
        assert r.location == "/topics?error=confirm-invalid"
        assert "The confirmation was not valid (expired" in v.get(r.location).text
    names = [t["name"] for t in call(open_broker.endpoints, "TopicList", {})["topics"]]
    assert "short-lived" in names


def test_endpoints_are_separated_by_semicolons(open_broker: BrokerProcess, tmp_path: Path) -> None:
    two = f"{open_broker.endpoints};127.0.0.1:9"
    with dashboard_process(two, log=tmp_path / "d.log") as url:
        overview = Visitor(url).get("/")
        for member in (open_broker.endpoints, "127.0.0.1:9"):
            assert f'data-member="{member}"' in overview.body, member
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), COLUMNS="200")
    cmd = [sys.executable, "-m", "txmq.cli", "dashboard", "--help"]
    shown = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=60, check=True)
    assert "HOST:P1;HOST:P2" in shown.stdout


def test_a_groups_page_lists_its_connected_consumers(dash: str, open_broker: BrokerProcess) -> None:
    v = Visitor(dash)

    def clients_table() -> str:
        r = v.get("/groups/lookers")
        assert r.status == 200, r.text
        found = re.search(r'<table id="clients">.*?</table>', r.body, re.S)
        assert found is not None, r.body
        return found.group(0)

    c = clients.consumer(open_broker.endpoints, "lookers", "orders")
    try:
        # Reading a message gives the group positions, so its page stays after the consumer.
        assert len(clients.drain(c, 1, 15)) == 1
        wait_until(lambda: c.client_id in clients_table(), 15, "the consumer on its group's page")
        row = clients_table()
        assert "simple consumer" in row and "orders" in row and UTC_DATE.search(row), row
    finally:
        c.shutdown()
    wait_until(lambda: c.client_id not in clients_table(), 15, "the consumer gone from the page")
    assert "none" in clients_table()
