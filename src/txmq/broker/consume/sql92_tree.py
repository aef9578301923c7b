"""The tree of a parsed SQL92 filter (consume/sql92.py parses it) and what it means: each node
compiled into a function of a message's properties.

Owns: the node classes, ``is_condition`` (RocketMQ's BooleanExpression: true/false/unknown
rather than a value) and ``compile_node``. The semantics are those of RocketMQ's filter module
(ActiveMQ's JMS selectors) with three-valued logic:
- a property is a string, or null when the message does not have it;
- a comparison with a null side is unknown (null), as is one whose string side does not read as
  a number where a number is compared (``[+-]digits`` as a long, else Java's decimal double
  syntax; NaN is not a number); two strings compare with ``=``/``<>`` as strings and with
  ``<``/``>`` as numbers;
- NOT unknown is unknown, FALSE AND unknown is FALSE, TRUE OR unknown is TRUE;
- a string compared with TRUE/FALSE is true when it is ``true`` in any case (Java's
  Boolean.valueOf); a bare property used as a condition reads the same way;
- CONTAINS/STARTSWITH/ENDSWITH are FALSE (never unknown) for a null or non-string value or an
  empty search string, negated or not, as in RocketMQ.
Must not: raise while evaluating (a message that cannot be compared is not delivered; it does
not fail the receive), or do I/O.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final, TypeAlias

Value: TypeAlias = str | int | float | bool | None
Props: TypeAlias = Mapping[str, str]
Eval: TypeAlias = Callable[[Props], Value]
# The values of a Java long, what RocketMQ reads a long literal into.
JAVA_LONGS: Final = range(-(1 << 63), 1 << 63)

# --- The tree. -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Literal:
    value: Value


@dataclass(frozen=True, slots=True)
class Property:
    name: str


@dataclass(frozen=True, slots=True)
class Negate:
    operand: Node


@dataclass(frozen=True, slots=True)
class Not:
    operand: Node


@dataclass(frozen=True, slots=True)
class Logic:
    op: str  # "AND" | "OR"
    operands: tuple[Node, ...]


@dataclass(frozen=True, slots=True)
class Compare:
    op: str  # "=", "<>", ">", ">=", "<", "<="
    left: Node
    right: Node


@dataclass(frozen=True, slots=True)
class IsNull:
    operand: Node
    negated: bool


@dataclass(frozen=True, slots=True)
class InList:
    prop: Property
    values: frozenset[str]
    negated: bool


@dataclass(frozen=True, slots=True)
class Match:
    op: str  # "CONTAINS" | "STARTSWITH" | "ENDSWITH"
    operand: Node
    search: str
    negated: bool


@dataclass(frozen=True, slots=True)
class Truth:
    """A bare property used as a condition."""

    prop: Property


Node: TypeAlias = (
    Literal | Property | Negate | Not | Logic | Compare | IsNull | InList | Match | Truth
)
_CONDITIONS: Final = (Not, Logic, Compare, IsNull, InList, Match, Truth)


def is_condition(node: Node) -> bool:
    """Whether ``node`` is true/false/unknown (RocketMQ's BooleanExpression), not a value."""
    return isinstance(node, _CONDITIONS) or (
        isinstance(node, Literal) and (node.value is None or isinstance(node.value, bool))
    )


# --- Evaluation. ---------------------------------------------------------------------------------

# A property as a number: Java's Long.valueOf syntax, else its decimal Double.valueOf syntax
# (surrounding whitespace and a d/f suffix allowed; NaN is not a number to compare).
_AS_LONG: Final = re.compile(r"[+-]?[0-9]+")
_AS_DOUBLE: Final = re.compile(
    r"[+-]?(?:(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|Infinity)"
)
# What Java's String.trim() removes: every character up to the space.
_JAVA_SPACE: Final = "".join(chr(c) for c in range(33))


def is_number(v: Value) -> bool:
    return type(v) is int or type(v) is float


def _as_number(v: Value) -> int | float | None:
    if type(v) is int or type(v) is float:
        return v
    if type(v) is not str:
        return None
    # A long has at most 19 digits and a sign; the length test keeps int() off huge strings.
    if len(v) <= 20 and _AS_LONG.fullmatch(v):
        n = int(v)
        if n in JAVA_LONGS:
            return n
    text = v.strip(_JAVA_SPACE)
    if text[-1:] in ("d", "D", "f", "F"):
        text = text[:-1]
    if _AS_DOUBLE.fullmatch(text):
        return float(text.replace("Infinity", "inf"))
    return None


def _equal(a: Value, b: Value) -> bool | None:
    if a is None or b is None:
        return None
    if type(a) is type(b):
        return a == b
    if type(a) is bool or type(b) is bool:
        flag, other = (a, b) if type(a) is bool else (b, a)
        if type(other) is str:
            return (other.lower() == "true") == flag
        return False  # RocketMQ: a boolean and a number are never equal
    na, nb = _as_number(a), _as_number(b)
    if na is None or nb is None:
        return None
    return na == nb


def _order(a: Value, b: Value) -> int | None:
    na, nb = _as_number(a), _as_number(b)
    if na is None or nb is None:
        return None
    return (na > nb) - (na < nb)


_ORDER_TESTS: Final[dict[str, Callable[[int], bool]]] = {
    ">": lambda c: c > 0,
    ">=": lambda c: c >= 0,
    "<": lambda c: c < 0,
    "<=": lambda c: c <= 0,
}


def compile_node(node: Node) -> Eval:
    """``node`` as a function of a message's properties (closures: no dispatch per message)."""
    if isinstance(node, Literal):
        value = node.value
        return lambda p: value
    if isinstance(node, Property):
        name = node.name
        return lambda p: p.get(name)
    if isinstance(node, Truth):
        name = node.prop.name

        def truth(p: Props) -> Value:
            v = p.get(name)
            return None if v is None else v.lower() == "true"

        return truth
    if isinstance(node, Negate):
        inner = compile_node(node.operand)

        def negate(p: Props) -> Value:
            n = _as_number(inner(p))
            return None if n is None else -n

        return negate
    if isinstance(node, Not):
        inner = compile_node(node.operand)

        def not_(p: Props) -> Value:
            v = inner(p)
            return None if v is None else not v

        return not_
    if isinstance(node, Logic):
        return _compile_logic(node)
    return _compile_test(node)


def _compile_logic(node: Logic) -> Eval:
    parts = tuple(compile_node(n) for n in node.operands)
    decisive = node.op == "OR"  # the value that decides at once: TRUE for OR, FALSE for AND

    def logic(p: Props) -> Value:
        unknown = False
        for part in parts:
            v = part(p)
            if v is None:
                unknown = True
            elif v is decisive:
                return decisive
        return None if unknown else not decisive

    return logic


def _compile_test(node: Node) -> Eval:
    if isinstance(node, Compare):
        left, right = compile_node(node.left), compile_node(node.right)
        if node.op in ("=", "<>"):
            differs = node.op == "<>"

            def equal(p: Props) -> Value:
                v = _equal(left(p), right(p))
                return None if v is None else v != differs

            return equal
        test = _ORDER_TESTS[node.op]

        def order(p: Props) -> Value:
            c = _order(left(p), right(p))
            return None if c is None else test(c)

        return order
    if isinstance(node, IsNull):
        inner, negated = compile_node(node.operand), node.negated
        return lambda p: (inner(p) is None) != negated
    if isinstance(node, InList):
        name, values, negated = node.prop.name, node.values, node.negated

        def in_list(p: Props) -> Value:
            v = p.get(name)
            return None if v is None else (v in values) != negated

        return in_list
    if isinstance(node, Match):
        return _compile_match(node)
    raise AssertionError(f"no evaluation for {type(node).__name__}")


_STRING_TESTS: Final[dict[str, Callable[[str, str], bool]]] = {
    "CONTAINS": str.__contains__,
    "STARTSWITH": str.startswith,
    "ENDSWITH": str.endswith,
}


def _compile_match(node: Match) -> Eval:
    inner, search, negated = compile_node(node.operand), node.search, node.negated
    if not search:
        return lambda p: False
    hit = _STRING_TESTS[node.op]

    def match(p: Props) -> Value:
        v = inner(p)
        return type(v) is str and hit(v, search) != negated

    return match
