"""Tag filter expressions."""

from __future__ import annotations

import pytest

from txmq import limits
from txmq.broker.consume.filter import matches, parse_tags
from txmq.errors import IllegalFilterExpressionError


def test_parse() -> None:
    assert parse_tags("") is None
    assert parse_tags(" * ") is None
    assert parse_tags("a") == frozenset({"a"})
    assert parse_tags("a || b||c ") == frozenset({"a", "b", "c"})
    assert parse_tags("a || *") is None
    assert matches(None, "x") and matches(frozenset({"x"}), "x")
    assert not matches(frozenset({"x"}), "y")


@pytest.mark.parametrize("text", ["a||", "||", "a|| ||b", "t" * 256])
def test_illegal(text: str) -> None:
    with pytest.raises(IllegalFilterExpressionError):
        parse_tags(text)


def test_too_many_tags() -> None:
    with pytest.raises(IllegalFilterExpressionError):
        parse_tags("||".join(f"t{i}" for i in range(limits.TAGS_PER_EXPRESSION_MAX + 1)))
