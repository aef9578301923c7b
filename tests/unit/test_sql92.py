"""SQL92 filters (broker/consume/sql92.py): a table of expressions evaluated over property maps
(TRUE, FALSE or unknown, with missing properties), precedence, RocketMQ's type rules refused at
parse time with the column and the token, the bounds on length, terms and nesting, and, by
hypothesis, that parsing never raises anything but IllegalFilterExpressionError and that
evaluating a parsed filter never raises at all.

Several rows are RocketMQ's own cases (apache/rocketmq filter/src/test ExpressionTest and
ParserTest), the rest cover what docs/filters.md promises, differences from RocketMQ included.
"""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from txmq import limits
from txmq.broker.consume.sql92 import parse, tokens
from txmq.broker.consume.sql92_tree import InList, Logic, Not
from txmq.errors import CODE_ILLEGAL_FILTER_EXPRESSION, IllegalFilterExpressionError

T, F, U = True, False, None  # U: unknown (a message with it is not delivered)

EVALUATED = [
    # Comparisons of numbers: the property's string read as a long or a double.
    ("a > 5", {"a": "7"}, T),
    ("a > 5", {"a": "5"}, F),
    ("a >= 5", {"a": "5"}, T),
    ("a < 5", {"a": "-6"}, T),
    ("a <= 5", {"a": "5.0"}, T),
    ("a > 3.14", {"a": "3.1415"}, T),
    ("a > 3.1E10", {"a": "31415000000.0"}, T),
    ("a > 5", {"a": " 6 "}, T),  # Java's Double.valueOf trims
    ("a > 5", {"a": "6d"}, T),
    ("a = 5", {"a": "05"}, T),
    ("a = 5", {"a": "5.0"}, T),
    ("a < 10", {"a": "9223372036854775807"}, F),
    ("a > 5", {"a": "99999999999999999999999"}, T),  # past a long: read as a double
    ("a > b", {"a": "20", "b": "10"}, T),
    ("a > b", {"a": "10", "b": "20"}, F),
    ("-a < -5", {"a": "6"}, T),
    ("a > -1", {"a": "0"}, T),
    ("a BETWEEN -1 AND 1", {"a": "0"}, T),
    # Strings: = and <> compare strings; a string that is not a number cannot be ordered.
    ("a = 'hello'", {"a": "hello"}, T),
    ("a <> 'hello'", {"a": "hello"}, F),
    ("a <> 'hello'", {"a": "world"}, T),
    ("a = b", {"a": "3.14", "b": "3.14"}, T),
    ("a <> b", {"a": "3.14", "b": "3.141"}, T),
    ("a = b", {"a": "5", "b": "5.0"}, F),  # two strings: compared as strings
    ("a > 5", {"a": "abc"}, U),
    ("a = 5", {"a": "abc"}, U),
    ("a > 5", {"a": "NaN"}, U),
    ("a > b", {"a": "x", "b": "1"}, U),
    ("TAGS = '''''tag'''''", {"TAGS": "''tag''"}, T),
    ("a = ''", {"a": ""}, T),
    # Booleans: a string is TRUE when it reads 'true' in any case.
    ("a = TRUE OR b = FALSE", {"a": "true", "b": "false"}, T),
    ("a = TRUE OR b = FALSE", {"a": "false", "b": "true"}, F),
    ("a = TRUE", {"a": "TRUE"}, T),
    ("a = FALSE", {"a": "yes"}, T),
    ("TRUE = a", {"a": "true"}, T),
    ("flag", {"flag": "True"}, T),
    ("flag", {"flag": "1"}, F),
    ("flag", {}, U),
    ("NOT flag", {}, U),
    ("TRUE", {}, T),
    ("FALSE", {}, F),
    ("NULL", {}, U),
    ("(a > 1) = TRUE", {"a": "2"}, T),
    # Missing properties: comparisons are unknown, on either side.
    ("a > 5", {}, U),
    ("a = 'x'", {}, U),
    ("a <> 'x'", {}, U),
    ("'x' = a", {}, U),
    ("'x' <> a", {}, U),
    ("a = b", {}, U),
    ("NOT a = 'x'", {}, U),
    ("a IN ('x')", {}, U),
    ("a NOT IN ('x')", {}, U),
    ("a BETWEEN 1 AND 2", {}, U),
    ("a NOT BETWEEN 1 AND 2", {}, U),
    ("a IS NULL", {}, T),
    ("a IS NULL", {"abc": "2"}, T),
    ("a IS NULL", {"a": "2"}, F),
    ("a IS NOT NULL", {"a": ""}, T),
    ("a IS NOT NULL", {}, F),
    ("(a > 1) IS NULL", {}, T),
    ("a IS NULL OR a = 'hello'", {}, T),
    ("a IS NULL OR a = 'hello'", {"a": "hello"}, T),
    ("a IS NULL OR a = 'hello'", {"a": "abc"}, F),
    ("a IS NOT NULL AND a = 'hello'", {}, F),
    # Three-valued AND / OR / NOT.
    ("a = 1 AND b = 1", {"a": "2"}, F),
    ("a = 1 AND b = 1", {"a": "1"}, U),
    ("a = 1 OR b = 1", {"a": "1"}, T),
    ("a = 1 OR b = 1", {"a": "2"}, U),
    ("a > 5 OR b = 'x'", {"a": "abc", "b": "x"}, T),
    ("NOT (a = 1 AND b = 1)", {"a": "2"}, T),
    ("NOT (a = 1 OR b = 1)", {"a": "2"}, U),
    # Precedence: NOT over AND over OR; NOT below a comparison, as SQL reads it.
    ("a = 1 OR b = 1 AND c = 1", {"a": "1", "b": "2"}, T),
    ("(a = 1 OR b = 1) AND c = 1", {"a": "1", "b": "2"}, U),
    ("NOT a = 1", {"a": "2"}, T),
    ("NOT a = 1 AND b = 1", {"a": "2", "b": "1"}, T),
    ("NOT NOT a = 1", {"a": "1"}, T),
    ("a = 1 = TRUE", {"a": "1"}, T),
    # RocketMQ's ExpressionTest rows.
    ("a=3 and b<>4 And c>5 AND d<=4", {"a": "3", "b": "5", "c": "6", "d": "1"}, T),
    ("a=3 and b<>4 And c>5 AND d<=4", {"a": "4", "b": "5", "c": "6", "d": "1"}, F),
    ("a=3 or b<>4 Or c>5 OR d<=4", {"a": "4", "b": "4", "c": "3", "d": "2"}, T),
    ("a=3 or b<>4 Or c>5 OR d<=4", {"a": "4", "b": "4", "c": "3", "d": "10"}, F),
    ("a in ('3', '4', '5')", {"a": "4"}, T),
    ("a in ('3', '4', '5')", {"a": "8"}, F),
    ("a not in ('3', '4', '5')", {"a": "8"}, T),
    ("a not in ('3', '4', '5')", {"a": "3"}, F),
    ("a between 2 and 10", {"a": "2"}, T),
    ("a between 2 and 10", {"a": "10"}, T),
    ("a between 2 and 10", {"a": "11"}, F),
    ("a not between 2 and 10", {"a": "1"}, T),
    ("a not between 2 and 10", {"a": "3"}, F),
    ("key is not null and key between 0 and 100", {"key": "con"}, U),
    ("a between up and low", {"a": "3.14", "up": "up", "low": "low"}, U),
    # CONTAINS / STARTSWITH / ENDSWITH: FALSE, never unknown, for a missing value or ''.
    ("value contains 'x'", {"value": "axb"}, T),
    ("value startswith 'ax'", {"value": "axb"}, T),
    ("value endswith 'xb'", {"value": "axb"}, T),
    ("value not contains 'x'", {"value": "axb"}, F),
    ("value not startswith 'u'", {"value": "axb"}, T),
    ("value contains 'x'", {}, F),
    ("value not contains 'x'", {}, F),
    ("value contains ''", {"value": "axb"}, F),
    ("value not endswith ''", {"value": "axb"}, F),
    ("'axb' contains 'x'", {}, T),
    ("5 contains '5'", {}, F),
    # TAGS and IN with odd strings.
    ("TAGS IN ('a', 'b''c')", {"TAGS": "b'c"}, T),
    ("TAGS IN ('a', 'b''c')", {"TAGS": "A"}, F),
    # Keywords in any case, comments, whitespace.
    ("a IS not NuLl -- trailing comment", {"a": "1"}, T),
    ("/* c */ a\t=\n'1' -- c\n AND b = '2'", {"a": "1", "b": "2"}, T),
    ("$x_1 = 'y'", {"$x_1": "y"}, T),
    ("A = 'y'", {"a": "y"}, U),  # property names are case-sensitive
]


@pytest.mark.parametrize(("text", "props", "want"), EVALUATED)
def test_evaluates(text: str, props: dict[str, str], want: bool | None) -> None:
    selector = parse(text)
    assert selector.evaluate(props) is want
    assert selector.matches(props) is (want is True)


REFUSED = [
    # (expression, column, a word of the message)
    ("", None, "empty"),
    ("   ", None, "empty"),
    ("a and between 2 and 10", 7, "near 'BETWEEN'"),
    (" a between 10 and 0", 12, "lower bound"),
    ("a between NULL and 0", 11, "cannot be NULL"),
    ("a > 100000000000000000000000", 5, "long's range"),
    ("a > 9223372036854775808", 5, "long's range"),
    ("a > 1e999", 5, "double's range"),
    ("a = NULL", 5, "IS NULL"),
    ("NULL <> a", 1, "IS NULL"),
    ("a > 'x'", 5, "only numbers"),
    ("a > TRUE", 5, "only numbers"),
    ("a BETWEEN 'a' AND 'c'", 11, "only numbers"),
    ("(a > 1) > 2", 1, "a condition cannot be compared"),
    ("a > 1 > 2", 3, "a condition cannot be compared"),
    ("TRUE = 5", 1, "boolean"),
    ("'x'", 1, "found a value"),
    ("5", 1, "found a value"),
    ("-a", 1, "found a value"),
    ("a = 1 AND 5", 11, "found a value"),
    ("a in (1)", 7, "IN lists strings"),
    ("a in ()", 7, "IN lists strings"),
    ("'x' in ('x')", 1, "IN applies to a property"),
    ("a in ('x'", 10, "expected , or )"),
    ("a contains x", 12, "CONTAINS takes a string"),
    ("a not contains 123", 16, "CONTAINS takes a string"),
    ("'axb' contains ", 16, "CONTAINS takes a string"),
    ("(a = 1", 7, "expected )"),
    ("a = 'x", 5, "not closed"),
    ("a ! b", 3, "unexpected character"),
    ("a == b", 4, "expected a value"),
    ("a != b", 3, "unexpected character"),
    ("a /* x", 3, "comment is not closed"),
    ("NOT", 4, "at the end"),
    ("a = 1 b", 7, "expected AND, OR"),
    ("a NOT = 1", 3, "expected AND, OR"),
    ("a IS 5", 6, "expected NULL"),
    ("a = 007", 6, "expected AND, OR"),
    ("-'x' = a", 2, "'-' applies"),
    ("a = é", 5, "unexpected character"),
    ("a > .", 5, "unexpected character"),
    ("a = 1 AND", 10, "at the end"),
]


@pytest.mark.parametrize(("text", "column", "says"), REFUSED)
def test_refuses_with_position(text: str, column: int | None, says: str) -> None:
    with pytest.raises(IllegalFilterExpressionError) as info:
        parse(text)
    message = str(info.value)
    assert says in message
    if column is not None:
        assert f"column {column} " in message
    assert info.value.code == CODE_ILLEGAL_FILTER_EXPRESSION


def test_shape_of_the_tree() -> None:
    tree = parse("a = 1 OR b = 1 OR NOT c IN ('x') AND d IS NULL").tree
    assert isinstance(tree, Logic) and tree.op == "OR" and len(tree.operands) == 3
    last = tree.operands[2]
    assert isinstance(last, Logic) and last.op == "AND"
    assert isinstance(last.operands[0], Not) and isinstance(last.operands[0].operand, InList)


def test_tokens_keep_columns_and_values() -> None:
    toks = tokens("a<>'it''s' AND 5L >= .5e1")
    assert [(t.kind, t.text, t.column) for t in toks] == [
        ("id", "a", 1),
        ("op", "<>", 2),
        ("str", "'it''s'", 4),
        ("kw", "AND", 12),
        ("long", "5L", 16),
        ("op", ">=", 19),
        ("double", ".5e1", 22),
        ("end", "", 26),
    ]
    assert toks[2].value == "it's" and toks[4].value == 5 and toks[6].value == 5.0


def test_bounds_on_length_terms_and_nesting() -> None:
    longest = "a IN (" + ",".join(["'x'"] * 10) + ")"
    parse(longest + " " * (limits.SQL_FILTER_LENGTH_MAX - len(longest)))
    with pytest.raises(IllegalFilterExpressionError, match="at most"):
        parse(longest + " " * (limits.SQL_FILTER_LENGTH_MAX - len(longest) + 1))
    depth = limits.SQL_FILTER_DEPTH_MAX
    parse("(" * depth + "a = 1" + ")" * depth)
    with pytest.raises(IllegalFilterExpressionError, match="nested deeper"):
        parse("(" * (depth + 1) + "a = 1" + ")" * (depth + 1))
    with pytest.raises(IllegalFilterExpressionError, match="nested deeper"):
        parse("NOT " * (depth + 1) + "a = 1")
    with pytest.raises(IllegalFilterExpressionError, match="nested deeper"):
        parse("a" + " = 1" * (depth + 2))
    with pytest.raises(IllegalFilterExpressionError, match="nested deeper"):
        parse("- " * (depth + 1) + "a > 1")
    terms = limits.SQL_FILTER_NODES_MAX
    with pytest.raises(IllegalFilterExpressionError, match="terms"):
        parse(" OR ".join(["a = 1"] * terms))


# --- Properties: parsing and evaluating never fail in any other way. ----------------------------

_WORDS = [
    "a", "b", "TAGS", "NOT", "AND", "OR", "BETWEEN", "IN", "IS", "NULL", "TRUE", "FALSE",
    "CONTAINS", "STARTSWITH", "ENDSWITH", "=", "<>", "<", "<=", ">", ">=", "(", ")", ",", "+",
    "-", "'x'", "''", "'", "0", "5", "5L", "1.5", ".5", "1e3", "1e999", "99999999999999999999",
    "--", "/*", "*/", "\n", "!", "é", "$", "0.",
]  # fmt: skip
_VALUES = st.one_of(
    st.sampled_from(["", "0", "5", "-5", "5.0", "1e3", "true", "TRUE", "x", "NaN", " 7 ", "6d"]),
    st.text(max_size=30),
    st.integers().map(str),
    st.floats().map(str),
)
_PROPS = st.dictionaries(st.sampled_from(["a", "b", "TAGS"]), _VALUES, max_size=3)


@settings(max_examples=600, deadline=None)
@given(st.lists(st.sampled_from(_WORDS), max_size=30).map(" ".join), _PROPS)
def test_token_soup_parses_or_is_refused_and_evaluates(text: str, props: dict[str, str]) -> None:
    try:
        selector = parse(text)
    except IllegalFilterExpressionError:
        return
    assert selector.evaluate(props) in (True, False, None)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200))
def test_any_text_parses_or_is_refused(text: str) -> None:
    with contextlib.suppress(IllegalFilterExpressionError):  # the one failure allowed
        parse(text)


_ATOMS = st.sampled_from(
    ["a > 5", "a = 'x'", "b IS NULL", "a IN ('1', '5')", "a BETWEEN 1 AND 9", "flag", "TRUE",
     "b CONTAINS 'x'", "-a <= b", "a NOT BETWEEN 2 AND 3", "NULL", "(a > 1) = FALSE"]
)  # fmt: skip
_EXPRESSIONS = st.recursive(
    _ATOMS,
    lambda inner: st.one_of(
        st.tuples(inner, st.sampled_from([" AND ", " OR "]), inner).map("".join),
        inner.map(lambda e: f"NOT ({e})"),
        inner.map(lambda e: f"({e})"),
    ),
    max_leaves=40,
)


@settings(max_examples=400, deadline=None)
@given(_EXPRESSIONS, _PROPS)
def test_nested_expressions_are_bounded_and_agree_with_their_negation(
    text: str, props: dict[str, str]
) -> None:
    """Deep or wide, a filter parses or is refused for its bound, never by Python's recursion
    limit; NOT (e) is the three-valued negation of e."""
    try:
        selector = parse(text)
    except IllegalFilterExpressionError as exc:
        assert "nested deeper" in str(exc) or "terms" in str(exc)
        return
    value = selector.evaluate(props)
    try:
        negated = parse(f"NOT ({text})")
    except IllegalFilterExpressionError:
        return  # the expression sat at a bound, which NOT ( ) passes
    assert negated.evaluate(props) == (None if value is None else not value)
