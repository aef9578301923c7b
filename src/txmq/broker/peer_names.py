"""Which cluster member a peer's TLS client certificate names (mutual TLS between members).

Owns: the rule for the peer-only calls when the members require client certificates
(``tls_client_ca``) and are in a cluster or a replica group. A replica's ``Replica/Fetch`` and
``Replica/Epochs`` (as the replica it names in ``follower``) and a member's forwarded topic
create or delete (``forwarded``: as some member of the cluster) are served only when the
caller's certificate names that member: its name or its host, as the cluster file lists it
(for a replica group without one: as etcd's replica list has it), among the certificate's
subject CN, SAN DNS names and SAN IP addresses. Any other certificate the CA signed is a
client's: it may call what its ACL grants, but not these (refused FORBIDDEN, saying what the
certificate names and what was wanted; logged once per such refusal by the refusing member).
Members on one host are told apart only by certificates that name them (a certificate naming
the host names every member the file puts there).
Must not: verify the certificate chain (gRPC's TLS did, against ``tls_client_ca``).
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final

from txmq.broker.config import BrokerConfig
from txmq.errors import ForbiddenError

log = logging.getLogger(__name__)
# Distinct refusals logged (each once); past this many, refusals are no longer logged.
_WARNED_KEPT: Final = 64


def normal(name: str) -> str:
    """A host or name as certificates and cluster files are compared: an IP address in its
    canonical text, anything else lower case without a trailing dot."""
    try:
        return str(ipaddress.ip_address(name.strip("[]")))
    except ValueError:
        return name.lower().rstrip(".")


def certificate_names(auth: Mapping[str, Iterable[bytes]]) -> frozenset[str]:
    """The names a client certificate carries, from gRPC's auth context: its subject CN and
    its subject alternative names (DNS names and IP addresses, as text)."""
    found = [*auth.get("x509_common_name", ()), *auth.get("x509_subject_alternative_name", ())]
    return frozenset(normal(v.decode(errors="replace")) for v in found)


def required(config: BrokerConfig) -> bool:
    """Members require client certificates of each other: mutual TLS, in a cluster or group."""
    return config.tls_client_ca is not None and (
        config.cluster_file is not None or bool(config.etcd)
    )


class PeerNames:
    """The check of one set of members (``members()``: name -> host, read at each call)."""

    def __init__(self, members: Callable[[], dict[str, str]], *, required: bool) -> None:
        self.members = members
        self.required = required
        self._warned: set[str] = set()

    def check(self, context: Any, method: str, claimed: str | None = None) -> None:
        """Refuse ``method`` unless the caller's certificate names member ``claimed`` (None:
        any member).

        Raises:
            ForbiddenError: it names no such member (or ``claimed`` is none this broker knows).
        """
        if not self.required:
            return
        names = certificate_names(context.auth_context())
        members = self.members()
        wanted = members if claimed is None else {n: h for n, h in members.items() if n == claimed}
        if any(normal(n) in names or normal(h) in names for n, h in wanted.items()):
            return
        if claimed is None:
            who = "any member of the cluster"
        elif claimed in members:
            who = f"{claimed} (host {members[claimed]})"
        else:
            who = f"{claimed}, which is no member this broker knows ({', '.join(sorted(members))})"
        text = (
            f"{method} is for cluster members only: the client certificate names"
            f" {', '.join(sorted(names)) or 'nothing'}, not {who} (its name or its host as"
            " the cluster file lists it)"
        )
        if text not in self._warned and len(self._warned) < _WARNED_KEPT:
            self._warned.add(text)
            log.warning("refused: %s", text)
        raise ForbiddenError(text)
