"""`make bench`: every benchmark in turn, each printing its ratios against its own baseline."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).parent

for script in ("bench_store.py", "bench_txn.py", "bench_broker.py", "bench_spark.py"):
    print(f"\n=== {script} ===", flush=True)
    subprocess.run([sys.executable, str(HERE / script)], check=True)
