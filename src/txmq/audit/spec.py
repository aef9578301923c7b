"""What an audit compares, parsed and checked before any Spark session starts. Pure.

Owns: the ``--match`` forms (``key``, ``property:NAME``, ``json:FIELD``) and how each takes a
message's join value (here for a half message the admin channel shows, and in job.py as a
Spark column: both must agree), the time window (``--since``/``--until``/``--grace``), and
which JDBC driver class and Debian jar serve a JDBC URL. Every bad value raises
``AuditInputError`` naming the flag, so the command exits 2 before a JVM is started.
Must not: import pyspark or talk to the broker or the database.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

from txmq import limits
from txmq.errors import BadRequestError


class AuditInputError(BadRequestError):
    """A flag of ``txmq audit`` is malformed, or names a table, column or file that is not
    there: bad input, exit 2."""


# --- Match: which value of a message joins it to a row. ----------------------------------------

_FIELD = r"[A-Za-z_][A-Za-z0-9_\-]*"
_PROPERTY_RE: Final = re.compile(r"^[A-Za-z0-9_.\-]{1,255}$")
_JSON_PATH_RE: Final = re.compile(rf"^{_FIELD}(\.{_FIELD})*$")


@dataclass(frozen=True, slots=True)
class Match:
    """``kind`` is "key" (the message's first key), "property" (the user property ``name``)
    or "json" (the field ``name`` of a JSON body, dots walking into objects)."""

    kind: str
    name: str = ""

    @classmethod
    def parse(cls, raw: str) -> Match:
        text = raw.strip()
        if text == "key":
            return cls("key")
        kind, sep, name = text.partition(":")
        if sep and kind == "property" and _PROPERTY_RE.match(name):
            return cls("property", name)
        if sep and kind == "json" and _JSON_PATH_RE.match(name):
            return cls("json", name)
        raise AuditInputError(
            f"--match must be key, property:NAME or json:FIELD (FIELD may be a.b), got {raw!r}"
        )

    def __str__(self) -> str:
        return self.kind if self.kind == "key" else f"{self.kind}:{self.name}"

    def value_of(self, keys: list[str], properties: dict[str, str], body: bytes) -> str | None:
        """The join value of one message, as the Spark job computes it (None: it has none).

        A JSON value is given as Spark's ``get_json_object`` gives it: a string as is, a number
        or boolean as its JSON text, an object or array as compact JSON."""
        if self.kind == "key":
            return keys[0] if keys else None
        if self.kind == "property":
            return properties.get(self.name)
        try:
            value: Any = json.loads(body)
        except ValueError:
            return None
        for part in self.name.split("."):
            if not isinstance(value, dict) or part not in value:
                return None
            value = value[part]
        if value is None:
            return None
        if isinstance(value, str):
            return value
        return json.dumps(value, separators=(",", ":"))


# --- The time window. ---------------------------------------------------------------------------

_DURATION_RE: Final = re.compile(r"^(\d{1,9})(ms|s|m|h|d)$")
_UNIT_MS: Final = {"ms": 1, "s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_duration_ms(raw: str, flag: str) -> int:
    """``90s``, ``10m``, ``2h``, ``7d`` (or ``500ms``) in milliseconds."""
    found = _DURATION_RE.match(raw.strip())
    if found is None:
        raise AuditInputError(f"{flag} must be a duration like 30s, 10m, 2h or 7d, got {raw!r}")
    return int(found.group(1)) * _UNIT_MS[found.group(2)]


def parse_time_ms(raw: str, flag: str, *, now_ms: int) -> int:
    """A point in time, in ms since the epoch: an ISO 8601 date or date-time (UTC unless it
    names an offset), ``now``, a duration meaning that long before now (``2h``), or a number
    of ms since the epoch."""
    text = raw.strip()
    if text == "now":
        return now_ms
    if text.isdigit() and len(text) >= 10:
        return int(text)
    if _DURATION_RE.match(text):
        return now_ms - parse_duration_ms(text, flag)
    try:
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise AuditInputError(
            f"{flag} must be an ISO date or time (2026-12-01, 2026-12-01T10:30Z), now, a "
            f"duration before now (2h) or ms since the epoch, got {raw!r}"
        ) from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return int(parsed.timestamp() * 1000)


@dataclass(frozen=True, slots=True)
class Window:
    """Rows and messages stored in ``[since_ms, until_ms)`` are audited (None: unbounded); a
    row's message, or a message's row, is looked for ``grace_ms`` beyond either end."""

    since_ms: int | None
    until_ms: int | None
    grace_ms: int = limits.AUDIT_GRACE_MS_DEFAULT

    def __post_init__(self) -> None:
        since, until = self.since_ms, self.until_ms
        if since is not None and until is not None and since >= until:
            raise AuditInputError("--since must be before --until")
        if self.grace_ms < 0:
            raise AuditInputError("--grace must not be negative")

    @property
    def bounded(self) -> bool:
        return self.since_ms is not None or self.until_ms is not None

    @property
    def wide_since_ms(self) -> int | None:
        return None if self.since_ms is None else max(1, self.since_ms - self.grace_ms)

    @property
    def wide_until_ms(self) -> int | None:
        return None if self.until_ms is None else self.until_ms + self.grace_ms

    def holds(self, at_ms: int) -> bool:
        return (self.since_ms is None or at_ms >= self.since_ms) and (
            self.until_ms is None or at_ms < self.until_ms
        )

    def as_json(self) -> dict[str, Any]:
        return {
            "since": iso_ms(self.since_ms),
            "until": iso_ms(self.until_ms),
            "grace_ms": self.grace_ms,
        }


def iso_ms(at_ms: int | None) -> str | None:
    """``2026-12-01T10:30:00.000Z`` for ms since the epoch (None stays None)."""
    if at_ms is None:
        return None
    moment = datetime.fromtimestamp(at_ms / 1000, tz=UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{at_ms % 1000:03d}Z"


# --- JDBC drivers. ------------------------------------------------------------------------------

# Sub-protocol -> (driver class, jars Debian installs under /usr/share/java, package name).
DRIVERS: Final = {
    "postgresql": ("org.postgresql.Driver", ("postgresql.jar",), "libpostgresql-jdbc-java"),
    "sqlite": (
        "org.sqlite.JDBC",
        ("sqlite-jdbc.jar", "xerial-sqlite-jdbc.jar"),
        "libxerial-sqlite-jdbc-java",
    ),
    "mariadb": ("org.mariadb.jdbc.Driver", ("mariadb-java-client.jar",), "libmariadb-java"),
    "mysql": ("com.mysql.cj.jdbc.Driver", ("mysql-connector-j.jar",), ""),
}
SYSTEM_JARS: Final = Path("/usr/share/java")
# What each JDBC connection runs before Spark's queries, by sub-protocol. MariaDB and MySQL
# send a TIMESTAMP column in the session's time zone, the server's own by default, and the
# driver reads that text in the JVM's zone (UTC: session.py): the session is set to UTC too.
# And Spark quotes column names "like this" unless it has a dialect for the URL: it has one
# for jdbc:mysql (backticks) but none for jdbc:mariadb, whose server reads "col" as a string
# literal (every row's key would be the text 'order_id'): such a connection turns on
# ANSI_QUOTES, keeping its other modes.
_UTC_SESSION: Final = "SET SESSION time_zone = '+00:00'"
SESSION_INIT: Final = {
    "mysql": _UTC_SESSION,
    "mariadb": f"{_UTC_SESSION}, SESSION sql_mode = "
    "CONCAT_WS(',', NULLIF(@@SESSION.sql_mode, ''), 'ANSI_QUOTES')",
}
_URL_RE: Final = re.compile(r"^jdbc:([a-z0-9]+):\S+$")


@dataclass(frozen=True, slots=True)
class Jdbc:
    """Where the table is: the URL, the driver class and the jars that hold it."""

    url: str
    table: str
    driver: str
    jars: tuple[Path, ...]

    @property
    def subprotocol(self) -> str:
        return self.url.split(":", 2)[1]

    @property
    def session_init(self) -> str:
        """The statement each JDBC connection runs before Spark's queries ("": none)."""
        return SESSION_INIT.get(self.subprotocol, "")

    @property
    def shown_url(self) -> str:
        """The URL without a password in it (for output and errors)."""
        return re.sub(r"(?i)(password=)[^&;]*", r"\1***", re.sub(r"//[^/@]*@", "//***@", self.url))


def jdbc(
    url: str,
    table: str,
    *,
    jars: str = "",
    driver: str = "",
    local_files: bool = True,
    system_jars: Path = SYSTEM_JARS,
) -> Jdbc:
    """Check the URL and find its driver: ``driver`` if named, else the sub-protocol's; the
    jars are ``jars`` (comma-separated paths) plus Debian's jar for it when installed.

    ``local_files`` says the JVM runs here (not ``--remote``): then a driver jar must be found
    and an SQLite file must exist (its driver would create an empty one instead). A jar of
    ``jars`` must exist here either way: over Spark Connect it is uploaded from here."""
    found = _URL_RE.match(url.strip())
    if found is None:
        raise AuditInputError(f"--jdbc-url must look like jdbc:postgresql://HOST/DB, got {url!r}")
    if not table.strip():
        raise AuditInputError("--table must name a table")
    sub = found.group(1)
    known = DRIVERS.get(sub)
    given = tuple(Path(p.strip()) for p in jars.split(",") if p.strip())
    for path in given:
        if not path.is_file():
            raise AuditInputError(f"--jars: no file {path}")
    if not driver and known is None:
        raise AuditInputError(
            f"no known JDBC driver for {sub!r} URLs: name its class with --driver and its jar "
            f"with --jars (known: {', '.join(sorted(DRIVERS))})"
        )
    system = tuple(system_jars / name for name in (known[1] if known else ()))
    installed = [p for p in system if p.is_file()][:1]
    chosen = given + tuple(p for p in installed if p not in given)
    if local_files and not chosen:
        package = known[2] if known else ""
        hint = f"install Debian's {package} or " if package else ""
        raise AuditInputError(f"no JDBC driver jar for {sub!r}: {hint}give its jar with --jars")
    if local_files and sub == "sqlite":
        _check_sqlite_file(url.strip())
    return Jdbc(url.strip(), table.strip(), driver or (known[0] if known else ""), chosen)


def _check_sqlite_file(url: str) -> None:
    path = url.split(":", 2)[2].split("?", 1)[0]
    if path.startswith("file:"):
        path = path[len("file:") :]
    if path and path != ":memory:" and not Path(path).is_file():
        raise AuditInputError(f"no SQLite database at {path} (from --jdbc-url)")


# --- The whole request. -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AuditSpec:
    """Everything ``txmq audit`` was asked, checked."""

    jdbc: Jdbc
    key_column: str
    topic: str
    match: Match
    window: Window
    time_column: str = ""  # empty: found from the table's columns when the window needs one
    epoch_unit_ms: int = 1  # a numeric time column counts this many ms per unit
    examples: int = limits.AUDIT_EXAMPLES_DEFAULT
    partitions: int = limits.AUDIT_JDBC_PARTITIONS_DEFAULT

    def __post_init__(self) -> None:
        if not self.key_column.strip():
            raise AuditInputError("--key must name the table's key column")
        if not self.topic.strip():
            raise AuditInputError("--topic must name a topic")
        if not 1 <= self.examples <= limits.AUDIT_EXAMPLES_MAX:
            raise AuditInputError(f"--examples must be 1..{limits.AUDIT_EXAMPLES_MAX}")
        if not 1 <= self.partitions <= limits.AUDIT_JDBC_PARTITIONS_MAX:
            raise AuditInputError(f"--db-partitions must be 1..{limits.AUDIT_JDBC_PARTITIONS_MAX}")
        if self.epoch_unit_ms not in (1, 1_000):
            raise AuditInputError("--epoch-unit must be ms or s")
