"""The demo's Spark step in a child process of ``txmq demo``: the aggregation and, when the
order database is SQLite, the reconciliation, in one session; prints one JSON line.

    python -m txmq.demo.spark_job ENDPOINTS OUT_DIR TOPIC ORDERS_DB|"" INVENTORY_DB

Owns: running pipeline.py's two jobs in one session. Must not: judge the result (report.py).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from txmq.demo.pipeline import aggregate_orders, reconcile
from txmq.errors import TxmqError
from txmq.spark.session import explain, local_session, txmq_cause


def main(argv: Sequence[str]) -> None:
    """Runs the jobs; a txmq error (no Java, workers without txmq) ends it with one
    ``txmq: ...`` line on stderr, which the demo shows (steps.run_spark)."""
    try:
        run(argv)
    except Exception as exc:  # converted to one line below, or raised as it is
        line = explain(exc) or (exc if isinstance(exc, TxmqError) else txmq_cause(exc))
        if line is None:
            raise
        print(f"txmq: {line}", file=sys.stderr, flush=True)
        raise SystemExit(2) from None


def run(argv: Sequence[str]) -> None:
    endpoints, out_dir, topic, orders_db, inventory_db = argv
    out = Path(out_dir)
    spark = local_session("txmq-demo")
    rows = aggregate_orders(
        endpoints, out / "per-sku-minute.parquet", out / "checkpoint", topic, spark=spark
    )
    result: dict[str, Any] = {"rows": rows}
    if orders_db:
        report = reconcile(endpoints, Path(orders_db), Path(inventory_db), topic, spark=spark)
        result["mismatches"] = report.mismatches
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:6])
