"""The ``txmq`` command: the group, the ``broker`` command and the exit-code contract.

Exit codes scripts can rely on:
  0  ok
  1  the operation failed (the broker refused it, a store check found problems, the demo was
     inconsistent)
  2  bad input: usage errors, bad configuration, unknown topic / transaction / message id
  3  the broker is unreachable
  130  interrupted (Ctrl-C)

Every error is one line on stderr: ``txmq: <what went wrong>``.
Owns: that mapping (``CliError``, ``TxmqGroup``) and ``txmq broker``, which builds a
BrokerConfig from file/env/flags and runs the server. Must not: import the client-side
commands eagerly (``python -m txmq.broker`` imports this module and must start even when the
demo's or Spark's dependencies are missing).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

import click

from txmq import limits
from txmq.broker.config import BrokerConfig
from txmq.cli.config import env, load_config
from txmq.errors import (
    BadRequestError,
    BrokerUnavailableError,
    ConfigError,
    NotFoundError,
    TxmqError,
)

# The broker's defaults, shown in ``txmq broker --help`` (built from them, never repeated).
_D = BrokerConfig(data_dir=Path("data"))

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_UNREACHABLE = 3
EXIT_INTERRUPTED = 130  # Ctrl-C, as shells report SIGINT


class CliError(click.ClickException):
    """An error shown as one ``txmq: ...`` line, exiting with a documented code."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code  # type: ignore[misc]  # click reads it per instance

    def show(self, file: IO[Any] | None = None) -> None:
        click.echo(f"txmq: {self.format_message()}", err=True)


def exit_code_for(exc: TxmqError) -> int:
    if isinstance(exc, BrokerUnavailableError):
        return EXIT_UNREACHABLE
    if isinstance(exc, ConfigError | NotFoundError | BadRequestError):
        return EXIT_USAGE
    return EXIT_FAILED


def cli_error(exc: TxmqError) -> CliError:
    message = " ".join(str(exc).split()) or type(exc).__name__  # one line, always
    return CliError(message, exit_code_for(exc))


class OneLineErrors(click.Command):
    """Standalone runs print every error as one ``txmq: ...`` line with the documented exit
    code, usage errors included (click's default is a multi-line usage block)."""

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, False, **extra)
        try:
            super().main(args, prog_name, complete_var, False, **extra)
        except click.UsageError as exc:
            hint = f" (see '{exc.ctx.command_path} --help')" if exc.ctx is not None else ""
            click.echo(f"txmq: {exc.format_message()}{hint}", err=True)
            sys.exit(EXIT_USAGE)
        except click.ClickException as exc:
            exc.show()
            sys.exit(exc.exit_code)
        except click.Abort:
            click.echo("txmq: interrupted", err=True)
            sys.exit(EXIT_INTERRUPTED)
        except TxmqError as exc:
            cli_error(exc).show()
            sys.exit(exit_code_for(exc))
        sys.exit(EXIT_OK)


class TxmqGroup(OneLineErrors, click.Group):
    """Maps typed errors from any subcommand to a one-line message and exit code."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except TxmqError as exc:
            raise cli_error(exc) from exc


@click.group(cls=TxmqGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="txmq", message="txmq %(version)s")
def cli() -> None:
    """txmq: transactional messages over the RocketMQ 5 protocol.

    \b
    Exit codes: 0 ok, 1 operation failed, 2 bad input (usage, config, unknown
    topic or id), 3 broker unreachable.
    Client commands take --endpoints HOST:PORT (env TXMQ_ENDPOINTS).
    """


@cli.command(
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
    "--acl-file",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Users and rights (TOML, mode 600); without it the broker is open. SIGHUP reloads.",
)
@click.option("--tls-cert", type=click.Path(path_type=Path, dir_okay=False), help="PEM cert.")
@click.option("--tls-key", type=click.Path(path_type=Path, dir_okay=False), help="PEM key.")
@click.option(
    "--tls-client-ca",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Require client certificates signed by this CA (PEM).",
)
@click.option(
    "--cluster",
    "cluster_file",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Cluster file (TOML): the cluster's name and every broker's name and endpoint.",
)
@click.option("--broker-name", help="This broker's name in the cluster file.")
def broker(config_file: Path | None, **flags: Any) -> None:
    """Start a broker in the foreground (Ctrl-C or SIGTERM stops it cleanly).

    Prints "txmq broker listening on HOST:PORT" once it accepts requests. Settings come
    from flags, then TXMQ_* environment variables, then --config, then defaults.
    """
    try:
        config = load_config(file=config_file, env=env(), flags=flags)
    except ConfigError as exc:
        raise cli_error(exc) from exc
    from txmq.broker.app import run

    try:
        run(config)
    except OSError as exc:
        raise CliError(f"cannot start the broker: {exc}", EXIT_FAILED) from exc
    except TxmqError as exc:
        raise cli_error(exc) from exc


def _register() -> None:
    from txmq.cli import commands
    from txmq.cli.demo import demo
    from txmq.dashboard.command import dashboard

    commands.register(cli)
    cli.add_command(demo)
    cli.add_command(dashboard)


def main(argv: Sequence[str] | None = None) -> None:
    """The console script ``txmq``."""
    _register()
    cli.main(args=list(argv) if argv is not None else None, prog_name="txmq")
