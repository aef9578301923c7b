"""PostgreSQL transactional outbox: what a team without a broker would build.

Owns: a throwaway cluster (initdb + pg_ctl on a free port, its own socket dir) and the outbox
workload. A send is one transaction: INSERT a business row + INSERT an outbox row, COMMIT with
synchronous_commit=on (WAL fdatasync before the commit returns; concurrent commits share a
flush). The relay (consumer) claims outbox rows with DELETE ... FOR UPDATE SKIP LOCKED
RETURNING in its own committed transaction, polling every 2 ms when the outbox is empty.
Must not: use the system's PostgreSQL service or port 5432.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import psycopg

from ._base import Absent, Running, free_port, give_to, service_user, version_of, which

TITLE = "PostgreSQL outbox"
PG_BIN_DIRS = [f"/usr/lib/postgresql/{v}/bin" for v in (17, 16, 15, 14, 13)]
POLL_IDLE_S = 0.002


def _bin(name: str) -> str:
    path = which(name, *PG_BIN_DIRS)
    if path is None:
        raise Absent(f"{name} not found (apt-get install postgresql)")
    return path


def _run(argv: list[str], user: str | None) -> None:
    out = subprocess.run(argv, user=user, capture_output=True, text=True, timeout=120, check=False)
    if out.returncode != 0:
        raise Absent(f"{Path(argv[0]).name} failed: {out.stderr.strip()[-400:]}")


def start(work: Path) -> Running:
    initdb, pg_ctl = _bin("initdb"), _bin("pg_ctl")
    user = service_user()
    work.mkdir(parents=True, exist_ok=True)
    give_to(user, work)
    data, port = work / "data", free_port()
    _run([initdb, "-D", str(data), "-A", "trust", "-U", "bench", "-E", "UTF8", "--no-sync"], user)
    opts = (
        f"-p {port} -k {work} -c listen_addresses=127.0.0.1 -c fsync=on "
        "-c synchronous_commit=on -c full_page_writes=on -c max_connections=200"
    )
    _run(
        [pg_ctl, "-D", str(data), "-l", str(work / "log"), "-w", "-t", "60", "-o", opts, "start"],
        user,
    )
    pid = int((data / "postmaster.pid").read_text().split()[0])

    def stop() -> None:
        _run([pg_ctl, "-D", str(data), "-m", "fast", "-w", "-t", "60", "stop"], user)

    endpoint = f"host=127.0.0.1 port={port} user=bench dbname=postgres"
    with psycopg.connect(endpoint) as c:
        method = c.execute("SHOW wal_sync_method").fetchone()
    return Running(
        endpoint=endpoint,
        pid=pid,
        version=version_of([_bin("postgres"), "--version"]),
        durability="synchronous_commit=on, fsync=on, wal_sync_method="
        f"{method[0] if method else '?'} (WAL flushed before COMMIT returns; group flush)",
        stop=stop,
        notes=[f"relay polls the outbox every {POLL_IDLE_S * 1000:.0f} ms when it is empty"],
    )


def prepare(endpoint: str, name: str) -> None:
    with psycopg.connect(endpoint, autocommit=True) as c:
        c.execute(f"CREATE TABLE {name}_orders (key text PRIMARY KEY, body bytea NOT NULL)")
        c.execute(
            f"CREATE TABLE {name}_outbox (id bigserial PRIMARY KEY, key text NOT NULL,"
            " payload bytea NOT NULL)"
        )


class Producer:
    def __init__(self, endpoint: str, name: str) -> None:
        self.conn = psycopg.connect(endpoint)
        self.orders = f"INSERT INTO {name}_orders (key, body) VALUES (%s, %s)"
        self.outbox = f"INSERT INTO {name}_outbox (key, payload) VALUES (%s, %s)"

    def send(self, key: bytes, body: bytes) -> None:
        k = key.decode()
        with self.conn.transaction():
            self.conn.execute(self.orders, (k, body[:64]))
            self.conn.execute(self.outbox, (k, body))

    def close(self) -> None:
        self.conn.close()


def consume(
    endpoint: str,
    name: str,
    ready: Callable[[], None],
    stop: Callable[[], bool],
    got: Callable[[bytes], None],
) -> None:
    claim = (
        f"DELETE FROM {name}_outbox WHERE id IN (SELECT id FROM {name}_outbox ORDER BY id"
        " LIMIT 100 FOR UPDATE SKIP LOCKED) RETURNING payload"
    )
    with psycopg.connect(endpoint) as conn:
        ready()
        while not stop():
            with conn.transaction():
                rows = conn.execute(claim).fetchall()
            # The relay "publishes" a row once its delete has committed: at-least-once.
            for (payload,) in rows:
                got(bytes(payload))
            if not rows:
                time.sleep(POLL_IDLE_S)
