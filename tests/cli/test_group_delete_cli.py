"""``txmq group delete`` and the throwaway groups of ``txmq consume``/``tail``, against a real
broker: a throwaway group is deleted when its command ends (a user who may consume but not
delete gets their messages and one warning line saying so, exit 0); a group named like one but
given with --group stays, hidden from ``group list`` unless --all; ``group delete`` says what it
deleted and that the DLQ stays, --dry-run deletes nothing, bad input is one line with exit 2."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli.test_cli import ok, txmq
from tests.integration.conftest import FAST, BrokerProcess
from tests.integration.security_fixtures import write_acl
from tests.integration.test_topic_update import one_line_error


def groups(endpoints: str) -> dict[str, bool]:
    """Every group of ``group list --all --json``: name -> throwaway."""
    shown = json.loads(ok("group", "list", "--all", "--json", "--endpoints", endpoints))
    return {str(g["group"]): bool(g["throwaway"]) for g in shown["groups"]}


def test_throwaway_groups_are_deleted_when_their_command_ends(broker: BrokerProcess) -> None:
    ep = ["--endpoints", broker.endpoints]
    ok("send", "news", "hello", *ep)
    r = txmq("consume", "news", "--max", "1", "--wait-s", "10", *ep)
    assert r.returncode == 0 and json.loads(r.stdout)["body"] == "hello" and not r.stderr
    r = txmq("tail", "news", "--max", "1", *ep)
    assert r.returncode == 0 and json.loads(r.stdout)["body"] == "hello" and not r.stderr
    assert groups(broker.endpoints) == {}
    # Named with --group, a name of that shape is the user's: kept, and left out by default.
    ok("consume", "news", "--group", "txmq-cli-0123abcd", "--max", "1", "--wait-s", "10", *ep)
    ok("consume", "news", "--group", "kept", "--max", "1", "--wait-s", "10", *ep)
    assert groups(broker.endpoints) == {"txmq-cli-0123abcd": True, "kept": False}
    listed = ok("group", "list", *ep)
    assert "kept" in listed and "txmq-cli-0123abcd" not in listed
    assert "1 throwaway group of `txmq consume` not shown" in listed
    assert "txmq-cli-0123abcd" in ok("group", "list", "--all", *ep)


def test_group_delete_says_what_it_deleted_and_refuses_bad_input(broker: BrokerProcess) -> None:
    ep = ["--endpoints", broker.endpoints]
    ok("topic", "create", "gone", "--queues", "1", *ep)
    ok("send", "gone", "one", *ep)
    ok("consume", "gone", "--group", "g1", "--max", "1", "--wait-s", "10", *ep)
    plan = json.loads(ok("group", "delete", "g1", "--dry-run", "--json", *ep))
    assert plan["dry_run"] is True and plan["dlq"] == "%DLQ%g1" and plan["dlq_kept"] is True
    assert [q["topic"] for q in plan["brokers"][0]["queues"]] == ["gone"]
    assert "g1" in groups(broker.endpoints), "a dry run deletes nothing"
    table = " ".join(ok("group", "delete", "g1", *ep).split())
    assert "group g1 deleted: 1 queue positions; %DLQ%g1 kept (0 dead letters)" in table
    assert groups(broker.endpoints) == {}
    assert "'g1' does not exist" in one_line_error(txmq("group", "delete", "g1", *ep), 2)
    assert "consumer group" in one_line_error(txmq("group", "delete", "bad group!", *ep), 2)
    one_line_error(txmq("group", "delete", *ep), 2)  # no name
    helped = " ".join(ok("group", "delete", "--help").split())
    assert "Exit codes: 0 deleted" in helped and "--force" in helped


def test_a_user_who_may_not_delete_gets_the_messages_and_a_warning(tmp_path: Path) -> None:
    acl = write_acl(
        tmp_path / "acl.toml",
        '[[users]]\naccess_key = "ops"\nsecret_key = "ops-secret-0123456789"\nadmin = true\n\n'
        '[[users]]\naccess_key = "reader"\nsecret_key = "reader-secret-0123456789"\n'
        'publish = ["news"]\nsubscribe = ["news"]\ngroups = ["txmq-cli-*"]\n',
    )
    b = BrokerProcess(tmp_path / "broker", [*FAST, "--acl-file", str(acl)])
    b.start()
    try:
        ops = ["--access-key", "ops", "--secret-key", "ops-secret-0123456789"]
        ep = ["--endpoints", b.endpoints]
        ok("topic", "create", "news", *ops, *ep)
        reader = ["--access-key", "reader", "--secret-key", "reader-secret-0123456789"]
        ok("send", "news", "hello", *reader, *ep)
        r = txmq("consume", "news", "--max", "1", "--wait-s", "10", *reader, *ep)
        assert r.returncode == 0 and json.loads(r.stdout)["body"] == "hello"
        (line,) = r.stderr.strip().splitlines()
        assert line.startswith("txmq: warning: throwaway consumer group txmq-cli-")
        assert "was not deleted" in line and "txmq group delete" in line
        shown = json.loads(ok("group", "list", "--all", "--json", *ops, *ep))["groups"]
        (left,) = [g["group"] for g in shown]
        assert left in line
        ok("group", "delete", left, *ops, *ep)
    finally:
        b.stop()
