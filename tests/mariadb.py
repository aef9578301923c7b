"""A throwaway MariaDB server for tests: ``mariadb-install-db`` into a temporary data directory,
then ``mariadbd --no-defaults`` on a free port bound to 127.0.0.1 with its own socket (the
programs from the session's ``mariadb_bin`` fixture, tests/tools.py; never the machine's
service or its configuration), in time zone +05:00 (SERVER_ZONE). Root, over the socket,
creates database ``txmq`` and a user ``txmq`` with a password that may connect over TCP from
127.0.0.1 only, as an application's user would.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.ports import accepts, free_port

MARIADB_TIMEOUT_S = 120
USER, PASSWORD, DATABASE = "txmq", "txmq-secret-1", "txmq"
# Small InnoDB files: the defaults take ~110 MB of disk per throwaway server.
_SMALL = ["--innodb-log-file-size=8M", "--innodb-buffer-pool-size=32M"]
# The server's zone is not UTC, as a server set to its site's zone is not: a TIMESTAMP column
# comes back in the session's zone, so a reader that does not ask for UTC reads it shifted.
SERVER_ZONE = "+05:00"


@dataclass(frozen=True)
class MariaDB:
    port: int
    client: Path
    socket: Path

    def sql(self, statements: str, database: str = DATABASE) -> str:
        """Run ``statements`` as root over the socket, in ``database``; their output."""
        r = subprocess.run(
            [str(self.client), "--no-defaults", f"--socket={self.socket}", "-uroot",
             "--batch", database, "-e", statements],
            capture_output=True, text=True, timeout=MARIADB_TIMEOUT_S, check=False,
        )  # fmt: skip
        assert r.returncode == 0, r.stderr
        return r.stdout

    def jdbc_url(self, scheme: str = "mariadb") -> str:
        return f"jdbc:{scheme}://127.0.0.1:{self.port}/{DATABASE}?user={USER}&password={PASSWORD}"


@contextmanager
def mariadb_server(programs: dict[str, Path]) -> Iterator[MariaDB]:
    """A running server (the ``mariadb_bin`` fixture's programs); stopped and deleted on exit."""
    work = Path(tempfile.mkdtemp(prefix="txmq-maria-"))
    data, sock, port = work / "data", work / "sock", free_port()
    me = ["--user=" + pwd.getpwuid(os.geteuid()).pw_name]  # as root: run as root, not mysql
    subprocess.run(
        [str(programs["install_db"]), "--no-defaults", f"--datadir={data}", *me,
         "--auth-root-authentication-method=normal", "--skip-test-db", *_SMALL],
        capture_output=True, text=True, timeout=MARIADB_TIMEOUT_S, check=True,
    )  # fmt: skip
    log = work / "error.log"
    proc = subprocess.Popen(
        [str(programs["server"]), "--no-defaults", f"--datadir={data}", f"--socket={sock}",
         f"--port={port}", "--bind-address=127.0.0.1", f"--log-error={log}",
         f"--pid-file={work / 'pid'}", f"--default-time-zone={SERVER_ZONE}", *me, *_SMALL],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + MARIADB_TIMEOUT_S
        while not (sock.exists() and accepts(port)):
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
            assert proc.poll() is None, f"mariadbd exited:\n{tail}"
            assert time.monotonic() < deadline, f"mariadbd not up:\n{tail}"
            time.sleep(0.2)  # sleep: poll interval of this bounded wait for the socket
        server = MariaDB(port, programs["client"], sock)
        server.sql(
            f"CREATE DATABASE IF NOT EXISTS {DATABASE};"
            f" CREATE USER '{USER}'@'127.0.0.1' IDENTIFIED BY '{PASSWORD}';"
            f" GRANT ALL ON {DATABASE}.* TO '{USER}'@'127.0.0.1';",
            database="mysql",
        )
        yield server
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=MARIADB_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(work)
