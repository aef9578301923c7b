"""The demo's consistency report: from facts gathered after the run to checks and rich tables.

Owns: deciding whether a demo run was consistent (orders committed = messages committed =
messages deducted or dead-lettered, stock deducted = quantity ordered, nothing rolled back ever
deducted, no transaction left undecided, every injected fate ending as it must) and rendering
that as tables. Pure: no I/O, so tests can feed it facts directly.
Must not: talk to the broker or the databases (demo.py gathers the facts).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from rich.table import Table

# What each injected fate must end as: is the order committed (row + visible message)?
FATE_COMMITS = {
    "ok": True,
    "local-error": False,
    "slow-local": True,
    "hang": True,
    "crash-after-db": True,
    "crash-before-db": False,
}
FATE_STORY = {
    "ok": "local commit, then commit",
    "local-error": "local transaction raised: rollback",
    "slow-local": "slower than the timeout: check-back told 'ask later', then commit",
    "hang": "local commit, decision never sent: check-back commits",
    "crash-after-db": "local commit, SIGKILL before deciding: check-back commits",
    "crash-before-db": "SIGKILL inside the local transaction: check-back rolls back",
}


@dataclass(frozen=True, slots=True)
class SparkResult:
    rows: int  # (sku, minute) rows in the aggregate
    orders: int  # orders counted in the aggregate
    qty: int  # quantity summed in the aggregate
    # The reconciliation job's mismatches by kind (None: not run, e.g. orders in PostgreSQL).
    mismatches: dict[str, list[str]] | None = None


@dataclass
class Facts:
    """Everything the report needs, gathered after the run settled (or gave up)."""

    fates: dict[str, str]  # order id -> injected fate
    qty: dict[str, int]  # order id -> quantity ordered
    db_orders: set[str]  # committed in the order database
    processed: dict[str, float]  # order id -> deducted at (ms), from the inventory database
    processed_rows: int  # rows in the processed table for this run (duplicates would show)
    stock_deducted: int  # sum of the stock table's deductions for this run's SKUs
    dead_lettered: set[str]
    topic_messages: int  # committed messages the broker holds in the demo topic
    undecided: int  # transactions of the demo topic still pending on the broker
    dead_transactions: int  # rolled back at max checks: none expected
    decided_at_ms: dict[str, float] = field(default_factory=dict)  # producer commits
    send_latency_ms: list[float] = field(default_factory=list)
    check_answers: dict[str, int] = field(default_factory=dict)
    inventory: dict[str, int] = field(default_factory=dict)
    spark: SparkResult | None = None
    spark_note: str = ""
    spark_error: str = ""


@dataclass(frozen=True, slots=True)
class Check:
    name: str
    expected: str
    actual: str
    ok: bool


def percentile(values: list[float], p: float) -> float:
    """Nearest-rank percentile; 0.0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, min(len(ordered), math.ceil(p * len(ordered))))
    return ordered[rank - 1]


def _check(name: str, expected: object, actual: object) -> Check:
    return Check(name, str(expected), str(actual), expected == actual)


def checks(f: Facts) -> list[Check]:
    committed = len(f.db_orders)
    deducted = set(f.processed) & f.db_orders
    should_commit = {o for o, fate in f.fates.items() if FATE_COMMITS[fate]}
    qty_due = sum(f.qty[o] for o in f.db_orders - f.dead_lettered)
    out = [
        _check(
            "orders committed (order DB) = committed messages (broker)", committed, f.topic_messages
        ),
        _check(
            "committed messages = deducted + dead-lettered",
            committed,
            len(deducted) + len(f.dead_lettered & f.db_orders),
        ),
        _check("stock deducted = quantity of deducted orders", qty_due, f.stock_deducted),
        _check(
            "deductions without a committed order (leaks)", 0, len(set(f.processed) - f.db_orders)
        ),
        _check("messages deducted twice", 0, f.processed_rows - len(f.processed)),
        _check(
            "orders ending as their injected fate requires",
            len(f.fates),
            _fate_matches(f, should_commit),
        ),
        _check("transactions left undecided on the broker", 0, f.undecided),
        _check("transactions rolled back at max checks", 0, f.dead_transactions),
    ]
    if f.spark_error:
        out.append(Check("Spark step", "ran", f.spark_error, False))
    if f.spark is not None and f.spark.mismatches is not None:
        out.append(_check("Spark reconciliation: mismatches", 0, _spark_mismatches(f)))
    if f.spark is not None:
        out.append(
            _check("Spark: orders in the aggregate = committed orders", committed, f.spark.orders)
        )
        out.append(
            _check(
                "Spark: quantity in the aggregate = quantity committed",
                sum(f.qty[o] for o in f.db_orders),
                f.spark.qty,
            )
        )
    return out


def _spark_mismatches(f: Facts) -> int:
    """Mismatches Spark found for this run's orders (a reused database may hold earlier runs'),
    except orders never deducted because they were dead-lettered (the poison SKU:
    undeliverable by design, and accounted for above)."""
    assert f.spark is not None and f.spark.mismatches is not None
    total = 0
    for kind, ids in f.spark.mismatches.items():
        mine = [i for i in ids if i in f.fates]
        if kind == "ordered but not deducted":
            mine = [i for i in mine if i not in f.dead_lettered]
        total += len(mine)
    return total


def _fate_matches(f: Facts, should_commit: set[str]) -> int:
    return sum(1 for o in f.fates if (o in f.db_orders) == (o in should_commit))


def fate_table(f: Facts) -> Table:
    t = Table(title="orders by injected fate")
    for col in ("fate", "what happens", "orders", "committed", "deducted", "dead-lettered"):
        t.add_column(col, justify="left" if col in ("fate", "what happens") else "right")
    for fate, story in FATE_STORY.items():
        ids = {o for o, x in f.fates.items() if x == fate}
        t.add_row(
            fate,
            story,
            str(len(ids)),
            str(len(ids & f.db_orders)),
            str(len(ids & set(f.processed))),
            str(len(ids & f.dead_lettered)),
        )
    return t


def check_table(results: list[Check]) -> Table:
    t = Table(title="consistency checks")
    t.add_column("check")
    t.add_column("expected", justify="right")
    t.add_column("actual", justify="right")
    t.add_column("", justify="center")
    for c in results:
        t.add_row(c.name, c.expected, c.actual, "[green]ok[/green]" if c.ok else "[red]FAIL[/red]")
    return t


def activity_table(f: Facts) -> Table:
    lag = [f.processed[o] - f.decided_at_ms[o] for o in f.decided_at_ms if o in f.processed]
    t = Table(title="what happened on the way")
    t.add_column("measure")
    t.add_column("value", justify="right")
    rows: list[tuple[str, object]] = [
        (f"check-back answers: {k}", v) for k, v in sorted(f.check_answers.items())
    ]
    rows += [(f"inventory: {k.replace('_', ' ')}", v) for k, v in f.inventory.items()]
    for name, values in (
        ("half + local txn + decision", f.send_latency_ms),
        ("commit -> deducted", lag),
    ):
        for p in (0.5, 0.95, 0.99):
            rows.append((f"latency {name} p{round(p * 100)} (ms)", f"{percentile(values, p):.1f}"))
    if f.spark is not None:
        rows.append(("Spark: (sku, minute) rows written to Parquet", f.spark.rows))
    elif f.spark_note:
        rows.append(("Spark", f.spark_note))
    for k, v in rows:
        t.add_row(k, str(v))
    return t
