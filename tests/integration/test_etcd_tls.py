"""etcd over TLS: leadership and fencing on an untrusted network.

Goal: a replica group can be led through an etcd that serves TLS and requires client
certificates, so nobody on the network can read or forge a leader key or an in-sync set; every
mismatch (plaintext against TLS, a CA that did not sign etcd's certificate, no client
certificate) is one clear error, at once, and a replica with such settings does not start.
Method: a real etcd (Debian's etcd-server) started with ``--cert-file/--key-file
--client-cert-auth --trusted-ca-file`` from throwaway certificates (txmq.demo.certs); the
client checked directly, then two real broker processes with ``--etcd-ca-file
--etcd-cert-file --etcd-key-file`` electing a leader and acknowledging SYNC sends through the
official client.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.clients import message, producer
from tests.integration.conftest import FAST, ROOT, BrokerProcess, wait_until
from tests.integration.test_replication import create_topic, leader_of, status
from txmq.coordination.etcd import Etcd, EtcdTls
from txmq.coordination.etcd_server import EtcdServing, start_local_etcd
from txmq.demo.certs import Bundle, make_bundle
from txmq.errors import ConfigError, CoordinationError


@pytest.fixture
def pki(tmp_path: Path) -> Bundle:
    return make_bundle(tmp_path / "pki")


@pytest.fixture
def tls_etcd(etcd_binary: Path, tmp_path: Path, pki: Bundle) -> Iterator[str]:
    """An etcd on 127.0.0.1 serving TLS with the bundle's server certificate, requiring
    client certificates signed by the bundle's CA."""
    serving = EtcdServing(pki.server_cert, pki.server_key, client_ca=pki.ca)
    client = EtcdTls(pki.ca, pki.client_cert, pki.client_key)
    proc, endpoint = start_local_etcd(tmp_path / "etcd", serving=serving, client=client)
    try:
        yield endpoint
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_the_client_talks_tls_and_every_mismatch_is_one_clear_error(
    tmp_path: Path, pki: Bundle, tls_etcd: str
) -> None:
    good = Etcd(tls_etcd, tls=EtcdTls(pki.ca, pki.client_cert, pki.client_key))
    good.put("/txmq-test/k", b"v")
    found = good.get("/txmq-test/k")
    assert found is not None and found.value == b"v"
    good.check_security()
    with pytest.raises(CoordinationError, match=f"etcd at {tls_etcd}: kv/range"):
        Etcd(tls_etcd).get("/txmq-test/k")  # plaintext: etcd resets the connection
    with pytest.raises(ConfigError, match="serves TLS: give --etcd-ca-file"):
        Etcd(tls_etcd).check_security()
    no_client_cert = Etcd(tls_etcd, tls=EtcdTls(pki.ca))
    with pytest.raises(ConfigError, match="check --etcd-ca-file"):
        no_client_cert.check_security()
    foreign = make_bundle(tmp_path / "foreign")
    with pytest.raises(ConfigError, match="CERTIFICATE_VERIFY_FAILED"):
        Etcd(tls_etcd, tls=EtcdTls(foreign.ca, pki.client_cert, pki.client_key)).check_security()
    # A client certificate from another CA: etcd refuses it.
    with pytest.raises(ConfigError, match="check --etcd-ca-file"):
        Etcd(
            tls_etcd, tls=EtcdTls(pki.ca, foreign.client_cert, foreign.client_key)
        ).check_security()
    with pytest.raises(ConfigError, match="go together"):
        EtcdTls.of(pki.ca, pki.client_cert, None)
    with pytest.raises(ConfigError, match="needs --etcd-ca-file"):
        EtcdTls.of(None, pki.client_cert, pki.client_key)
    with pytest.raises(ConfigError, match="etcd TLS files"):
        EtcdTls(tmp_path / "missing.pem").context()
    assert good.get("/txmq-test/k") is not None, "nothing above changed what etcd holds"


def test_a_replica_group_is_led_through_etcd_over_tls(
    tmp_path: Path, pki: Bundle, tls_etcd: str
) -> None:
    tls = ["--etcd-ca-file", str(pki.ca), "--etcd-cert-file", str(pki.client_cert),
           "--etcd-key-file", str(pki.client_key)]  # fmt: skip
    args = [*FAST, "--etcd", tls_etcd, "--replica-group", "g", "--min-insync-replicas", "2"]
    group = [BrokerProcess(tmp_path / n, [*args, "--broker-name", n, *tls]) for n in ("r0", "r1")]
    for b in group:
        b.start()
    try:
        leader, follower = leader_of(group)
        wait_until(lambda: status(follower.endpoints).get("role") == "follower", 20, "a follower")
        create_topic(leader, follower, "orders")
        p = producer(follower.endpoints, ("orders",))
        try:
            sent = [p.send(message("orders", f"m-{i}".encode())) for i in range(5)]
        finally:
            p.shutdown()
        assert len(sent) == 5, "acknowledged: durable on both replicas (SYNC 2)"
        leader_status = status(leader.endpoints)
        assert sorted(str(m) for m in leader_status["in_sync"]) == ["r0", "r1"]  # type: ignore[attr-defined]
    finally:
        for b in group:
            b.stop()
    # A replica without the CA does not start: one line, naming the options.
    r = subprocess.run(
        [sys.executable, "-m", "txmq.broker", "--data-dir", str(tmp_path / "r2"), "--port", "0",
         "--etcd", tls_etcd, "--replica-group", "g", "--broker-name", "r2"],
        capture_output=True, text=True, timeout=60, check=False,
        env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert r.returncode != 0
    lines = [x for x in r.stderr.splitlines() if x.startswith("txmq:")]
    assert lines and "serves TLS: give --etcd-ca-file" in lines[0], r.stderr
    assert "Traceback" not in r.stderr
