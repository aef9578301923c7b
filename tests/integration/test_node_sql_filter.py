"""SQL92 subscriptions with the official Node.js client (npm ``rocketmq-client-nodejs``, pinned
in tests/tools.py), unmodified, against a real broker process.

Goal: a Node SimpleConsumer subscribed with ``new FilterExpression(expr, FilterType.SQL)``
receives exactly the messages its filter matches, with the tag and user properties the Node
producer set and nothing more; a property a message lacks makes a comparison unknown, so neither
``region <> 'eu'`` nor ``NOT (amount > 100)`` delivers the messages without it while
``region IS NULL OR ...`` does; a tag subscription (the plain string the client takes for one)
selects by tag alone; a PushConsumer's listener gets exactly the matches too; what each filter
passes over counts as consumed (lag 0). A malformed expression is refused with
ILLEGAL_FILTER_EXPRESSION (40010) and the broker's message naming the column, which the client
surfaces in both places it can meet it: in Settings, where ``startup()`` of a SimpleConsumer or
a PushConsumer rejects at once with an Error whose ``cause`` is a BadRequestException carrying
the code, and on receive after ``subscribe()`` changed the filter of a running SimpleConsumer
(no new Settings), where ``receive()`` rejects with the BadRequestException itself.

Method: ``node/sql_filter.js`` sends the messages listed here with the Node Producer, drains one
SimpleConsumer per filter (each its own group) until every queue answers empty, runs a
PushConsumer until this test has seen its group settle, tries the malformed cases, and prints
one JSON line checked here against expectations computed in Python. The ``node_client`` fixture
installs the client or skips (see tests/tools.py). About 8 s.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from tests.integration.conftest import BrokerProcess, wait_until
from txmq.client.admin import call, call_pages
from txmq.errors import CODE_ILLEGAL_FILTER_EXPRESSION

SCRIPT = Path(__file__).with_name("node") / "sql_filter.js"
RUN_TIMEOUT_S = 60
TOPIC = "node-sql"
QUEUES = 2
SENT = 20
FILTERS = {
    "match": ("sql", "(region = 'eu' AND amount > 100) OR TAGS IN ('urgent')"),
    "notEu": ("sql", "region <> 'eu'"),
    "notEuOrNull": ("sql", "region IS NULL OR region <> 'eu'"),
    "notBig": ("sql", "NOT (amount > 100)"),
    "tag": ("tag", "urgent"),
}
REFUSED_AT_STARTUP = "amount > 100 AND"
REFUSED_ON_RECEIVE = "region = 'eu' AND AND"


def _message(i: int) -> tuple[str, str, dict[str, str]]:
    """Message i: region eu, us or none in turn; every fourth has no amount; every fifth is
    tagged urgent (message 8 has no property at all)."""
    props = {}
    if i % 3 != 2:
        props["region"] = "eu" if i % 3 == 0 else "us"
    if i % 4 != 0:
        props["amount"] = str(i * 10)
    return f"m{i}", "urgent" if i % 5 == 0 else "normal", props


def _expected(name: str, tag: str, props: dict[str, str]) -> bool:
    """Whether FILTERS[name] delivers the message: TRUE only, unknown (a missing side) is not."""
    region, amount = props.get("region"), props.get("amount")
    if name == "match":
        return (region == "eu" and amount is not None and int(amount) > 100) or tag == "urgent"
    if name == "notEu":
        return region is not None and region != "eu"
    if name == "notEuOrNull":
        return region is None or region != "eu"
    if name == "notBig":
        return amount is not None and int(amount) <= 100
    return tag == "urgent"


def _want(name: str) -> list[str]:
    """The bodies FILTERS[name] delivers, sorted."""
    sent = map(_message, range(SENT))
    return sorted(body for body, tag, props in sent if _expected(name, tag, props))


def _groups(endpoints: str) -> dict[str, dict[str, Any]]:
    return {g["group"]: g for g in call_pages(endpoints, "GroupList", {}, "groups")}


def _run(broker: BrokerProcess, node_client: Path, tmp_path: Path) -> dict[str, Any]:
    """Runs the script; tells its PushConsumer when the group has settled, as seen here."""
    settled = tmp_path / "push-settled"
    spec = {
        "messages": [_message(i) for i in range(SENT)],
        "filters": FILTERS,
        "queues": QUEUES,
        "push": {"filter": FILTERS["match"][1], "settled": str(settled)},
        "refusedAtStartup": REFUSED_AT_STARTUP,
        "refusedOnReceive": REFUSED_ON_RECEIVE,
    }
    env = dict(os.environ, NODE_PATH=str(node_client), HOME=str(tmp_path))
    with subprocess.Popen(
        ["node", str(SCRIPT), broker.endpoints, TOPIC, json.dumps(spec)],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    ) as proc:  # fmt: skip
        try:

            def push_settled() -> bool:
                g = _groups(broker.endpoints).get("node-sql-push")
                return proc.poll() is not None or (g is not None and g["lag"] == g["inflight"] == 0)

            # Lag 0 with nothing in flight: every match acked, every other message passed over,
            # and each acked one was handed to the listener (recorded) before its ack.
            wait_until(push_settled, RUN_TIMEOUT_S, "the PushConsumer's group settled")
            settled.touch()
            out, err = proc.communicate(timeout=RUN_TIMEOUT_S)
        finally:
            proc.kill()  # a no-op once it has exited
    assert proc.returncode == 0, err[-3000:] + broker.log_tail()
    return json.loads(out.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_node_client_sql92_filters(
    broker: BrokerProcess, node_client: Path, tmp_path: Path
) -> None:
    call(broker.endpoints, "TopicCreate", {"name": TOPIC, "queues": QUEUES, "type": "normal"})
    got = _run(broker, node_client, tmp_path)

    sent = {body: (tag, props) for body, tag, props in map(_message, range(SENT))}
    for name in FILTERS:
        want = _want(name)
        assert 0 < len(want) < SENT, name
        received = got["received"][name]
        assert sorted(m["body"] for m in received) == want, name
        for m in received:  # the producer's tag and user properties, and nothing else
            assert (m["tag"], m["properties"]) == sent[m["body"]], m
    # Absent properties: unknown is not TRUE, on either side of NOT; IS NULL lets them in.
    no_region = {b for b, (_, props) in sent.items() if "region" not in props}
    assert no_region and not no_region & {m["body"] for m in got["received"]["notEu"]}
    assert no_region <= {m["body"] for m in got["received"]["notEuOrNull"]}
    # The PushConsumer's listener got the matches only (its group settled: see _run).
    assert sorted(got["push"]) == _want("match")
    # What each filter passed over counts as consumed for its group.
    groups = _groups(broker.endpoints)
    for name in FILTERS:
        g = groups[f"node-sql-{name}"]
        assert g["lag"] == g["inflight"] == 0, (name, g)

    # Refused in Settings: startup() rejects at once (SimpleConsumer and PushConsumer alike),
    # with the broker's status as its cause.
    for kind, at_start in got["refusedAtStartup"].items():
        assert at_start["cause"] is not None, (kind, at_start)
        assert at_start["cause"]["name"] == "BadRequestException"
        assert at_start["cause"]["code"] == CODE_ILLEGAL_FILTER_EXPRESSION
        assert "illegal SQL92 filter at column 17 (at the end)" in at_start["cause"]["message"]
        assert "response-code=40010" in at_start["message"]
    # Refused on receive (subscribe() on a running consumer sends no new Settings).
    on_receive = got["refusedOnReceive"]
    assert on_receive["name"] == "BadRequestException", on_receive
    assert on_receive["code"] == CODE_ILLEGAL_FILTER_EXPRESSION
    assert "illegal SQL92 filter at column 19 (near 'AND')" in on_receive["message"]
