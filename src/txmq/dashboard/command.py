"""``txmq dashboard``: serve the web UI for one broker or every member of a cluster.

Owns: the command's options and running uvicorn. Binds 127.0.0.1 unless ``--host`` says
otherwise: the dashboard can delete topics and decide transactions, so it is not exposed to
the network by accident. It answers only the Host names it bound and those ``--allowed-host``
adds (guard.py). uvicorn is told not to trust proxy headers: every local process may connect
from 127.0.0.1, so an ``X-Forwarded-For`` would let any of them pick the address the sign-in
limit counts. Must not: hold page logic.
"""

from __future__ import annotations

import re
import socket
import sys

import click

from txmq import limits
from txmq.client.security import current, security_options
from txmq.dashboard.link import parse_members
from txmq.dashboard.sessions import FORM_TTL_S
from txmq.protocol.client_security import ClientSecurity

DASHBOARD_LISTEN_BACKLOG = 128
# NAME[:PORT], [IPv6][:PORT], or a bare IPv6 address.
HOST_NAME = re.compile(
    r"[A-Za-z0-9._-]+(:[0-9]{1,5})?|\[[0-9A-Fa-f:.]+\](:[0-9]{1,5})?|[0-9A-Fa-f:.]+"
)


@click.command(short_help="Serve the web dashboard.")
@click.option(
    "--endpoints",
    envvar="TXMQ_ENDPOINTS",
    default="127.0.0.1:8081",
    show_default=True,
    help="Broker HOST:PORT; HOST:P1;HOST:P2 for several members of a cluster (commas are "
    "accepted too; one member is enough, the others are found) (env TXMQ_ENDPOINTS).",
)
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option("--port", default=8080, show_default=True, type=click.IntRange(0, 65535))
@click.option(
    "--allowed-host",
    "allowed",
    multiple=True,
    metavar="NAME[:PORT]",
    help="Answer requests for this Host name too (repeatable), besides the bound address and "
    "port (and localhost when bound to a loopback address); e.g. the name a reverse proxy "
    "forwards. Any other Host is refused (421), against DNS rebinding.",
)
@click.option(
    "--form-ttl-s",
    default=FORM_TTL_S,
    show_default=True,
    type=click.FloatRange(0.0, limits.DASHBOARD_FORM_TTL_S_MAX, min_open=True),
    help="Seconds a confirmation page or the sign-in form stays usable.",
)
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
def dashboard(
    endpoints: str,
    host: str,
    port: int,
    allowed: tuple[str, ...],
    form_ttl_s: float,
    sample_ms: int,
) -> None:
    """Serve a web dashboard: overview charts, topics, consumer groups, transactions and
    message lookup, over the broker's admin channel. Ctrl-C stops it.

    With ACL on the broker, every page asks a visitor to sign in with an admin's keys, checked
    with the broker, and reads and acts with them. --access-key/--secret-key (an admin's) only
    draw the overview's charts. Without ACL the broker is open, and the pages say so.
    """
    try:
        members = parse_members(endpoints)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--endpoints") from exc
    for name in allowed:
        if HOST_NAME.fullmatch(name) is None:
            raise click.BadParameter(
                f"{name!r} is not a host name or address (NAME, NAME:PORT, [IPv6]:PORT)",
                param_hint="--allowed-host",
            )
    # Read now: the click context that holds the options is gone in uvicorn's threads.
    serve(
        members,
        host=host,
        port=port,
        sample_ms=sample_ms,
        security=current(),
        allowed=allowed,
        form_ttl_s=form_ttl_s,
    )


def serve(
    members: list[str],
    *,
    host: str,
    port: int,
    sample_ms: int = limits.DASHBOARD_SAMPLE_PERIOD_MS,
    security: ClientSecurity | None = None,
    allowed: tuple[str, ...] = (),
    form_ttl_s: float = FORM_TTL_S,
) -> None:
    """Bind, print ``txmq dashboard on http://HOST:PORT/`` (the real port when 0 was asked,
    flushed, for scripts and tests), then serve until Ctrl-C or SIGTERM."""
    import uvicorn

    from txmq.dashboard.app import build_app
    from txmq.dashboard.guard import allowed_hosts

    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    # Listening before the line is printed: a client that reads it and connects at once is
    # queued until uvicorn accepts, instead of refused.
    sock.listen(DASHBOARD_LISTEN_BACKLOG)
    bound = sock.getsockname()[1]
    app = build_app(
        members,
        sample_period_ms=sample_ms,
        security=security,
        hosts=allowed_hosts(host, bound, allowed),
        form_ttl_s=form_ttl_s,
    )
    config = uvicorn.Config(app, log_level="warning", proxy_headers=False)
    if host in ("0.0.0.0", "::") and not allowed:
        click.echo(
            f"txmq dashboard: bound to {host}, which no browser sends as a Host: give the "
            "names it is reached by with --allowed-host",
            err=True,
        )
    click.echo(f"txmq dashboard on http://{host}:{bound}/ watching {', '.join(members)}")
    sys.stdout.flush()
    uvicorn.Server(config).run(sockets=[sock])
