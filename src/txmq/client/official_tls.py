"""A client certificate for the official RocketMQ client, for brokers that require one.

The official Python client (rocketmq-python-client 5.1.2) opens every TLS channel in
``rocketmq/v5/client/connection/rpc_channel.py`` with ``grpc.ssl_channel_credentials()``: the
default roots (``GRPC_DEFAULT_SSL_ROOTS_FILE_PATH`` replaces them) and no client certificate,
and it takes no option for one. A broker started with ``--tls-client-ca`` refuses such a
handshake, so ``txmq send``/``consume`` could not reach it at all.

Owns: ``present`` (give that module a ``grpc`` whose ``ssl_channel_credentials()`` answers with
one ``ClientSecurity``'s credentials: its CA or the default roots, and its client certificate)
and taking it back. One choice per process, as the roots variable already is: a CLI process
talks to one cluster. Must not: change anything for a ``ClientSecurity`` without a certificate,
or for any other gRPC user of the process (only the official client's module sees the change).
"""

from __future__ import annotations

import types
from typing import Any

import grpc

from txmq.errors import invariant
from txmq.protocol.client_security import ClientSecurity


class _GrpcWithCertificate(types.ModuleType):
    """``grpc`` as the official client's channel module sees it: everything is the real module's
    but ``ssl_channel_credentials``, which returns the credentials given."""

    def __init__(self, credentials: Any) -> None:
        super().__init__("grpc")
        self._credentials = credentials

    def __getattr__(self, name: str) -> Any:
        return getattr(grpc, name)

    def ssl_channel_credentials(self, *args: Any, **kwargs: Any) -> Any:
        invariant(not args and not kwargs, "the official client asks for default credentials")
        return self._credentials


def present(security: ClientSecurity) -> None:
    """Channels the official client opens from now on present ``security``'s client
    certificate (and trust its ``ca_file``); without a certificate, the client's own behaviour
    is restored.

    Raises:
        ConfigError: a certificate, key or CA file cannot be read.
    """
    from rocketmq.v5.client.connection import rpc_channel

    invariant(
        rpc_channel.grpc is grpc or isinstance(rpc_channel.grpc, _GrpcWithCertificate),
        "rocketmq-python-client opens its channels with the grpc module (5.1.2 does)",
    )
    if security.cert_file is None:
        rpc_channel.grpc = grpc
        return
    rpc_channel.grpc = _GrpcWithCertificate(security.channel_credentials())
