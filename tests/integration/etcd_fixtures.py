"""A real single-member etcd for replication tests (Debian's etcd-server, 3.4 here).

``etcd_endpoint``: a session-wide etcd started in a temporary directory; installed with apt-get
when missing and the tests run as root, otherwise the tests that need it skip saying why.
``forget_clusters``: called by an autouse fixture of each conftest whose tests use it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator

import pytest

from tests.apt import apt_lock
from txmq.coordination.etcd import Etcd
from txmq.coordination.etcd_server import PACKAGE_HINT, start_local_etcd

APT_TIMEOUT_S = 300


def ensure_etcd() -> None:
    if shutil.which("etcd"):
        return
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        pytest.skip(f"etcd is missing and this is not root with apt-get: {PACKAGE_HINT}")
    with apt_lock():
        if shutil.which("etcd"):  # another test process installed it meanwhile
            return
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        done = subprocess.run(
            ["apt-get", "install", "-y", "etcd-server"],
            env=env, capture_output=True, text=True, timeout=APT_TIMEOUT_S, check=False,
        )  # fmt: skip
    if done.returncode != 0 or not shutil.which("etcd"):
        pytest.skip(f"apt-get install etcd-server failed: {done.stderr.strip()[-300:]}")


def forget_clusters(request: pytest.FixtureRequest) -> None:
    """Before a test that uses the session's etcd: delete every txmq key earlier tests left.
    A stored in-sync set names its members by data-directory incarnation (ADR 0005), so a set
    left by an earlier test's group of the same names would let none of this test's fresh
    replicas lead (to etcd, they are that group with every member's data lost)."""
    if "etcd_endpoint" in request.fixturenames:
        Etcd(request.getfixturevalue("etcd_endpoint")).delete_prefix("/txmq/")


@pytest.fixture(scope="session")
def etcd_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    ensure_etcd()
    proc, endpoint = start_local_etcd(tmp_path_factory.mktemp("etcd"))
    try:
        yield endpoint
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
