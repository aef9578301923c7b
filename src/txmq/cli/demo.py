"""``txmq demo``: the seeds' story end to end, with a consistency report.

An embedded broker (a subprocess in a temporary data directory, or ``--endpoints``), the order
service placing orders with injected failures, the inventory service consuming idempotently
with injected failures, optionally the Spark pipeline aggregating the order stream, and a
report proving nothing was lost, duplicated or leaked. Exit code 0 only when consistent.
"""

from __future__ import annotations

import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from txmq.cli.admin_client import call
from txmq.errors import NotFoundError

console = Console()
DLQ = "%DLQ%inventory-service"


def _start_broker(data_dir: Path) -> tuple[subprocess.Popen[str], str]:
    cmd = [
        sys.executable,
        "-m",
        "txmq.broker",
        "--data-dir",
        str(data_dir),
        "--port",
        "0",
        "--transaction-timeout-ms",
        "1500",
        "--transaction-check-interval-ms",
        "1000",
        "--delivery-attempts-max",
        "3",
        "--retry-backoff-initial-ms",
        "500",
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if "listening on" not in line:
        proc.kill()
        raise click.ClickException(f"the embedded broker did not start: {line!r}")
    return proc, line.strip().rsplit(" ", 1)[1]


def _dead_lettered(endpoints: str, order_ids: set[str]) -> set[str]:
    """Which of these orders' messages are in the inventory group's dead-letter queue."""
    found: set[str] = set()
    for order_id in order_ids:
        try:
            r = call(endpoints, "MessageFind", {"topic": DLQ, "key": order_id})
        except NotFoundError:
            continue
        if r["messages"]:
            found.add(order_id)
    return found


def _pct(values: list[float], p: float) -> float:
    if not values:
        return 0.0
    s = sorted(values)
    return s[min(len(s) - 1, int(p * len(s)))]


@click.command()
@click.option("--orders", default=200, show_default=True, type=click.IntRange(1, 100_000))
@click.option("--seed", default=7, show_default=True, type=int)
@click.option(
    "--endpoints",
    envvar="TXMQ_ENDPOINTS",
    default=None,
    help="Use a running broker instead of an embedded one.",
)
@click.option("--no-spark", is_flag=True, help="Skip the Spark aggregation step.")
@click.option(
    "--work-dir",
    type=click.Path(path_type=Path),
    default=None,
    help="Where databases and Parquet output go (default: a temporary directory).",
)
def demo(
    orders: int, seed: int, endpoints: str | None, no_spark: bool, work_dir: Path | None
) -> None:
    """Run the order/inventory story end to end and print a consistency report."""
    from txmq.demo.inventory import Inventory
    from txmq.demo.orders import place_orders, shutdown_producers

    tmp = Path(tempfile.mkdtemp(prefix="txmq-demo-"))
    work = work_dir or tmp
    work.mkdir(parents=True, exist_ok=True)
    proc = None
    started = time.monotonic()
    try:
        if endpoints is None:
            console.print("[bold]starting an embedded broker[/bold]")
            proc, endpoints = _start_broker(tmp / "broker")
        console.print(f"broker at {endpoints}")
        inventory = Inventory(endpoints, work / "inventory.db", seed=seed)
        inventory.start()
        with Progress(console=console) as progress:
            task = progress.add_task("placing orders", total=orders)
            stats = place_orders(
                endpoints,
                work / "orders.db",
                orders,
                seed=seed,
                progress=lambda: progress.advance(task),
            )
            wait = progress.add_task("waiting for check-back and consumers", total=None)
            consistent_at = _wait_settled(endpoints, work, deadline_s=120)
            progress.update(wait, completed=1, total=1)
        checks = shutdown_producers()
        inventory.stop()
        spark_rows = None
        if not no_spark:
            spark_rows = _spark_step(endpoints, work)
        report, ok = _report(endpoints, work, stats, inventory.stats, checks, spark_rows)
        console.print(report)
        elapsed = time.monotonic() - started
        if ok and consistent_at:
            console.print(f"[bold green]CONSISTENT[/bold green] in {elapsed:.1f}s")
        else:
            console.print(f"[bold red]INCONSISTENT[/bold red] after {elapsed:.1f}s")
            sys.exit(1)
    finally:
        if proc is not None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)
        if work_dir is None or tmp != work:
            shutil.rmtree(tmp, ignore_errors=True)


def _counts(work: Path) -> tuple[set[str], set[str]]:
    orders = {r[0] for r in sqlite3.connect(work / "orders.db").execute("SELECT id FROM orders")}
    inv = sqlite3.connect(work / "inventory.db")
    processed = {r[0] for r in inv.execute("SELECT order_id FROM processed")}
    return orders, processed


def _wait_settled(endpoints: str, work: Path, *, deadline_s: float) -> bool:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        orders, processed = _counts(work)
        pending = call(endpoints, "TxnList", {})["transactions"]
        undecided = [t for t in pending if not t.get("dead")]
        if not undecided and not (
            orders - processed - _dead_lettered(endpoints, orders - processed)
        ):
            return True
        time.sleep(0.5)
    return False


def _spark_step(endpoints: str, work: Path) -> int | None:
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        console.print(
            "[yellow]Java 17+ not found: skipping the Spark step (install a JDK "
            "or pass --no-spark)[/yellow]"
        )
        return None
    try:
        from txmq.spark.pipeline import aggregate_orders
    except ImportError as exc:
        console.print(
            f"[yellow]Spark extra not installed ({exc}); skipping the Spark step "
            "(pip install 'txmq[spark]')[/yellow]"
        )
        return None
    console.print("[bold]Spark: aggregating the committed order stream per SKU and minute[/bold]")
    rows: int = aggregate_orders(endpoints, work / "per-sku-minute.parquet", work / "checkpoint")
    return rows


def _report(
    endpoints: str, work: Path, stats: Any, inv: Any, checks: int, spark_rows: int | None
) -> tuple[Table, bool]:
    orders, processed = _counts(work)
    dead = _dead_lettered(endpoints, orders - processed)
    leaked = processed - orders
    lost = len(orders - processed - dead)
    latencies = [
        inv.received_at_ms[o] - stats.sent_at_ms[o]
        for o in inv.received_at_ms
        if o in stats.sent_at_ms
    ]
    t = Table(title="txmq demo: consistency report")
    t.add_column("measure")
    t.add_column("value", justify="right")
    rows: list[tuple[str, Any]] = [
        ("orders committed by the producer", stats.committed),
        ("orders rolled back (local transaction failed)", stats.rolled_back),
        ("orders left undecided (resolved by check-back)", stats.left_to_check_back),
        ("check-back calls answered by the order service", checks),
        ("orders in the order database", len(orders)),
        ("orders deducted by the inventory service", len(processed)),
        ("messages dead-lettered (poison SKU)", len(dead)),
        ("redeliveries skipped as duplicates", inv.duplicates_skipped),
        ("transient consumer failures (retried)", inv.transient_failures),
        ("deducted but never ordered (leaked)", len(leaked)),
        ("ordered but neither deducted nor dead-lettered (lost)", lost),
        ("commit -> deduct latency p50 (ms)", f"{_pct(latencies, 0.5):.1f}"),
        ("commit -> deduct latency p99 (ms)", f"{_pct(latencies, 0.99):.1f}"),
    ]
    if spark_rows is not None:
        rows.append(("Spark: (sku, minute) rows written to Parquet", spark_rows))
    for k, v in rows:
        t.add_row(k, str(v))
    ok = not leaked and lost == 0
    return t, ok
