"""A real single-member etcd for replication tests (Debian's etcd-server, 3.4 here).

``etcd_endpoint``: a session-wide etcd started in a temporary directory, from the session's
``etcd_binary`` fixture (tests/conftest.py: Debian's etcd-server, installed when missing).
``forget_clusters``: called by an autouse fixture of each conftest whose tests use it.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from txmq.coordination.etcd import Etcd
from txmq.coordination.etcd_server import start_local_etcd


def forget_clusters(request: pytest.FixtureRequest) -> None:
    """Before a test that uses the session's etcd: delete every txmq key earlier tests left.
    A stored in-sync set names its members by data-directory incarnation (ADR 0005), so a set
    left by an earlier test's group of the same names would let none of this test's fresh
    replicas lead (to etcd, they are that group with every member's data lost)."""
    if "etcd_endpoint" in request.fixturenames:
        Etcd(request.getfixturevalue("etcd_endpoint")).delete_prefix("/txmq/")


@pytest.fixture(scope="session")
def etcd_endpoint(etcd_binary: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
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
