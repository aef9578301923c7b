"""Client of the broker's admin channel (``txmq.admin.v1.Admin``, JSON bodies; the server side
is txmq/broker/admin/service.py).

Owns: one call = one short-lived channel, and the mapping of failures to typed errors that the
CLI turns into exit codes: nothing answering -> BrokerUnavailableError (3); a refusal -> the
error ``errors.from_code`` types by its status code (NotFoundError and BadRequestError families
exit 2, the rest 1).
Must not: retry (a script decides whether to retry, from the exit code).
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from typing import Any

import grpc

from txmq import errors, limits
from txmq.client.security import current
from txmq.errors import BrokerUnavailableError, RemoteProtocolError, TxmqError
from txmq.protocol import channels
from txmq.protocol.client_security import ClientSecurity, open_channel

SERVICE = channels.ADMIN_SERVICE


def split_endpoints(endpoints: str) -> list[str]:
    """``H:P1;H:P2`` (the official clients' form for several brokers) -> ``[H:P1, H:P2]``."""
    parts = [e.strip() for e in endpoints.split(";") if e.strip()]
    if not parts:
        raise errors.BadRequestError(
            f"no broker address in {endpoints!r} (expected HOST:PORT[;...])"
        )
    return parts


# `txmq consume` and `txmq tail` without --group read as a fresh group of this prefix and 8
# hex digits, which they delete when they end (best effort: ``delete_group``); listings for
# people (`txmq group list`) leave out those left behind by a run that could not.
THROWAWAY_GROUP_PREFIX = "txmq-cli-"


def throwaway_group() -> str:
    """A fresh throwaway group name (``is_throwaway_group`` knows it)."""
    return f"{THROWAWAY_GROUP_PREFIX}{uuid.uuid4().hex[:8]}"


def is_throwaway_group(name: str) -> bool:
    suffix = name.removeprefix(THROWAWAY_GROUP_PREFIX)
    return suffix != name and len(suffix) == 8 and all(c in "0123456789abcdef" for c in suffix)


def delete_group(
    endpoints: str, group: str, *, force: bool = False, dry_run: bool = False,
    timeout_s: float = 10.0,
) -> Any:  # fmt: skip
    """Delete consumer group ``group`` on every broker of the cluster behind ``endpoints``
    (GroupDelete, broker/admin/delete.py): its positions and messages in flight, never its
    dead letters. ``force``: even while a consumer of it is connected.

    Raises:
        ConsumerGroupNotFoundError: no broker knows the group.
        BadRequestError: a consumer of the group is connected and not ``force`` (the
            broker's GroupInUseError, said in the message), or the name is malformed.
        TxmqError: what ``call`` raises.
    """
    args = {"group": group, "force": force, "dry_run": dry_run}
    return call(endpoints, "GroupDelete", args, timeout_s=timeout_s)


def call(
    endpoints: str,
    method: str,
    args: dict[str, Any],
    *,
    timeout_s: float = 10.0,
    security: ClientSecurity | None = None,
    credentials: Any = None,
) -> Any:
    """Call one admin method on the first of ``endpoints`` (``H:P1;H:P2``) that answers and
    is not a follower replica (which refuses, naming its leader); returns the decoded result.
    ``security`` defaults to the running command's options (client/security.py): credentials
    sign the call, TLS wraps it. ``credentials`` (anything
    with ``access_key`` and ``secret_key``) replaces its keys. In a cluster any member answers
    for the cluster's topic definitions; per-broker state is asked of each (``cluster_call``).

    Raises:
        BrokerUnavailableError: nothing answers at any of ``endpoints``.
        TxmqError: the broker refused the request (``errors.from_code``).
    """
    addresses = split_endpoints(endpoints)
    for address in addresses[:-1]:
        try:
            return _call_one(address, method, args, timeout_s, security, credentials)
        except (BrokerUnavailableError, errors.NotLeaderError):
            continue
    return _call_one(addresses[-1], method, args, timeout_s, security, credentials)


def members(endpoints: str) -> list[dict[str, Any]]:
    """Every member of the cluster behind ``endpoints`` (name, endpoint, live as the answering
    member sees it); a broker without a cluster file is a cluster of one named ``txmq``."""
    found = list(call(endpoints, "ClusterInfo", {})["members"])
    if len(found) == 1:
        # One broker: keep the address the user gave (its TLS name, its route from here),
        # not the one the broker advertises.
        found[0] = {**found[0], "endpoint": split_endpoints(endpoints)[0]}
    return found


def cluster_call(
    endpoints: str, method: str, args: dict[str, Any], *, timeout_s: float = 5.0
) -> list[tuple[dict[str, Any], Any]]:
    """Call ``method`` on every member; (member, reply or the TxmqError it raised) per member,
    in cluster-file order, so callers show what the unreachable members could not say."""
    out: list[tuple[dict[str, Any], Any]] = []
    for m in members(endpoints):
        try:
            out.append((m, call(str(m["endpoint"]), method, args, timeout_s=timeout_s)))
        except errors.TxmqError as exc:
            out.append((m, exc))
    return out


def _call_one(
    endpoints: str,
    method: str,
    args: dict[str, Any],
    timeout_s: float,
    security: ClientSecurity | None,
    credentials: Any,
) -> Any:
    chosen = security if security is not None else current()
    if credentials is not None:  # a person signed in (the dashboard): their keys, our TLS
        chosen = dataclasses.replace(
            chosen, access_key=credentials.access_key, secret_key=credentials.secret_key
        )
    channel = open_channel(endpoints, chosen)
    try:
        stub = channel.unary_unary(channels.method_path(SERVICE, method))
        metadata = chosen.metadata(time.time_ns() // 1_000_000)
        raw = stub(channels.encode(args), metadata=metadata, timeout=timeout_s)
    except grpc.RpcError as exc:
        error = channels.transport_error(exc, endpoints, "txmq admin", method)
        raise _certificate_hint(error, chosen) from exc
    finally:
        channel.close()
    return channels.admin_reply(raw, method)


def _certificate_hint(error: TxmqError, security: ClientSecurity) -> TxmqError:
    """A broker started with --tls-client-ca ends a handshake without a client certificate
    before any gRPC status, which the caller sees as "Socket closed": say what is likely."""
    if (
        isinstance(error, BrokerUnavailableError)
        and security.tls
        and security.cert_file is None
        and "Socket closed" in error.reason
    ):
        return BrokerUnavailableError(
            error.endpoints,
            f"{error.reason} (a broker started with --tls-client-ca closes the TLS handshake "
            "of a client without a certificate: give --cert-file and --key-file)",
        )
    return error


def call_pages(
    endpoints: str, method: str, args: dict[str, Any], rows: str, *, timeout_s: float = 10.0
) -> list[Any]:
    """Every row of a paged listing (TxnList, TopicList, GroupList: broker/admin/listing.py),
    following the ``next`` cursor from page to page. ``rows`` names the list in each reply.

    Raises what ``call`` raises, and RemoteProtocolError if the broker's cursors do not
    advance.
    """
    out: list[Any] = []
    after = ""
    for _ in range(limits.ADMIN_PAGES_MAX):
        reply = call(endpoints, method, {**args, "after": after}, timeout_s=timeout_s)
        out.extend(reply[rows])
        cursor = reply.get("next")
        if not cursor:
            return out
        if cursor == after:
            raise RemoteProtocolError(f"{method} repeated its page cursor {after!r}")
        after = str(cursor)
    raise RemoteProtocolError(f"{method} had more than {limits.ADMIN_PAGES_MAX} pages")
