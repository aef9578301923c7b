"""The client commands' security options: ``--access-key``/``--secret-key`` (env
``TXMQ_ACCESS_KEY``/``TXMQ_SECRET_KEY``), ``--tls`` (``TXMQ_TLS``), ``--ca-file``
(``TXMQ_CA_FILE``) and ``--cert-file``/``--key-file`` (``TXMQ_CERT_FILE``/``TXMQ_KEY_FILE``, a
client certificate for a broker started with ``--tls-client-ca``).

Owns: declaring them once (``security_options``, added by ``endpoints_option`` to every command
that talks to a broker), the ``ClientSecurity`` value a command's calls use (``current``), and
configuring the official client the same way (``official_configuration``).
Must not: print or log a secret.

Why a context value rather than a parameter of every command: each command already passes
``--endpoints`` down to the admin channel client and the official client; the security choice
travels beside it in the click context, so commands added later get it without new plumbing.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from txmq.protocol.client_security import ClientSecurity

F = TypeVar("F", bound=Callable[..., Any])
META_KEY = "txmq.client_security"


def _remember(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    assert param.name is not None, "security options are named"
    ctx.meta.setdefault(META_KEY, {})[param.name] = value
    return value


def _file_option(flag: str, envvar: str, text: str) -> Callable[[F], F]:
    return click.option(
        flag,
        envvar=envvar,
        type=click.Path(path_type=Path, dir_okay=False),
        default=None,
        expose_value=False,
        callback=_remember,
        help=f"{text} (env {envvar}).",
    )


def security_options(fn: F) -> F:
    """Add the six options to a command; their values go to ``current()``."""
    options = [
        click.option(
            "--access-key",
            envvar="TXMQ_ACCESS_KEY",
            default="",
            expose_value=False,
            callback=_remember,
            help="Access key of an ACL user (env TXMQ_ACCESS_KEY).",
        ),
        click.option(
            "--secret-key",
            envvar="TXMQ_SECRET_KEY",
            default="",
            show_default=False,
            expose_value=False,
            callback=_remember,
            help="Its secret key (env TXMQ_SECRET_KEY; prefer the variable: flags show in ps).",
        ),
        click.option(
            "--tls",
            envvar="TXMQ_TLS",
            is_flag=True,
            default=False,
            expose_value=False,
            callback=_remember,
            help="Connect over TLS (env TXMQ_TLS).",
        ),
        _file_option("--ca-file", "TXMQ_CA_FILE", "PEM CA to trust; implies --tls"),
        _file_option(
            "--cert-file", "TXMQ_CERT_FILE", "PEM client certificate for mutual TLS; implies --tls"
        ),
        _file_option("--key-file", "TXMQ_KEY_FILE", "PEM key of --cert-file"),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


def current() -> ClientSecurity:
    """The running command's choice, else the environment's (library use, tests).

    Raises:
        ConfigError: one key without the other, or a malformed access key.
    """
    ctx = click.get_current_context(silent=True)
    chosen = ctx.meta.get(META_KEY) if ctx is not None else None
    if not chosen:
        return ClientSecurity.from_env(os.environ)
    return ClientSecurity(
        access_key=chosen.get("access_key") or "",
        secret_key=chosen.get("secret_key") or "",
        tls=bool(chosen.get("tls")),
        ca_file=chosen.get("ca_file"),
        cert_file=chosen.get("cert_file"),
        key_file=chosen.get("key_file"),
    )


def official_configuration(endpoints: str) -> tuple[Any, bool]:
    """(ClientConfiguration, tls_enable) for the official client with ``current()``.

    The official client takes no CA argument: it trusts gRPC's default roots, which
    ``GRPC_DEFAULT_SSL_ROOTS_FILE_PATH`` replaces; so ``--ca-file`` sets that variable for this
    process (a CLI process talks to one broker). It takes no client certificate either:
    ``--cert-file`` reaches it through official_tls.present. It signs its local time as UTC:
    official_dates makes it sign the time in UTC, which a broker with an ACL expects.

    Raises:
        ConfigError: a certificate, key or CA file cannot be read.
    """
    from rocketmq import ClientConfiguration, Credentials

    from txmq.client import official_dates, official_tls

    security = current()
    if security.ca_file is not None:
        os.environ["GRPC_DEFAULT_SSL_ROOTS_FILE_PATH"] = str(security.ca_file)
    official_tls.present(security)
    official_dates.sign_in_utc()
    credentials = Credentials(security.access_key, security.secret_key)
    return ClientConfiguration(endpoints, credentials), security.tls
