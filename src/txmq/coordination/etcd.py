"""A small etcd v3 client over etcd's own JSON gateway (HTTP/1.1 or HTTPS, stdlib only;
ADR 0005).

Owns: the calls replica leadership needs (lease grant, keepalive and revoke; a
compare-and-put of a key that must not exist; a plain put (a replica's own entry in its group's
list); a read of one key, or of every key under a prefix: all groups' leaders, a group's
replicas) and their wire format
(base64 keys and values, int64 as strings). Every failure is one ``CoordinationError`` naming
the endpoint and the call. Blocking: the broker runs these in a thread (leadership.py).
Must not: decide anything about leadership (election.py does).
"""

from __future__ import annotations

import base64
import http.client
import json
import socket
import ssl
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from txmq import limits
from txmq.errors import ConfigError, CoordinationError, RemoteProtocolError

_TLS_HINT = (
    "give --etcd-ca-file (and, when it asks for client certificates,"
    " --etcd-cert-file/--etcd-key-file)"
)
# etcd's answer to a revoke of a lease it does not have (rpctypes.ErrLeaseNotFound).
_LEASE_NOT_FOUND = "requested lease not found"


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")


@dataclass(frozen=True, slots=True)
class KeyValue:
    value: bytes
    create_revision: int
    mod_revision: int
    lease: int


@dataclass(frozen=True, slots=True)
class Claim:
    """The answer to a compare-and-put: ``won`` and the key's holder as stored (ours if won)."""

    won: bool
    holder: KeyValue | None


@dataclass(frozen=True, slots=True)
class EtcdTls:
    """How to reach an etcd that serves TLS (``--etcd-ca-file``; with ``--client-cert-auth``
    on etcd's side also ``--etcd-cert-file``/``--etcd-key-file``): the CA that signed etcd's
    certificate, which must name the endpoint's host, and this side's client certificate."""

    ca_file: Path
    cert_file: Path | None = None
    key_file: Path | None = None

    @classmethod
    def of(cls, ca: Path | None, cert: Path | None, key: Path | None) -> EtcdTls | None:
        """From the three options (None without a CA: plaintext).

        Raises:
            ConfigError: a certificate without its key or the reverse, or either without a CA.
        """
        if (cert is None) != (key is None):
            raise ConfigError("--etcd-cert-file and --etcd-key-file go together")
        if ca is None:
            if cert is not None:
                raise ConfigError("--etcd-cert-file needs --etcd-ca-file (etcd over TLS)")
            return None
        return cls(ca, cert, key)

    def context(self) -> ssl.SSLContext:
        """A client context: etcd's certificate checked against ``ca_file`` and its host name.

        Raises:
            ConfigError: a file is missing, unreadable or not PEM.
        """
        try:
            ctx = ssl.create_default_context(cafile=str(self.ca_file))
            if self.cert_file is not None and self.key_file is not None:
                ctx.load_cert_chain(str(self.cert_file), str(self.key_file))
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(f"etcd TLS files: {exc}") from exc
        return ctx


class Etcd:
    def __init__(
        self,
        endpoint: str,
        *,
        timeout_ms: int = limits.ETCD_CALL_TIMEOUT_MS,
        tls: EtcdTls | None = None,
        keep_alive: bool = False,
    ) -> None:
        host, _, port = endpoint.rpartition(":")
        if not host or not port.isdigit():
            raise CoordinationError(f"etcd endpoint must be HOST:PORT, got {endpoint!r}")
        self.endpoint = endpoint
        self.host = host
        self.port = int(port)
        self.timeout_s = timeout_ms / 1000
        # Built once: loading the CA and the key pair per call would cost more than the call.
        self._context = tls.context() if tls is not None else None
        # With keep_alive, connections etcd keeps open are reused (at most ETCD_IDLE_MAX idle):
        # a replica calls etcd a few times a second, and a new TCP connection (over TLS, a
        # handshake) per call costs more CPU than the call.
        self.keep_alive = keep_alive
        self._idle: list[http.client.HTTPConnection] = []
        self._idle_lock = threading.Lock()

    def _connection(self) -> http.client.HTTPConnection:
        if self._context is None:
            return http.client.HTTPConnection(self.host, self.port, timeout=self.timeout_s)
        return http.client.HTTPSConnection(
            self.host, self.port, timeout=self.timeout_s, context=self._context
        )

    def _take(self) -> tuple[http.client.HTTPConnection, bool]:
        """An idle kept-alive connection (True) or a new one (False)."""
        with self._idle_lock:
            if self._idle:
                return self._idle.pop(), True
        return self._connection(), False

    def _give_back(self, conn: http.client.HTTPConnection) -> None:
        with self._idle_lock:
            if self.keep_alive and len(self._idle) < limits.ETCD_IDLE_MAX:
                self._idle.append(conn)
                return
        conn.close()

    def close(self) -> None:
        """Close the idle connections (calls still work after: they open new ones)."""
        with self._idle_lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    def _post(self, path: str, payload: str) -> tuple[int, bytes]:
        """(status, body) of one POST. On a kept-alive connection etcd closed while it was idle,
        once more on a new one: every call this client makes may be repeated (reads,
        keepalives, puts and compare-and-puts; a second lease grant only leaves a lease that
        expires unused)."""
        for _ in range(2):
            conn, reused = self._take()
            try:
                conn.request("POST", f"/v3/{path}", payload, {"Content-Type": "application/json"})
                resp = conn.getresponse()
                raw = resp.read(limits.ETCD_RESPONSE_SIZE_MAX)
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError) as exc:
                conn.close()
                if reused:
                    continue
                raise CoordinationError(f"etcd at {self.endpoint}: {path} failed: {exc}") from exc
            except (OSError, http.client.HTTPException) as exc:
                conn.close()
                raise CoordinationError(f"etcd at {self.endpoint}: {path} failed: {exc}") from exc
            if resp.isclosed() and not resp.will_close:  # read to its end, and kept open
                self._give_back(conn)
            else:
                conn.close()
            return resp.status, raw
        raise CoordinationError(f"etcd at {self.endpoint}: {path} failed: connection closed")

    def call(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """POST ``body`` to ``/v3/<path>``; the first JSON object of the answer."""
        status, raw = self._post(path, json.dumps(body))
        text = raw.decode("utf-8", "replace").strip().splitlines()
        try:
            doc = json.loads(text[0]) if text else {}
        except json.JSONDecodeError as exc:
            raise RemoteProtocolError(f"etcd at {self.endpoint}: {path}: not JSON") from exc
        if status == 400 and "HTTPS server" in raw.decode("utf-8", "replace"):
            raise CoordinationError(f"etcd at {self.endpoint} serves TLS: {_TLS_HINT}")
        if status != 200 or not isinstance(doc, dict) or "error" in doc:
            raise CoordinationError(
                f"etcd at {self.endpoint}: {path} refused ({status}): {text[:1]}"
            )
        return doc

    def check_security(self) -> None:
        """One read, at a replica's start: a TLS mismatch with etcd (plaintext against TLS, TLS
        against plaintext, a CA that did not sign etcd's certificate, no client certificate
        where etcd asks for one) never heals, so it is a ConfigError now instead of a
        leadership loop that retries forever. An etcd that does not answer yet is left to
        that loop.

        Raises:
            ConfigError: the TLS settings do not match etcd's.
        """
        try:
            self.get("/txmq/ready")
        except CoordinationError as exc:
            if self._context is None and self._serves_tls():  # a 400 "HTTPS server" too
                raise ConfigError(f"etcd at {self.endpoint} serves TLS: {_TLS_HINT}") from exc
            if isinstance(exc.__cause__, ssl.SSLError):
                raise ConfigError(
                    f"{exc} (check --etcd-ca-file, --etcd-cert-file and --etcd-key-file)"
                ) from exc

    def _serves_tls(self) -> bool:
        """Whether the endpoint answers a TLS ClientHello as a TLS server (a plaintext call to
        etcd serving TLS is only a connection reset). A probe: no certificate is trusted and
        nothing is sent after the handshake."""
        probe = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        probe.check_hostname = False
        probe.verify_mode = ssl.CERT_NONE
        try:
            with (
                socket.create_connection((self.host, self.port), timeout=self.timeout_s) as raw,
                probe.wrap_socket(raw),
            ):
                return True  # a handshake completed
        except ssl.SSLError as exc:
            # An alert (e.g. a client certificate required) is a TLS server too; a plaintext
            # server's answer is not a TLS record.
            return exc.reason not in ("WRONG_VERSION_NUMBER", "RECORD_LAYER_FAILURE")
        except OSError:
            return False

    # --- Leases. ------------------------------------------------------------------------------

    def grant(self, ttl_ms: int) -> tuple[int, int]:
        """A new lease of at least ``ttl_ms`` (rounded up to seconds): (id, granted TTL ms)."""
        doc = self.call("lease/grant", {"TTL": str(max(1, -(-ttl_ms // 1000)))})
        return int(doc["ID"]), int(doc.get("TTL", "0")) * 1000

    def keepalive(self, lease_id: int) -> int:
        """Renew a lease: its TTL in ms, 0 if etcd no longer has it."""
        doc = self.call("lease/keepalive", {"ID": str(lease_id)})
        result = doc.get("result", doc)
        return int(result.get("TTL", "0")) * 1000

    def revoke(self, lease_id: int) -> None:
        """Drop a lease and every key attached to it (a clean leader's step down). A lease etcd
        no longer has (it lapsed, or was revoked) is gone already: that is no error (a leader
        whose loop stalled resigns after its lease lapsed; CI 2026-11-28)."""
        try:
            self.call("lease/revoke", {"ID": str(lease_id)})
        except CoordinationError as exc:
            if _LEASE_NOT_FOUND not in str(exc):
                raise

    # --- Keys. --------------------------------------------------------------------------------

    def get(self, key: str) -> KeyValue | None:
        doc = self.call("kv/range", {"key": _b64(key.encode())})
        kvs = doc.get("kvs") or []
        return _kv(kvs[0]) if kvs else None

    def get_prefix(self, prefix: str) -> dict[str, KeyValue]:
        """Every key starting with ``prefix`` (at most ``ETCD_PREFIX_KEYS_MAX``) -> its value."""
        raw = prefix.encode()
        end = raw[:-1] + bytes([raw[-1] + 1])  # etcd's range_end for "every key with this prefix"
        doc = self.call(
            "kv/range",
            {"key": _b64(raw), "range_end": _b64(end), "limit": str(limits.ETCD_PREFIX_KEYS_MAX)},
        )
        return {base64.b64decode(kv["key"]).decode(): _kv(kv) for kv in doc.get("kvs") or []}

    def put(self, key: str, value: bytes) -> None:
        """Put ``key`` = ``value`` with no lease (it stays until overwritten or deleted)."""
        self.call("kv/put", {"key": _b64(key.encode()), "value": _b64(value)})

    def put_if_absent(
        self, key: str, value: bytes, lease_id: int, unchanged: tuple[str, int] | None = None
    ) -> Claim:
        """Put ``key`` = ``value`` attached to ``lease_id`` if no one holds ``key`` (and the
        key ``unchanged[0]`` was last modified at revision ``unchanged[1]``, 0: absent); either
        way, the holder afterwards (its create_revision is the epoch)."""
        k = _b64(key.encode())
        compare = [{"key": k, "result": "EQUAL", "target": "CREATE", "create_revision": "0"}]
        if unchanged is not None:
            other, rev = unchanged
            compare.append(
                {"key": _b64(other.encode()), "result": "EQUAL", "target": "MOD",
                 "mod_revision": str(rev)}
            )  # fmt: skip
        doc = self.call(
            "kv/txn",
            {
                "compare": compare,
                "success": [
                    {"request_put": {"key": k, "value": _b64(value), "lease": str(lease_id)}}
                ],
                "failure": [{"request_range": {"key": k}}],
            },
        )
        if doc.get("succeeded"):
            rev = int(doc["header"]["revision"])
            return Claim(True, KeyValue(value, rev, rev, lease_id))
        ranges = (doc.get("responses") or [{}])[0].get("response_range", {})
        kvs = ranges.get("kvs") or []
        return Claim(False, _kv(kvs[0]) if kvs else None)

    def put_if_created(self, key: str, value: bytes, guard: str, create_revision: int) -> bool:
        """Put ``key`` = ``value`` (no lease) only while ``guard`` exists with this
        ``create_revision`` (a leader writing under its own leader key); True if put."""
        doc = self.call(
            "kv/txn",
            {
                "compare": [
                    {
                        "key": _b64(guard.encode()),
                        "result": "EQUAL",
                        "target": "CREATE",
                        "create_revision": str(create_revision),
                    }
                ],
                "success": [{"request_put": {"key": _b64(key.encode()), "value": _b64(value)}}],
            },
        )
        return bool(doc.get("succeeded"))

    def put_if_unchanged(self, key: str, value: bytes, mod_revision: int, absent: str) -> bool:
        """Put ``key`` = ``value`` (no lease) only while ``key`` was last modified at
        ``mod_revision`` (0: it does not exist) and ``absent`` does not exist; True if put."""
        doc = self.call(
            "kv/txn",
            {
                "compare": [
                    {"key": _b64(key.encode()), "result": "EQUAL", "target": "MOD",
                     "mod_revision": str(mod_revision)},
                    {"key": _b64(absent.encode()), "result": "EQUAL", "target": "CREATE",
                     "create_revision": "0"},
                ],
                "success": [{"request_put": {"key": _b64(key.encode()), "value": _b64(value)}}],
            },
        )  # fmt: skip
        return bool(doc.get("succeeded"))

    def delete(self, key: str) -> None:
        self.call("kv/deleterange", {"key": _b64(key.encode())})

    def delete_prefix(self, prefix: str) -> int:
        """Delete every key starting with ``prefix``; how many there were."""
        raw = prefix.encode()
        end = raw[:-1] + bytes([raw[-1] + 1])
        doc = self.call("kv/deleterange", {"key": _b64(raw), "range_end": _b64(end)})
        return int(doc.get("deleted", "0"))


def _kv(doc: dict[str, Any]) -> KeyValue:
    return KeyValue(
        value=base64.b64decode(doc.get("value", "")),
        create_revision=int(doc.get("create_revision", "0")),
        mod_revision=int(doc.get("mod_revision", "0")),
        lease=int(doc.get("lease", "0")),
    )
