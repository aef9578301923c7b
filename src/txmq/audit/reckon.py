"""The audit's reckoning as Spark DataFrame transformations: rows and messages per key, and the
discrepancies between them. Lazy and pure: nothing here runs a Spark job.

Owns: the definition of each kind, on two inputs anyone can build (the ``txmq audit`` job from a
JDBC table and the txmq source, the demo from its own tables):

- rows: ``key`` (string, never null), ``at`` (timestamp), ``in_window`` (boolean)
- messages: ``key`` (string; null: the message has no join value), ``at`` (store time),
  ``message_id``, ``in_window``

Rows and messages outside the window are the grace margin: they are looked up, never reported.
A key is **lost** when it has a row in the window and no committed message at all, a
**phantom** when it has a message in the window and no row at all, a **duplicate** when it has
more than one message and at least one in the window.

Must not: collect anything to the driver (job.py brings bounded results back).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from txmq.audit.spec import Match, Window


def match_column(match: Match) -> Any:
    """The join value of each row of a txmq DataFrame, as ``Match.value_of`` computes it for
    one message (a missing key, property or field is null, never an error)."""
    from pyspark.sql import functions as F

    if match.kind == "key":
        return F.get(F.col("keys"), 0)
    if match.kind == "property":
        return F.try_element_at(F.col("properties"), F.lit(match.name))
    return F.get_json_object(F.col("body").cast("string"), f"$.{match.name}")


def in_window(at: Any, window: Window) -> Any:
    """True where ``at`` lies in the window; a null time is in an unbounded window only."""
    from pyspark.sql import functions as F

    inside = F.lit(True)
    if window.since_ms is not None:
        inside = inside & (at >= F.timestamp_millis(F.lit(window.since_ms)))
    if window.until_ms is not None:
        inside = inside & (at < F.timestamp_millis(F.lit(window.until_ms)))
    return F.coalesce(inside, F.lit(not window.bounded))


def keyed_messages(messages: Any, match: Match, window: Window) -> Any:
    """A txmq DataFrame as the messages input: its join value, store time and id."""
    from pyspark.sql import functions as F

    at = F.col("store_timestamp")
    return messages.select(
        match_column(match).alias("key"),
        at.alias("at"),
        F.col("message_id"),
        in_window(at, window).alias("in_window"),
    )


def untimed_rows(table: Any, key: str) -> Any:
    """A table without a time column as the rows input: every row in the (unbounded) window."""
    from pyspark.sql import functions as F

    return table.select(
        F.col(key).cast("string").alias("key"),
        F.lit(None).cast("timestamp").alias("at"),
        F.lit(True).alias("in_window"),
    )


def per_key(rows: Any, messages: Any) -> Any:
    """One line per key found on either side: ``rows``/``rows_in`` (rows, of them in the
    window), ``db_at`` (first row time in the window), ``copies``/``copies_in`` (messages, of
    them in the window), ``first_at``/``last_at`` and ``first_id``/``last_id`` (first and last
    copy by store time). A side the key is missing from has nulls."""
    from pyspark.sql import functions as F

    inside = F.col("in_window").cast("long")
    db = (
        rows.where(F.col("key").isNotNull())
        .groupBy("key")
        .agg(
            F.count(F.lit(1)).alias("rows"),
            F.sum(inside).alias("rows_in"),
            F.min(F.when(F.col("in_window"), F.col("at"))).alias("db_at"),
        )
    )
    topic = (
        messages.where(F.col("key").isNotNull())
        .groupBy("key")
        .agg(
            F.count(F.lit(1)).alias("copies"),
            F.sum(inside).alias("copies_in"),
            F.min("at").alias("first_at"),
            F.max("at").alias("last_at"),
            F.min_by("message_id", "at").alias("first_id"),
            F.max_by("message_id", "at").alias("last_id"),
        )
    )
    return db.join(topic, on="key", how="full_outer")


def lost_condition() -> Any:
    from pyspark.sql import functions as F

    return (F.col("rows_in") > 0) & F.col("copies").isNull()


def phantom_condition() -> Any:
    from pyspark.sql import functions as F

    return (F.col("copies_in") > 0) & F.col("rows").isNull()


def duplicate_condition() -> Any:
    from pyspark.sql import functions as F

    return (F.col("copies") > 1) & (F.col("copies_in") > 0)


@dataclass(frozen=True, slots=True)
class Discrepancies:
    """One DataFrame per kind, unordered (``ORDER`` names the time column examples are taken
    in order of: the oldest first)."""

    lost: Any  # key, at (the row's time)
    phantom: Any  # key, message_id, at (store time), copies
    duplicate: Any  # key, copies, first_message_id, last_message_id, first_at, last_at

    def by_kind(self) -> dict[str, Any]:
        return {"lost": self.lost, "phantom": self.phantom, "duplicate": self.duplicate}


ORDER: Final = {"lost": "at", "phantom": "at", "duplicate": "first_at"}


def discrepancies(keys: Any) -> Discrepancies:
    """The three kinds Spark finds, from ``per_key``'s frame."""
    from pyspark.sql import functions as F

    return Discrepancies(
        lost=keys.where(lost_condition()).select("key", F.col("db_at").alias("at")),
        phantom=keys.where(phantom_condition()).select(
            "key", F.col("first_id").alias("message_id"), F.col("first_at").alias("at"), "copies"
        ),
        duplicate=keys.where(duplicate_condition()).select(
            "key",
            "copies",
            F.col("first_id").alias("first_message_id"),
            F.col("last_id").alias("last_message_id"),
            "first_at",
            "last_at",
        ),
    )


def count_columns() -> list[Any]:
    """The aggregate columns of the counts over ``per_key``'s frame (one Spark job)."""
    from pyspark.sql import functions as F

    def how_many(condition: Any) -> Any:
        return F.coalesce(F.sum(F.when(condition, 1).otherwise(0)), F.lit(0))

    return [
        how_many(lost_condition()).alias("lost"),
        how_many(phantom_condition()).alias("phantom"),
        how_many(duplicate_condition()).alias("duplicate"),
        F.coalesce(
            F.sum(F.when(duplicate_condition(), F.col("copies") - 1).otherwise(0)), F.lit(0)
        ).alias("duplicate_copies"),
        how_many(F.col("rows_in") > 1).alias("db_duplicate_keys"),
    ]
