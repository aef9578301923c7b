"""The CLI speaks plainly, against a real broker: bad input the broker (or the official client)
refuses exits 2 with the option that fixes it, outcomes are said as people say them, figures
are rounded, option names do not collide, both endpoint separators work, and a clean stop logs
the disk reserve's release at INFO (throwaway consumer groups: test_group_delete_cli.py)."""

from __future__ import annotations

import json
import re
import subprocess

from tests.cli.test_cli import ok, txmq
from tests.integration.conftest import BrokerProcess


def one_line(r: subprocess.CompletedProcess[str], code: int) -> str:
    assert r.returncode == code, (r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("txmq: "), lines
    return lines[0]


def test_a_message_of_the_wrong_type_is_bad_input_said_with_its_fix(
    broker: BrokerProcess,
) -> None:
    ep = ["--endpoints", broker.endpoints]
    ok("topic", "create", "orders", "--type", "transaction", *ep)
    ok("topic", "create", "ticks", "--type", "fifo", *ep)
    line = one_line(txmq("send", "orders", "hi", *ep), 2)
    assert "topic 'orders' takes transaction messages" in line
    assert "this one is a normal message: send it with --transactional" in line
    assert not re.search(r"\b4\d{4}\b", line), line  # no raw status code
    line = one_line(txmq("send", "ticks", "hi", "--transactional", *ep), 2)
    assert "send it with --group GROUP and without --transactional" in line
    # A refusal the broker sends with a 400xx status (a key longer than 255 characters).
    line = one_line(
        txmq("send", "orders", "hi", "--transactional", "--message-key", "k" * 300, *ep), 2
    )
    assert "key" in line and not re.search(r"\b4\d{4}\b", line), line
    # Nothing was stored by the refused sends.
    described = json.loads(ok("topic", "describe", "orders", "--json", *ep))
    assert sum(q["max"] for q in described["queues"]) == 0


def test_outcomes_are_said_as_words(broker: BrokerProcess) -> None:
    ep = ["--endpoints", broker.endpoints]
    assert "transaction rolled back" in ok(
        "send", "t", "a", "--transactional", "--outcome", "rollback", *ep
    )
    assert "transaction left undecided" in ok(
        "send", "t", "b", "--transactional", "--outcome", "none", *ep
    )
    (pending,) = json.loads(ok("txn", "list", "--json", *ep))["transactions"]
    tid = pending["transaction_id"]
    assert ok("txn", "resolve", tid, "rollback", *ep).strip() == f"transaction {tid} is rolled back"
    line = one_line(txmq("txn", "resolve", tid, "commit", *ep), 1)
    assert "is already rolled back; it cannot be committed too" in line
    assert "_" not in line.replace(tid, "")


def test_store_status_in_words_and_verify_says_it_is_offline(broker: BrokerProcess) -> None:
    ep = ["--endpoints", broker.endpoints]
    table = ok("store", "status", *ep)
    assert not re.search(r"\d\.\d{4,}", table), table  # rounded figures only
    assert re.search(r"disk used\s+│\s+\d+\.\d%", table), table
    assert re.search(r"writes\s+│\s+accepted", table), table
    assert "fenced" not in table
    report = json.loads(ok("store", "status", "--json", *ep))
    assert report["fenced"] == "" and isinstance(report["disk_used_ratio"], float)  # unchanged


def test_message_key_option_and_its_old_name(broker: BrokerProcess) -> None:
    ep = ["--endpoints", broker.endpoints]
    new = ok("send", "k", "one", "--message-key", "order-1", *ep).strip()
    old = ok("send", "k", "two", "--key", "order-1", *ep).strip()  # scripts using --key
    found = json.loads(ok("message", "find", "--message-key", "order-1", "--json", *ep))
    assert sorted(m["message_id"] for m in found["messages"]) == sorted([new, old])
    found = json.loads(ok("message", "find", "--key", "order-1", "--json", *ep))
    assert len(found["messages"]) == 2


def test_endpoints_take_semicolons_or_commas(broker: BrokerProcess) -> None:
    nothing = "127.0.0.1:1"  # nothing listens there: the next address answers
    ok("topic", "create", "both", "--endpoints", f"{nothing};{broker.endpoints}")
    assert "both" in ok("topic", "list", "--endpoints", f"{nothing},{broker.endpoints}")
    ok("send", "both", "hello", "--endpoints", f"{broker.endpoints}, {nothing}")


def test_a_clean_stop_logs_the_reserve_release_at_info(broker: BrokerProcess) -> None:
    assert broker.stop() == 0
    lines = [line for line in broker.log_tail(200).splitlines() if "disk reserve" in line]
    assert lines and all(" INFO " in line for line in lines), lines
    broker.start()
