"""``txmq audit``: does the database agree with the topic? A Spark job (txmq/audit/) reads a
table over JDBC and the topic with the txmq source, joins them on a key, and reports rows
without their message (lost), messages without their row (phantom), keys delivered twice
(duplicate) and transactions the broker still holds open (undecided).

Owns: the command's flags and output: a rich summary for people, ``--json`` for scripts (an
interface: fields are added, never renamed), ``--report DIR`` (Parquet of every discrepancy,
an HTML page, the JSON). Exit 0 consistent, 1 inconsistent or the job failed, 2 bad input,
3 broker unreachable. Every flag is checked, and the topic looked up, before a JVM starts.
Must not: import pyspark at import time (``txmq broker`` registers this command too).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import click
from rich.console import Console

from txmq import limits
from txmq.audit.result import AuditResult
from txmq.audit.spec import (
    AuditInputError,
    AuditSpec,
    Match,
    Window,
    jdbc,
    parse_duration_ms,
    parse_time_ms,
)
from txmq.cli.admin_commands import endpoints_option
from txmq.client.admin import call
from txmq.errors import TxmqError

err_console = Console(stderr=True)


class AuditFailedError(TxmqError):
    """The audit's Spark job failed after its inputs were accepted (exit 1)."""


_OPTIONS = [
    click.option("--jdbc-url", required=True, help="The database, e.g. jdbc:postgresql://H/DB."),
    click.option("--table", required=True, help="The table (or a parenthesised subquery)."),
    click.option("--key", "key_column", required=True, help="The table's key column."),
    click.option("--topic", required=True, help="The topic its messages go to."),
    click.option(
        "--match",
        default="key",
        show_default=True,
        help="Which value of a message is the key: key (its first key), property:NAME, "
        "json:FIELD (of a JSON body; a.b walks into objects).",
    ),
    click.option(
        "--since", default="", help="Window start: 2026-12-01, an ISO time, or 2h (2 hours ago)."
    ),
    click.option("--until", default="", help="Window end (exclusive), same forms, or now."),
    click.option(
        "--grace",
        default="10m",
        show_default=True,
        help="Look this far past the window for a row's message or a message's row.",
    ),
    click.option(
        "--time-column",
        default="",
        help="The table's time column (default: its "
        "only timestamp or date column, when a window is given).",
    ),
    click.option(
        "--epoch-unit",
        type=click.Choice(["ms", "s"]),
        default="ms",
        show_default=True,
        help="Unit of a numeric --time-column.",
    ),
    click.option(
        "--jars",
        default="",
        help="JDBC driver jars, comma-separated (Debian's are found under /usr/share/java).",
    ),
    click.option("--driver", default="", help="JDBC driver class for an unknown URL kind."),
    click.option("--master", default="", help="Spark master URL (default local[*])."),
    click.option("--remote", default="", help="Spark Connect server, sc://HOST:PORT."),
    click.option(
        "--examples",
        default=limits.AUDIT_EXAMPLES_DEFAULT,
        show_default=True,
        type=int,
        help="Examples kept per kind.",
    ),
    click.option(
        "--db-partitions",
        default=limits.AUDIT_JDBC_PARTITIONS_DEFAULT,
        type=int,
        show_default=True,
        help="Parallel reads of a windowed table.",
    ),
    click.option("--json", "as_json", is_flag=True, help="Print the result as JSON."),
    click.option(
        "--report",
        "report_dir",
        type=click.Path(path_type=Path, file_okay=False),
        default=None,
        help="Write Parquet, an HTML page and JSON here.",
    ),
    endpoints_option,
]


def _options(fn: Any) -> Any:
    for option in reversed(_OPTIONS):
        fn = option(fn)
    return fn


def _spec(args: dict[str, Any], now_ms: int) -> AuditSpec:
    if args["master"] and args["remote"]:
        raise AuditInputError("give --master or --remote, not both")
    window = Window(
        parse_time_ms(args["since"], "--since", now_ms=now_ms) if args["since"] else None,
        parse_time_ms(args["until"], "--until", now_ms=now_ms) if args["until"] else None,
        parse_duration_ms(args["grace"], "--grace"),
    )
    where = jdbc(
        args["jdbc_url"],
        args["table"],
        jars=args["jars"],
        driver=args["driver"],
        local_files=not args["remote"],
    )
    return AuditSpec(
        where,
        args["key_column"],
        args["topic"],
        Match.parse(args["match"]),
        window,
        time_column=args["time_column"],
        epoch_unit_ms=1_000 if args["epoch_unit"] == "s" else 1,
        examples=args["examples"],
        partitions=args["db_partitions"],
    )


@click.command(short_help="Check that a database table and a topic agree (Spark).")
@_options
def audit(**args: Any) -> None:
    """Join a database table (JDBC) with a topic's committed messages on a key, over a time
    window, in Spark, and report lost rows, phantom messages, duplicate keys and transactions
    still open on the broker.

    \b
    Exit codes: 0 consistent, 1 inconsistent (or the job failed), 2 bad input, 3 broker
    unreachable.
    """
    now_ms = int(time.time() * 1000)
    spec = _spec(args, now_ms)
    endpoints: str = args["endpoints"]
    call(endpoints, "TopicDescribe", {"name": spec.topic})  # unknown topic: exit 2
    result = _audit(spec, endpoints, args["master"], args["remote"], args["report_dir"], now_ms)
    if args["as_json"]:
        click.echo(json.dumps(result.as_json(), indent=2, sort_keys=True))
    else:
        from txmq.audit.render import summary

        Console().print(summary(result))
    sys.exit(result.exit_code)


def _audit(
    spec: AuditSpec, endpoints: str, master: str, remote: str, report: Path | None, now_ms: int
) -> AuditResult:
    from txmq.audit.job import Topic, run
    from txmq.audit.session import open_session
    from txmq.audit.table import first_line
    from txmq.audit.undecided import open_transactions
    from txmq.client.security import current

    open_txns = open_transactions(endpoints, spec.topic, spec.match, spec.window)
    topic = Topic(endpoints, spec.topic, current().spark_options())
    if report is not None:
        report.mkdir(parents=True, exist_ok=True)
    with err_console.status("starting Spark"):
        spark = open_session(master, remote, spec.jdbc.jars)
    try:
        with err_console.status(f"auditing {spec.jdbc.table} against {spec.topic}"):
            result, first = run(
                spark, spec, topic, open_txns.first, now_ms=now_ms, report_dir=report
            )
    except TxmqError:
        raise
    except Exception as exc:
        raise AuditFailedError(f"the audit's Spark job failed: {first_line(exc)}") from exc
    finally:
        spark.stop()
    result.counts["undecided"] = open_txns.undecided
    result.dead = open_txns.dead
    result.examples["undecided"] = [t.as_json(now_ms) for t in first[: spec.examples]]
    if report is not None:
        _write_report(result, report)
    return result


def _write_report(result: AuditResult, report: Path) -> None:
    from txmq.audit.job import PARQUET_NAMES
    from txmq.audit.page import page

    (report / "index.html").write_text(page(result, PARQUET_NAMES), encoding="utf-8")
    text = json.dumps(result.as_json(), indent=2, sort_keys=True)
    (report / "audit.json").write_text(text + "\n", encoding="utf-8")
