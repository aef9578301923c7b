"""Turning a comparison run into words and pictures: the goal verdicts, the rich table, the
markdown results file and the PNG chart.

Owns: presentation of the report dict built by benchmarks/compare.py. Must not: measure.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

P99_GOAL_MS = 10.0


def _phase(systems: list[dict[str, Any]], key: str, producers: int) -> dict[str, Any] | None:
    for s in systems:
        if s["key"] == key:
            for p in s["phases"]:
                if p["producers"] == producers:
                    return dict(p)
    return None


def goals(systems: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The goals of issue #7, each with both figures, the ratio and whether it is met."""
    out: list[dict[str, Any]] = []
    tx32 = _phase(systems, "txmq", 32)
    for key, n, label in (
        ("postgres", 8, "PostgreSQL outbox, 8 connections"),
        ("rabbitmq", 32, "RabbitMQ confirms, 32 producers"),
    ):
        ref = _phase(systems, key, n)
        goal = f"txmq 32 producers msg/s >= {label}"
        if tx32 is None or ref is None or ref["rate"] <= 0:
            out.append({"goal": goal, "met": None, "note": "not measured in this run"})
            continue
        out.append(
            {
                "goal": goal,
                "txmq": tx32["rate"],
                "reference": ref["rate"],
                "ratio": tx32["rate"] / ref["rate"],
                "met": tx32["rate"] >= ref["rate"],
            }
        )
    tx1 = _phase(systems, "txmq", 1)
    goal = f"txmq single-producer send+commit p99 <= {P99_GOAL_MS:.0f} ms"
    if tx1 is None:
        out.append({"goal": goal, "met": None, "note": "not measured in this run"})
    else:
        out.append(
            {
                "goal": goal,
                "txmq": tx1["send_p99_ms"],
                "reference": P99_GOAL_MS,
                "ratio": tx1["send_p99_ms"] / P99_GOAL_MS,
                "met": tx1["send_p99_ms"] <= P99_GOAL_MS,
            }
        )
    return out


def _verdict(g: dict[str, Any]) -> str:
    if g["met"] is None:
        return f"{g['goal']}: {g['note']}"
    word = "MET" if g["met"] else "MISSED"
    return f"{g['goal']}: {word} ({g['txmq']:.1f} vs {g['reference']:.1f}, ratio {g['ratio']:.2f})"


def rows(report: dict[str, Any]) -> list[list[str]]:
    floor = report["fsync_floor"]
    out = []
    for s in report["systems"]:
        for p in s["phases"]:
            cpu_pct = 100 * p["server_cpu_s"] / p["seconds"] if p["seconds"] else 0.0
            us_per_msg = 1e6 * p["server_cpu_s"] / p["sent"] if p["sent"] else math.nan
            out.append(
                [
                    s["title"],
                    str(p["producers"]),
                    f"{p['rate']:.0f} ({p.get('rate_min', p['rate']):.0f}-"
                    f"{p.get('rate_max', p['rate']):.0f})",
                    f"{p['rate'] / floor['ops_per_s']:.2f}",
                    f"{p['send_p50_ms']:.2f} ({p['send_p50_ms'] / floor['p50_ms']:.0f}x)",
                    f"{p['send_p99_ms']:.2f} ({p['send_p99_ms'] / floor['p99_ms']:.0f}x)",
                    f"{p['e2e_p50_ms']:.1f}",
                    f"{p['e2e_p99_ms']:.1f}",
                    f"{cpu_pct:.0f}",
                    f"{us_per_msg:.0f}",
                    f"{100 * p['client_cpu_s'] / p['seconds']:.0f}" if p["seconds"] else "-",
                    f"{p['errors']}/{p['undelivered']}",
                    f"{p.get('machine_busy_cores', float('nan')):.2f}",
                ]
            )
    return out


HEADERS = [
    "system",
    "prod.",
    "msg/s (min-max)",
    "x floor",
    "send p50 ms (x floor)",
    "send p99 ms (x floor)",
    "e2e p50 ms",
    "e2e p99 ms",
    "server CPU %",
    "server CPU us/msg",
    "client CPU %",
    "errors/ undeliv.",
    "machine busy cores",
]
NOTE = (
    "send = begin + send + commit as the producer sees it; e2e = producer's commit returned ->"
    " consumer received it; CPU % of one core over the phase; machine busy = all processes on"
    " the machine, other users included; x floor = figure / the raw fsync floor's figure."
)


def _floor_line(report: dict[str, Any]) -> str:
    f = report["fsync_floor"]
    return (
        f"raw 1 KiB write+fdatasync floor on the same disk: {f['ops_per_s']:.0f}/s, "
        f"p50 {f['p50_ms']:.3f} ms, p99 {f['p99_ms']:.3f} ms"
    )


def table(report: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=200)
    t = Table(title="1 KiB durable transactional messages, fsync before every ack")
    for h in HEADERS:
        t.add_column(h, justify="left" if h == "system" else "right")
    for r in rows(report):
        t.add_row(*r)
    console.print(t)
    console.print(NOTE)
    console.print(_floor_line(report))
    for s in report["systems"]:
        if "skipped" in s:
            console.print(f"[yellow]{s['title']}: skipped: {s['skipped']}[/yellow]")
        else:
            console.print(
                f"{s['title']} ({s['version']}): {s['durability']}; " + "; ".join(s["notes"])
            )
    for s in report["systems"]:
        for failure in s.get("failures", []):
            console.print(f"[red]{s['title']} FAILED: {failure}[/red]")
    for g in report["goals"]:
        colour = {True: "green", False: "red", None: "yellow"}[g["met"]]
        console.print(f"[{colour}]{_verdict(g)}[/{colour}]")


def markdown(report: dict[str, Any]) -> str:
    m = report["machine"]
    lines = [
        f"# txmq vs peers, {report['date']} on {m['host']}",
        "",
        f"Command: `{report['command'].strip()}` (wall time {report['wall_seconds']:.0f} s; "
        f"{report['settings']['seconds']:.0f} s or {report['settings']['messages']} messages per "
        f"phase, producers spread over {report['settings']['procs']} processes).",
        "",
        *[f"- {k}: {v}" for k, v in m.items()],
        f"- {_floor_line(report)}",
        "",
        "| " + " | ".join(HEADERS) + " |",
        "|" + "---|" * len(HEADERS),
        *["| " + " | ".join(r) + " |" for r in rows(report)],
        "",
        NOTE,
        "",
        "Durability and versions:",
        "",
    ]
    for s in report["systems"]:
        if "skipped" in s:
            lines.append(f"- {s['title']}: skipped: {s['skipped']}")
        else:
            lines.append(
                f"- {s['title']} ({s['version']}): {s['durability']}; " + "; ".join(s["notes"])
            )
    lines += [
        f"- {s['title']} FAILED: {f}" for s in report["systems"] for f in s.get("failures", [])
    ]
    lines += ["", "Goals:", "", *[f"- {_verdict(g)}" for g in report["goals"]], ""]
    return "\n".join(lines)


def chart(report: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels, rates, p99s = [], [], []
    for s in report["systems"]:
        for p in s["phases"]:
            labels.append(f"{s['title']}\n{p['producers']} prod.")
            rates.append(p["rate"])
            p99s.append(p["send_p99_ms"])
    fig, (a, b) = plt.subplots(1, 2, figsize=(14, 5))
    colours = ["tab:red" if lb.startswith("txmq") else "tab:blue" for lb in labels]
    a.barh(labels, rates, color=colours)
    a.axvline(report["fsync_floor"]["ops_per_s"], ls="--", c="gray", label="raw fsync floor")
    a.set_xlabel("durable transactional messages / s (higher is better)")
    a.legend(loc="lower right")
    a.invert_yaxis()
    b.barh(labels, p99s, color=colours)
    b.axvline(report["fsync_floor"]["p99_ms"], ls="--", c="gray", label="fsync floor p99")
    b.set_xscale("log")
    b.set_xlabel("send + commit p99 ms, log scale (lower is better)")
    b.legend(loc="lower right")
    b.invert_yaxis()
    b.set_yticklabels([])
    fig.suptitle(
        f"1 KiB, fsync per ack, {report['machine']['cores']}, {report['date']}", fontsize=10
    )
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
