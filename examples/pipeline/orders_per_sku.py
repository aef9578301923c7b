"""Spark pipeline: the committed order stream -> Parquet (exactly-once, AvailableNow) ->
quantity per SKU per minute in Parquet. Needs Java 17+.

    .venv/bin/python examples/pipeline/orders_per_sku.py --endpoints 127.0.0.1:8081 --out /tmp/agg
"""

from __future__ import annotations

import argparse
from pathlib import Path

from txmq.spark.pipeline import aggregate_orders


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--endpoints", default="127.0.0.1:8081")
    ap.add_argument("--out", type=Path, default=Path("/tmp/txmq-per-sku-minute"))
    args = ap.parse_args()
    rows = aggregate_orders(
        args.endpoints, args.out / "per-sku-minute.parquet", args.out / "checkpoint"
    )
    print(f"wrote {rows} (sku, minute) rows to {args.out}")


if __name__ == "__main__":
    main()
