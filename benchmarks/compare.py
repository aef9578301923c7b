"""Side-by-side benchmark: txmq against what users would pick instead for "database commit +
message publish must be atomic", on this machine, in one run.

Workload: 1 KiB messages; (a) one producer sending one durable transactional message at a time;
(b) 32 concurrent producers (and PostgreSQL with 8 connections, the goal's reference point);
(c) end-to-end latency from the producer's commit to the consumer's receipt. Each peer is started
here on 127.0.0.1 with its own temporary data directory and stopped afterwards; absent peers are
skipped with a note. Durability settings are printed: all run fsync-per-ack. The raw fsync floor
of the disk is measured in the same run so every figure is also a ratio to it.

    make bench-compare            # or: .venv/bin/python benchmarks/compare.py --seconds 5
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import platform
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
from _common import fsync_floor  # noqa: E402
from peers import postgres_peer, redis_peer, txmq_peer  # noqa: E402
from peers.common import Result  # noqa: E402

ABSENT = {
    "rabbitmq (publisher confirms)": "rabbitmq-server is not installed here; skipped",
    "nats jetstream (msg-id dedup)": "nats-server is not installed here; skipped",
}


def _describe() -> str:
    mem = Path("/proc/meminfo").read_text().split("\n")[0].split()[1]
    cpus = subprocess.run(["nproc"], capture_output=True, text=True).stdout.strip()
    return (
        f"{cpus} cores, {int(mem) // 1024 // 1024} GiB RAM, kernel {platform.release()}, "
        f"Python {platform.python_version()}"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=5.0, help="per scenario")
    ap.add_argument("--out", type=Path, default=HERE / "results")
    args = ap.parse_args()
    from rich.console import Console
    from rich.table import Table

    console = Console()
    floor, f50, f99 = fsync_floor(args.seconds)
    console.print(f"raw write+fdatasync floor: {floor:.0f}/s (p50 {f50:.2f} ms, p99 {f99:.2f} ms)")
    results: list[Result] = []
    durability: dict[str, str] = {}
    notes = dict(ABSENT)
    peers = [
        ("txmq", txmq_peer, "", [1, 32]),
        ("postgresql outbox", postgres_peer, postgres_peer.available(), [1, 8, 32]),
        ("redis streams", redis_peer, redis_peer.available(), [1, 32]),
    ]
    for name, mod, missing, threads in peers:
        if missing:
            notes[name] = missing
            continue
        console.print(f"running {name} ...")
        durability[name] = mod.DURABILITY
        results.extend(mod.run(threads, args.seconds))
    table = Table(title=f"txmq vs peers, 1 KiB, fsync per ack ({_describe()})")
    for col in (
        "system",
        "scenario",
        "msg/s",
        "x fsync floor",
        "send p50 ms",
        "send p99 ms",
        "commit->receipt p50 ms",
        "p99 ms",
        "server CPU s / 1k msg",
    ):
        table.add_column(col)
    for r in results:
        table.add_row(
            r.system,
            r.scenario,
            f"{r.rate:.0f}",
            f"{r.rate / floor:.2f}",
            f"{r.p50_ms:.2f}",
            f"{r.p99_ms:.2f}",
            f"{r.e2e_p50_ms:.1f}",
            f"{r.e2e_p99_ms:.1f}",
            f"{r.cpu_s_per_1k:.2f}",
        )
    console.print(table)
    for k, v in durability.items():
        console.print(f"durability, {k}: {v}")
    for k, v in notes.items():
        console.print(f"[yellow]{k}: {v}[/yellow]")
    _save(args.out, floor, results, durability, notes)


def _save(
    out: Path,
    floor: float,
    results: list[Result],
    durability: dict[str, str],
    notes: dict[str, str],
) -> None:
    out.mkdir(parents=True, exist_ok=True)
    stem = out / f"{dt.date.today().isoformat()}-{platform.node()}"
    data = {
        "machine": _describe(),
        "fsync_floor_per_s": floor,
        "results": [dataclasses.asdict(r) for r in results],
        "durability": durability,
        "skipped": notes,
    }
    stem.with_suffix(".json").write_text(json.dumps(data, indent=1))
    lines = [
        f"# Comparison benchmark, {dt.date.today()}",
        "",
        f"Machine: {_describe()}",
        "",
        f"Raw write+fdatasync floor: {floor:.0f}/s",
        "",
        "| system | scenario | msg/s | x floor | send p99 ms | commit->receipt p99 ms | CPU s/1k |",
        "|---|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {r.system} | {r.scenario} | {r.rate:.0f} | {r.rate / floor:.2f} | "
        f"{r.p99_ms:.2f} | {r.e2e_p99_ms:.1f} | {r.cpu_s_per_1k:.2f} |"
        for r in results
    ]
    lines += ["", "Durability:"] + [f"- {k}: {v}" for k, v in durability.items()]
    lines += ["", "Skipped:"] + [f"- {k}: {v}" for k, v in notes.items()]
    stem.with_suffix(".md").write_text("\n".join(lines) + "\n")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, ax = plt.subplots(figsize=(9, 4))
    labels = [f"{r.system}\n{r.scenario}" for r in results]
    ax.bar(labels, [r.rate for r in results])
    ax.axhline(floor, linestyle="--", color="gray", label="raw fsync floor")
    ax.set_ylabel("transactional messages / s")
    ax.legend()
    plt.xticks(fontsize=7)
    plt.tight_layout()
    fig.savefig(stem.with_suffix(".png"), dpi=110)


if __name__ == "__main__":
    main()
