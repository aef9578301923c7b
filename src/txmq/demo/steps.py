"""Steps of ``txmq demo`` that touch the outside world: the embedded broker process, the
environment of the processes the demo starts, the admin queries the report needs, and the Spark
job.

Owns: starting and stopping those processes with bounded waits, and turning their failures
into DemoError with a pointer to the log. Must not: decide consistency (report.py).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import select
import shutil
import signal
import site
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

import txmq
from txmq.client.admin import call, call_pages, cluster_call, members
from txmq.demo.report import SparkResult
from txmq.errors import NotFoundError, TxmqError

console = Console()
# Short timings so undecided transactions are checked back, and poison messages reach the DLQ,
# within seconds instead of RocketMQ's production defaults (6 s / 30 s / 16 attempts).
BROKER_FLAGS = (
    "--transaction-timeout-ms=1500",
    "--transaction-check-interval-ms=1000",
    "--delivery-attempts-max=3",
    "--retry-backoff-initial-ms=300",
)
SETTLE_S = 90.0
# A Spark session alone took ~80 s to start on a 2-core machine at load 17; 150 s was not enough
# for the session and both jobs there.
SPARK_TIMEOUT_S = 240.0
SPARK_JOB_MODULE = "txmq.demo.spark_job"


class DemoError(TxmqError):
    """A step of the demo could not run (as opposed to an inconsistent result)."""


def child_env() -> dict[str, str]:
    """The environment of the processes the demo starts (broker, crashing order service, Spark
    job): they import txmq from where this process did. An installed txmq is found as it is;
    a source checkout run through PYTHONPATH or from its root is put on PYTHONPATH."""
    home = str(Path(txmq.__file__).resolve().parents[1])
    if home in site.getsitepackages():
        return dict(os.environ)
    path = os.environ.get("PYTHONPATH")
    return dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [home, path])))


@contextmanager
def embedded_broker(data_dir: Path, log_path: Path, extra: Sequence[str] = ()) -> Iterator[str]:
    """A broker subprocess on a free port (``extra``: more flags, e.g. TLS and ACL); yields its
    endpoints and stops it on exit."""
    cmd = [sys.executable, "-m", "txmq.broker", "--data-dir", str(data_dir), "--port", "0"]
    cmd += list(extra)
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            [*cmd, *BROKER_FLAGS], stdout=subprocess.PIPE, stderr=log, text=True, env=child_env()
        )
    try:
        yield _first_line_endpoints(proc, log_path)
    finally:
        _stop_child(proc, stop_timeout_s=30)


def _first_line_endpoints(proc: subprocess.Popen[str], log_path: Path) -> str:
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], 30.0)
    line = proc.stdout.readline() if ready else ""
    found = re.search(r"listening on (\S+:\d+)", line)
    if found is None:
        tail = log_path.read_text().strip().splitlines()[-3:]
        raise DemoError(f"the embedded broker did not start ({' / '.join(tail) or line!r})")
    return found.group(1)


def spark_skip_reason() -> str | None:
    """Why the Spark step cannot run here, or None when it can."""
    java = shutil.which("java")
    if os.environ.get("JAVA_HOME"):
        java = str(Path(os.environ["JAVA_HOME"]) / "bin" / "java")
    if java is None or not Path(java).exists():
        return "Java not found: the Spark step needs Java 17+ (install a JDK or set JAVA_HOME)"
    probe = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30)
    found = re.search(r'version "(\d+)(?:\.(\d+))?', probe.stderr + probe.stdout)
    major = int(found.group(1)) if found else 0
    if major == 1 and found and found.group(2):
        major = int(found.group(2))  # "1.8.0" is Java 8
    if major < 17:
        return f"Java {major or '?'} found at {java}: the Spark step needs Java 17+"
    if importlib.util.find_spec("pyspark") is None:
        return "pyspark is not installed: pip install 'txmq[spark]'"
    return None


def run_spark(
    endpoints: str, topic: str, work: Path, orders_db: Path | None, inventory_db: Path
) -> SparkResult:
    """The Spark jobs (spark_job.py: aggregation; reconciliation when the order DB is SQLite)
    in their own process, whose JVM logs go to spark.log."""
    out = work / "spark"
    dbs = [str(orders_db or ""), str(inventory_db)]
    with open(work / "spark.log", "w") as log:
        try:
            r = subprocess.run(
                [sys.executable, "-m", SPARK_JOB_MODULE, endpoints, str(out), topic, *dbs],
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
                env=child_env(),
                timeout=SPARK_TIMEOUT_S,
            )
        except subprocess.TimeoutExpired:
            log_path = work / "spark.log"
            raise DemoError(
                f"the Spark step did not finish in {SPARK_TIMEOUT_S:.0f} s; see {log_path}"
            ) from None
    if r.returncode != 0:
        raise DemoError(spark_failure(work / "spark.log", r.returncode))
    result = json.loads(r.stdout.strip().splitlines()[-1])
    import pyarrow.parquet as pq

    table = pq.read_table(out / "per-sku-minute.parquet").to_pydict()
    mismatches = result.get("mismatches")
    return SparkResult(
        rows=int(result["rows"]),
        orders=int(sum(table["orders"])),
        qty=int(sum(table["qty"])),
        mismatches=None if mismatches is None else {k: list(v) for k, v in mismatches.items()},
    )


def spark_failure(log: Path, code: int) -> str:
    """Why the Spark step failed: the job's own ``txmq: ...`` line when it wrote one (no Java,
    Spark's workers without txmq), else where the JVM's log is."""
    lines = log.read_text(errors="replace").splitlines()
    told = [line.removeprefix("txmq: ") for line in lines if line.startswith("txmq: ")]
    if told:
        return f"the Spark step failed: {told[-1]}"
    return f"the Spark step failed (exit {code}); see {log}"


def topic_messages(endpoints: str, topic: str) -> int:
    """Messages of ``topic`` on every broker (a cluster's members each hold their queues)."""
    total = 0
    for _m, r in cluster_call(endpoints, "TopicDescribe", {"name": topic}):
        if isinstance(r, NotFoundError):
            continue
        if isinstance(r, TxmqError):
            raise r
        total += sum(int(q["max"]) - int(q["min"]) for q in r["queues"])
    return total


def wait_topic(endpoints: str, topic: str, timeout_s: float = 30.0) -> None:
    """Until every member of the cluster has ``topic`` (a create reaches peers at once, or at
    their next probe when the forwarded create missed its deadline)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = cluster_call(endpoints, "TopicDescribe", {"name": topic})
        if all(not isinstance(r, TxmqError) for _m, r in got):
            return
        time.sleep(0.2)  # polling the members' topic lists, bounded by timeout_s
    raise DemoError(f"topic {topic} did not reach every broker within {timeout_s:.0f}s")


def undecided(endpoints: str, topic: str) -> tuple[int, int]:
    """(pending, dead) transactions of ``topic`` on every broker."""
    every = [
        t
        for m in members(endpoints)
        for t in call_pages(str(m["endpoint"]), "TxnList", {}, "transactions")
    ]
    rows = [t for t in every if t.get("topic") == topic]
    dead = sum(1 for t in rows if t.get("dead"))
    return len(rows) - dead, dead


def dead_lettered(endpoints: str, dlq: str, order_ids: set[str]) -> set[str]:
    """The orders whose message is in the group's DLQ on any broker (each keeps its own)."""
    found: set[str] = set()
    for m in members(endpoints):
        for order_id in sorted(order_ids - found):
            args = {"topic": dlq, "key": order_id}
            try:
                if call(str(m["endpoint"]), "MessageFind", args)["messages"]:
                    found.add(order_id)
            except NotFoundError:
                break  # no DLQ topic on this broker yet: nothing dead-lettered here
    return found


@contextmanager
def embedded_cluster(work: Path, brokers: int) -> Iterator[str]:
    """``txmq cluster up --brokers N`` on consecutive free ports; yields ``H:P1;H:P2...``
    and stops every broker on exit (SIGTERM to the cluster, which stops each cleanly)."""
    port = consecutive_free_ports(brokers)
    cmd = [sys.executable, "-m", "txmq.cli", "cluster", "up", "--brokers", str(brokers),
           "--data-dir", str(work / "cluster"), "--port", str(port),
           "--", *BROKER_FLAGS]  # fmt: skip
    with open(work / "cluster.log", "w") as log:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, text=True, env=child_env())
    try:
        yield ";".join(_listening(proc, brokers, work / "cluster.log"))
    finally:
        _stop_child(proc, stop_timeout_s=60)


def _listening(proc: subprocess.Popen[str], n: int, log_path: Path) -> list[str]:
    """The endpoints of ``cluster up``'s first ``n`` lines, read by a thread (a select on the
    pipe would miss lines already read ahead into the text buffer), waited for 60 s at most."""
    found: list[str] = []

    def read() -> None:
        for _ in range(n):
            line = proc.stdout.readline() if proc.stdout is not None else ""
            hit = re.search(r"listening on (\S+:\d+)", line)
            if hit is None:
                return
            found.append(hit.group(1))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(60.0)
    if len(found) < n:
        tail = log_path.read_text().strip().splitlines()[-3:]
        raise DemoError(f"the embedded cluster did not start ({' / '.join(tail)})")
    return found


def consecutive_free_ports(n: int) -> int:
    """A port P with P..P+n-1 free now (``cluster up`` takes consecutive ports)."""
    for _ in range(100):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        try:
            for p in range(port + 1, port + n):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", p))
        except OSError:
            continue
        if port + n <= 65535:
            return port
    raise DemoError(f"no {n} consecutive free ports for the embedded cluster")


def progress_bar() -> Progress:
    return Progress(
        TextColumn("{task.description:<44}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
    )


def _stop_child(proc: subprocess.Popen[str], *, stop_timeout_s: float) -> None:
    """SIGTERM a still-running broker or cluster, and SIGKILL it if it outlasts the timeout."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=stop_timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=30)
