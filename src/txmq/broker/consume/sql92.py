"""SQL92 filter expressions of consumer subscriptions, read as RocketMQ's ``filter`` module reads
them (its SelectorParser grammar, which comes from ActiveMQ's JMS message selectors).
docs/filters.md is the user's description.

Owns: ``parse`` (text -> ``Selector``, or IllegalFilterExpressionError naming the column and the
token where the text went wrong, within SQL_FILTER_LENGTH_MAX characters, SQL_FILTER_NODES_MAX
terms and SQL_FILTER_DEPTH_MAX levels of nesting) and ``Selector`` (the tree, consume/sql92_tree.py,
and its evaluation over a message's properties).
Must not: do I/O or know records (consume/filter.py shows a record's properties as a mapping).

Grammar (keywords in any case, identifiers ``[A-Za-z_$][A-Za-z0-9_$]*`` are case-sensitive
property names, strings in single quotes with ``''`` for a quote, ``--`` and ``/* */``
comments, long literals without sign or leading zero and an optional ``L``, doubles as
``1.5``, ``1.``, ``.5``, ``1e3``):

    expression := or
    or         := and { OR and }
    and        := not { AND not }
    not        := NOT not | equality
    equality   := comparison { ("=" | "<>") comparison | IS [NOT] NULL }
    comparison := unary { (">" | ">=" | "<" | "<=") unary
                        | [NOT] BETWEEN unary AND unary
                        | [NOT] IN "(" string { "," string } ")"
                        | [NOT] (CONTAINS | STARTSWITH | ENDSWITH) string }
    unary      := ("+" | "-") unary | primary
    primary    := string | long | double | TRUE | FALSE | NULL | identifier | "(" expression ")"

RocketMQ's parser binds NOT tighter than a comparison (``NOT a = 1`` is ``(NOT a) = 1`` there,
which never matches); here it is SQL's ``NOT (a = 1)``. The type rules are RocketMQ's: ``<``,
``>``, ``<=``, ``>=`` and BETWEEN compare numbers (a string or boolean literal there is
refused), NULL is tested with IS [NOT] NULL only, IN lists strings and applies to a property,
BETWEEN's literal bounds must be in order, and the whole expression must be a condition.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from txmq import limits
from txmq.broker.consume.sql92_tree import (
    JAVA_LONGS,
    Compare,
    Eval,
    InList,
    IsNull,
    Literal,
    Logic,
    Match,
    Negate,
    Node,
    Not,
    Property,
    Props,
    Truth,
    Value,
    compile_node,
    is_condition,
    is_number,
)
from txmq.errors import IllegalFilterExpressionError

KEYWORDS: Final = frozenset(
    {"NOT", "AND", "OR", "BETWEEN", "IN", "TRUE", "FALSE", "NULL", "IS"}
    | {"CONTAINS", "STARTSWITH", "ENDSWITH"}
)
_ORDERING: Final = (">", ">=", "<", "<=")
_MATCHES: Final = ("CONTAINS", "STARTSWITH", "ENDSWITH")

# --- Tokens. -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Token:
    kind: str  # "id", "kw", "str", "long", "double", "op", "end"
    text: str  # as written; a keyword upper-cased
    value: Value
    column: int  # 1-based


_SPACE: Final = re.compile(r"[ \t\n\r\f]+|--[^\n\r]*|/\*.*?\*/", re.S)
_DOUBLE: Final = re.compile(
    r"[0-9]+\.[0-9]*(?:[eE][+-]?[0-9]+)?|\.[0-9]+(?:[eE][+-]?[0-9]+)?|[0-9]+[eE][+-]?[0-9]+"
)
_LONG: Final = re.compile(r"0|[1-9][0-9]*[lL]?")
_IDENT: Final = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*")
_STRING: Final = re.compile(r"'(?:[^']|'')*'")
_OPS: Final = ("<>", "<=", ">=", "=", "<", ">", "(", ")", ",", "+", "-")


def _fail(tok: Token, why: str) -> IllegalFilterExpressionError:
    where = "at the end" if tok.kind == "end" else f"near {tok.text!r}"
    return IllegalFilterExpressionError(
        f"illegal SQL92 filter at column {tok.column} ({where}): {why}"
    )


def tokens(text: str) -> list[Token]:
    """The tokens of ``text``, ending with an "end" token. Bounded: each step consumes input."""
    out: list[Token] = []
    i, n = 0, len(text)
    while i < n:
        space = _SPACE.match(text, i)
        if space:
            i = space.end()
            continue
        tok = _token(text, i)
        out.append(tok)
        i += len(tok.text)
    out.append(Token("end", "", None, n + 1))
    return out


def _token(text: str, i: int) -> Token:
    col = i + 1
    c = text[i]
    if c == "'":
        m = _STRING.match(text, i)
        if m is None:
            raise _fail(Token("str", c, None, col), "the string is not closed with a quote")
        raw = m.group()
        return Token("str", raw, raw[1:-1].replace("''", "'"), col)
    if c.isascii() and (c.isdigit() or c == "."):
        return _number(text, i)
    m = _IDENT.match(text, i)
    if m:
        word = m.group()
        if word.upper() in KEYWORDS:
            return Token("kw", word.upper(), None, col)
        return Token("id", word, word, col)
    if text.startswith("/*", i):
        raise _fail(Token("op", "/*", None, col), "the comment is not closed with */")
    for op in _OPS:
        if text.startswith(op, i):
            return Token("op", op, None, col)
    raise _fail(Token("op", c, None, col), "unexpected character")


def _number(text: str, i: int) -> Token:
    """A long or double literal at ``i``: the longer of the two readings, as JavaCC picks."""
    col = i + 1
    d = _DOUBLE.match(text, i)
    whole = _LONG.match(text, i)
    if d and (whole is None or d.end() > whole.end()):
        raw = d.group()
        value = float(raw)
        if value == float("inf"):
            raise _fail(Token("double", raw, None, col), "the number is out of a double's range")
        return Token("double", raw, value, col)
    if whole is None:
        raise _fail(Token("op", text[i], None, col), "unexpected character")
    raw = whole.group()
    digits = raw.rstrip("lL")
    # A long has at most 19 digits; the length test first keeps int() off huge digit strings.
    if len(digits) > 19 or int(digits) not in JAVA_LONGS:
        raise _fail(Token("long", raw, None, col), "the number is out of a long's range")
    return Token("long", raw, int(digits), col)


# --- The parser. ---------------------------------------------------------------------------------


class _Parser:
    """Recursive descent over ``tokens``; nesting (parentheses, NOT, signs) is bounded by
    SQL_FILTER_DEPTH_MAX and the tree's size by SQL_FILTER_NODES_MAX."""

    def __init__(self, toks: list[Token]) -> None:
        self.toks = toks
        self.at = 0
        self.depth = 0
        self.nodes = 0

    def peek(self, ahead: int = 0) -> Token:
        return self.toks[min(self.at + ahead, len(self.toks) - 1)]

    def take(self) -> Token:
        tok = self.peek()
        self.at = min(self.at + 1, len(self.toks) - 1)
        return tok

    def accept(self, text: str) -> Token | None:
        tok = self.peek()
        if tok.kind in ("kw", "op") and tok.text == text:
            return self.take()
        return None

    def expect(self, text: str, why: str) -> Token:
        tok = self.accept(text)
        if tok is None:
            raise _fail(self.peek(), why)
        return tok

    def made(self, node: Node) -> Node:
        self.nodes += 1
        if self.nodes > limits.SQL_FILTER_NODES_MAX:
            raise _fail(self.peek(), f"more than {limits.SQL_FILTER_NODES_MAX} terms")
        return node

    def nest(self, tok: Token) -> None:
        self.depth += 1
        if self.depth > limits.SQL_FILTER_DEPTH_MAX:
            raise _fail(tok, f"nested deeper than {limits.SQL_FILTER_DEPTH_MAX}")

    # Levels, loosest first.

    def expression(self) -> Node:
        return self.logic("OR", self.conjunction)

    def conjunction(self) -> Node:
        return self.logic("AND", self.negation)

    def logic(self, op: str, operand: Callable[[], Node]) -> Node:
        first_tok = self.peek()
        parts = [operand()]
        toks = [first_tok]
        while True:
            tok = self.accept(op)
            if tok is None:
                break
            toks.append(self.peek())
            parts.append(operand())
        if len(parts) == 1:
            return parts[0]
        conditions = tuple(_condition(p, t) for p, t in zip(parts, toks, strict=True))
        return self.made(Logic(op, conditions))

    def negation(self) -> Node:
        tok = self.accept("NOT")
        if tok is None:
            return self.equality()
        self.nest(tok)
        operand_tok = self.peek()
        node = self.made(Not(_condition(self.negation(), operand_tok)))
        self.depth -= 1
        return node

    def equality(self) -> Node:
        left_tok = self.peek()
        left = self.comparison()
        depth, links = self.depth, 0
        while True:
            tok = self.peek()
            if tok.text in ("=", "<>") and tok.kind == "op":
                self.take()
                right_tok = self.peek()
                right = self.comparison()
                _check_equal(left, left_tok, right, right_tok)
                left = self.made(Compare(tok.text, left, right))
            elif self.accept("IS"):
                negated = self.accept("NOT") is not None
                self.expect("NULL", "expected NULL after IS" + (" NOT" if negated else ""))
                left = self.made(IsNull(left, negated))
            else:
                self.depth = depth
                return left
            links += 1
            if links > 1:
                self.nest(tok)  # a chain (a = b = c) nests its tree as parentheses do
            left_tok = tok

    def comparison(self) -> Node:
        left_tok = self.peek()
        left = self.unary()
        depth, links = self.depth, 0
        while True:
            tok = self.peek()
            negated = tok.kind == "kw" and tok.text == "NOT"
            after = self.peek(1) if negated else tok
            if tok.kind == "op" and tok.text in _ORDERING:
                self.take()
                right_tok = self.peek()
                right = self.unary()
                _check_ordered(left, left_tok)
                _check_ordered(right, right_tok)
                left = self.made(Compare(tok.text, left, right))
            elif after.kind == "kw" and after.text == "BETWEEN":
                left = self.between(left, left_tok, negated)
            elif after.kind == "kw" and after.text == "IN":
                left = self.in_list(left, left_tok, negated)
            elif after.kind == "kw" and after.text in _MATCHES:
                self.at += 2 if negated else 1
                search = self.peek()
                if search.kind != "str":
                    raise _fail(search, f"{after.text} takes a string in single quotes")
                self.take()
                left = self.made(Match(after.text, left, str(search.value), negated))
            else:
                self.depth = depth
                return left
            links += 1
            if links > 1:
                self.nest(tok)  # a chain (a CONTAINS 'x' CONTAINS 'y') nests as well
            left_tok = tok

    def between(self, value: Node, value_tok: Token, negated: bool) -> Node:
        self.at += 2 if negated else 1
        low_tok = self.peek()
        low = self.unary()
        self.expect("AND", "expected AND between BETWEEN's bounds")
        high_tok = self.peek()
        high = self.unary()
        for node, tok in ((low, low_tok), (high, high_tok)):
            if isinstance(node, Literal) and node.value is None:
                raise _fail(tok, "BETWEEN's bounds cannot be NULL")
        for node, tok in ((value, value_tok), (low, low_tok), (high, high_tok)):
            _check_ordered(node, tok)
        if (
            not negated
            and isinstance(low, Literal)
            and isinstance(high, Literal)
            and low.value > high.value  # type: ignore[operator]
        ):
            raise _fail(low_tok, f"BETWEEN's lower bound {low_tok.text} is above its upper bound")
        if negated:
            parts = (Compare("<", value, low), Compare(">", value, high))
            return self.made(Logic("OR", parts))
        return self.made(Logic("AND", (Compare(">=", value, low), Compare("<=", value, high))))

    def in_list(self, value: Node, value_tok: Token, negated: bool) -> Node:
        self.at += 2 if negated else 1
        if not isinstance(value, Property):
            raise _fail(value_tok, "IN applies to a property")
        self.expect("(", "expected ( after IN")
        items: list[str] = []
        while True:
            item = self.take()
            if item.kind != "str":
                raise _fail(item, "IN lists strings in single quotes")
            items.append(str(item.value))
            if self.accept(")"):
                break
            self.expect(",", "expected , or ) in the IN list")
        return self.made(InList(value, frozenset(items), negated))

    def unary(self) -> Node:
        tok = self.peek()
        if tok.kind != "op" or tok.text not in ("+", "-"):
            return self.primary()
        self.take()
        self.nest(tok)
        operand_tok = self.peek()
        operand = self.unary()
        self.depth -= 1
        if tok.text == "+":
            return operand
        if isinstance(operand, Literal) and is_number(operand.value):
            return self.made(Literal(-operand.value))  # type: ignore[operator]
        if isinstance(operand, (Property, Negate)):
            return self.made(Negate(operand))
        raise _fail(operand_tok, "'-' applies to numbers and properties")

    def primary(self) -> Node:
        tok = self.take()
        if tok.kind in ("str", "long", "double"):
            return self.made(Literal(tok.value))
        if tok.kind == "id":
            return self.made(Property(str(tok.value)))
        if tok.kind == "kw" and tok.text in ("TRUE", "FALSE", "NULL"):
            return self.made(Literal({"TRUE": True, "FALSE": False}.get(tok.text)))
        if tok.kind == "op" and tok.text == "(":
            self.nest(tok)
            node = self.expression()
            self.expect(")", "expected )")
            self.depth -= 1
            return node
        raise _fail(tok, "expected a value, a property or (")


def _condition(node: Node, tok: Token) -> Node:
    """``node`` where a condition is due: a bare property reads as one (``Truth``)."""
    if isinstance(node, Property):
        return Truth(node)
    if not is_condition(node):
        raise _fail(tok, "expected a condition, found a value")
    return node


def _check_ordered(node: Node, tok: Token) -> None:
    """RocketMQ's rule for ``<``, ``>``, ``<=``, ``>=`` and BETWEEN: numbers only."""
    if isinstance(node, Literal) and not is_number(node.value):
        raise _fail(tok, "only numbers can be compared with <, >, <=, >= or BETWEEN")
    if is_condition(node):
        raise _fail(tok, "a condition cannot be compared with <, >, <=, >= or BETWEEN")


def _check_equal(left: Node, left_tok: Token, right: Node, right_tok: Token) -> None:
    """RocketMQ's rule for ``=`` and ``<>``: never with NULL (that is IS NULL), never a
    boolean literal against another kind of literal."""
    for node, tok in ((left, left_tok), (right, right_tok)):
        if isinstance(node, Literal) and node.value is None:
            raise _fail(tok, "use IS NULL or IS NOT NULL to compare with NULL")
    if (
        isinstance(left, Literal)
        and isinstance(right, Literal)
        and isinstance(left.value, bool) != isinstance(right.value, bool)
    ):
        raise _fail(left_tok, "a boolean cannot be compared with a string or a number")


# --- The entry point. ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Selector:
    """A parsed filter: ``tree`` and its compiled evaluation."""

    text: str
    tree: Node
    _eval: Eval

    def evaluate(self, props: Props) -> bool | None:
        """TRUE, FALSE or unknown (None) for a message with these properties."""
        v = self._eval(props)
        return None if v is None else bool(v)

    def matches(self, props: Props) -> bool:
        """Whether a message with these properties is delivered: the expression is TRUE."""
        return self._eval(props) is True


def parse(text: str) -> Selector:
    """``text`` as a Selector; IllegalFilterExpressionError (naming the column and the token)
    for anything else, including text over SQL_FILTER_LENGTH_MAX characters."""
    if len(text) > limits.SQL_FILTER_LENGTH_MAX:
        raise IllegalFilterExpressionError(
            f"an SQL92 filter is at most {limits.SQL_FILTER_LENGTH_MAX} characters, got {len(text)}"
        )
    parser = _Parser(tokens(text))
    first = parser.peek()
    if first.kind == "end":
        raise IllegalFilterExpressionError("an SQL92 filter expression is empty")
    tree = _condition(parser.expression(), first)
    if parser.peek().kind != "end":
        raise _fail(parser.peek(), "expected AND, OR or the end of the expression")
    return Selector(text, tree, compile_node(tree))
