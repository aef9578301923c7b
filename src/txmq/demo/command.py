"""``txmq demo``: the order/inventory story end to end, with a consistency report.

Owns: running the story. An embedded broker (``python -m txmq.broker --port 0`` in a temporary
data directory, with a short transaction timeout so check-back happens within the demo) or a
running one (``--endpoints``); the order service (order_service.py) placing orders with
injected failures, a second order-service process killed with SIGKILL mid-transaction; the
inventory service (inventory_service.py) consuming idempotently with injected failures; the
Spark aggregation (spark_job.py, skipped with a note without Java 17+); and the report
(report.py). Exit code 0 only when every consistency check passes. ``--dashboard`` keeps
``txmq dashboard`` running on the story's broker (or cluster) while it plays.
Must not: reach into the broker's internals; everything goes through the official client and
the admin channel, as a user's services would.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import click

from txmq.dashboard.background import maybe_dashboard
from txmq.demo.report import Facts, activity_table, check_table, checks, fate_table
from txmq.demo.steps import console, embedded_broker, embedded_cluster
from txmq.demo.story import DemoRun


@click.command(short_help="Run the order/inventory story and check its consistency.")
@click.option("--orders", default=200, show_default=True, type=click.IntRange(1, 20_000))
@click.option("--seed", default=7, show_default=True, type=int, help="Seeds the failure plan.")
@click.option(
    "--endpoints",
    default=None,
    # Deliberately not read from TXMQ_ENDPOINTS: `make demo` must not wander off to whatever
    # broker a developer's shell points the other commands at.
    help="Use this running broker instead of an embedded one.",
)
@click.option(
    "--brokers",
    default=1,
    show_default=True,
    type=click.IntRange(1, 16),
    help="Embedded brokers: more than one runs the story on a cluster (txmq cluster up).",
)
@click.option("--no-spark", is_flag=True, help="Skip the Spark aggregation step.")
@click.option(
    "--secure",
    is_flag=True,
    help="Embedded broker with TLS (a throwaway CA) and an ACL; every client signs its calls.",
)
@click.option(
    "--orders-db",
    default=None,
    help="Order database: a SQLite path or a postgresql:// URL (default: SQLite in the work dir).",
)
@click.option(
    "--work-dir",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="Keep databases, logs and Parquet output here (default: a temporary directory).",
)
@click.option(
    "--dashboard", is_flag=True, help="Run the web dashboard during the story, to watch it."
)
@click.option(
    "--dashboard-port",
    default=8080,
    show_default=True,
    type=click.IntRange(0, 65535),
    help="Port of --dashboard on 127.0.0.1 (0 picks a free one).",
)
def demo(
    orders: int,
    seed: int,
    endpoints: str | None,
    brokers: int,
    no_spark: bool,
    secure: bool,
    orders_db: str | None,
    work_dir: Path | None,
    dashboard: bool,
    dashboard_port: int,
) -> None:
    """Run the order/inventory story end to end and print a consistency report.

    Exit code 0 when consistent, 1 when inconsistent or a step failed, 3 when --endpoints
    does not answer.
    """
    started = time.monotonic()
    work = work_dir or Path(tempfile.mkdtemp(prefix="txmq-demo-"))
    work.mkdir(parents=True, exist_ok=True)
    ok = False
    try:
        run = DemoRun(orders=orders, seed=seed, work=work, orders_db=orders_db, spark=not no_spark)
        if dashboard and secure:
            raise click.UsageError("--dashboard does not hold the --secure demo's admin keys")
        story = _watched(run, dashboard_port if dashboard else None, work)
        if (endpoints is not None or secure) and brokers > 1:
            raise click.UsageError("--brokers starts its own plain cluster; drop it")
        if endpoints is None and secure:
            facts = _run_secure(run, work)
        elif endpoints is None and brokers > 1:
            console.print(f"[bold]starting an embedded cluster of {brokers} brokers[/bold]")
            with embedded_cluster(work, brokers) as ep:
                facts = story(ep, True)
        elif endpoints is None:
            console.print("[bold]starting an embedded broker[/bold]")
            with embedded_broker(work / "broker", work / "broker.log") as ep:
                facts = story(ep, True)
        else:
            if secure:
                raise click.UsageError("--secure starts its own broker; drop --endpoints")
            facts = story(endpoints, False)
        ok = print_report(facts, time.monotonic() - started)
    finally:
        if work_dir is None and (ok or not any(work.iterdir())):
            shutil.rmtree(work, ignore_errors=True)
        elif work_dir is None:
            # Whatever went wrong, the databases and logs are the evidence: keep them.
            console.print(f"kept the databases and logs in {work}")
    if not ok:
        sys.exit(1)


def _watched(run: DemoRun, port: int | None, work: Path) -> Callable[[str, bool], Facts]:
    """``run.run``, with a dashboard on the story's endpoints while it plays when ``port``."""

    def story(endpoints: str, embedded: bool) -> Facts:
        with maybe_dashboard(endpoints, port=port, log=work / "dashboard.log") as url:
            if url is not None:
                console.print(f"[bold]dashboard at {url}/ [/bold] (open it to watch the story)")
            return run.run(endpoints, embedded=embedded)

    return story


def _run_secure(run: DemoRun, work: Path) -> Facts:
    from txmq.demo.secure import probes, secure_setup

    with secure_setup(work) as (flags, users):
        console.print("[bold]starting an embedded broker with TLS and an ACL[/bold]")
        with embedded_broker(work / "broker", work / "broker.log", flags) as ep:
            for tried, answer in probes(ep, users, "demo-probe"):
                console.print(f"refused as it should be: {tried} -> {answer}")
            return run.run(ep, embedded=True)


def print_report(f: Facts, elapsed_s: float) -> bool:
    results = checks(f)
    console.print(fate_table(f))
    console.print(activity_table(f))
    console.print(check_table(results))
    ok = all(c.ok for c in results)
    verdict = "[bold green]CONSISTENT[/bold green]" if ok else "[bold red]INCONSISTENT[/bold red]"
    console.print(f"{verdict}: {len(f.db_orders)} orders committed, {elapsed_s:.1f}s")
    return ok
