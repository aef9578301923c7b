"""Which cluster member a peer's TLS client certificate names (mutual TLS between members).

Owns: the rule for the peer-only calls when the members require client certificates
(``tls_client_ca``) and are in a cluster or a replica group. Every ``txmq.replica.v1.Replica``
method but Status (Fetch, Epochs, and any later way to ship the log: each request of a stream
is checked) is served only to a certificate naming the replica the request names in
``follower`` (Epochs without one: any replica of the group), and a forwarded topic create,
growth or delete or group reset (``forwarded``: what only a peer sends) only to one naming some
member of the cluster. A certificate names a member when the member's name or host, as the
cluster file lists it (for a replica group without one: as etcd's replica list has it), is its
subject CN, one of its SAN DNS names or one of its SAN IP addresses. Any other certificate the
CA signed is a client's: it may call what its ACL grants, but not these (refused FORBIDDEN in
the channel's own framing, saying what the certificate names and what was wanted; logged once
per distinct refusal).
Members on one host are told apart only by certificates that name them (a certificate naming
the host names every member the file puts there). Installed as the last server interceptor, so
no handler can be added around it.
Must not: verify the certificate chain (gRPC's TLS did, against ``tls_client_ca``).
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from typing import Any, Final

import grpc

from txmq import limits
from txmq.broker.cluster.membership import Membership
from txmq.broker.config.broker_config import BrokerConfig
from txmq.broker.leadership.runner import Leadership
from txmq.broker.rpc.json_channel import refusal
from txmq.errors import ForbiddenError, invariant
from txmq.protocol import channels

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

    def __init__(self, members: Callable[[], dict[str, str]]) -> None:
        self.members = members
        self._warned: set[str] = set()

    def check(self, context: Any, method: str, claimed: str | None = None) -> None:
        """Refuse ``method`` unless the caller's certificate names member ``claimed`` (None:
        any member).

        Raises:
            ForbiddenError: it names no such member (or ``claimed`` is none this broker knows).
        """
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


# What a request claims to be, from its JSON body: (the member set to check, the member named,
# None: any), or None when the request is no peer's call.
Claim = Callable[[dict[str, Any]], "tuple[PeerNames, str | None] | None"]


# Admin methods a member forwards to its peers (``forwarded: true``): only a peer sends those.
_FORWARDED: Final = frozenset(
    f"/{channels.ADMIN_SERVICE}/{m}"
    for m in ("TopicCreate", "TopicUpdate", "TopicDelete", "GroupReset", "GroupDelete")
)


class PeerInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """The peer-only methods, each request checked before its handler sees it: ``group`` for
    the Replica channel, ``cluster`` for forwarded admin calls (set before the server starts)."""

    def __init__(self, group: PeerNames, cluster: PeerNames) -> None:
        self.group = group
        self.cluster = cluster
        self._handlers: dict[str, Any] = {}

    async def intercept_service(
        self, continuation: Callable[[Any], Awaitable[Any]], details: Any
    ) -> Any:
        method = str(details.method)
        if method in self._handlers:
            return self._handlers[method]
        handler = await continuation(details)
        claim = self._claim(method)
        if handler is not None and claim is not None:
            handler = self._wrap(handler, method.rsplit("/", 1)[-1], claim)
        self._handlers[method] = handler
        invariant(len(self._handlers) <= limits.SERVER_METHODS_MAX, "registered methods only")
        return handler

    def _claim(self, method: str) -> Claim | None:
        if method.startswith(f"/{channels.REPLICA_SERVICE}/") and not method.endswith("/Status"):

            def replica(args: dict[str, Any]) -> tuple[PeerNames, str | None]:
                named = args.get("follower")
                if named is None and method.endswith("/Epochs"):
                    return self.group, None  # a follower before it named itself: any replica
                return self.group, str(named or "")

            return replica
        if method in _FORWARDED:
            return lambda args: (self.cluster, None) if args.get("forwarded") else None
        return None

    def _wrap(self, handler: Any, name: str, claim: Claim) -> Any:
        def refused(body: bytes, context: Any) -> bytes | None:
            """The refusal frame, or None when the request may go to the handler (a body
            that is not a JSON object is the handler's to refuse)."""
            try:
                args = json.loads(body or b"{}")
            except ValueError:
                return None
            found = claim(args) if isinstance(args, dict) else None
            if found is None:
                return None
            try:
                found[0].check(context, name, found[1])
            except ForbiddenError as exc:
                return channels.frame(refusal(exc, name))
            return None

        kinds = {
            "request_deserializer": handler.request_deserializer,
            "response_serializer": handler.response_serializer,
        }
        if handler.request_streaming and handler.response_streaming:
            behavior = handler.stream_stream

            async def each(requests: Any, context: Any) -> AsyncIterator[Any]:
                no: list[bytes] = []

                async def checked() -> AsyncIterator[Any]:
                    async for body in requests:
                        answer = refused(body, context)
                        if answer is not None:
                            no.append(answer)
                            return
                        yield body

                async with contextlib.aclosing(behavior(checked(), context)) as items:
                    async for item in items:
                        yield item
                if no:  # the reply to the refused request; the stream ends with it
                    yield no[0]

            return grpc.stream_stream_rpc_method_handler(each, **kinds)
        invariant(not handler.request_streaming and not handler.response_streaming, name)
        unary = handler.unary_unary

        async def one(body: Any, context: Any) -> Any:
            answer = refused(body, context)
            return answer if answer is not None else await unary(body, context)

        return grpc.unary_unary_rpc_method_handler(one, **kinds)


def peer_interceptor(
    config: BrokerConfig, leadership: Leadership | None, known: list[Membership]
) -> PeerInterceptor | None:
    """The check for a member or replica that requires client certificates (None for any
    other broker): its group's replicas as the cluster file lists them (a replica group
    without one: as etcd lists them), and every member of its cluster. ``known`` holds its
    Membership before the server starts."""
    if not required(config):
        return None

    def cluster() -> dict[str, str]:
        return {m.name: m.host for m in known[0].cluster.members}

    def group() -> dict[str, str]:
        if config.cluster_file is not None or leadership is None:
            return {m.name: m.host for m in known[0].group.replicas}
        return {n: e.rsplit(":", 1)[0] for n, e in leadership.replicas.items()}

    return PeerInterceptor(PeerNames(group), PeerNames(cluster))
