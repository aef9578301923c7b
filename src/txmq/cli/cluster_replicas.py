"""``txmq cluster up --replicas R`` and the replica view of ``txmq cluster status`` (issue 19).

Owns: starting a local etcd when none is given (``--etcd``), the R replica processes of one
group (``txmq broker --etcd E --replica-group group-0``, data in DIR/replica-<i>, ports
PORT..PORT+R-1), and reading each replica's ``txmq.replica.v1.Replica/Status`` for the status
table (role, leader, epoch, in-sync replicas, lag in bytes).
Must not: elect or supervise beyond reporting (cluster.py's rules apply).
"""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import grpc

from txmq.broker.etcd_server import start_local_etcd
from txmq.broker.replication import SERVICE

GROUP = "group-0"
STATUS_TIMEOUT_S = 2.0


def start_etcd(data_dir: Path, host: str) -> tuple[subprocess.Popen[bytes], str]:
    """A local etcd with its data in DIR/etcd. Raises CoordinationError (etcd missing: names
    Debian's etcd-server package; or it did not answer)."""
    return start_local_etcd(data_dir / "etcd", host)


def replica_command(
    i: int, data_dir: Path, host: str, port: int, etcd: str, min_insync: int, extra: tuple[str, ...]
) -> list[str]:
    return [
        sys.executable, "-m", "txmq.broker",
        "--data-dir", str(data_dir / f"replica-{i}"), "--host", host, "--port", str(port + i),
        "--etcd", etcd, "--replica-group", GROUP, "--broker-name", f"replica-{i}",
        "--min-insync-replicas", str(min_insync), *extra,
    ]  # fmt: skip


def replica_status(endpoint: str) -> dict[str, Any] | None:
    """A replica's status header; None when ``endpoint`` is not a replica (no such service)
    or does not answer."""
    with grpc.insecure_channel(endpoint) as ch:
        call = ch.unary_unary(f"/{SERVICE}/Status")
        try:
            reply = call(b"{}", timeout=STATUS_TIMEOUT_S)
        except grpc.RpcError:
            return None
    (n,) = struct.unpack_from(">I", reply, 0)
    doc: dict[str, Any] = json.loads(reply[4 : 4 + n])
    return doc


def replica_rows(endpoints: list[str]) -> list[dict[str, Any]] | None:
    """One row per endpoint, or None when no endpoint is a replica (a plain cluster)."""
    found = [(e, replica_status(e)) for e in endpoints]
    if all(doc is None for _, doc in found):
        return None
    rows = []
    for endpoint, doc in found:
        if doc is None:
            rows.append({"name": "?", "endpoint": endpoint, "up": False})
            continue
        row = {k: v for k, v in doc.items() if k != "ok"}
        rows.append({"endpoint": endpoint, "up": True, **row})
    return rows


def replica_table(rows: list[dict[str, Any]]) -> tuple[list[str], list[list[Any]]]:
    cols = ["replica", "endpoint", "up", "role", "leader", "epoch", "end", "in sync", "lag bytes"]
    out = []
    for r in rows:
        lag = r.get("lag_bytes", "-")
        if isinstance(lag, dict):
            lag = ", ".join(f"{k}={v}" for k, v in sorted(lag.items())) or "0"
        in_sync = r.get("in_sync")
        out.append(
            [
                r.get("name", "?"), r["endpoint"], "up" if r["up"] else "DOWN",
                r.get("role", "-"), r.get("leader", "-"), r.get("epoch", "-"), r.get("end", "-"),
                ", ".join(in_sync) if isinstance(in_sync, list) else "-", lag,
            ]
        )  # fmt: skip
    return cols, out
