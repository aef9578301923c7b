"""The names a peer's client certificate carries and the member they name (broker/peer_names)."""

from __future__ import annotations

import pytest

from txmq.broker.security.peer_names import PeerNames, certificate_names, normal
from txmq.errors import ForbiddenError


class Call:
    """What a grpc.aio handler's context gives the check: gRPC's auth context of the call."""

    def __init__(self, cn: bytes, *sans: bytes) -> None:
        self.auth = {"x509_common_name": [cn], "x509_subject_alternative_name": list(sans)}

    def auth_context(self) -> dict[str, list[bytes]]:
        return self.auth


MEMBERS = {"r0": "10.0.0.1", "r1": "Broker-1.Example.COM", "r2": "::1"}


def test_names_compare_as_hosts_do() -> None:
    assert normal("Broker.Example.com.") == "broker.example.com"
    assert normal("0:0:0:0:0:0:0:1") == normal("[::1]") == "::1"
    assert certificate_names({"x509_common_name": [b"R0"]}) == {"r0"}
    assert certificate_names({}) == frozenset()


def test_a_certificate_passes_for_the_member_it_names_by_name_or_host() -> None:
    peers = PeerNames(lambda: MEMBERS)
    peers.check(Call(b"r0"), "Fetch", "r0")  # CN = the member's name
    peers.check(Call(b"x", b"10.0.0.1"), "Fetch", "r0")  # SAN IP = its host
    peers.check(Call(b"x", b"broker-1.example.com"), "Fetch", "r1")  # SAN DNS, any case
    peers.check(Call(b"x", b"0::1"), "Fetch", "r2")
    peers.check(Call(b"r1"), "TopicCreate")  # any member


def test_a_certificate_naming_another_member_or_none_is_refused_saying_so() -> None:
    peers = PeerNames(lambda: MEMBERS)
    with pytest.raises(ForbiddenError, match=r"names r0, not r1 \(host Broker-1"):
        peers.check(Call(b"r0", b"r0"), "Fetch", "r1")
    with pytest.raises(ForbiddenError, match="names txmq client, not any member"):
        peers.check(Call(b"txmq client"), "TopicCreate")
    with pytest.raises(ForbiddenError, match="r9, which is no member this broker knows"):
        peers.check(Call(b"r9"), "Fetch", "r9")
    with pytest.raises(ForbiddenError, match="names nothing"):
        peers.check(Call(b""), "Epochs", "r0")
