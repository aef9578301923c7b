"""The benchmark scripts still run: each one, shrunk to a fraction of a second per phase, exits 0
and prints its figures. Why: benchmarks run by hand only, so a refactor that breaks one goes
unnoticed until someone needs its numbers (bench_broker once crashed after its first phase).
No figure is checked here: speed belongs to the benchmarks, not to the test suite.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.conftest import ROOT

BENCH = ROOT / "benchmarks"
RUN_TIMEOUT_S = 240


def run_bench(script: str, *args: str, tmp: Path) -> str:
    env = dict(os.environ, TXMQ_BENCH_DIR=str(tmp))
    out = subprocess.run(
        [sys.executable, str(BENCH / script), *args],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        env=env,
        cwd=tmp,
        check=False,
    )
    assert out.returncode == 0, f"{script} failed:\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}"
    return out.stdout


def test_bench_store_runs(tmp_path: Path) -> None:
    out = run_bench("bench_store.py", "--seconds", "0.2", "--recovery-mib", "2", tmp=tmp_path)
    assert "floor" in out


def test_bench_txn_runs(tmp_path: Path) -> None:
    args = ("--seconds", "0.2", "--slices", "1", "--threads", "1")
    assert run_bench("bench_txn.py", *args, tmp=tmp_path).strip()


def test_bench_broker_runs_every_baseline(tmp_path: Path) -> None:
    out = run_bench("bench_broker.py", "--seconds", "0.5", "--threads", "1", tmp=tmp_path)
    for figure in (
        "grpc.aio echo",
        "asyncio client",
        "send+commit p50",
        "CPU per transaction: broker",
        "CPU per plain message: broker",
        "per thread, loop/flusher/grpc/io µs: txmq ",
    ):
        assert figure in out, out
    # Both workloads reached the consumer and got a floor, driven alike and paced, to compare.
    assert out.count("ratio ") == 4, out
    assert out.count("floor paced to txmq's rate") == 2, out
    assert " 0 receipts" not in out, out


def test_compare_reports_server_cpu_per_message(tmp_path: Path) -> None:
    """The peer comparison's txmq leg (the peers need Debian packages; the full run is by
    hand): every phase prints the server's CPU per message beside its rate."""
    args = ("--systems", "txmq", "--rounds", "1", "--seconds", "0.5", "--no-save")
    out = run_bench("compare.py", *args, tmp=tmp_path)
    phases = [line for line in out.splitlines() if "producers:" in line and "send p50" in line]
    assert len(phases) == 2, out
    assert all("us/msg" in line for line in phases), out


@pytest.mark.spark
@pytest.mark.slow
def test_bench_spark_reports_both_rates(tmp_path: Path, java_runtime: Path) -> None:
    """Slow (~37 s, a Spark JVM and three pipelines): `make test-slow` runs it. The source and
    sink it times are covered in the default suite by tests/spark (test_pipeline,
    test_batch_and_errors, test_stream_crash); only the benchmark script itself waits for the
    slow run."""
    pytest.importorskip("pyspark")
    out = run_bench(
        "bench_spark.py",
        *("--messages", "300", "--rounds", "1", "--sink-rows", "100,1000"),
        tmp=tmp_path,
    )
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["messages"] == 300
    assert set(summary["sink"]) == {"100", "1000"}, "the sink beside plain batched sends"
    assert summary["sink_ratio_1000"] > 0 and summary["sink_time_growth_100_1000"] > 0
    assert set(summary["wall_s"]) == set(summary["in_batches_s"]) == {"txmq", "jsonl", "floor"}
    assert summary["ratio_wall"] > 0 and summary["ratio_in_batches"] > 0


def test_bench_auth_compares_with_the_open_broker(tmp_path: Path) -> None:
    out = run_bench("bench_auth.py", "--calls", "20", "--rounds", "1", tmp=tmp_path)
    assert "Guard.authenticate: cached signature" in out, out
    for method in ("QueryRoute", "SendMessage"):
        for mode in ("open", "acl", "acl+tls"):
            assert f"{method:<12} {mode:<8} broker CPU" in out, out


def test_bench_cluster_reports_the_ratio_and_the_projection(tmp_path: Path) -> None:
    args = ("--seconds", "0.3", "--threads", "1", "--rounds", "1")
    out = run_bench("bench_cluster.py", *args, tmp=tmp_path)
    assert "2 brokers / 1 broker" in out and "PROJECTION (not measured)" in out


@pytest.mark.slow
@pytest.mark.parametrize("compare", ["cluster", "floor"])
def test_bench_instructions_reports_the_ratio(tmp_path: Path, compare: str) -> None:
    """Slow (~1-2 min each: brokers under valgrind): `make test-slow` runs it."""
    import shutil

    if shutil.which("valgrind") is None:
        pytest.skip("valgrind is not installed (Debian package valgrind)")
    args = (compare, "--seconds", "3", "--rate", "2", "--rounds", "1")
    out = run_bench("bench_instructions.py", *args, tmp=tmp_path)
    pair = "2 brokers / 1 broker" if compare == "cluster" else "broker / floor"
    assert f"instructions per transaction, {pair}, paired per round" in out, out


@pytest.mark.slow
def test_bench_inprocess_reports_each_tree(tmp_path: Path) -> None:
    """Slow (~1 min: a broker's handlers under valgrind): `make test-slow` runs it."""
    import shutil

    if shutil.which("valgrind") is None:
        pytest.skip("valgrind is not installed (Debian package valgrind)")
    src = str(ROOT / "src")
    args = ("--src", src, "--src", src, "--rounds", "1", "--count", "3", "--warmup", "1")
    out = run_bench("bench_inprocess.py", *args, tmp=tmp_path)
    assert out.count("M instructions per transaction") == 2, out


def test_bench_replication_reports_the_sync_ratio(etcd_binary: Path, tmp_path: Path) -> None:
    # --baseline-src: this tree again, as the same-run A/B phase
    args = (
        "--seconds",
        "0.3",
        "--threads",
        "1",
        "--rounds",
        "1",
        "--baseline-src",
        str(BENCH.parent),
    )
    out = run_bench("bench_replication.py", *args, tmp=tmp_path)
    assert "SYNC 2 replicas / single broker throughput" in out, out
    assert "SYNC 2 / baseline SYNC 2 throughput" in out, out
    assert "CPU us/op: client" in out and "leader" in out and "follower" in out, out


def test_bench_groups_reports_start_and_failover(etcd_binary: Path, tmp_path: Path) -> None:
    out = run_bench("bench_groups.py", "--runs", "1", tmp=tmp_path)
    assert "2x2 run 0: listening lines" in out and "after kill -9" in out, out
