"""Tag filter expressions of consumer subscriptions: ``*`` (everything) or ``a||b||c``.

Owns: parsing and validating the expression into the tag set the store filters on (None means
every tag). SQL92 filters are refused (RocketMQ brokers need them enabled explicitly; txmq has
none). Must not: read messages (the store applies the set while it reads a queue).
"""

from __future__ import annotations

from txmq import limits
from txmq.errors import IllegalFilterExpressionError


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
