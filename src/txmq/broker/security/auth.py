"""Who may do what on this broker: the ACL file, signature checks and the per-RPC rules.

Owns: reading the ACL file (refused when group or others may read it), the current rules and
their reload, authenticating one call's metadata (``Guard.authenticate``, with a cache of
verified headers per date), checking each call's client id against the access key it is bound
to (the bindings and their bounds: client_ids.py), and the rights each RPC needs (``RULES``,
``DATA_RULES``). The interceptor that applies them at the edge of the server is
txmq/broker/security/interceptor.py.
Must not: block the event loop beyond a dictionary lookup and one HMAC, or log a secret.

Rights per RPC (docs/security.md):
- SendMessage, EndTransaction (the producer's decision and its answer to a check-back),
  RecallMessage: publish on the message's topic; EndTransaction also on the topic the broker
  recorded for that transaction, so a publisher of one topic cannot decide another's.
- ReceiveMessage, AckMessage, ChangeInvisibleDuration, ForwardMessageToDeadLetterQueue,
  PullMessage, Update/Get/QueryOffset, QueryAssignment: subscribe on the topic and the group.
- QueryRoute: publish or subscribe on the topic (a route may create the topic).
- Heartbeat, NotifyClientTermination: the group when one is named.
- Telemetry: credentials once, when the stream opens; publishing topics a user may not publish
  are dropped from its Settings, so it is never asked to check back another topic's messages.
- The admin channel: admin; MessageFind within one topic: subscribe on it (the Spark sink reads
  its ledger so); TopicDescribe: publish or subscribe on the topic (``txmq send``/``consume``
  check the topic first). The data channel: subscribe on the topic for PullRecords and
  QueueOffsets, publish on it for PrepareBundle (the Spark sink's transactions).
  Any method not listed needs admin (fail closed for methods added later).
"""

from __future__ import annotations

import json
import logging
import stat
from collections import OrderedDict
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Final

from txmq import limits
from txmq.broker.config.broker_config import BrokerConfig
from txmq.broker.security.client_ids import ClientIds, NoStreams, Streams
from txmq.broker.security.tls import read_pem
from txmq.errors import ConfigError, ForbiddenError, UnauthorizedError, invariant
from txmq.protocol import auth
from txmq.protocol.acl import Acl, User, parse_acl
from txmq.protocol.client_security import PLAINTEXT, ClientSecurity

log = logging.getLogger("txmq.broker")

TransactionTopic = Callable[[str], str | None]


def read_acl_file(path: Path) -> Acl:
    """Read and parse an ACL file, refusing one that others could read or that names no admin.

    Raises:
        ConfigError: unreadable, group- or world-readable or -writable, too large, malformed
            (one line naming the file and the key), or without a user with ``admin = true``
            (an empty file included).
    """
    try:
        info = path.stat()
        if stat.S_IMODE(info.st_mode) & 0o066:
            raise ConfigError(
                f"{path}: mode {stat.S_IMODE(info.st_mode):04o} lets group or others read or "
                "write the secrets; chmod 600 it"
            )
        if info.st_size > limits.ACL_FILE_SIZE_MAX:
            raise ConfigError(f"{path}: larger than {limits.ACL_FILE_SIZE_MAX} bytes")
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read ACL file {path}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text") from exc
    acl = parse_acl(text, str(path))
    if not any(user.admin for user in acl.users.values()):
        # Rules nobody may change through the broker, and that lock out cluster peers (they
        # sign as an admin): almost always a truncated or half-edited file.
        raise ConfigError(
            f"{path}: no user has admin = true ({len(acl.users)} users): such rules would "
            "lock out every administrator and the cluster's own members; add an admin user"
        )
    return acl


def metadata_value(metadata: Iterable[Any] | None, name: str) -> str:
    for key, value in metadata or ():
        if key == name:
            return value if isinstance(value, str) else ""
    return ""


class Guard:
    """The current ACL and the authentication state that goes with it. Event loop only."""

    def __init__(
        self,
        acl: Acl,
        *,
        source: Path,
        transaction_topic: TransactionTopic,
        date_skew_ms: int = limits.AUTH_DATE_SKEW_S_DEFAULT * 1000,
        streams: Streams | None = None,
    ) -> None:
        self.acl = acl
        self.source = source
        self.transaction_topic = transaction_topic
        # How far a signed date may be from the broker's clock, either side (auth_date_skew_s).
        self.date_skew_ms = date_skew_ms
        # (authorization header, date header) verified -> (access key, date in ms).
        self._verified: OrderedDict[tuple[str, str], tuple[str, int]] = OrderedDict()
        # Client id -> the access key that first used it; ``streams``: the sessions, whose
        # Telemetry streams keep a binding (none: a follower has no sessions of its own).
        self.client_ids = ClientIds(streams or NoStreams())

    def replace(self, acl: Acl) -> None:
        """Take new rules; cached signatures were computed with the old secrets. Client ids stay
        bound to the access keys the new rules still have (forgetting them would let anyone
        take a live producer's client id right after a reload)."""
        self.acl = acl
        self._verified.clear()
        self.client_ids.keep_only(acl.users)

    def reload_read(self) -> Acl | None:
        """Re-read the ACL file (SIGHUP; any thread): the new rules, or None when the file is
        refused, which is logged and keeps the old rules. ``replace`` installs them."""
        try:
            acl = read_acl_file(self.source)
        except ConfigError as exc:
            log.error("ACL reload refused, keeping the previous rules: %s", exc)
            return None
        log.info("ACL reloaded from %s: %d users", self.source, len(acl.users))
        return acl

    def authenticate(self, metadata: Iterable[Any] | None, now_ms: int) -> User:
        """The user whose valid signature ``metadata`` carries.

        Raises:
            UnauthorizedError: no, malformed, stale or wrong credentials, an unknown access key,
                or a client id already used with another access key.
            TooManyRequestsError: a new client id the bindings have no room for (client_ids.py).
        """
        pairs = tuple(metadata or ())
        text = metadata_value(pairs, auth.HEADER_AUTHORIZATION)
        date = metadata_value(pairs, auth.HEADER_DATE)
        # A header (signature included) already verified with this date needs no parse and no
        # HMAC again: only the date window is re-checked.
        verified = self._verified.get((text, date))
        if verified is None:
            user, date_ms = self._verify(text, date)
        else:
            access_key, date_ms = verified
            # Present: the cache is emptied whenever the rules change.
            user = self.acl.users[access_key]
        auth.check_date(date_ms, now_ms, self.date_skew_ms)
        if verified is None:
            self._verified[(text, date)] = (user.access_key, date_ms)
            if len(self._verified) > limits.AUTH_SIGNATURE_CACHE_MAX:
                self._verified.popitem(last=False)
        self._bind_client_id(metadata_value(pairs, "x-mq-client-id"), user)
        return user

    def _verify(self, text: str, date: str) -> tuple[User, int]:
        """Parse and check one header against the rules: the user and the date in ms."""
        header = auth.parse_authorization(text)
        user = self.acl.user(header.access_key)
        if user is None:
            raise UnauthorizedError(f"unknown access key {header.access_key!r}")
        date_ms = auth.parse_date_ms(date)
        if not auth.signature_matches(header.signature, auth.sign(user.secret_key, date)):
            raise UnauthorizedError(f"wrong signature for access key {header.access_key!r}")
        return user, date_ms

    def _bind_client_id(self, client_id: str, user: User) -> None:
        if client_id:
            self.client_ids.bind(client_id, user.access_key)


# --- Rights. ------------------------------------------------------------------------------------


def need_publish(user: User, topic: str) -> None:
    if not user.publish.allows(topic):
        raise ForbiddenError(f"access key {user.access_key!r} may not publish to topic {topic!r}")


def need_subscribe(user: User, topic: str, group: str | None) -> None:
    if not user.subscribe.allows(topic):
        raise ForbiddenError(f"access key {user.access_key!r} may not subscribe to topic {topic!r}")
    if group is not None:
        need_group(user, group)


def need_group(user: User, group: str) -> None:
    if not user.groups.allows(group):
        raise ForbiddenError(f"access key {user.access_key!r} may not use group {group!r}")


def need_admin(guard: Guard, user: User, request: Any) -> None:
    if not user.admin:
        raise ForbiddenError(f"access key {user.access_key!r} is not an admin")


def _nothing(guard: Guard, user: User, request: Any) -> None:
    """Authenticated is enough."""


def _route(guard: Guard, user: User, request: Any) -> None:
    topic = request.topic.name
    if not (user.publish.allows(topic) or user.subscribe.allows(topic)):
        raise ForbiddenError(
            f"access key {user.access_key!r} may neither publish nor subscribe to topic {topic!r}"
        )


def _named_group(guard: Guard, user: User, request: Any) -> None:
    if request.group.name:
        need_group(user, request.group.name)


def _send(guard: Guard, user: User, request: Any) -> None:
    for message in request.messages:
        need_publish(user, message.topic.name)


def _end(guard: Guard, user: User, request: Any) -> None:
    need_publish(user, request.topic.name)
    recorded = guard.transaction_topic(request.transaction_id)
    if recorded is not None and recorded != request.topic.name:
        need_publish(user, recorded)


def _topic_group(guard: Guard, user: User, request: Any) -> None:
    need_subscribe(user, request.topic.name, request.group.name)


def _queue_group(guard: Guard, user: User, request: Any) -> None:
    need_subscribe(user, request.message_queue.topic.name, request.group.name)


def _queue(guard: Guard, user: User, request: Any) -> None:
    need_subscribe(user, request.message_queue.topic.name, None)


def _recall(guard: Guard, user: User, request: Any) -> None:
    need_publish(user, request.topic.name)


Rule = Callable[[Guard, User, Any], None]

# apache.rocketmq.v2.MessagingService: method -> the rights its request needs. A method not
# listed needs admin (fail closed).
RULES: Final[dict[str, Rule]] = {
    "QueryRoute": _route,
    "Heartbeat": _named_group,
    "SendMessage": _send,
    "QueryAssignment": _topic_group,
    "ReceiveMessage": _queue_group,
    "AckMessage": _topic_group,
    "ForwardMessageToDeadLetterQueue": _topic_group,
    "EndTransaction": _end,
    "Telemetry": _nothing,
    "NotifyClientTermination": _named_group,
    "ChangeInvisibleDuration": _topic_group,
    "PullMessage": _queue_group,
    "UpdateOffset": _queue_group,
    "GetOffset": _queue_group,
    "QueryOffset": _queue,
    "RecallMessage": _recall,
    "SyncLiteSubscription": _nothing,
}


def _json_name(body: Any, field: str) -> str | None:
    """The string ``field`` of a JSON request body, None when the body is not that."""
    try:
        args = json.loads(body or b"{}")
    except ValueError:
        return None
    value = args.get(field) if isinstance(args, dict) else None
    return value if isinstance(value, str) else None


def _data_topic(guard: Guard, user: User, body: Any) -> None:
    """Reads of the txmq channels: subscribe on the topic named in the JSON body (an admin may
    read everything already: MessageShow)."""
    topic = _json_name(body, "topic")
    if user.admin:
        return
    if topic is None:
        need_admin(guard, user, body)  # no topic named: only an admin gets to the handler
        return
    need_subscribe(user, topic, None)


def _json_topic_any(guard: Guard, user: User, body: Any) -> None:
    """Topic metadata: publish or subscribe on the topic named ``name`` in the JSON body."""
    topic = _json_name(body, "name")
    if user.admin:
        return
    if topic is None:
        need_admin(guard, user, body)
        return
    if not (user.publish.allows(topic) or user.subscribe.allows(topic)):
        raise ForbiddenError(
            f"access key {user.access_key!r} may neither publish nor subscribe to topic {topic!r}"
        )


def _bundle_topic(body: Any) -> str | None:
    """The topic in a PrepareBundle request's JSON header (broker/data_channel/bundles.py framing:
    a 4-byte
    big-endian length, the header, then the messages), None when it is not there."""
    if not isinstance(body, bytes | bytearray | memoryview) or len(body) < 4:
        return None
    length = int.from_bytes(body[:4], "big")
    if length > limits.PULL_HEADER_SIZE_MAX or 4 + length > len(body):
        return None
    try:
        header = json.loads(bytes(body[4 : 4 + length]))
    except ValueError:
        return None
    topic = header.get("topic") if isinstance(header, dict) else None
    return topic if isinstance(topic, str) else None


def _bundle(guard: Guard, user: User, body: Any) -> None:
    """PrepareBundle (the Spark sink's transactions): publish on the bundle's topic."""
    topic = _bundle_topic(body)
    if topic is None:
        need_admin(guard, user, body)  # an unreadable header: only an admin reaches the handler
        return
    need_publish(user, topic)


DATA_RULES: Final[dict[str, Rule]] = {
    "PullRecords": _data_topic,
    "QueueOffsets": _data_topic,
    "PrepareBundle": _bundle,
}
# The admin channel: admin, except a lookup by key within one topic, which reads no more than
# a subscriber of that topic may (the Spark sink reads its ledger topic that way).
ADMIN_RULES: Final[dict[str, Rule]] = {
    "MessageFind": _data_topic,
    "TopicDescribe": _json_topic_any,
}
invariant(all(callable(r) for r in RULES.values()), "every rule is callable")


def drop_unpublishable(user: User, settings: Any) -> list[str]:
    """Remove from a Telemetry Settings the publishing topics ``user`` may not publish to (in
    place); returns their names for the log."""
    topics = settings.publishing.topics
    refused = [t.name for t in topics if not user.publish.allows(t.name)]
    if refused:
        kept = [t for t in topics if user.publish.allows(t.name)]
        copies = [type(t)() for t in kept]
        for copy, original in zip(copies, kept, strict=True):
            copy.CopyFrom(original)
        del topics[:]
        topics.extend(copies)
    return refused


def peer_security(config: BrokerConfig, acl: Acl | None) -> ClientSecurity:
    """How this broker calls its peers (cluster members' admin channel, a replica group
    leader's Fetch, a follower's forwarded calls): signed as ``cluster_access_key`` (an admin of
    the ACL file) when they check credentials, over TLS trusting ``cluster_ca_file`` when they
    serve TLS, presenting a client certificate when they require one (``_peer_certificate``).

    Raises:
        ConfigError: a secured cluster member or replica without what its peers will ask for,
            or a peer certificate or key that cannot be read.
    """
    if config.cluster_file is None and not config.etcd:
        return PLAINTEXT
    key = secret = ""
    if acl is not None:
        user = acl.user(config.cluster_access_key) if config.cluster_access_key else None
        if user is None or not user.admin:
            raise ConfigError(
                "cluster_access_key: a cluster member or replica with an ACL file needs an "
                "admin user of that file to sign its calls to its peers, got "
                f"{config.cluster_access_key!r}"
            )
        key, secret = user.access_key, user.secret_key
    if config.tls_cert is None:
        return ClientSecurity(key, secret)
    if config.cluster_ca_file is None:
        raise ConfigError(
            "cluster_ca_file: a cluster member or replica serving TLS needs the CA that signed "
            "its peers' certificates"
        )
    cert, cert_key = _peer_certificate(config)
    return ClientSecurity(
        key, secret, tls=True, ca_file=config.cluster_ca_file, cert_file=cert, key_file=cert_key
    )


def _peer_certificate(config: BrokerConfig) -> tuple[Path | None, Path | None]:
    """The client certificate and key this member presents to its peers: ``tls_peer_cert`` and
    ``tls_peer_key`` when given; else, when the members require client certificates
    (``tls_client_ca``: the same on every member), its own ``tls_cert`` and ``tls_key``, which
    then need the clientAuth extended key usage besides serverAuth; else none. Read once here so
    an unreadable file stops the start, naming its flag, rather than every later peer call.
    """
    if config.tls_peer_cert is not None and config.tls_peer_key is not None:
        cert, key = config.tls_peer_cert, config.tls_peer_key
        flags = ("--tls-peer-cert", "--tls-peer-key")
    elif config.tls_client_ca is not None and config.tls_cert and config.tls_key:
        cert, key = config.tls_cert, config.tls_key
        flags = ("--tls-cert (as the peer certificate)", "--tls-key")
    else:
        return None, None
    read_pem(cert, flags[0])
    read_pem(key, flags[1])
    return cert, key


def open_broker_notice(acl_file: Path | None) -> None:
    if acl_file is None:
        log.warning(
            "no --acl-file: this broker is open; anyone who reaches the port may send, "
            "consume, decide transactions and administer it (docs/security.md)"
        )
