"""One run of ``txmq demo`` against a broker: place orders, let check-back and consumers settle,
run the Spark step, and gather the facts the report checks.

Owns: the order of the story and its bounded waits. The services are the demo's own example
applications (order_service.py, inventory_service.py in this package).
Must not: judge the outcome (report.py does) or print the report (command.py does).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from txmq import limits
from txmq.client.admin import call
from txmq.demo import inventory_service, order_service
from txmq.demo.report import Facts
from txmq.demo.steps import (
    SETTLE_S,
    DemoError,
    child_env,
    console,
    dead_lettered,
    progress_bar,
    run_spark,
    spark_skip_reason,
    topic_messages,
    undecided,
    wait_topic,
)
from txmq.model import DLQ_PREFIX

POLL_S = 0.5


class DemoRun:
    def __init__(
        self, *, orders: int, seed: int, work: Path, orders_db: str | None, spark: bool
    ) -> None:
        self.seed = seed
        self.work = work
        self.spark = spark
        self.orders_db_url = orders_db or str(work / "orders.db")
        # Order ids carry the run id so runs sharing a broker or a database never mix.
        self.run_id = f"{time.time_ns() // 1_000_000 % 10**9:09d}"
        self.prefix = f"o-{self.run_id}-"
        self.plan: list[Any] = order_service.plan_orders(orders, seed, self.run_id)

    def run(self, endpoints: str, *, embedded: bool) -> Facts:
        """The whole story; returns the facts for the report."""
        # A fresh embedded broker can use the plain name; a shared one gets a topic per run so
        # an earlier run's messages never reach this run's consumer group.
        topic = order_service.TOPIC if embedded else f"{order_service.TOPIC}-{self.run_id}"
        group = inventory_service.GROUP if embedded else f"{inventory_service.GROUP}-{self.run_id}"
        call(endpoints, "TopicCreate", {"name": topic, "queues": 4, "type": "transaction"})
        wait_topic(endpoints, topic)  # on every broker of a cluster before anyone sends
        console.print(f"broker at {endpoints}; topic {topic}")
        db = order_service.OrderDb(self.orders_db_url)
        service = order_service.OrderService(endpoints, db, topic=topic)
        inventory = inventory_service.InventoryService(
            endpoints, self.work / "inventory.db", topic=topic, group=group, seed=self.seed
        )
        stock_before = sum(inventory.db.stock().values())
        service.start()
        inventory.start()
        try:
            placed = self._place_all(endpoints, topic, service)
            self._settle(endpoints, topic, DLQ_PREFIX + group, db, inventory)
        finally:
            inventory.stop()
            service.stop()
        if inventory.error is not None:
            raise DemoError(f"the inventory service failed: {inventory.error!r}")
        facts = self._facts(endpoints, topic, DLQ_PREFIX + group, db, inventory, placed)
        facts.stock_deducted = sum(inventory.db.stock().values()) - stock_before
        facts.check_answers = dict(service.checker.answers)
        self._spark(endpoints, topic, facts)
        return facts

    def _place_all(self, endpoints: str, topic: str, service: Any) -> list[Any]:
        crash_fates = order_service.CRASH_FATES
        doomed = [o for o in self.plan if o.fate in crash_fates]
        mine = [o for o in self.plan if o.fate not in crash_fates]
        child = self._crash_child(endpoints, topic, doomed) if doomed else None
        placed = []
        with progress_bar() as progress:
            task = progress.add_task("order service: placing orders", total=len(mine))
            for order in mine:
                placed.append(service.place(order))
                progress.advance(task)
        if child is not None:
            self._wait_crashed(child, len(doomed))
        return placed

    def _crash_child(self, endpoints: str, topic: str, doomed: list[Any]) -> subprocess.Popen[str]:
        """A second order-service process that sends half messages and dies with SIGKILL."""
        batch = self.work / "crash-batch.json"
        batch.write_text(json.dumps([asdict(o) for o in doomed]))
        args = ["--endpoints", endpoints, "--db", self.orders_db_url, "--topic", topic]
        with open(self.work / "crash-child.log", "w") as log:
            return subprocess.Popen(
                [sys.executable, "-m", order_service.__name__, *args, "--crash-batch", str(batch)],
                stdout=log,
                stderr=subprocess.STDOUT,
                text=True,
                env=child_env(),
            )

    def _wait_crashed(self, child: subprocess.Popen[str], count: int) -> None:
        try:
            code = child.wait(timeout=60)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait(timeout=30)
            raise DemoError("the crashing order service did not finish in 60 s") from None
        if code != -9:
            log = (self.work / "crash-child.log").read_text().strip().splitlines()[-3:]
            raise DemoError(f"the crashing order service exited {code}: {' / '.join(log)}")
        console.print(
            f"order service instance B: {count} half messages sent, then killed with SIGKILL "
            "before deciding"
        )

    def _settle(self, endpoints: str, topic: str, dlq: str, db: Any, inventory: Any) -> bool:
        """Wait (bounded) until no transaction is undecided and every committed order is
        deducted or dead-lettered. Returns False at the deadline; the report shows what's off."""
        in_doubt = sum(1 for o in self.plan if o.fate in ("hang", *order_service.CRASH_FATES))
        # Bounded, but long enough for big runs: consumers handle well over 50 orders a second.
        settle_s = SETTLE_S + len(self.plan) / 50
        deadline = time.monotonic() + settle_s
        with progress_bar() as progress:
            checks = progress.add_task("check-back: in-doubt orders decided", total=in_doubt)
            handled = progress.add_task("inventory: committed orders handled", total=None)
            while time.monotonic() < deadline:
                pending, _dead = undecided(endpoints, topic)
                committed = set(db.orders(self.prefix))
                missing = committed - set(inventory.db.processed(self.prefix))
                dead: set[str] = set()
                if len(missing) <= limits.DEMO_DLQ_PROBE_MAX:
                    dead = dead_lettered(endpoints, dlq, missing)
                progress.update(checks, completed=max(0, in_doubt - pending))
                progress.update(
                    handled, total=len(committed), completed=len(committed) - len(missing - dead)
                )
                if pending == 0 and missing == dead:
                    return True
                if inventory.error is not None:
                    return False
                time.sleep(POLL_S)
        console.print(f"[yellow]not settled after {settle_s:.0f}s[/yellow]")
        return False

    def _facts(
        self, endpoints: str, topic: str, dlq: str, db: Any, inventory: Any, placed: list[Any]
    ) -> Facts:
        committed = set(db.orders(self.prefix))
        processed = inventory.db.processed(self.prefix)
        pending, dead_txns = undecided(endpoints, topic)
        return Facts(
            fates={o.order_id: o.fate for o in self.plan},
            qty={o.order_id: o.qty for o in self.plan},
            db_orders=committed,
            processed={o: at for o, (_sku, _qty, at) in processed.items()},
            processed_rows=inventory.db.processed_rows(self.prefix),
            stock_deducted=0,
            dead_lettered=dead_lettered(endpoints, dlq, committed - set(processed)),
            topic_messages=topic_messages(endpoints, topic),
            undecided=pending,
            dead_transactions=dead_txns,
            decided_at_ms={
                p.order.order_id: p.decided_at_ms for p in placed if p.decision == "commit"
            },
            send_latency_ms=[p.latency_ms for p in placed],
            inventory=dict(vars(inventory.stats)),
        )

    def _spark(self, endpoints: str, topic: str, facts: Facts) -> None:
        if not self.spark:
            facts.spark_note = "skipped (--no-spark)"
            return
        reason = spark_skip_reason()
        if reason is not None:
            console.print(f"[yellow]skipping the Spark step: {reason}[/yellow]")
            facts.spark_note = f"skipped: {reason}"
            return
        with console.status("Spark: aggregating the order stream, reconciling it with both DBs"):
            try:
                sqlite_orders = None if "://" in self.orders_db_url else Path(self.orders_db_url)
                facts.spark = run_spark(
                    endpoints, topic, self.work, sqlite_orders, self.work / "inventory.db"
                )
            except DemoError as exc:
                facts.spark_error = str(exc)
