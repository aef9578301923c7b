"""Spark pipeline: the committed order stream -> Parquet (exactly-once, Trigger.AvailableNow)
-> quantity and order count per SKU per minute in Parquet. Needs Java 17+.

    .venv/bin/python examples/pipeline/orders_per_sku.py --endpoints 127.0.0.1:8081 --out /tmp/agg
    .venv/bin/python -m examples.pipeline.orders_per_sku ...        (from the repository root)

``txmq demo`` loads this file and calls ``aggregate_orders``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from txmq.spark.pipeline import ORDER_TOPIC_DEFAULT, aggregate_orders

__all__ = ["aggregate_orders", "main"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--endpoints", default="127.0.0.1:8081")
    ap.add_argument("--topic", default=ORDER_TOPIC_DEFAULT)
    ap.add_argument("--out", type=Path, default=Path("/tmp/txmq-per-sku-minute"))
    args = ap.parse_args()
    out = args.out / "per-sku-minute.parquet"
    rows = aggregate_orders(args.endpoints, out, args.out / "checkpoint", args.topic)
    print(f"wrote {rows} (sku, minute) rows to {out}")


if __name__ == "__main__":
    main()
