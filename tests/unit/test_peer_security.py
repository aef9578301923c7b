"""How a cluster member or replica calls its peers when they require client certificates
(broker/auth.peer_security), and the client side's certificate options (ClientSecurity, the
Spark options). Real PEM files from txmq.demo.certs; the handshakes themselves are in
tests/integration/test_security_mtls.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from txmq.broker.config.broker_config import BrokerConfig
from txmq.broker.security.auth import peer_security
from txmq.demo.certs import Bundle, make_bundle
from txmq.errors import ConfigError
from txmq.protocol.client_security import ClientSecurity
from txmq.spark.options import TxmqOptionError, lower_keys, security


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Bundle:
    return make_bundle(tmp_path_factory.mktemp("pki"))


def member(pki: Bundle, tmp_path: Path, **kw: object) -> BrokerConfig:
    return BrokerConfig(
        data_dir=tmp_path,
        cluster_file=tmp_path / "cluster.toml",  # peer_security reads only that one is set
        tls_cert=pki.server_cert,
        tls_key=pki.server_key,
        cluster_ca_file=pki.ca,
        **kw,  # type: ignore[arg-type]
    )


def test_a_member_requiring_client_certificates_presents_its_own(
    pki: Bundle, tmp_path: Path
) -> None:
    got = peer_security(member(pki, tmp_path, tls_client_ca=pki.ca), None)
    assert (got.tls, got.ca_file) == (True, pki.ca)
    assert (got.cert_file, got.key_file) == (pki.server_cert, pki.server_key)
    assert got.channel_credentials() is not None
    # Without tls_client_ca nobody asks for one: none is presented unless given.
    assert peer_security(member(pki, tmp_path), None).cert_file is None
    given = member(pki, tmp_path, tls_peer_cert=pki.client_cert, tls_peer_key=pki.client_key)
    assert peer_security(given, None).cert_file == pki.client_cert


def test_an_unusable_peer_certificate_stops_the_start_naming_its_flag(
    pki: Bundle, tmp_path: Path
) -> None:
    missing = tmp_path / "missing.pem"
    config = member(pki, tmp_path, tls_peer_cert=missing, tls_peer_key=pki.client_key)
    with pytest.raises(ConfigError, match=r"--tls-peer-cert .*missing\.pem"):
        peer_security(config, None)
    not_pem = tmp_path / "key.txt"
    not_pem.write_text("no key here")
    config = member(pki, tmp_path, tls_peer_cert=pki.client_cert, tls_peer_key=not_pem)
    with pytest.raises(ConfigError, match=r"--tls-peer-key .*not a PEM file"):
        peer_security(config, None)
    with pytest.raises(ConfigError, match="tls_peer_cert and tls_peer_key go together"):
        member(pki, tmp_path, tls_peer_cert=pki.client_cert)
    with pytest.raises(ConfigError, match="tls_peer_cert needs tls_cert"):
        BrokerConfig(data_dir=tmp_path, tls_peer_cert=pki.ca, tls_peer_key=pki.ca)


def test_client_certificate_options(pki: Bundle, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="--cert-file and --key-file go together"):
        ClientSecurity(cert_file=pki.client_cert)
    assert ClientSecurity(cert_file=pki.client_cert, key_file=pki.client_key).tls
    env = {"TXMQ_CERT_FILE": str(pki.client_cert), "TXMQ_KEY_FILE": str(pki.client_key)}
    from_env = ClientSecurity.from_env(env)
    assert (from_env.cert_file, from_env.key_file, from_env.tls) == (
        pki.client_cert,
        pki.client_key,
        True,
    )
    with pytest.raises(ConfigError, match=r"--key-file .*gone\.key: cannot read"):
        ClientSecurity(
            cert_file=pki.client_cert, key_file=tmp_path / "gone.key"
        ).channel_credentials()
    spark = security({"certfile": str(pki.client_cert), "keyfile": str(pki.client_key)})
    assert spark == ClientSecurity(cert_file=pki.client_cert, key_file=pki.client_key)
    assert security(lower_keys(spark.spark_options())) == spark  # the options round-trip
    with pytest.raises(TxmqOptionError, match="option certFile and keyFile go together"):
        security({"certfile": str(pki.client_cert)})
