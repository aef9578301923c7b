"""``txmq dashboard``: serve the web UI for one broker or every member of a cluster.

Owns: the command's options and running uvicorn. Binds 127.0.0.1 unless ``--host`` says
otherwise: the dashboard can delete topics and decide transactions, so it is not exposed to
the network by accident. Must not: hold page logic.
"""

from __future__ import annotations

import socket
import sys

import click

from txmq import limits
from txmq.client.security import current, security_options
from txmq.dashboard.link import parse_members
from txmq.protocol.client_security import ClientSecurity

DASHBOARD_LISTEN_BACKLOG = 128


@click.command(short_help="Serve the web dashboard.")
@click.option(
    "--endpoints",
    envvar="TXMQ_ENDPOINTS",
    default="127.0.0.1:8081",
    show_default=True,
    help="Broker HOST:PORT; comma-separated for every member of a cluster (env TXMQ_ENDPOINTS).",
)
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option("--port", default=8080, show_default=True, type=click.IntRange(0, 65535))
@click.option(
    "--sample-ms",
    default=limits.DASHBOARD_SAMPLE_PERIOD_MS,
    show_default=True,
    type=click.IntRange(
        limits.DASHBOARD_SAMPLE_PERIOD_MS_MIN, limits.DASHBOARD_SAMPLE_PERIOD_MS_MAX
    ),
    help="How often to sample each broker's metrics for the charts.",
)
@security_options
def dashboard(endpoints: str, host: str, port: int, sample_ms: int) -> None:
    """Serve a web dashboard: overview charts, topics, consumer groups, transactions and
    message lookup, over the broker's admin channel. Ctrl-C stops it.

    With ACL on the broker, --access-key/--secret-key (an admin's) sign the dashboard's reads;
    changes need a person to sign in on the page with an admin's keys (else read-only).
    """
    try:
        members = parse_members(endpoints)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--endpoints") from exc
    # Read now: the click context that holds the options is gone in uvicorn's threads.
    serve(members, host=host, port=port, sample_ms=sample_ms, security=current())


def serve(
    members: list[str],
    *,
    host: str,
    port: int,
    sample_ms: int = limits.DASHBOARD_SAMPLE_PERIOD_MS,
    security: ClientSecurity | None = None,
) -> None:
    """Bind, print ``txmq dashboard on http://HOST:PORT/`` (the real port when 0 was asked,
    flushed, for scripts and tests), then serve until Ctrl-C or SIGTERM."""
    import uvicorn

    from txmq.dashboard.app import build_app

    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    # Listening before the line is printed: a client that reads it and connects at once is
    # queued until uvicorn accepts, instead of refused.
    sock.listen(DASHBOARD_LISTEN_BACKLOG)
    bound = sock.getsockname()[1]
    config = uvicorn.Config(
        build_app(members, sample_period_ms=sample_ms, security=security), log_level="warning"
    )
    click.echo(f"txmq dashboard on http://{host}:{bound}/ watching {', '.join(members)}")
    sys.stdout.flush()
    uvicorn.Server(config).run(sockets=[sock])
