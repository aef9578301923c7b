"""The external programs the tests need, each found or installed once per test session by its
fixture in tests/conftest.py, never left behind by another test for later ones to find:

- ``node_client``: the official Node.js client (npm ``rocketmq-client-nodejs``), installed with
  the machine's npm into a cache kept between runs (``$XDG_CACHE_HOME/txmq-node``);
- ``chromium_binary``: Debian's ``chromium`` at /usr/bin/chromium (never a browser build that
  ``playwright install`` downloads);
- ``etcd_binary``: Debian's ``etcd-server``;
- ``postgres_bin``: Debian's ``postgresql`` (its ``initdb`` and ``pg_ctl``);
- ``mariadb_bin``: Debian's MariaDB server and client programs (``mariadb-server-core``,
  ``mariadb-client-core``: the programs without the system service, which tests never use);
- ``jdbc_jars``: Debian's JDBC drivers for PostgreSQL, SQLite and MariaDB (``txmq audit``'s
  Spark);
- ``java_runtime``: a Java 17+ for Spark (JAVA_HOME's or PATH's, else Debian's
  ``openjdk-17-jre-headless``).

Debian packages are installed with apt-get when missing and the tests run as root, one apt-get
at a time among test processes (tests/apt.py). A tool that cannot be had skips the tests that
need it, saying why; ``make test`` and CI set TXMQ_REQUIRE_TOOLS=1, and then such a skip fails
the test instead (tests/conftest.py), so a suite that did not really run them cannot look green.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

import pytest

from tests.apt import apt_lock

APT_TIMEOUT_S = 600
NPM_TIMEOUT_S = 300
NODE_CLIENT = "rocketmq-client-nodejs"
NODE_CLIENT_VERSION = VERSION = "1.0.8"
CHROMIUM = Path("/usr/bin/chromium")
JDBC_JARS = {
    "postgresql": Path("/usr/share/java/postgresql.jar"),
    "sqlite": Path("/usr/share/java/sqlite-jdbc.jar"),
    "mariadb": Path("/usr/share/java/mariadb-java-client.jar"),
}
JDBC_PACKAGES = ("libpostgresql-jdbc-java", "libxerial-sqlite-jdbc-java", "libmariadb-java")
MARIADB_PACKAGES = "mariadb-server-core mariadb-client-core"
MARIADB_PROGRAMS = {
    "server": Path("/usr/sbin/mariadbd"),
    "install_db": Path("/usr/bin/mariadb-install-db"),
    "client": Path("/usr/bin/mariadb"),
}
JAVA_PACKAGE = "openjdk-17-jre-headless"
PG_BIN_DIRS = tuple(f"/usr/lib/postgresql/{v}/bin" for v in (17, 16, 15, 14, 13))


def missing(tool: str, why: str) -> NoReturn:
    """Skip the test that needs ``tool``, saying why it cannot be had here."""
    pytest.skip(f"missing tool {tool}: {why}")


def apt_install(package: str, there: Callable[[], bool], what: str) -> None:
    """Install Debian's ``package`` (several: space-separated) unless ``there()`` already
    (``what`` it provides is found); skip the test when that cannot be done here."""
    if there():
        return
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        missing(package, f"no {what}, and this is not root with apt-get")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    with apt_lock():
        if there():  # another test process installed it meanwhile
            return
        for cmd in (
            ["apt-get", "update", "-qq"],
            ["apt-get", "install", "-y", "-qq", *package.split()],
        ):
            r = subprocess.run(
                cmd, capture_output=True, text=True, env=env, timeout=APT_TIMEOUT_S, check=False
            )
            if r.returncode != 0:
                missing(package, f"{' '.join(cmd)} failed: {r.stderr.strip()[-300:]}")
    if not there():
        missing(package, f"apt-get installed {package} but there is no {what}")


def node_cache() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "txmq-node"


def install_node_client() -> Path:
    """The ``node_modules`` directory holding the pinned Node.js client (NODE_PATH for node)."""
    npm, node = shutil.which("npm"), shutil.which("node")
    if npm is None or node is None:
        missing(NODE_CLIENT, "node and npm are not on PATH (Node.js 18+)")
    cache = node_cache()
    cache.mkdir(parents=True, exist_ok=True)
    installed = cache / "node_modules" / NODE_CLIENT / "package.json"
    with open(cache / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one npm install at a time into the shared cache
        if installed.exists() and json.loads(installed.read_text())["version"] == VERSION:
            return cache / "node_modules"
        manifest = cache / "package.json"
        if not manifest.exists():
            manifest.write_text('{"name": "txmq-node-compat", "private": true}\n')
        r = subprocess.run(
            [npm, "install", "--no-audit", "--no-fund", f"{NODE_CLIENT}@{NODE_CLIENT_VERSION}"],
            cwd=cache, capture_output=True, text=True, timeout=NPM_TIMEOUT_S, check=False,
        )  # fmt: skip
    if r.returncode != 0 or not installed.exists():
        missing(NODE_CLIENT, f"npm install failed: {r.stderr[-500:]}")
    return cache / "node_modules"


def install_chromium() -> Path:
    apt_install("chromium", CHROMIUM.exists, str(CHROMIUM))
    return CHROMIUM


def install_etcd() -> Path:
    apt_install("etcd-server", lambda: shutil.which("etcd") is not None, "etcd on PATH")
    return Path(str(shutil.which("etcd")))


def postgres_bin_dir() -> Path | None:
    for d in map(Path, PG_BIN_DIRS):
        if (d / "initdb").exists() and (d / "pg_ctl").exists():
            return d
    return None


def install_postgres() -> Path:
    """The directory holding PostgreSQL's server programs (``initdb``, ``pg_ctl``)."""
    apt_install("postgresql", lambda: postgres_bin_dir() is not None, "initdb and pg_ctl")
    return Path(str(postgres_bin_dir()))


def install_mariadb() -> dict[str, Path]:
    """MariaDB's programs: "server" (``mariadbd``), "install_db", "client" (``mariadb``)."""
    there = lambda: all(p.is_file() for p in MARIADB_PROGRAMS.values())  # noqa: E731
    apt_install(MARIADB_PACKAGES, there, "mariadbd, mariadb-install-db and mariadb")
    return dict(MARIADB_PROGRAMS)


def install_jdbc_jars() -> dict[str, Path]:
    """Database name -> its JDBC driver jar."""
    there = lambda: all(p.is_file() for p in JDBC_JARS.values())  # noqa: E731
    apt_install(" ".join(JDBC_PACKAGES), there, "JDBC jars in /usr/share/java")
    return dict(JDBC_JARS)


def java_problem() -> str | None:
    """Why Spark cannot start a JVM here (txmq.spark.session's own words), or None."""
    from txmq.errors import TxmqError
    from txmq.spark.session import require_java

    try:
        require_java()
    except TxmqError as exc:
        return str(exc)
    return None


def install_java() -> Path:
    """The ``java`` Spark will run: JAVA_HOME's or PATH's when it is 17+, else Debian's."""
    from txmq.spark.session import java_binary

    problem = java_problem()
    if problem is not None and os.environ.get("JAVA_HOME"):
        missing(JAVA_PACKAGE, problem)  # an explicit JAVA_HOME is the user's choice: no apt
    apt_install(JAVA_PACKAGE, lambda: java_problem() is None, "Java 17+ for Spark")
    return java_binary()
