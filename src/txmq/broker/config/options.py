"""Click options shared by ``txmq broker`` and the cluster commands that reach etcd.

Owns: the declaration of file options (a path to an existing-or-not file, never a directory)
and the three etcd TLS options, so the broker and ``txmq cluster unclean-election`` spell them
the same. Must not: validate them (BrokerConfig and EtcdTls.of do).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])


def file_option(flag: str, help: str) -> Callable[[F], F]:
    """``flag`` taking a file path (a ``Path``; a directory is refused)."""
    return click.option(flag, type=click.Path(path_type=Path, dir_okay=False), help=help)


def etcd_tls_options(fn: F) -> F:
    """``--etcd-ca-file``, ``--etcd-cert-file`` and ``--etcd-key-file`` (docs/security.md)."""
    fn = file_option("--etcd-key-file", "PEM key of --etcd-cert-file.")(fn)
    fn = file_option(
        "--etcd-cert-file",
        "PEM client certificate for etcd's --client-cert-auth (with --etcd-key-file).",
    )(fn)
    return file_option(
        "--etcd-ca-file", "Reach etcd over TLS: the CA (PEM) that signed etcd's certificate."
    )(fn)
