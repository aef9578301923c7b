"""TLS for the broker's gRPC port: server credentials from PEM files.

Owns: reading ``tls_cert``, ``tls_key`` and ``tls_client_ca`` and turning them into gRPC server
credentials (mutual TLS when a client CA is given). With a certificate the port serves TLS only:
a plaintext client's handshake fails and it never reaches a handler.
Must not: generate certificates (tests and ``txmq demo --secure`` do, with ``cryptography``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import grpc

from txmq import limits
from txmq.broker.config.broker_config import BrokerConfig
from txmq.errors import ConfigError


def read_pem(path: Path, what: str) -> bytes:
    """The bytes of a PEM file.

    Raises:
        ConfigError: unreadable, too large, or without a PEM block.
    """
    try:
        if path.stat().st_size > limits.PEM_FILE_SIZE_MAX:
            raise ConfigError(f"{what} {path}: larger than {limits.PEM_FILE_SIZE_MAX} bytes")
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read {what} {path}: {exc.strerror or exc}") from exc
    if b"-----BEGIN " not in data:
        raise ConfigError(f"{what} {path}: not a PEM file")
    return data


def server_credentials(config: BrokerConfig) -> Any | None:
    """gRPC server credentials for ``config``, or None when it asks for no TLS.

    Raises:
        ConfigError: a file cannot be read or is not PEM.
    """
    if config.tls_cert is None or config.tls_key is None:
        return None
    cert = read_pem(config.tls_cert, "--tls-cert")
    key = read_pem(config.tls_key, "--tls-key")
    client_ca = (
        read_pem(config.tls_client_ca, "--tls-client-ca")
        if config.tls_client_ca is not None
        else None
    )
    return grpc.ssl_server_credentials(
        [(key, cert)],
        root_certificates=client_ca,
        require_client_auth=client_ca is not None,
    )
