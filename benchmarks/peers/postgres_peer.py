# ruff: noqa: B023  -- closures run and finish inside the loop iteration that defines them
"""PostgreSQL transactional outbox: INSERT the business row and the outbox row in one
transaction (synchronous_commit=on, fsync=on), a relay polling the outbox for (c).

Started by the benchmark as its own cluster (initdb + pg_ctl) in a temporary directory, run as
the ``postgres`` user when the benchmark runs as root (PostgreSQL refuses to run as root).
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
import threading
import time

from peers.common import Result, drive, e2e_ms, free_port, pct, stamped, tree_cpu_seconds

DURABILITY = "synchronous_commit=on, fsync=on: COMMIT returns after the WAL fsync"


def _bin(name: str) -> str | None:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    return found[-1] if found else shutil.which(name)


def available() -> str:
    return "" if _bin("initdb") and _bin("pg_ctl") else "PostgreSQL server binaries not found"


def _as_postgres(cmd: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *cmd] if os.geteuid() == 0 else cmd


def run(threads_list: list[int], seconds: float) -> list[Result]:
    import psycopg

    d = tempfile.mkdtemp(prefix="txmq-pg-")
    os.chmod(d, 0o777)
    data, sock = os.path.join(d, "data"), d
    if os.geteuid() == 0:
        shutil.chown(d, "postgres")
    port = free_port()
    subprocess.run(
        _as_postgres([_bin("initdb") or "", "-D", data, "-A", "trust", "-U", "bench"]),
        check=True,
        capture_output=True,
    )
    opts = f"-p {port} -k {sock} -c listen_addresses=127.0.0.1 -c max_connections=100"
    subprocess.run(
        _as_postgres(
            [
                _bin("pg_ctl") or "",
                "-D",
                data,
                "-o",
                opts,
                "-w",
                "-l",
                os.path.join(d, "log"),
                "start",
            ]
        ),
        check=True,
        capture_output=True,
    )
    dsn = f"host=127.0.0.1 port={port} user=bench dbname=postgres"
    try:
        with open(os.path.join(data, "postmaster.pid")) as f:
            server_pid = int(f.readline())
        with psycopg.connect(dsn, autocommit=True) as c:
            c.execute("CREATE TABLE orders (id text PRIMARY KEY, body bytea)")
            c.execute("CREATE TABLE outbox (id bigserial PRIMARY KEY, body bytea)")
        results = []
        for n in threads_list:
            conns = [psycopg.connect(dsn) for _ in range(n)]
            lat: list[float] = []
            done = threading.Event()

            def relay() -> None:
                last = 0
                with psycopg.connect(dsn, autocommit=True) as c:
                    while not done.is_set():
                        rows = c.execute(
                            "SELECT id, body FROM outbox WHERE id > %s ORDER BY id LIMIT 1000",
                            (last,),
                        ).fetchall()
                        for rid, body in rows:
                            lat.append(e2e_ms(bytes(body)))
                            last = rid
                        if not rows:
                            time.sleep(0.002)

            threading.Thread(target=relay, daemon=True).start()

            def op(k: int, i: int, n: int = n) -> None:
                conn = conns[k]
                body = stamped(k, i)
                with conn.transaction():
                    conn.execute("INSERT INTO orders VALUES (%s, %s)", (f"{n}-{k}-{i}", body))
                    conn.execute("INSERT INTO outbox (body) VALUES (%s)", (body,))

            cpu0 = tree_cpu_seconds(server_pid)
            rate, send_lat = drive(n, seconds, op)
            cpu = tree_cpu_seconds(server_pid) - cpu0
            time.sleep(1)
            done.set()
            for c in conns:
                c.close()
            results.append(
                Result(
                    "postgresql outbox",
                    f"{n} producers",
                    rate,
                    pct(send_lat, 0.5),
                    pct(send_lat, 0.99),
                    1000 * cpu / max(rate * seconds, 1),
                    pct(lat, 0.5),
                    pct(lat, 0.99),
                )
            )
        return results
    finally:
        subprocess.run(
            _as_postgres([_bin("pg_ctl") or "", "-D", data, "-m", "fast", "stop"]),
            capture_output=True,
        )
        shutil.rmtree(d, ignore_errors=True)
