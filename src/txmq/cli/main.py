"""The ``txmq`` command. Exit codes: 0 ok, 1 operation failed, 2 bad input, 3 broker unreachable."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click

from txmq.cli.config import env, load_config
from txmq.errors import ConfigError, TxmqError

EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_UNREACHABLE = 3


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def cli() -> None:
    """txmq: transactional messages over the RocketMQ 5 protocol."""


@cli.command()
@click.option("--data-dir", type=click.Path(path_type=Path), help="Where the broker keeps data.")
@click.option("--port", type=int, help="Port to listen on (0 picks a free one). Default 8081.")
@click.option("--host", help="Address to bind. Default 127.0.0.1.")
@click.option(
    "--config",
    "config_file",
    type=click.Path(path_type=Path, exists=True),
    help="TOML configuration file.",
)
@click.option("--metrics-port", type=int, help="Serve Prometheus metrics on this port.")
@click.option("--transaction-timeout-ms", type=int, help="Age before a check-back (6000).")
@click.option("--transaction-check-interval-ms", type=int, help="Between check-backs (30000).")
@click.option("--transaction-check-max", type=int, help="Check-backs before rollback (15).")
@click.option("--delivery-attempts-max", type=int, help="Deliveries before the DLQ (16).")
@click.option("--retry-backoff-initial-ms", type=int, help="First redelivery backoff (1000).")
@click.option("--segment-size-bytes", type=int, help="Commit-log segment size (1 GiB).")
@click.option("--flush-mode", type=click.Choice(["sync", "async"]), help="Durability (sync).")
def broker(config_file: Path | None, **flags: Any) -> None:
    """Start a broker in the foreground (Ctrl-C stops it cleanly)."""
    from txmq.broker.app import run

    try:
        cfg = load_config(file=config_file, env=env(), flags=flags)
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from exc
    run(cfg)


def _register() -> None:
    from txmq.cli import commands

    commands.register(cli)


def main(argv: Sequence[str] | None = None) -> None:
    _register()
    try:
        cli.main(
            args=list(argv) if argv is not None else None, prog_name="txmq", standalone_mode=True
        )
    except ConfigError as exc:
        click.echo(f"txmq: {exc}", err=True)
        sys.exit(EXIT_USAGE)
    except TxmqError as exc:
        click.echo(f"txmq: {exc}", err=True)
        sys.exit(EXIT_FAILED)
