"""The ``txmq`` command group: it registers the ``broker`` command (txmq/broker/node/command.py),
the client commands and the demo, and maps typed errors to the exit-code contract
(txmq/exits.py: one ``txmq: ...`` line, documented exit codes).

Owns: the group. Must not: import the client-side commands eagerly (they register in
``main``, so ``txmq broker`` starts even when the demo's or Spark's dependencies are missing).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import click

from txmq.broker.node.command import broker
from txmq.errors import TxmqError
from txmq.exits import OneLineErrors, cli_error


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
    Client commands take --endpoints HOST:PORT, or HOST:P1;HOST:P2 for several
    (env TXMQ_ENDPOINTS). Commands with other exit codes say so in their help.
    """


cli.add_command(broker)


def _register() -> None:
    from txmq.cli import commands
    from txmq.cli.audit import audit
    from txmq.dashboard.command import dashboard
    from txmq.demo.command import demo

    commands.register(cli)
    cli.add_command(demo)
    cli.add_command(dashboard)
    cli.add_command(audit)


def main(argv: Sequence[str] | None = None) -> None:
    """The console script ``txmq``."""
    _register()
    cli.main(args=list(argv) if argv is not None else None, prog_name="txmq")
