"""The seeds' story as a script: order service + inventory service against a running broker.

    .venv/bin/txmq broker --data-dir /tmp/txmq --port 8081 &
    .venv/bin/python examples/order_inventory.py --endpoints 127.0.0.1:8081 --orders 50

The services live in txmq.demo (orders.py: local SQLite transaction + transactional message with a
TransactionChecker answering from the order table; inventory.py: idempotent consumer storing
processed message ids with the stock update in one local transaction).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from txmq.demo.inventory import Inventory
from txmq.demo.orders import place_orders, shutdown_producers


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--endpoints", default="127.0.0.1:8081")
    ap.add_argument("--orders", type=int, default=50)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="txmq-example-"))
    inventory = Inventory(args.endpoints, work / "inventory.db", seed=args.seed)
    inventory.start()
    stats = place_orders(args.endpoints, work / "orders.db", args.orders, seed=args.seed)
    time.sleep(10)  # let check-back resolve the orders left undecided
    checks = shutdown_producers()
    inventory.stop()
    print(
        f"committed {stats.committed}, rolled back {stats.rolled_back}, "
        f"left for check-back {stats.left_to_check_back} ({checks} checks answered), "
        f"deduct messages handled {inventory.stats.deliveries}; databases in {work}"
    )


if __name__ == "__main__":
    main()
