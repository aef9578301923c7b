"""Per-process counters for the benchmarks: CPU time, context switches (every thread, from
/proc) and, where ``perf`` may count tracepoints, fdatasync calls and all syscalls (perf stat
attached to a running process: counting only, no tracing, so the process runs at its own pace,
unlike under strace)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

CLK_TCK = os.sysconf("SC_CLK_TCK")
PERF_EVENTS = (
    "syscalls:sys_enter_fdatasync",
    "raw_syscalls:sys_enter",
    "cpu-migrations",
    "page-faults",
)
# perf stat gives no sign once it is attached; it attaches in well under this.
PERF_ATTACH_S = 0.3


@dataclass
class Counters:
    cpu_s: float  # utime + stime of every thread
    ctxt: int  # voluntary + involuntary context switches of every live thread

    def __sub__(self, other: Counters) -> Counters:
        return Counters(self.cpu_s - other.cpu_s, self.ctxt - other.ctxt)


def counters(pid: int) -> Counters:
    raw = Path(f"/proc/{pid}/stat").read_text()
    fields = raw[raw.rindex(")") + 2 :].split()
    cpu = (int(fields[11]) + int(fields[12])) / CLK_TCK
    ctxt = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            text = (task / "status").read_text()
        except (FileNotFoundError, ProcessLookupError):
            continue  # a thread that ended between the listing and the read
        for line in text.splitlines():
            if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")):
                ctxt += int(line.split()[1])
    return Counters(cpu, ctxt)


def machine_busy_s() -> float:
    """CPU seconds every core of the machine has been busy since boot (/proc/stat: user, nice,
    system, irq, softirq, steal; not idle or iowait)."""
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in fields[:8])
    return (user + nice + system + irq + softirq + steal) / CLK_TCK


def perf_works() -> bool:
    """Whether ``perf stat`` can count the syscall tracepoints here (needs perf and a
    perf_event_paranoid that lets this user read tracepoints)."""
    if shutil.which("perf") is None:
        return False
    probe = subprocess.run(
        ["perf", "stat", "-x,", "-e", PERF_EVENTS[0], "true"],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    return probe.returncode == 0 and "<not supported>" not in probe.stderr


class PerfCount:
    """``perf stat`` counting fdatasync and all syscalls of some processes (all their threads)
    from ``start()`` until ``stop()``, which returns {event: count} summed over them."""

    def __init__(self, pids: list[int]) -> None:
        self.pids = pids
        self.proc: subprocess.Popen[str] | None = None

    def start(self) -> None:
        cmd = ["perf", "stat", "-x,", "-e", ",".join(PERF_EVENTS),
               "-p", ",".join(str(p) for p in self.pids)]  # fmt: skip
        self.proc = subprocess.Popen(
            cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
        )
        time.sleep(PERF_ATTACH_S)  # sleep: perf stat prints nothing once attached

    def stop(self) -> dict[str, int]:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGINT)
        _, err = self.proc.communicate(timeout=30)
        counts: dict[str, int] = {}
        for row in err.splitlines():
            cells = row.split(",")
            if len(cells) > 2 and cells[2] in PERF_EVENTS and cells[0].isdigit():
                counts[cells[2]] = counts.get(cells[2], 0) + int(cells[0])
        return counts


# How bench_broker groups a server's threads (the broker names its own: txmq.thread_names).
THREAD_KINDS = ("loop", "flusher", "grpc", "io")


def _thread_kind(pid: int, tid: int, comm: str) -> str:
    if tid == pid:
        return "loop"  # the main thread runs the event loop
    if comm.startswith("txmq-flusher"):
        return "flusher"
    if comm.startswith("txmq-io"):
        return "io"
    return "grpc"  # the poller thread (a Python thread), event engine, timer, lifeguard


def thread_cpu_s(pid: int) -> dict[str, float]:
    """CPU seconds (utime + stime) of a process's live threads, summed by THREAD_KINDS."""
    out = dict.fromkeys(THREAD_KINDS, 0.0)
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            raw = (task / "stat").read_text()
            comm = (task / "comm").read_text().strip()
        except (FileNotFoundError, ProcessLookupError):
            continue  # a thread that ended between the listing and the read
        fields = raw[raw.rindex(")") + 2 :].split()
        kind = _thread_kind(pid, int(task.name), comm)
        out[kind] += (int(fields[11]) + int(fields[12])) / CLK_TCK
    return out
