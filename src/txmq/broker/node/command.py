"""``txmq broker`` and ``python -m txmq.broker``: one click command that builds a BrokerConfig
from file, environment and flags (config_sources.py) and runs the server (app.py).

Owns: the command's flags and their help, built from BrokerConfig's defaults (never repeated as
literals). Must not: import the client-side CLI (txmq.cli registers this command; a broker starts
even while client commands are broken or miss dependencies).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from txmq import limits
from txmq.broker.config.broker_config import BrokerConfig
from txmq.broker.config.options import etcd_tls_options, file_option
from txmq.broker.config.sources import env, load_config
from txmq.errors import ConfigError, TxmqError
from txmq.exits import EXIT_FAILED, CliError, OneLineErrors, cli_error

# The broker's defaults, shown in ``txmq broker --help`` (built from them, never repeated).
_D = BrokerConfig(data_dir=Path("data"))


@click.command(
    "broker",
    cls=OneLineErrors,
    short_help="Start a broker.",
    context_settings={"help_option_names": ["-h", "--help"]},
)
@click.option("--data-dir", type=click.Path(path_type=Path), help="Where the broker keeps data.")
@click.option(
    "--port", type=int, help=f"Port to listen on; 0 picks a free one.  [default: {_D.port}]"
)
@click.option("--host", help=f"Address to bind.  [default: {_D.host}]")
@click.option(
    "--config",
    "config_file",
    type=click.Path(path_type=Path, dir_okay=False),
    help="TOML configuration file (see docs/configuration.md).",
)
@click.option("--metrics-port", type=int, help="Serve Prometheus metrics on this port.")
@click.option(
    "--transaction-timeout-ms",
    type=int,
    help=f"Age before the first check-back ({_D.transaction_timeout_ms}).",
)
@click.option(
    "--transaction-check-interval-ms",
    type=int,
    help=f"Between check-backs ({_D.transaction_check_interval_ms}).",
)
@click.option(
    "--transaction-check-max",
    type=int,
    help=f"Check-backs before rollback ({_D.transaction_check_max}).",
)
@click.option(
    "--delivery-attempts-max",
    type=int,
    help=f"Deliveries before the DLQ ({_D.delivery_attempts_max}).",
)
@click.option(
    "--retry-backoff-initial-ms",
    type=int,
    help=f"First redelivery backoff ({_D.retry_backoff_initial_ms}).",
)
@click.option(
    "--segment-size-bytes",
    type=int,
    help=f"Commit-log segment size ({_D.store.segment_size_bytes // limits.MiB} MiB).",
)
@click.option(
    "--flush-mode",
    type=click.Choice(["sync", "async"]),
    help=f"Durability ({_D.store.flush_mode.value}).",
)
@click.option(
    "--auto-create-topics/--no-auto-create-topics",
    default=None,
    help="Create an unknown topic on first use (off by default: use `txmq topic create`).",
)
@file_option(
    "--acl-file",
    "Users and rights (TOML, mode 600); without it the broker is open. SIGHUP reloads.",
)
@click.option(
    "--auth-date-skew-s",
    type=int,
    help=(
        "With --acl-file: how far a signature's date may be from this broker's clock (UTC),"
        " either side; wider for clients that sign local time as UTC"
        f" ({_D.auth_date_skew_s}, at most {limits.AUTH_DATE_SKEW_S_MAX})."
    ),
)
@file_option("--tls-cert", "PEM cert.")
@file_option("--tls-key", "PEM key.")
@file_option("--tls-client-ca", "Require client certificates signed by this CA (PEM).")
@file_option(
    "--tls-peer-cert",
    "PEM client cert presented to peers (default with --tls-client-ca: --tls-cert).",
)
@file_option(
    "--tls-peer-key", "PEM key of --tls-peer-cert (default with --tls-client-ca: --tls-key)."
)
@click.option(
    "--cluster",
    "cluster_file",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Cluster file (TOML): the cluster's name and every broker's name and endpoint.",
)
@click.option("--broker-name", help="This broker's name in the cluster file.")
@click.option("--etcd", help="etcd HOST:PORT: run as one replica of a group led through etcd.")
@etcd_tls_options
@click.option("--replica-group", help="The replica group's name (default: --broker-name).")
@click.option(
    "--min-insync-replicas",
    type=int,
    help=f"Replicas holding a write before it is acknowledged ({_D.min_insync_replicas}).",
)
def broker(config_file: Path | None, **flags: Any) -> None:
    """Start a broker in the foreground (Ctrl-C or SIGTERM stops it cleanly).

    Prints "txmq broker listening on HOST:PORT" once it accepts requests. Settings come
    from flags, then TXMQ_* environment variables, then --config, then defaults.
    """
    try:
        config = load_config(file=config_file, env=env(), flags=flags)
    except ConfigError as exc:
        raise cli_error(exc) from exc
    from txmq.broker.node.run import run

    try:
        run(config)
    except OSError as exc:
        raise CliError(f"cannot start the broker: {exc}", EXIT_FAILED) from exc
    except TxmqError as exc:
        raise cli_error(exc) from exc
