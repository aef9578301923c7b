"""``client.verbs.failed_members``: how the CLI and the dashboard name the members a
cluster-wide verb (GroupReset, GroupDelete) failed on, from the reply's ``failed``."""

from __future__ import annotations

from txmq.client.verbs import failed_members


def test_none_failed_is_empty() -> None:
    assert failed_members({"failed": {}}) == ""
    assert failed_members({"brokers": []}) == ""
    assert failed_members(None) == ""


def test_the_failed_members_by_name_with_why() -> None:
    reply = {"failed": {"b2": "unreachable", "b0": "disk full"}}
    assert failed_members(reply) == "b0: disk full; b2: unreachable"
