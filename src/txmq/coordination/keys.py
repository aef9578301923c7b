"""The etcd keys of replica groups and their values: what the broker and the CLI both read.

Owns: the key layout under ``/txmq/<cluster>/`` (a group's leader key, its in-sync set, its
replica list) and the JSON codecs of their values, with the value types they decode to
(``Leader``, ``Member``, ``Confirmed``). The rules that decide with them are
txmq/broker/leadership/election.py's (ADR 0005); the CLI's ``cluster`` commands read and repair
them.
Must not: do I/O (txmq/coordination/etcd.py does) or decide anything.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from txmq.coordination.etcd import KeyValue
from txmq.errors import RemoteProtocolError, invariant
from txmq.store.replica.epochs import EpochStart, divergence_point

# (name, incarnation); incarnation None: unknown (a set stored before incarnations were, or a
# follower that sent none), which matches whatever incarnation that name has (the old rule).
Member = tuple[str, str | None]


@dataclass(frozen=True, slots=True)
class Confirmed:
    """What every member of a stored in-sync set held when its leader stored it: the log
    below ``end``, whose last records there are ``epoch``'s (which start at ``start``) (ADR
    0005, "restored backups")."""

    end: int
    epoch: int
    start: int

    def held_by(self, history: list[EpochStart], log_end: int) -> bool:
        """A log with this epoch history and end holds it: it reaches ``end``, and its
        records there are ``epoch``'s up to ``end`` (so they are the group's, below it)."""
        if log_end < self.end:
            return False
        return divergence_point(history, log_end, [(self.epoch, self.start)], self.end) >= self.end

    def describe(self) -> str:
        return f"offset {self.end} in epoch {self.epoch}"


@dataclass(frozen=True, slots=True)
class Leader:
    """Who leads a group and since which etcd revision (the epoch: every later leader's is
    higher, because etcd's revisions only grow), holding the key with which etcd lease (0:
    not known)."""

    name: str
    endpoint: str
    epoch: int
    lease: int = 0


def leader_key(cluster: str, group: str) -> str:
    return f"/txmq/{cluster}/groups/{group}/leader"


def insync_key(cluster: str, group: str) -> str:
    """The group's in-sync set (ADR 0005): JSON ``{"epoch", "members": [name, ...],
    "incarnations": {name: incarnation}, "confirmed"?: [end, epoch, start]}``, no lease,
    written only by the leader under its leader key (``Etcd.put_if_created``)."""
    return f"/txmq/{cluster}/groups/{group}/insync"


def encode_insync(epoch: int, members: list[Member], confirmed: Confirmed | None = None) -> bytes:
    names = [n for n, _ in members]
    invariant(len(set(names)) == len(names), f"one incarnation per member: {members}")
    known = {n: i for n, i in members if i is not None}
    doc: dict[str, object] = {"epoch": epoch, "members": names, "incarnations": known}
    if confirmed is not None:
        doc["confirmed"] = [confirmed.end, confirmed.epoch, confirmed.start]
    return json.dumps(doc).encode()


def decode_confirmed(kv: KeyValue | None) -> Confirmed | None:
    """What every member of the stored set held when it was stored (None: not recorded, as
    in a set stored before this was, or by ``cluster unclean-election``)."""
    if kv is None:
        return None
    try:
        found = json.loads(kv.value).get("confirmed")
        return None if found is None else Confirmed(*(int(x) for x in found))
    except (ValueError, TypeError, AttributeError) as exc:
        raise RemoteProtocolError(f"in-sync key holds no confirmed end: {kv.value[:80]!r}") from exc


def decode_insync(kv: KeyValue | None) -> list[Member] | None:
    """The stored set as (name, incarnation) pairs. A set stored before incarnations were (no
    ``incarnations``), or a member stored without one, has an unknown incarnation: it matches
    whatever incarnation that name has (the rule before), until the leader stores it again
    with the one its fetches give (InSync.wanted)."""
    if kv is None:
        return None
    try:
        doc = json.loads(kv.value)
        known = doc.get("incarnations") or {}
        members: list[Member] = []
        for m in doc["members"]:
            i = known.get(m)
            members.append((str(m), str(i) if i is not None else None))
        return members
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise RemoteProtocolError(f"in-sync key holds no set: {kv.value[:80]!r}") from exc


def replicas_prefix(cluster: str, group: str) -> str:
    """Kept apart from ``.../groups/``, which GroupLeaders reads whole for every leader key."""
    return f"/txmq/{cluster}/replicas/{group}/"


def decode_leader(kv: KeyValue | None) -> Leader | None:
    if kv is None:
        return None
    try:
        doc = json.loads(kv.value)
        return Leader(str(doc["name"]), str(doc["endpoint"]), kv.create_revision, kv.lease)
    except (ValueError, KeyError, TypeError) as exc:
        raise RemoteProtocolError(f"leader key holds no leader: {kv.value[:80]!r}") from exc
