"""What a txmq client (CLI, Spark source and sink) needs to reach a secured broker.

Owns: the credentials and TLS choice of one client (``ClientSecurity``), validated once; the
signed metadata for each call (the official clients' MQv2-HMAC-SHA1 headers, from
txmq/protocol/auth.py); and opening a gRPC channel, TLS or not, to a broker.
Must not: read the environment or the clock by itself (callers pass them), or show a secret in
``repr`` or in an error.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import grpc

from txmq import limits
from txmq.errors import ConfigError
from txmq.protocol import auth

_TRUE = ("1", "true", "yes", "on")


@dataclass(frozen=True, slots=True)
class ClientSecurity:
    """Credentials (both keys or neither), TLS (``tls``, implied by ``ca_file`` and
    ``cert_file``) and a client certificate for brokers that require one (mutual TLS)."""

    access_key: str = ""
    secret_key: str = field(default="", repr=False)
    tls: bool = False
    # PEM roots to trust; None trusts gRPC's default roots (GRPC_DEFAULT_SSL_ROOTS_FILE_PATH
    # or the system's).
    ca_file: Path | None = None
    # PEM client certificate chain and its private key (both or neither), presented to a broker
    # started with --tls-client-ca; the certificate needs the clientAuth extended key usage.
    cert_file: Path | None = None
    key_file: Path | None = None

    def __post_init__(self) -> None:
        if bool(self.access_key) != bool(self.secret_key):
            raise ConfigError("--access-key and --secret-key go together (give both or neither)")
        if self.access_key and auth.ACCESS_KEY_PATTERN.fullmatch(self.access_key) is None:
            raise ConfigError(
                "--access-key: letters, digits and _ . @ : / + - only "
                f"(at most {limits.ACCESS_KEY_LENGTH_MAX})"
            )
        if (self.cert_file is None) != (self.key_file is None):
            raise ConfigError("--cert-file and --key-file go together (a certificate and its key)")
        if (self.ca_file is not None or self.cert_file is not None) and not self.tls:
            object.__setattr__(self, "tls", True)

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> ClientSecurity:
        """From ``TXMQ_ACCESS_KEY``, ``TXMQ_SECRET_KEY``, ``TXMQ_TLS``, ``TXMQ_CA_FILE``,
        ``TXMQ_CERT_FILE`` and ``TXMQ_KEY_FILE``."""

        def path(name: str) -> Path | None:
            value = env.get(name, "")
            return Path(value) if value else None

        return cls(
            access_key=env.get("TXMQ_ACCESS_KEY", ""),
            secret_key=env.get("TXMQ_SECRET_KEY", ""),
            tls=env.get("TXMQ_TLS", "").strip().lower() in _TRUE,
            ca_file=path("TXMQ_CA_FILE"),
            cert_file=path("TXMQ_CERT_FILE"),
            key_file=path("TXMQ_KEY_FILE"),
        )

    @property
    def official_credentials(self) -> tuple[str, str]:
        """(access key, secret key) as the official client's ``Credentials`` takes them."""
        return self.access_key, self.secret_key

    def spark_options(self) -> dict[str, str]:
        """The Spark source and sink options that carry this choice."""
        out = {"tls": "true" if self.tls else "false"}
        if self.access_key:
            out.update(accessKey=self.access_key, secretKey=self.secret_key)
        if self.ca_file is not None:
            out["caFile"] = str(self.ca_file)
        if self.cert_file is not None and self.key_file is not None:
            out.update(certFile=str(self.cert_file), keyFile=str(self.key_file))
        return out

    def metadata(self, now_ms: int) -> list[tuple[str, str]]:
        """The signature headers for one call made at ``now_ms`` (none without credentials)."""
        if not self.access_key:
            return []
        return auth.signed_metadata(self.access_key, self.secret_key, now_ms)

    def channel_credentials(self) -> Any:
        """gRPC channel credentials trusting ``ca_file`` (or the default roots), presenting
        ``cert_file``/``key_file`` when given.

        Raises:
            ConfigError: a file cannot be read.
        """
        return grpc.ssl_channel_credentials(
            root_certificates=_read(self.ca_file, "--ca-file"),
            private_key=_read(self.key_file, "--key-file"),
            certificate_chain=_read(self.cert_file, "--cert-file"),
        )


def _read(path: Path | None, what: str) -> bytes | None:
    if path is None:
        return None
    try:
        return path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"{what} {path}: cannot read: {exc.strerror or exc}") from exc


# No credentials, no TLS: an open broker on a trusted network.
PLAINTEXT: Final = ClientSecurity()


def open_aio_channel(
    endpoints: str, security: ClientSecurity, options: Sequence[tuple[str, Any]] = ()
) -> Any:
    """An asyncio channel to ``endpoints``: TLS when ``security.tls``, else plaintext."""
    if security.tls:
        return grpc.aio.secure_channel(endpoints, security.channel_credentials(), options)
    return grpc.aio.insecure_channel(endpoints, options)


def open_channel(
    endpoints: str, security: ClientSecurity, options: Sequence[tuple[str, Any]] = ()
) -> grpc.Channel:
    """A channel to ``endpoints``: TLS when ``security.tls``, else plaintext."""
    if security.tls:
        return grpc.secure_channel(endpoints, security.channel_credentials(), options=options)
    return grpc.insecure_channel(endpoints, options=options)
