"""The exit-code contract of every txmq command (``txmq ...`` and ``python -m txmq.broker``).

Exit codes scripts can rely on:
  0  ok
  1  the operation failed (the broker refused it, a store check found problems, the demo was
     inconsistent, `txmq audit` found the database and the topic disagree)
  2  bad input: usage errors, bad configuration, unknown topic / transaction / message id, a
     message the broker refuses as malformed (a 400xx status: a message type the topic does not
     take, an illegal key or tag) or too large (413xx)
  3  the broker is unreachable
  130  interrupted (Ctrl-C)

Every error is one line on stderr: ``txmq: <what went wrong>``.
Owns: that mapping (``CliError``, ``exit_code_for``, ``OneLineErrors``). It sits below the
broker and the CLI so both front ends use it without importing each other.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import IO, Any

import click

from txmq.errors import (
    BadRequestError,
    BrokerUnavailableError,
    ConfigError,
    MessageBodyTooLargeError,
    MessagePropertiesTooLargeError,
    NotFoundError,
    TxmqError,
)

# Errors that mean the input was wrong: retrying the same command cannot succeed.
_BAD_INPUT = (
    ConfigError,
    NotFoundError,
    BadRequestError,
    MessageBodyTooLargeError,
    MessagePropertiesTooLargeError,
)

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
    if isinstance(exc, _BAD_INPUT):
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
