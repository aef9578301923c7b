"""Reading the audited table through Spark's JDBC source, as the rows input of reckon.py.

Owns: opening the table (each connection first running its URL's session statement, from
spec.py; an error from its driver, a missing key or time column: bad input), choosing the
time column when the window needs one and none was named, turning that column into a
timestamp (a timestamp or date column as is; a number as ms, or s, since the epoch; text
parsed as an ISO time), and reading only the window plus grace when there is one, split into
partitions on the time column so executors read in parallel. Must not: collect rows.
"""

from __future__ import annotations

from typing import Any

from txmq import limits
from txmq.audit.reckon import in_window, untimed_rows
from txmq.audit.spec import AuditInputError, AuditSpec, iso_ms

_TIME_TYPES = ("timestamp", "timestamp_ntz", "date")
_NUMBER_TYPES = ("tinyint", "smallint", "int", "bigint", "decimal")


def jdbc_reader(spark: Any, spec: AuditSpec) -> Any:
    jdbc = spec.jdbc
    reader = (
        spark.read.format("jdbc")
        .option("url", jdbc.url)
        .option("dbtable", jdbc.table)
        .option("fetchsize", str(limits.AUDIT_JDBC_FETCH_ROWS))
    )
    if jdbc.session_init:
        reader = reader.option("sessionInitStatement", jdbc.session_init)
    return reader.option("driver", jdbc.driver) if jdbc.driver else reader


def open_schema(spark: Any, spec: AuditSpec) -> dict[str, str]:
    """The table's columns (name -> Spark type name), asking the database for no rows.

    Raises:
        AuditInputError: the driver refused the URL, the credentials or the table.
    """
    try:
        fields = jdbc_reader(spark, spec).load().schema.fields
    except Exception as exc:
        raise AuditInputError(
            f"cannot open table {spec.jdbc.table!r} at {spec.jdbc.shown_url}: {first_line(exc)}"
        ) from exc
    return {f.name: f.dataType.typeName() for f in fields}


def first_line(exc: BaseException) -> str:
    """The useful line of a Spark or JDBC error: the driver's own message when Java sent one."""
    text = str(exc)
    for line in text.splitlines():
        for marker in ("Exception: ", "Error: "):
            if marker in line and "py4j" not in line:
                return line.split(marker, 1)[1].strip()[:300]
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return (lines[0] if lines else type(exc).__name__)[:300]


def column(schema: dict[str, str], name: str, flag: str) -> str:
    """The table's spelling of column ``name`` (case-insensitive), or AuditInputError."""
    for real in schema:
        if real.lower() == name.lower():
            return real
    raise AuditInputError(
        f"{flag}: table has no column {name!r} (columns: {', '.join(sorted(schema))})"
    )


def time_column(spec: AuditSpec, schema: dict[str, str]) -> str:
    """The named time column, else the table's only timestamp or date column; "" when there is
    none to take and the window needs none (the audit reads the whole table)."""
    if spec.time_column:
        name = column(schema, spec.time_column, "--time-column")
        kind = _type_base(schema[name])
        if kind not in (*_TIME_TYPES, *_NUMBER_TYPES, "string"):
            raise AuditInputError(
                f"--time-column {name!r} is {schema[name]}: it must be a timestamp, a date, a "
                "number of ms (or s) since the epoch, or ISO text"
            )
        return name
    found = [n for n, t in schema.items() if _type_base(t) in _TIME_TYPES]
    if len(found) == 1:
        return found[0]
    if not spec.window.bounded:
        return ""  # the whole table; rows have no time (the series shows messages only)
    what = f"it has {', '.join(found)}" if found else "it has no timestamp or date column"
    raise AuditInputError(
        f"--since/--until need the table's time column: name it with --time-column ({what})"
    )


def _type_base(type_name: str) -> str:
    return type_name.split("(", 1)[0]


def read_rows(spark: Any, spec: AuditSpec, *, now_ms: int) -> Any:
    """The rows input (key, at, in_window) of the window plus grace, or of the whole table.
    ``now_ms`` ends the span a window without an end is split over (later rows are still
    read, by the last partition)."""
    from pyspark.sql import functions as F

    schema = open_schema(spark, spec)
    key = column(schema, spec.key_column, "--key")
    when = time_column(spec, schema)
    if not when:
        return untimed_rows(jdbc_reader(spark, spec).load(), key)
    kind = _type_base(schema[when])
    reader = jdbc_reader(spark, spec)
    window = spec.window
    until_ms = window.wide_until_ms if window.wide_until_ms is not None else now_ms
    bounds = _bounds(kind, window.wide_since_ms, until_ms, spec.epoch_unit_ms)
    if bounds is not None and spec.partitions > 1:
        reader = (
            reader.option("partitionColumn", when)
            .option("lowerBound", bounds[0])
            .option("upperBound", bounds[1])
            .option("numPartitions", str(spec.partitions))
        )
    table = reader.load()
    raw = F.col(when)
    # Filters on the raw column with literals: Spark pushes them into the database's query.
    if window.wide_since_ms is not None:
        table = table.where(raw >= _literal(kind, window.wide_since_ms, spec.epoch_unit_ms))
    if window.wide_until_ms is not None:
        table = table.where(raw < _literal(kind, window.wide_until_ms, spec.epoch_unit_ms))
    at = _as_timestamp(raw, kind, spec.epoch_unit_ms)
    return table.select(
        F.col(key).cast("string").alias("key"),
        at.alias("at"),
        in_window(at, window).alias("in_window"),
    )


def _as_timestamp(raw: Any, kind: str, unit_ms: int) -> Any:
    from pyspark.sql import functions as F

    if kind in _NUMBER_TYPES:
        return F.timestamp_millis((raw * unit_ms).cast("long"))
    if kind == "string":
        return F.try_to_timestamp(raw)
    return raw.cast("timestamp")


def _literal(kind: str, at_ms: int, unit_ms: int) -> Any:
    from pyspark.sql import functions as F

    if kind in _NUMBER_TYPES:
        return F.lit(at_ms // unit_ms)
    if kind == "string":
        return F.lit(_sql_time(at_ms))
    if kind == "date":
        return F.to_date(F.timestamp_millis(F.lit(at_ms)))
    return F.timestamp_millis(F.lit(at_ms)).cast("timestamp")


def _bounds(kind: str, since_ms: int | None, until_ms: int, unit_ms: int) -> tuple[str, str] | None:
    """lowerBound/upperBound of a partitioned read: the window plus grace (only when it has a
    start before ``until_ms``, and only for column types Spark can split on)."""
    if since_ms is None or since_ms >= until_ms:
        return None
    if kind in _NUMBER_TYPES:
        return str(since_ms // unit_ms), str(until_ms // unit_ms)
    if kind in ("timestamp", "timestamp_ntz"):
        return _sql_time(since_ms), _sql_time(until_ms)
    if kind == "date":
        return _sql_time(since_ms)[:10], _sql_time(until_ms)[:10]
    return None


def _sql_time(at_ms: int) -> str:
    """``2026-12-01 10:30:00.000`` (UTC), the form Spark and SQL read a timestamp in."""
    text = iso_ms(at_ms)
    assert text is not None
    return text.replace("T", " ").rstrip("Z")
