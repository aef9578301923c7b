"""Side-by-side benchmark: txmq against what users would pick instead when a business write and
a message must commit together, all on this machine, in one run (issue #7).

Workload, 1 KiB messages, every system with fsync before the ack (settings printed per system):
  (a) one producer sending one durable transactional message at a time;
  (b) 32 concurrent producers (PostgreSQL also with 8 connections, the goal's reference point);
  (c) end-to-end latency from the producer's commit to the consumer's receipt, with a consumer
      running during (a) and (b).
Each peer (benchmarks/peers/<peer>.py) is started here on 127.0.0.1 with its own temporary data
directory and stopped afterwards; absent peers are skipped with a note. The raw write+fdatasync
floor of the same disk is measured in the same run so every figure is also a ratio to it.

    make bench-compare       # or: .venv/bin/python benchmarks/compare.py [--seconds 8]

Results go to benchmarks/results/<date>-<machine>.{md,json,png} (see docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from importlib import import_module
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
from peers._base import Absent  # noqa: E402
from peers._driver import PhaseResult, pct, run_phase  # noqa: E402
from peers._report import chart, goals, markdown, table  # noqa: E402

# (key, module, producer counts); PostgreSQL runs 8 connections too: the goal compares with it.
PEERS: list[tuple[str, str, list[int]]] = [
    ("txmq", "peers.txmq_broker", [1, 32]),
    ("postgres", "peers.postgres", [1, 8, 32]),
    ("rabbitmq", "peers.rabbitmq", [1, 32]),
    ("nats", "peers.nats_jetstream", [1, 32]),
    ("redis", "peers.redis_streams", [1, 32]),
]
CLIENT_LIBS = ["rocketmq-python-client", "psycopg", "pika", "nats-py", "redis", "grpcio"]


def fsync_floor(directory: Path, seconds: float, size: int = 1024) -> dict[str, float]:
    """One writer, write + fdatasync of ``size`` bytes in a loop: the disk's own bound."""
    path = directory / "floor"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    data, lat = b"x" * size, list[float]()
    try:
        end = time.monotonic() + seconds
        while time.monotonic() < end and len(lat) < 1_000_000:
            t = time.monotonic()
            os.write(fd, data)
            os.fdatasync(fd)
            lat.append((time.monotonic() - t) * 1000)
    finally:
        os.close(fd)
        path.unlink()
    return {"ops_per_s": len(lat) / seconds, "p50_ms": pct(lat, 0.5), "p99_ms": pct(lat, 0.99)}


def _disk(directory: Path) -> str:
    best = ("?", "", "?")
    for line in Path("/proc/mounts").read_text().splitlines():
        dev, mnt, fstype = line.split()[:3]
        if str(directory).startswith(mnt) and len(mnt) > len(best[1]):
            best = (dev, mnt, fstype)
    dev, _, fstype = best
    name = Path(dev).name.rstrip("0123456789") if dev.startswith("/dev/") else dev
    rot = Path(f"/sys/block/{name}/queue/rotational")
    kind = {"0": "non-rotational", "1": "rotational"}.get(
        rot.read_text().strip() if rot.exists() else "", "unknown kind"
    )
    size = shutil.disk_usage(directory).total / 2**30
    return f"{dev} ({fstype}, {kind}, {size:.0f} GiB)"


def machine(directory: Path) -> dict[str, str]:
    cpuinfo = Path("/proc/cpuinfo").read_text()
    model = next(
        (ln.split(":", 1)[1].strip() for ln in cpuinfo.splitlines() if ln.startswith("model name")),
        platform.processor() or "?",
    )
    mem_kib = int(Path("/proc/meminfo").read_text().split()[1])
    libs = {}
    for lib in CLIENT_LIBS:
        try:
            libs[lib] = version(lib)
        except PackageNotFoundError:
            libs[lib] = "absent"
    return {
        "host": platform.node(),
        "cores": f"{os.cpu_count()} x {model}",
        "ram": f"{mem_kib / 2**20:.1f} GiB",
        "disk": _disk(directory),
        "kernel": f"{platform.system()} {platform.release()}",
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "load average at start": " ".join(Path("/proc/loadavg").read_text().split()[:3]),
        "client libraries": ", ".join(f"{k} {v}" for k, v in libs.items()),
    }


def run_peer(
    key: str, mod_name: str, counts: list[int], work: Path, args: argparse.Namespace
) -> dict[str, Any]:
    mod = import_module(mod_name)
    entry: dict[str, Any] = {"key": key, "title": mod.TITLE, "phases": []}
    work.mkdir(parents=True, exist_ok=True)
    try:
        running = mod.start(work)
    except Absent as e:
        entry["skipped"] = str(e)
        print(f"  {key}: skipped: {e}", flush=True)
        return entry
    entry |= {"version": running.version, "durability": running.durability, "notes": running.notes}
    print(f"  {key}: {running.version}; {running.durability}", flush=True)
    try:
        for n in counts:
            try:
                res = run_phase(
                    mod_name,
                    running.endpoint,
                    running.pid,
                    f"bench_{key}_p{n}",
                    n,
                    args.procs,
                    args.seconds,
                    args.messages,
                )
            except Exception as e:  # reported in the results; the other systems still run
                entry.setdefault("failures", []).append(f"{n} producers: {type(e).__name__}: {e}")
                print(f"    {key} {n} producers FAILED: {type(e).__name__}: {e}", flush=True)
                continue
            entry["phases"].append(dataclasses.asdict(res))
            _progress(key, res)
    finally:
        running.stop()
    return entry


def run_rounds(
    peers: list[tuple[str, str, list[int]]], top: Path, args: argparse.Namespace
) -> tuple[list[dict[str, Any]], list[dict[str, float]]]:
    """Every system once per round, odd rounds in reverse order so that a slow drift in the
    machine's other load does not always fall on the same system; each phase is then reported
    by its median-rate round, with the spread."""
    entries: dict[str, dict[str, Any]] = {}
    floors = []
    for r in range(args.rounds):
        floors.append(fsync_floor(top, min(2.0, args.seconds)))
        f = floors[-1]
        print(
            f"round {r + 1}/{args.rounds}: raw 1 KiB write+fdatasync floor {f['ops_per_s']:.0f}/s,"
            f" p50 {f['p50_ms']:.3f} ms, p99 {f['p99_ms']:.3f} ms",
            flush=True,
        )
        for key, mod_name, counts in peers if r % 2 == 0 else peers[::-1]:
            if "skipped" in entries.get(key, {}):
                continue
            got = run_peer(key, mod_name, counts, top / f"{key}-{r}", args)
            entry = entries.setdefault(key, {**got, "phases": [], "rounds": []})
            entry["rounds"].append(got["phases"])
            if got.get("failures"):
                entry.setdefault("failures", []).extend(
                    f"round {r + 1}, {f}" for f in got["failures"]
                )
    for entry in entries.values():
        entry["phases"] = _medians(entry["rounds"])
    return [entries[k] for k, _, _ in peers if k in entries], floors


def _medians(rounds: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    by_n: dict[int, list[dict[str, Any]]] = {}
    for phases in rounds:
        for p in phases:
            by_n.setdefault(p["producers"], []).append(p)
    out = []
    for runs in by_n.values():
        runs.sort(key=lambda p: p["rate"])
        out.append(
            {
                **runs[(len(runs) - 1) // 2],
                "rate_min": runs[0]["rate"],
                "rate_max": runs[-1]["rate"],
                "rounds": len(runs),
            }
        )
    return out


def _progress(key: str, r: PhaseResult) -> None:
    print(
        f"    {key:8s} {r.producers:2d} producers: {r.rate:7.0f} msg/s, send p50 "
        f"{r.send_p50_ms:6.2f} ms p99 {r.send_p99_ms:7.2f} ms, commit->receipt p50 "
        f"{r.e2e_p50_ms:7.1f} ms p99 {r.e2e_p99_ms:7.1f} ms, server CPU "
        f"{100 * r.server_cpu_s / r.seconds:4.0f} % = {1e6 * r.server_cpu_s / max(1, r.sent):5.0f} "
        f"us/msg, machine busy {r.machine_busy_cores:.2f} "
        f"cores, errors {r.errors}, undelivered "
        f"{r.undelivered}" + (f" ({r.first_error[:120]})" if r.errors else ""),
        flush=True,
    )


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=5.0, help="length of each phase (5)")
    ap.add_argument(
        "--messages", type=int, default=50_000, help="at most this many messages per phase (50000)"
    )
    ap.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="repeat every system this many times, report the median (3)",
    )
    ap.add_argument(
        "--procs", type=int, default=2, help="producer processes the producers are spread over (2)"
    )
    ap.add_argument(
        "--systems",
        default=",".join(k for k, _, _ in PEERS),
        help="comma-separated subset of: " + ", ".join(k for k, _, _ in PEERS),
    )
    ap.add_argument(
        "--out",
        type=Path,
        default=HERE / "results",
        help="where to write <date>-<machine>.{md,json,png}",
    )
    ap.add_argument("--no-save", action="store_true", help="print only")
    ap.add_argument("--tmp", type=Path, default=None, help="parent of the data directories")
    return ap.parse_args()


def main() -> None:
    args = parse_args()
    wanted = [s.strip() for s in args.systems.split(",") if s.strip()]
    unknown = set(wanted) - {k for k, _, _ in PEERS}
    if unknown:
        raise SystemExit(f"unknown systems: {', '.join(sorted(unknown))}")
    started = time.monotonic()
    top = Path(tempfile.mkdtemp(prefix="txmq-compare-", dir=args.tmp))
    top.chmod(0o755)  # servers that refuse root (PostgreSQL) run as another user in here
    try:
        info = machine(top)
        print("machine: " + "; ".join(f"{k} {v}" for k, v in info.items()), flush=True)
        systems, floors = run_rounds([p for p in PEERS if p[0] in wanted], top, args)
        floor = sorted(floors, key=lambda f: f["ops_per_s"])[(len(floors) - 1) // 2]
    finally:
        shutil.rmtree(top, ignore_errors=True)
    report = {
        "date": dt.date.today().isoformat(),
        "command": "python benchmarks/compare.py " + " ".join(sys.argv[1:]),
        "settings": {
            "rounds": args.rounds,
            "seconds": args.seconds,
            "messages": args.messages,
            "procs": args.procs,
            "body_bytes": 1024,
        },
        "machine": info,
        "fsync_floor": floor,
        "fsync_floor_rounds": floors,
        "systems": systems,
        "goals": goals(systems),
        "wall_seconds": round(time.monotonic() - started, 1),
    }
    table(report)
    if not args.no_save:
        args.out.mkdir(parents=True, exist_ok=True)
        stem = args.out / f"{report['date']}-{info['host']}-{os.cpu_count()}c"
        stem.with_suffix(".json").write_text(json.dumps(report, indent=1) + "\n")
        stem.with_suffix(".md").write_text(markdown(report))
        chart(report, stem.with_suffix(".png"))
        print(f"wrote {stem}.md, .json, .png")


if __name__ == "__main__":
    main()
