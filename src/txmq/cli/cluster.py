"""``txmq cluster``: start a cluster of brokers on this machine (``up``) and show one (``status``).

Owns: ``cluster up`` (writes DIR/cluster.toml, starts one ``txmq broker --cluster`` process per
member on consecutive ports with data dirs DIR/<member>, prints each member's "listening" line,
stops them all on SIGTERM or Ctrl-C; with ``--replicas R`` the members are N groups of R
replicas and a local etcd runs beside them unless ``--etcd`` names one) and ``cluster status``
(every member: reachable or not, its disk, topics, queues and messages, asked of each member
itself; for replicas, cluster_replicas.py's view).
Must not: supervise beyond reporting: a member that dies is reported, not restarted (an operator
or a service manager decides), and the others keep serving their queues.
"""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import click

from txmq import limits
from txmq.broker.config.options import etcd_tls_options
from txmq.cli import cluster_replicas
from txmq.cli.admin_commands import endpoints_option
from txmq.cli.tables import Col, human_bytes, json_option, show, wide_option
from txmq.client.admin import cluster_call, split_endpoints
from txmq.coordination.cluster_file import ClusterFile, Member, write
from txmq.coordination.etcd import EtcdTls
from txmq.errors import TxmqError
from txmq.store.files.disk import make_private_dirs, open_private, tighten_tree

CLUSTER_FILE_NAME = "cluster.toml"
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0
WATCH_PERIOD_S = 0.5
# A group's first replica (its lowest port) is started, and given this long to lead, before the
# others: the official Python client dials a group's addresses sorted and stays on the first
# that accepts (ADR 0006), so a group led by its lowest address serves clients with no
# forwarding hop. Only at start: after a failover whoever leads, leads.
FIRST_LEADS_S = 10.0


@click.group()
def cluster() -> None:
    """A cluster of brokers behind one route: start one, show one."""


def _brokers(value: str) -> int:
    if value == "auto":
        return max(1, len(os.sched_getaffinity(0)))
    if not value.isdigit() or not 1 <= int(value) <= 64:
        raise click.BadParameter(f"expected 1..64 or auto, got {value!r}")
    return int(value)


def _start(
    member: Member, data_dir: Path, cluster_path: Path, host: str, extra: tuple[str, ...]
) -> subprocess.Popen[str]:
    cmd = [
        sys.executable, "-m", "txmq.broker",
        "--data-dir", str(data_dir), "--host", host, "--port", str(member.port),
        "--cluster", str(cluster_path), "--broker-name", member.name, *extra,
    ]  # fmt: skip
    log_path = data_dir.parent / f"{member.name}.log"
    with os.fdopen(open_private(log_path, os.O_WRONLY | os.O_APPEND), "a") as log:
        return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, text=True)


def _first_line(proc: subprocess.Popen[str], deadline: float) -> str:
    assert proc.stdout is not None
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        if not sel.select(timeout=max(0.0, deadline - time.monotonic())):
            return ""
        return proc.stdout.readline().strip()


def _stop_all(procs: dict[str, subprocess.Popen[str]]) -> int:
    for p in procs.values():
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    worst = 0
    for name, p in procs.items():
        try:
            code = p.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            p.kill()
            code = p.wait()
            click.echo(f"txmq: broker {name} ignored SIGTERM and was killed", err=True)
        worst = worst or (1 if code not in (0, -signal.SIGTERM) else 0)
    return worst


@cluster.command(
    "up", context_settings={"ignore_unknown_options": True, "help_option_names": ["-h", "--help"]}
)
@click.option(
    "--brokers", "count", help="N, or auto (one per core).  [default: 2; 1 with --replicas]"
)
@click.option("--data-dir", required=True, type=click.Path(path_type=Path, file_okay=False))
@click.option("--port", default=8081, show_default=True, type=click.IntRange(1, 65535))
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option(
    "--replicas",
    default=1,
    show_default=True,
    type=click.IntRange(1, limits.REPLICAS_MAX),
    help="Replicas of each broker (a group each), led through etcd.",
)
@click.option("--etcd", help="etcd HOST:PORT for --replicas (default: start one in DIR/etcd).")
@click.option("--async", "async_", is_flag=True, help="With --replicas: acknowledge on the leader.")
@click.argument("broker_args", nargs=-1, type=click.UNPROCESSED)
def up(
    count: str | None,
    data_dir: Path,
    port: int,
    host: str,
    replicas: int,
    etcd: str | None,
    async_: bool,
    broker_args: tuple[str, ...],
) -> None:
    """Start N brokers on ports PORT..PORT+N-1 with data dirs DIR/broker-<i>, in one cluster.

    Writes DIR/cluster.toml (use it with `txmq broker --cluster` on other machines). Arguments
    after `--` go to every broker (e.g. `-- --transaction-timeout-ms 800`). Runs until SIGTERM
    or Ctrl-C, then stops every broker cleanly.

    With --replicas R: N groups (group-<g>) of R replicas each, N x R processes replica-<k> on
    ports PORT..PORT+N*R-1 (group g has replicas k = g*R..g*R+R-1), data in DIR/replica-<k>;
    SYNC replication (a write is acknowledged once it is on 2 replicas; --async: on the
    leader), leadership through etcd (--etcd, or a local etcd in DIR/etcd).

    DIR must not be a single broker's data directory (one with store/ in it): its topics would
    not be served by brokers started beside them. Give the cluster a directory of its own.

    \b
    Exit codes:
      0  every broker stopped cleanly at SIGTERM or Ctrl-C
      1  a broker did not start; or one exited on its own before the stop
         (said on stderr when it happens, the others keep serving); or all did
      2  bad input (an option, DIR holding a single broker's data)
    """
    n = _brokers(count or ("1" if replicas > 1 else "2"))
    _refuse_single_broker_dir(data_dir)
    if etcd is not None and replicas == 1:
        raise click.BadParameter("--etcd goes with --replicas R (R > 1)")
    if port + n * replicas - 1 > 65535:
        raise click.BadParameter(f"ports {port}..{port + n * replicas - 1} do not fit below 65536")
    # Owner only, as each broker's own directory (they hold message bodies and logs).
    make_private_dirs(data_dir)
    tightened = tighten_tree(data_dir)
    if tightened is not None:
        click.echo(f"txmq cluster: {tightened}", err=True)
    local = None
    if replicas > 1 and etcd is None:
        local, etcd = cluster_replicas.start_etcd(data_dir)
        click.echo(f"txmq etcd listening on {etcd}")
    name = data_dir.resolve().name or "txmq"
    if replicas > 1:
        layout = cluster_replicas.layout(name, n, replicas, host, port, etcd or "")
        extra = ("--min-insync-replicas", "1" if async_ else "2", *broker_args)
    else:
        layout = ClusterFile(name, tuple(Member(f"broker-{i}", host, port + i) for i in range(n)))
        extra = broker_args
    cluster_path = data_dir / CLUSTER_FILE_NAME
    write(cluster_path, layout)
    try:
        first = frozenset(g.replicas[0].name for g in layout.groups if replicas > 1)
        code = _run(layout.members, data_dir, cluster_path, host, extra, first)
    finally:
        if local is not None:
            local.terminate()
            local.wait(timeout=STOP_TIMEOUT_S)
    sys.exit(code)


def _refuse_single_broker_dir(data_dir: Path) -> None:
    """Raises click.BadParameter (exit 2) when ``data_dir`` holds one broker's own data: the
    cluster's brokers would live in DIR/broker-<i> beside it and not serve its topics."""
    found = [n for n in ("store", "broker.lock", "topics.json") if (data_dir / n).exists()]
    if found:
        raise click.BadParameter(
            f"{data_dir} holds a single broker's data ({', '.join(found)}): a cluster there"
            " would start new brokers beside it and not serve its topics; give the cluster a"
            " directory of its own",
            param_hint="--data-dir",
        )


def _run(
    members: tuple[Member, ...],
    data_dir: Path,
    cluster_path: Path,
    host: str,
    extra: tuple[str, ...],
    first: frozenset[str] = frozenset(),
) -> int:
    """One process per member until a signal; the worst exit code of their clean stop.
    Members named in ``first`` start first, and have FIRST_LEADS_S to lead before the rest."""
    stop = _stop_on_signals()
    procs: dict[str, subprocess.Popen[str]] = {}
    lines: dict[str, str] = {}
    deadline = time.monotonic() + START_TIMEOUT_S
    try:
        leading = [m for m in members if m.name in first]
        for m in leading:
            procs[m.name] = _start(m, data_dir / m.name, cluster_path, host, extra)
        for m in leading:
            lines[m.name] = _listening(procs[m.name], m.name, data_dir, deadline)
        _until_they_lead(leading)
        for m in members:
            if m.name not in procs:
                procs[m.name] = _start(m, data_dir / m.name, cluster_path, host, extra)
        for m in members:
            click.echo(lines.get(m.name) or _listening(procs[m.name], m.name, data_dir, deadline))
            sys.stdout.flush()  # a supervisor reading our stdout learns each port at once
        _watch(procs, stop)
    finally:
        code = _stop_all(procs)
    return code


def _listening(proc: subprocess.Popen[str], name: str, data_dir: Path, deadline: float) -> str:
    line = _first_line(proc, deadline)
    if "listening on" not in line:
        raise TxmqError(f"broker {name} did not start (see {data_dir / name}.log)")
    return line


def _until_they_lead(members: list[Member]) -> None:
    """Until each of ``members`` leads its group, for at most FIRST_LEADS_S; one that does not
    answer its status (a secured replica refuses this unsigned call) is not waited for."""
    deadline = time.monotonic() + FIRST_LEADS_S
    waiting = list(members)
    while waiting and time.monotonic() < deadline:
        docs = [(m, cluster_replicas.replica_status(m.endpoint)) for m in waiting]
        waiting = [m for m, doc in docs if doc is not None and doc.get("role") != "leader"]
        if waiting:
            time.sleep(WATCH_PERIOD_S / 5)  # sleep: polling a child's status, no event to wait on


def _watch(procs: dict[str, subprocess.Popen[str]], stop: dict[str, bool]) -> None:
    """Until a signal: report members that exit; return when every one has."""
    reported: set[str] = set()
    while not stop["now"]:
        for name, p in procs.items():
            code = p.poll()
            if code is not None and name not in reported:
                reported.add(name)
                click.echo(f"txmq: broker {name} exited with code {code}", err=True)
        if len(reported) == len(procs):
            raise TxmqError("every broker of the cluster has exited")
        time.sleep(WATCH_PERIOD_S)  # sleep: polling child processes; no event to wait on here


def _human(key: str, value: Any) -> Any:
    if key.endswith("_bytes"):
        return human_bytes(value)
    if key == "up":
        return "up" if value else "DOWN"
    return value


@cluster.command("status")
@endpoints_option
@json_option
@wide_option
def status(endpoints: str, as_json: bool, wide: bool) -> None:
    """Every member: up or down, its topics, messages and pending transactions (asked of each;
    --wide: its data, free disk and queues too). For replicas: each one's group, role, log end
    and the leader's in-sync set (--wide: the leader each sees, the epoch, the followers' lag
    in bytes, the preferred replica).

    \b
    Exit codes:
      0  every member answered
      1  a member is down (the table shows it DOWN, and the others)
      3  no member answers
    """
    replica_rows = cluster_replicas.replica_rows(split_endpoints(endpoints))
    if replica_rows is not None:
        cols, rows = cluster_replicas.replica_table(replica_rows)
        show("replicas", cols, rows, {"replicas": replica_rows}, as_json, wide)
        for r in replica_rows:
            if r.get("renewed") and not as_json:  # its log lost records (ADR 0005)
                click.echo(f"{r.get('name')} renewed its {r['renewed']}")
        if not all(r["up"] for r in replica_rows):
            sys.exit(1)
        return
    out = []
    for m, got in cluster_call(endpoints, "BrokerStatus", {}):
        row: dict[str, Any] = {"name": m["name"], "endpoint": m["endpoint"]}
        if isinstance(got, TxmqError):
            row.update(up=False, error=str(got))
        else:
            row.update(up=True, **{k: v for k, v in got.items() if k not in ("ok", "name")})
        out.append(row)
    keys = ["name", "endpoint", "up", "topics", "messages", "pending_transactions",
            "data_bytes", "disk_free_bytes", "queues"]  # fmt: skip
    rows = [[_human(k, r.get(k, "-")) for k in keys] for r in out]
    cols = [Col("broker", ident=True), Col("endpoint", ident=True), Col("up")]
    cols += [Col(h, justify="right") for h in ("topics", "messages", "pending txns")]
    cols += [Col(h, wide=True, justify="right") for h in ("data", "disk free", "queues")]
    show("cluster", cols, rows, {"members": out}, as_json, wide)
    if not all(r["up"] for r in out):
        sys.exit(1)


@cluster.command("unclean-election")
@click.option("--etcd", required=True, help="The etcd HOST:PORT the group is led through.")
@click.option("--replica", required=True, help="HOST:PORT of the replica that is to lead.")
@etcd_tls_options
def unclean_election(
    etcd: str,
    replica: str,
    etcd_ca_file: Path | None,
    etcd_cert_file: Path | None,
    etcd_key_file: Path | None,
) -> None:
    """Let one replica lead a group whose stored in-sync set names no replica that can.

    For when every member that set names lost its data for good (a replica restarted on an
    empty data directory is not the member the set names: it may lead only after it caught
    up from a leader). Stores the set as REPLICA alone, under the incarnation it runs with,
    while the group has no leader. Whatever only the forgotten members held is lost (Kafka's
    unclean leader election): pick the replica that holds the most (`cluster status`, end).
    A replica that was behind when its leader died may need a restart to campaign.
    """
    tls = EtcdTls.of(etcd_ca_file, etcd_cert_file, etcd_key_file)
    click.echo(cluster_replicas.unclean_election(etcd, replica, tls))


def _stop_on_signals() -> dict[str, bool]:
    """A flag that SIGTERM and Ctrl-C set, for the watch loop to stop every process cleanly."""
    stop = {"now": False}

    def on_signal(signum: int, frame: Any) -> None:
        stop["now"] = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    return stop
