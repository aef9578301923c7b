"""``txmq cluster up --brokers N --replicas R`` and the replica view of ``txmq cluster status``.

Owns: starting a local etcd when none is given (``--etcd``), the layout of N groups of R
replicas (group-<g>, replica-<k> on port PORT+k, k = g*R+i; cluster.py starts them with the
cluster file), and the status table: every replica of every group (found through ClusterInfo,
which any member answers), each one's ``txmq.replica.v1.Replica/Status`` (role, leader, epoch,
in-sync replicas, lag in bytes); ``cluster unclean-election`` (the operator's way out when
every member of a group's stored in-sync set lost its data, ADR 0005).
Must not: elect or supervise beyond reporting (cluster.py's rules apply).
"""

from __future__ import annotations

import json
import struct
import subprocess
import time
from pathlib import Path
from typing import Any

import grpc

from txmq.cli.tables import Col
from txmq.client.admin import call
from txmq.client.security import current
from txmq.coordination.cluster_file import ClusterFile, Group, Member
from txmq.coordination.etcd import Etcd, EtcdTls
from txmq.coordination.etcd_server import start_local_etcd
from txmq.coordination.keys import decode_insync, decode_leader, encode_insync
from txmq.errors import BrokerUnavailableError, CoordinationError, TxmqError
from txmq.protocol import channels
from txmq.protocol.client_security import open_channel

STATUS_TIMEOUT_S = 2.0


def start_etcd(data_dir: Path) -> tuple[subprocess.Popen[bytes], str]:
    """A local etcd with its data in DIR/etcd, on the loopback interface whatever ``--host``
    the brokers bind: every replica ``cluster up`` starts runs on this machine, and an etcd
    in plaintext must not be reachable from others (a forged leader key is a split brain).
    Raises CoordinationError (etcd missing: names Debian's etcd-server package; or it did not
    answer)."""
    return start_local_etcd(data_dir / "etcd", "127.0.0.1")


def layout(name: str, groups: int, replicas: int, host: str, port: int, etcd: str) -> ClusterFile:
    """N groups of R replicas on consecutive ports, led through ``etcd``."""
    return ClusterFile.of_groups(
        name,
        tuple(
            Group(
                f"group-{g}",
                tuple(
                    Member(f"replica-{k}", host, port + k)
                    for k in range(g * replicas, (g + 1) * replicas)
                ),
            )
            for g in range(groups)
        ),
        etcd,
    )


def replica_status(endpoint: str) -> dict[str, Any] | None:
    """A replica's status header; None when ``endpoint`` is not a replica (no such service)
    or does not answer. Asked with the command's own TLS and credentials (client/security.py),
    as every other CLI call: a secured replica refuses an unsigned or plaintext caller."""
    chosen = current()
    channel = open_channel(endpoint, chosen)
    try:
        stub = channel.unary_unary(f"/{channels.REPLICA_SERVICE}/Status")
        metadata = chosen.metadata(time.time_ns() // 1_000_000)
        reply = stub(b"{}", metadata=metadata, timeout=STATUS_TIMEOUT_S)
    except grpc.RpcError:
        return None
    finally:
        channel.close()
    (n,) = struct.unpack_from(">I", reply, 0)
    doc: dict[str, Any] = json.loads(reply[4 : 4 + n])
    return doc


def _replicas_of(endpoints: list[str]) -> list[tuple[str, str]]:
    """(group, endpoint) of every replica of the cluster behind ``endpoints`` (ClusterInfo,
    which leaders and followers answer), then any given endpoint it did not list."""
    try:
        info = call(";".join(endpoints), "ClusterInfo", {}, timeout_s=STATUS_TIMEOUT_S)
        found = [
            (str(g["name"]), str(r["endpoint"]))
            for g in info["members"]
            for r in g.get("replicas", [])
        ]
    except TxmqError:
        found = []
    listed = {e for _, e in found}
    return found + [("", e) for e in endpoints if e not in listed]


def replica_rows(endpoints: list[str]) -> list[dict[str, Any]] | None:
    """One row per replica, or None when no endpoint is a replica (a plain cluster)."""
    found = [(g, e, replica_status(e)) for g, e in _replicas_of(endpoints)]
    if all(doc is None for _, _, doc in found):
        return None
    rows = []
    for group, endpoint, doc in found:
        if doc is None:
            rows.append({"group": group, "name": "?", "endpoint": endpoint, "up": False})
            continue
        row = {k: v for k, v in doc.items() if k != "ok"}
        rows.append({"group": group, "endpoint": endpoint, "up": True, **row})
    return rows


def replica_table(rows: list[dict[str, Any]]) -> tuple[list[Col], list[list[Any]]]:
    """The columns (the role reads DOWN for a replica that does not answer; ``--wide`` adds
    the leader as each sees it, the epoch, the followers' lag and the preferred replica) and
    one row per replica. The in-sync set is the leader's: a follower's row shows "-"."""
    cols = [Col(h, ident=True) for h in ("group", "replica", "endpoint")]
    cols += [Col("role"), Col("end", justify="right"), Col("in sync")]
    cols += [Col("up", wide=True), Col("leader", ident=True, wide=True)]
    cols += [Col("epoch", wide=True, justify="right"), Col("lag bytes", wide=True)]
    cols += [Col("preferred", wide=True)]
    out = []
    for r in rows:
        lag = r.get("lag_bytes", "-")
        if isinstance(lag, dict):
            lag = ", ".join(f"{k}={v}" for k, v in sorted(lag.items())) or "0"
        in_sync = r.get("in_sync")
        out.append(
            [
                r.get("group") or "-", r.get("name", "?"), r["endpoint"],
                r.get("role", "-") if r["up"] else "DOWN", r.get("end", "-"),
                ", ".join(in_sync) if isinstance(in_sync, list) else "-",
                "up" if r["up"] else "DOWN", r.get("leader", "-"), r.get("epoch", "-"), lag,
                _preferred(r),
            ]
        )  # fmt: skip
    return cols, out


def _preferred(row: dict[str, Any]) -> str:
    """ "yes" for the group's preferred replica (preferred.py: the first member as the cluster
    file lists them), "no" for its others, "-" where unknown (down, or a group without one)."""
    preferred = row.get("preferred")
    if not preferred:
        return "-"
    return "yes" if preferred == row.get("name") else "no"


def unclean_election(etcd_endpoint: str, replica: str, tls: EtcdTls | None = None) -> str:
    """Store the in-sync set of ``replica``'s group as that replica alone, with the incarnation
    it runs under, so that it may lead (and no one else, until it stores a new set). Only
    while the group has no leader, in one etcd transaction. Returns what was done.

    Raises:
        BrokerUnavailableError: no replica answers at ``replica``.
        CoordinationError: it leads, the group has a leader or no stored set, or the set or
            the leader changed while this ran (look again); etcd does not answer.
    """
    doc = replica_status(replica)
    if doc is None:
        raise BrokerUnavailableError(replica, "no replica answers Replica/Status there")
    name, born, key = doc.get("name"), doc.get("incarnation"), doc.get("insync_key")
    if doc.get("role") == "leader":
        raise CoordinationError(f"{name} at {replica} leads its group: nothing to do")
    if doc.get("role") != "follower" or not (name and born and key):
        raise CoordinationError(f"{replica} is not a follower that names its incarnation: {doc}")
    leader_key = str(key)[: -len("insync")] + "leader"
    etcd = Etcd(etcd_endpoint, tls=tls)
    found = etcd.get_prefix(str(key)[: -len("insync")])
    leader = decode_leader(found.get(leader_key))
    if leader is not None:
        raise CoordinationError(f"the group has a leader ({leader.name}): nothing to do")
    old = found.get(str(key))
    if old is None:
        raise CoordinationError(f"no in-sync set is stored at {key}: any replica may lead")
    value = encode_insync(0, [(str(name), str(born))])
    if not etcd.put_if_unchanged(str(key), value, old.mod_revision, leader_key):
        raise CoordinationError("the group's leader or in-sync set changed meanwhile: look again")
    return (
        f"{key}: was {decode_insync(old)}, now names only {name} (incarnation {born}); it may"
        " lead. Writes acknowledged only by the members it forgot are lost."
    )
