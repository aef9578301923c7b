"""An operator's topic definition against an auto-created topic (ADR 0004).

Goal: with auto-creation on, a client's route query can create a topic (default queues, any
type) on a member before the operator's definition of it arrives there; the explicit definition
then replaces the auto-created one as long as nothing was written to it, and never after (a
writer holds the definition it wrote with). Whether a topic was written to survives a restart.
Method: real registries on real files (``topics.json``), ``define`` as the forwarded create and
the probe import call it, and two threads racing a write against a replacement.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from txmq.broker.cluster.membership import copy_definition, define, definition, grown
from txmq.broker.topics.registry import TopicInfo, TopicRegistry
from txmq.errors import BadRequestError, TopicNotFoundError
from txmq.model import MessageType
from txmq.store.files.disk import OsDisk

EXPLICIT = {"name": "orders", "queues": 2, "type": "transaction", "all": False}


def registry(path: Path) -> TopicRegistry:
    return TopicRegistry(path / "topics.json", OsDisk(), auto_create=True, default_queues=4)


def test_an_unwritten_auto_created_topic_gives_way_to_the_definition(tmp_path: Path) -> None:
    reg = registry(tmp_path)
    auto = reg.ensure("orders")  # a route query
    assert auto.accepts_all and auto.queue_count == 4
    assert not reg.settled("orders"), "a write to it would first record that it was written"
    assert define(reg, EXPLICIT) == "replaced"
    assert definition(reg.get("orders")) == EXPLICIT
    assert reg.settled("orders")
    assert define(reg, EXPLICIT) == "exists"
    # The registry file says the same after a restart.
    assert definition(registry(tmp_path).get("orders")) == EXPLICIT


def test_a_written_auto_created_topic_keeps_its_definition(tmp_path: Path) -> None:
    reg = registry(tmp_path)
    reg.ensure("orders")
    reg.ensure("orders", MessageType.TRANSACTION, writing=True)  # a send stores a message
    with pytest.raises(BadRequestError, match="written to"):
        define(reg, EXPLICIT)
    assert reg.get("orders").queue_count == 4
    # Also after a restart: "written" is on disk, not only in memory.
    with pytest.raises(BadRequestError, match="written to"):
        define(registry(tmp_path), EXPLICIT)


def test_unwritten_survives_a_restart_and_old_files_count_as_written(tmp_path: Path) -> None:
    reg = registry(tmp_path)
    reg.ensure("orders")
    assert define(registry(tmp_path), EXPLICIT) == "replaced"
    # A registry file from before the "unwritten" key: its auto-created topics may hold
    # messages, so they are never replaced.
    rows = [{"name": "paid", "queues": 4, "type": "normal", "all": True}]
    (tmp_path / "topics.json").write_text(json.dumps(rows))
    with pytest.raises(BadRequestError, match="written to"):
        define(registry(tmp_path), {**EXPLICIT, "name": "paid"})


def test_an_explicit_definition_here_wins_over_a_peers_auto_created_one(tmp_path: Path) -> None:
    reg = registry(tmp_path)
    assert define(reg, EXPLICIT) == "created"
    assert define(reg, {"name": "orders", "queues": 4, "type": "normal", "all": True}) == "exists"
    assert definition(reg.get("orders")) == EXPLICIT
    with pytest.raises(BadRequestError, match="another definition"):
        define(reg, {**EXPLICIT, "queues": 3})  # two explicit definitions: refused, as before


def test_a_follower_copies_its_leaders_definition_as_it_is(tmp_path: Path) -> None:
    reg = registry(tmp_path)
    reg.ensure("orders", writing=True)
    copy_definition(reg, EXPLICIT)
    assert definition(reg.get("orders")) == EXPLICIT
    copy_definition(reg, {"name": "new", "queues": 1, "type": "normal", "all": True})
    assert reg.get("new").accepts_all and reg.settled("new"), "a copy counts as written"
    with pytest.raises(BadRequestError, match="queue count"):
        copy_definition(reg, {**EXPLICIT, "queues": 0})
    assert definition(reg.get("orders")) == EXPLICIT


def test_a_writer_never_holds_a_replaced_definition(tmp_path: Path) -> None:
    """A writer reads the definition and marks the topic written under the registry's lock,
    the one a replacement holds: so either the replacement came first and the writer got the
    new definition, or the writer came first and the replacement is refused, never the old
    definition with a successful replacement (a message in queue 3 of a 2-queue topic).
    White box: the test holds that lock itself to stop both at the door."""
    reg = registry(tmp_path)
    auto = reg.ensure("orders")
    explicit = TopicInfo("orders", 2, MessageType.TRANSACTION)
    got: dict[str, object] = {}
    writer = threading.Thread(target=lambda: got.update(w=reg.ensure("orders", writing=True)))
    replacer = threading.Thread(target=lambda: got.update(r=reg.replace_unwritten(explicit)))
    with reg._lock:
        writer.start()
        writer.join(0.5)
        assert writer.is_alive(), "the writer waits for the lock before it reads the definition"
        replacer.start()
    writer.join(10)
    replacer.join(10)
    assert got["w"] == (explicit if got["r"] else auto)


def test_a_topic_only_grows_and_its_growth_survives_a_restart(tmp_path: Path) -> None:
    reg = registry(tmp_path)
    reg.create("orders", 4, MessageType.FIFO)
    assert reg.grow("orders", 8, dry_run=True) == (4, 8)
    assert reg.get("orders").queue_count == 4, "a dry run changes nothing"
    assert reg.grow("orders", 8) == (4, 8)
    assert reg.grow("orders", 8) == (8, 8), "the same count again is no change"
    with pytest.raises(BadRequestError, match="only grows"):
        reg.grow("orders", 4)
    with pytest.raises(BadRequestError, match="queue count"):
        reg.grow("orders", 257)
    with pytest.raises(TopicNotFoundError):
        reg.grow("nosuch", 8)
    again = registry(tmp_path).get("orders")
    assert (again.queue_count, again.message_type) == (8, MessageType.FIFO)


def test_a_peers_grown_definition_is_taken_and_no_other_difference_is(tmp_path: Path) -> None:
    """What a probe imports (membership.grown): the same topic with more queues, never one
    with fewer, nor one that differs in anything else."""
    reg = registry(tmp_path)
    reg.create("orders", 2, MessageType.TRANSACTION)
    assert grown(reg, {**EXPLICIT, "queues": 4})
    assert not grown(reg, EXPLICIT)
    assert not grown(reg, {**EXPLICIT, "queues": 1})
    assert not grown(reg, {**EXPLICIT, "queues": 4, "type": "normal"})
    assert not grown(reg, {**EXPLICIT, "name": "other", "queues": 4})
