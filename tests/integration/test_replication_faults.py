"""A seeded random fault schedule over a group of 3 replicas: crashes, pauses and partitions.

Three replicas, SYNC with min_insync_replicas 2, one real etcd. Each replica reaches etcd
through a cuttable TCP proxy of its own, and its peers reach it through another
(tests/integration/faults.py): each binds 127.0.0.2 and advertises 127.0.0.1, where its proxy
listens on the same port, so a follower's fetches and forwarded calls to it cross the proxy
while this test's sender and probes call it directly. A sender thread sends unique messages to
whichever replica leads (found by Replica/Status; a send not answered OK is not acknowledged
and may be retried as a new message); a probe thread asks every replica's Status ten times a
second. Meanwhile the schedule, drawn from a printed seed (``TXMQ_FAULT_SEED`` replays one),
does one fault at a time: kill -9 and restart a replica (or the leader), SIGSTOP and resume one,
cut one (or the leader) from etcd, or cut the leader from its followers (connections refused or
black-holed).
Checked at the end:

- acknowledged => delivered: every acknowledged message is delivered by the final leader (the
  official consumer), and nothing is delivered that was never sent;
- no acknowledgement under an old epoch after its lease: a replica cut from etcd acknowledges
  no send made more than a lease TTL after the cut began (it cannot hold a lease), and a leader
  cut from its followers acknowledges no send made during the cut (none can confirm it);
- never two leaders: no replica said it led an epoch after another replica had said it led a
  later one (a Status asked after another's answer came back).

``make test-slow`` runs the long schedule (``TXMQ_FAULT_SECONDS``, 90 s, every kind of
fault); the default suite runs one short partition schedule (a cut from etcd, a cut from the
followers).
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from rocketmq import SimpleConsumer

from tests.integration.clients import consumer
from tests.integration.conftest import FAST, BrokerProcess, wait_until
from tests.integration.faults import TcpProxy
from tests.integration.test_replication import _send_raw, route, status
from tests.integration.test_replication_failover import free_ports

from .etcd_fixtures import etcd_endpoint  # noqa: F401  (fixture)

DURATION_S = float(os.environ.get("TXMQ_FAULT_SECONDS", "90"))
SEND_TIMEOUT_S = 8.0
LEASE_S = 3.0  # REPLICA_LEASE_TTL_MS: no replica leads longer than this without etcd
ROUND_S = 1.0  # a write sent this long after the followers were cut was not fetched before
PROBE_S = 0.1
STABLE_S = 4.0  # more than a lease: a leader that led this long is not the last fault's
REAL_HOST = "127.0.0.2"  # where the replicas bind; their proxies listen on 127.0.0.1
SLOW_KINDS = ("kill", "pause", "kill-leader", "cut-etcd", "cut-etcd-leader", "cut-followers")
SHORT_KINDS = ("cut-etcd-leader", "cut-followers")


@dataclass
class Replica:
    """One replica process and its two proxies."""

    broker: BrokerProcess
    etcd: TcpProxy  # its way to etcd
    peers: TcpProxy  # its peers' way to it (its advertised address)

    @property
    def name(self) -> str:
        return self.broker.data_dir.name


@dataclass
class History:
    # (body, replica, sent, answered): monotonic times around the call
    acked: list[tuple[str, str, float, float]] = field(default_factory=list)
    tried: set[str] = field(default_factory=set)
    refused: int = 0
    # (replica, epoch, asked, answered) of each Status saying "leader"
    claims: list[tuple[str, int, float, float]] = field(default_factory=list)
    # (kind, replica, begun, healed): monotonic times, healed taken before the proxy heals
    cuts: list[tuple[str, str, float, float]] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)


def start_group(tmp_path: Path, etcd: str, name: str) -> list[Replica]:
    out: list[Replica] = []
    for i, port in enumerate(free_ports(3)):
        conf = tmp_path / f"r{i}.toml"
        conf.write_text('[broker]\nadvertised_host = "127.0.0.1"\n')
        to_etcd = TcpProxy(etcd)
        args = [*FAST, "--config", str(conf), "--etcd", to_etcd.endpoint, "--replica-group",
                name, "--broker-name", f"r{i}", "--min-insync-replicas", "2"]  # fmt: skip
        peers = TcpProxy(f"{REAL_HOST}:{port}", port=port)
        broker = BrokerProcess(tmp_path / f"r{i}", args, port=port, host=REAL_HOST)
        r = Replica(broker, to_etcd, peers)
        out.append(r)
        r.broker.start()
    return out


def _leader(group: list[Replica]) -> Replica | None:
    for r in group:
        if r.broker.running and status(r.broker.endpoints).get("role") == "leader":
            return r
    return None


def _sender(group: list[Replica], h: History) -> None:
    for n in range(1_000_000):
        if h.stop.is_set():
            return
        leader = _leader(group)
        if leader is None:
            h.stop.wait(0.2)  # no leader right now: look again shortly
            continue
        body = f"m-{n}"
        h.tried.add(body)
        sent = time.monotonic()
        code, _ = _send_raw(leader.broker.endpoints, "chaos", body.encode(), f"{n:08X}")
        if code == 20000:
            h.acked.append((body, leader.name, sent, time.monotonic()))
        else:
            h.refused += 1


def _prober(group: list[Replica], h: History) -> None:
    for _ in range(10_000_000):
        if h.stop.is_set():
            return
        for r in group:
            if not r.broker.running:
                continue
            asked = time.monotonic()
            st = status(r.broker.endpoints)
            if st.get("role") == "leader":
                epoch = st.get("epoch")
                assert isinstance(epoch, int)
                h.claims.append((r.name, epoch, asked, time.monotonic()))
        h.stop.wait(PROBE_S)


def _fault(rng: random.Random, group: list[Replica], kind: str, h: History,
           log: list[str]) -> None:  # fmt: skip
    victim = rng.choice(group)
    if kind in ("kill-leader", "cut-etcd-leader", "cut-followers"):
        victim = _leader(group) or victim
    proc = victim.broker.proc
    assert proc is not None
    held = rng.uniform(1, 6)
    # Each sleep below is the fault itself: how long it lasts.
    if kind == "pause":
        proc.send_signal(signal.SIGSTOP)
        log.append(f"pause {victim.name} {held:.1f}s")
        time.sleep(held)  # sleep: the pause's length
        proc.send_signal(signal.SIGCONT)
    elif kind in ("kill", "kill-leader"):
        victim.broker.kill9()
        down = rng.uniform(0.5, 4)
        log.append(f"{kind} {victim.name} down {down:.1f}s")
        time.sleep(down)  # sleep: how long the replica stays down
        victim.broker.start()
    else:
        how = rng.choice(("refuse", "blackhole"))
        proxy = victim.peers if kind == "cut-followers" else victim.etcd
        proxy.cut(how)
        begun = time.monotonic()
        log.append(f"{kind} {victim.name} {how} {held:.1f}s")
        time.sleep(held)  # sleep: the cut's length
        h.cuts.append((kind, victim.name, begun, time.monotonic()))
        proxy.heal()


def _stable_leader(group: list[Replica]) -> Replica:
    """The replica that leads and has led for STABLE_S in a row (a lease that lapsed in the
    last fault's wake has played out by then), within a bound."""
    since: tuple[Replica, float] | None = None

    def stable() -> bool:
        nonlocal since
        now, leader = time.monotonic(), _leader(group)
        if leader is None or since is None or since[0] is not leader:
            since = (leader, now) if leader is not None else None
            return False
        return now - since[1] >= STABLE_S

    wait_until(stable, 40, "a leader, stable, after the faults")
    assert since is not None
    return since[0]


def _collect(c: SimpleConsumer, want: set[str]) -> set[str]:
    """Receive (and acknowledge) until every body of ``want`` came, or a minute passed; then
    shut ``c`` down. Until every acknowledged message came, not until as many came: a send
    refused or timed out may be stored and delivered too, and a new leader shows what its old
    leader acknowledged last only once its followers confirm it (ADR 0005 "On open")."""
    got: set[str] = set()
    deadline = time.monotonic() + 60
    try:
        while not want <= got and time.monotonic() < deadline:
            try:
                batch = c.receive(32, 15) or []
            except Exception as exc:  # a leader change after all (a status, or gRPC's): again
                print(f"receive failed: {exc}")
                continue
            for m in batch:
                got.add(bytes(m.body).decode())
                try:
                    c.ack(m)
                except Exception as exc:  # delivered again later; counted already
                    print(f"ack failed: {exc}")
    finally:
        c.shutdown()
    return got


def _check_fencing(h: History) -> list[str]:
    """Acknowledgements a cut replica could not have given, and leaders that overlapped."""
    bad = []
    for kind, name, begun, healed in h.cuts:
        after = begun + (ROUND_S if kind == "cut-followers" else LEASE_S)
        bad += [
            f"{name} acknowledged {body} during {kind} (sent {sent - begun:.1f}s in)"
            for body, by, sent, answered in h.acked
            if by == name and after < sent and answered < healed
        ]
    first_answer: dict[int, tuple[float, str]] = {}
    last_ask: dict[int, tuple[float, str]] = {}
    for name, epoch, asked, answered in h.claims:
        first_answer[epoch] = min(first_answer.get(epoch, (answered, name)), (answered, name))
        last_ask[epoch] = max(last_ask.get(epoch, (asked, name)), (asked, name))
    names = {e: {n for n, ep, _, _ in h.claims if ep == e} for e in first_answer}
    bad += [f"epoch {e} led by {sorted(n)}" for e, n in names.items() if len(n) > 1]
    for old, (asked, who) in last_ask.items():
        for new, (answered, whom) in first_answer.items():
            if old < new and who != whom and asked > answered:
                bad.append(f"{who} said it led epoch {old} after {whom} said it led {new}")
    return bad


def _schedule(tmp_path: Path, etcd: str, kinds: tuple[str, ...], seconds: float, *,
              in_turn: bool = False) -> None:  # fmt: skip
    """Faults drawn from ``kinds`` for ``seconds``; ``in_turn``: each kind once, in a drawn
    order (then the schedule ends), instead of at random until the time is up."""
    seed = int(os.environ.get("TXMQ_FAULT_SEED", random.randrange(2**32)))
    print(f"fault schedule seed {seed} (TXMQ_FAULT_SEED={seed} replays it)")
    rng = random.Random(seed)
    group = start_group(tmp_path, etcd, f"chaos-{seed}")
    h = History()
    threads = [threading.Thread(target=f, args=(group, h), daemon=True)
               for f in (_sender, _prober)]  # fmt: skip
    try:
        wait_until(lambda: _leader(group) is not None, 20, "a leader")
        leader = _leader(group)
        assert leader is not None
        every = sorted(r.broker.port for r in group)  # routes list every replica (ADR 0006)
        wait_until(lambda: route(leader.broker.endpoints, "chaos") == every, 20, "all routed")
        for t in threads:
            t.start()
        faults: list[str] = []
        turns = rng.sample(kinds, len(kinds)) if in_turn else []
        end = time.monotonic() + seconds
        while time.monotonic() < end and (turns or not in_turn):
            h.stop.wait(rng.uniform(1, 4))  # calm between faults
            _fault(rng, group, turns.pop() if in_turn else rng.choice(kinds), h, faults)
        h.stop.set()
        for t in threads:
            t.join(SEND_TIMEOUT_S * 2)
        print(f"faults: {faults}")
        final = _stable_leader(group)
        acked = {body for body, _, _, _ in h.acked}
        got = _collect(consumer(final.broker.endpoints, f"check-{seed}", "chaos"), acked)
        epochs = sorted({e for _, e, _, _ in h.claims})
        print(f"acked {len(acked)}, refused {h.refused}, delivered {len(got)}, leader epochs"
              f" seen {epochs}, cuts {len(h.cuts)}")  # fmt: skip
        assert acked, "nothing was acknowledged"
        lost = acked - got
        assert not lost, f"seed {seed}: lost {len(lost)} acknowledged messages: {sorted(lost)[:10]}"
        assert got <= h.tried, f"seed {seed}: delivered what was never sent"
        unfenced = _check_fencing(h)
        assert not unfenced, f"seed {seed}: {unfenced[:10]}"
    finally:
        h.stop.set()
        for r in group:
            if r.broker.proc is not None and r.broker.running:
                r.broker.proc.send_signal(signal.SIGCONT)
                r.broker.stop()
            r.etcd.close()
            r.peers.close()


@pytest.mark.slow
def test_random_faults_never_lose_an_acknowledged_message(
    tmp_path: Path,
    etcd_endpoint: str,  # noqa: F811
) -> None:
    _schedule(tmp_path, etcd_endpoint, SLOW_KINDS, DURATION_S)


def test_a_short_partition_schedule_never_loses_or_fences_badly(
    tmp_path: Path,
    etcd_endpoint: str,  # noqa: F811
) -> None:
    """The default suite's run: the leader cut from etcd and the leader cut from its followers,
    in a drawn order, each for 1-6 s, connections refused or black-holed; the same checks."""
    _schedule(tmp_path, etcd_endpoint, SHORT_KINDS, seconds=40, in_turn=True)
