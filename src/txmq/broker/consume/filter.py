"""Filter expressions of consumer subscriptions: tags (``*`` for everything, or ``a||b||c``) and
SQL92 (consume/sql92.py) over a message's properties and tag.

Owns: parsing and validating an expression into a ``Filter``: the tag set the store filters on
by tag hash (None means every tag) and, for SQL92, the predicate the store applies to each record
it reads (``RecordProperties`` is what the expression sees of a record). Parsed SQL92 filters are
kept (SQL_FILTER_CACHE_MAX) since every receive of a subscription carries its expression again.
Must not: read messages (the store applies the filter while it reads a queue; what it passes
over counts as consumed by the group, consume/book.py).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

from txmq import limits
from txmq.broker.consume.sql92 import Selector, parse
from txmq.errors import IllegalFilterExpressionError
from txmq.model import Record, is_internal_property

# The properties a SQL92 filter sees besides a record's own user properties, as RocketMQ names
# them: the message's tag and its keys (space-separated).
TAGS = "TAGS"
KEYS = "KEYS"


@dataclass(frozen=True, slots=True)
class Filter:
    """A subscription's filter: ``tags`` the store matches by tag hash (None: every tag);
    ``where`` a predicate on each record read (None: every record)."""

    tags: frozenset[str] | None = None
    where: Callable[[Record], bool] | None = None


EVERYTHING = Filter()


def parse_filter(expression: str, *, sql: bool) -> Filter:
    """A subscription's expression: SQL92 when ``sql``, else tags."""
    if not sql:
        return Filter(tags=parse_tags(expression))
    selector = _selector(expression)
    return Filter(where=lambda rec: selector.matches(RecordProperties(rec)))


def parse_tags(expression: str) -> frozenset[str] | None:
    """``""`` or ``"*"`` -> None (no filter); ``"a || b"`` -> {"a", "b"}."""
    text = expression.strip()
    if text in ("", "*"):
        return None
    parts = [t.strip() for t in text.split("||")]
    if any(not t for t in parts):
        raise IllegalFilterExpressionError(f"illegal tag expression {expression!r}: empty tag")
    if "*" in parts:
        return None  # "a || *" asks for everything, as RocketMQ reads it
    if len(parts) > limits.TAGS_PER_EXPRESSION_MAX:
        raise IllegalFilterExpressionError(
            f"a tag expression names at most {limits.TAGS_PER_EXPRESSION_MAX} tags, "
            f"got {len(parts)}"
        )
    for t in parts:
        if len(t) > limits.TAG_LENGTH_MAX:
            raise IllegalFilterExpressionError(f"tag longer than {limits.TAG_LENGTH_MAX}: {t!r}")
    return frozenset(parts)


def matches(tags: frozenset[str] | None, tag: str) -> bool:
    return tags is None or tag in tags


class RecordProperties(Mapping[str, str]):
    """A record as a SQL92 filter sees it: its user properties (not the broker's own,
    ``is_internal_property``), ``TAGS`` (the tag, absent when the message has none) and
    ``KEYS`` (its keys joined by spaces, absent when it has none)."""

    __slots__ = ("_rec",)

    def __init__(self, rec: Record) -> None:
        self._rec = rec

    def get(self, key: str, default: str | None = None) -> str | None:  # type: ignore[override]
        if key == TAGS:
            return self._rec.tag or default
        if key == KEYS:
            return " ".join(self._rec.keys) or default
        if is_internal_property(key):
            return default
        return self._rec.properties.get(key, default)

    def __getitem__(self, key: str) -> str:
        v = self.get(key)
        if v is None:
            raise KeyError(key)
        return v

    def __iter__(self) -> Iterator[str]:
        names = [k for k in self._rec.properties if not is_internal_property(k)]
        names += [k for k in (TAGS, KEYS) if self.get(k) is not None and k not in names]
        return iter(names)

    def __len__(self) -> int:
        return sum(1 for _ in self)


@functools.lru_cache(maxsize=limits.SQL_FILTER_CACHE_MAX)
def _selector(expression: str) -> Selector:
    """``parse``, kept: each receive carries the expression again. A refused expression is not
    kept; the next receive parses it again, within its length bound."""
    return parse(expression)
