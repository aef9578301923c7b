"""The txmq CLI: each command's success path against a real broker process, and bad input
(unknown topic, bad id, broker down, bad config) giving a one-line error and a non-zero exit."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.conftest import ROOT, BrokerProcess


def txmq(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "COLUMNS": "200", **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "txmq.cli", *args],
        capture_output=True,
        text=True,
        env=full,
        timeout=120,
    )


def ok(*args: str) -> str:
    r = txmq(*args)
    assert r.returncode == 0, r.stderr
    return r.stdout


@pytest.mark.slow  # 8 interpreter starts (~6-13 s); test_offline.py's
# test_help_on_every_command checks --help on every command in process, and every other test
# here runs `python -m txmq.cli` itself.
def test_help_everywhere() -> None:
    for cmd in (
        [],
        ["topic"],
        ["txn"],
        ["send"],
        ["broker"],
        ["demo"],
        ["store", "verify"],
        ["dashboard"],
    ):
        assert "Usage" in ok(*cmd, "--help")


def test_commands_against_a_broker(broker: BrokerProcess, tmp_path: Path) -> None:
    ep = ["--endpoints", broker.endpoints]
    assert "created topic orders" in ok(
        "topic", "create", "orders", "--queues", "2", "--type", "transaction", *ep
    )
    assert "orders" in ok("topic", "list", *ep)
    listed = json.loads(ok("topic", "list", "--json", *ep))["topics"]
    assert {"name": "orders", "type": "transaction", "queues": 2, "messages": 0} in listed
    assert "queue" in ok("topic", "describe", "orders", *ep)
    mid = ok("send", "plain", "hello", "--tag", "A", "--message-key", "k1", *ep).strip()
    assert "committed" not in mid and mid
    assert "transaction committed" in ok("send", "orders", "o1", "--transactional", *ep)
    assert "transaction rolled back" in ok(
        "send", "orders", "o2", "--transactional", "--outcome", "rollback", *ep
    )
    lines = ok("consume", "orders", "--group", "cli-g", "--max", "5", "--wait-s", "3", *ep)
    assert [json.loads(x)["body"] for x in lines.splitlines()] == ["o1"]
    assert "cli-g" in ok("group", "list", *ep)
    assert "orders" in ok("group", "describe", "cli-g", *ep)
    described = json.loads(ok("group", "describe", "cli-g", "--json", *ep))
    assert sum(q["lag"] for q in described["queues"]) == 0
    shown = json.loads(ok("message", "show", mid.split()[0], *ep))
    assert shown["body"] == "hello"
    assert "k1" in ok("message", "find", "--topic", "plain", "--message-key", "k1", *ep)
    assert mid.split()[0] in ok("message", "find", "--message-key", "k1", *ep)  # every topic
    ok("send", "plain", "later", "--delay-ms", "500", *ep)
    tailed = ok("tail", "plain", "--group", "tailer", "--max", "2", *ep)
    assert sorted(json.loads(x)["body"] for x in tailed.splitlines()) == ["hello", "later"]
    ok("txn", "list", *ep)
    assert "deleted" in ok("topic", "delete", "plain", *ep)
    broker.stop()
    report = json.loads(ok("store", "verify", "--json", "--data-dir", str(broker.data_dir)))
    assert report["records"] > 0 and report["problems"] == ""
    assert report["state"] == "closed cleanly"
    broker.start()


def test_operator_resolves_an_orphaned_transaction(broker: BrokerProcess) -> None:
    """The CLI producer exits without deciding, so no producer is live for check-back: the
    transaction stays pending (no check is spent) until an operator resolves it."""
    ep = ["--endpoints", broker.endpoints]
    ok("send", "orphans", "d1", "--transactional", "--outcome", "none", *ep)
    rows = [t for t in json.loads(ok("txn", "list", "--json", *ep))["transactions"]]
    assert [t["topic"] for t in rows] == ["orphans"]
    tid = rows[0]["transaction_id"]
    assert "committed" in ok("txn", "resolve", tid, "commit", *ep)
    assert "committed" in ok("txn", "show", tid, *ep)
    r = txmq("txn", "resolve", tid, "rollback", *ep)
    assert r.returncode != 0 and "already committed" in r.stderr


@pytest.mark.parametrize(
    "args,code,text",
    [
        (["topic", "describe", "nope"], 2, "does not exist"),
        (["txn", "show", "bad-id"], 2, "unknown"),
        (["message", "show", "NOPE"], 2, "no message"),
        (["topic", "create", "bad name!"], 2, "illegal topic"),
        (["topic", "delete", "nope"], 2, "does not exist"),
        (["consume", "nope", "--wait-s", "1"], 2, "does not exist"),
        (["group", "describe", "nobody"], 2, "no positions"),
        (["txn", "resolve", "bad-id", "commit"], 2, "unknown"),
    ],
)
def test_bad_input_one_line_error(
    broker: BrokerProcess, args: list[str], code: int, text: str
) -> None:
    r = txmq(*args, "--endpoints", broker.endpoints)
    assert r.returncode == code
    assert text in r.stderr.lower()
    assert len(r.stderr.strip().splitlines()) == 1


def test_duplicate_topic_is_bad_input(broker: BrokerProcess) -> None:
    ep = ["--endpoints", broker.endpoints]
    ok("topic", "create", "dup", *ep)
    r = txmq("topic", "create", "dup", *ep)
    assert r.returncode == 2 and "already exists" in r.stderr


def test_demo_against_a_running_broker(broker: BrokerProcess, tmp_path: Path) -> None:
    """--endpoints mode: the demo gets its own topic and group on a shared broker, so it runs
    twice on one broker and both runs are consistent."""
    for seed in ("1", "2"):
        r = txmq(
            "demo",
            "--orders",
            "20",
            "--seed",
            seed,
            "--no-spark",
            "--endpoints",
            broker.endpoints,
            "--work-dir",
            str(tmp_path / seed),
        )
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
        assert "CONSISTENT" in r.stdout and "INCONSISTENT" not in r.stdout
        assert (tmp_path / seed / "orders.db").exists()


def test_broker_down_exit_3() -> None:
    r = txmq("topic", "list", "--endpoints", "127.0.0.1:1")
    assert r.returncode == 3
    assert "unreachable" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_bad_config_is_a_usage_error(tmp_path: Path) -> None:
    cfg = tmp_path / "bad.toml"
    cfg.write_text("[broker]\nport = 99999\n")
    r = txmq("broker", "--data-dir", str(tmp_path / "d"), "--config", str(cfg))
    assert r.returncode == 2
    assert "port" in r.stderr
    cfg.write_text("[broker]\nnope = 1\n")
    r = txmq("broker", "--data-dir", str(tmp_path / "d"), "--config", str(cfg))
    assert r.returncode == 2
    assert "unknown key" in r.stderr


def test_store_verify_reports_corruption(tmp_path: Path) -> None:
    from tests.conftest import SMALL, Clock
    from txmq.model import RecordDraft
    from txmq.store.store import Store

    s = Store.open(tmp_path / "store", SMALL, now_ms=Clock())
    offs = [
        s.append(RecordDraft(topic="t", queue_id=0, body=b"x" * 50, message_id=f"m{i}"))
        for i in range(5)
    ]
    s.close()
    assert ok("store", "verify", "--data-dir", str(tmp_path))
    seg = tmp_path / "store" / "commitlog" / f"{0:020d}"
    data = bytearray(seg.read_bytes())
    data[offs[2].physical_offset + 30] ^= 0xFF
    seg.write_bytes(bytes(data))
    r = txmq("store", "verify", "--data-dir", str(tmp_path))
    assert r.returncode == 1
    assert "bad record" in r.stdout
