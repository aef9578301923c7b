"""The properties block's encoder: ``properties_json`` joins plain str -> str pairs by hand and
must give ``json.dumps(separators=(",", ":"))``'s bytes for every mapping, escapes, non-ASCII,
lone surrogates and values that are not strings included (the block is on-disk layout:
docs/formats.md)."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from txmq.format.properties import properties_json


def _json(props: dict[object, object]) -> bytes:
    return json.dumps(props, separators=(",", ":")).encode()


# Mostly the characters around the plain range's edges (controls, space, `"`, `\`, `~`, DEL,
# Latin-1), then any code point, lone surrogates included.
_EDGES = st.characters(min_codepoint=0, max_codepoint=0xA0)
_ANY = st.one_of(st.characters(), st.characters(categories=["Cs"]))
_TEXT = st.text(st.one_of(_EDGES, _EDGES, _EDGES, _ANY), max_size=10)
_PLAIN = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=10)


@settings(max_examples=600, deadline=None)
@given(
    st.one_of(
        st.dictionaries(_PLAIN, _PLAIN, max_size=8),
        st.dictionaries(st.one_of(_PLAIN, _TEXT), st.one_of(_PLAIN, _TEXT), max_size=8),
        st.dictionaries(_PLAIN, _PLAIN, min_size=1, max_size=8).flatmap(
            lambda d: st.tuples(st.just(d), st.sampled_from(sorted(d)), _TEXT).map(
                lambda t: {**t[0], t[1]: t[2]}  # one value of a plain mapping not plain
            )
        ),
    )
)
def test_properties_json_is_json_dumps_byte_for_byte(props: dict[str, str]) -> None:
    assert properties_json(props) == _json(dict(props))


class _Str(str):
    pass


def test_keys_or_values_that_are_not_plain_strings_are_encoded_as_json_encodes_them() -> None:
    cases: list[dict[object, object]] = [
        {},
        {"a": "b", "c": 'd"e'},
        {"a": "b\\"},
        {"a": "\x7f", "b": "~"},
        {"a": "\x1f"},
        {'"': ""},
        {"": ""},
        {"a": "\ud800"},
        {"a": "é", "b": "€", "c": "\U0001f600"},
        {"a": 1, "b": "c"},
        {1: "a"},
        {None: "a", True: "b", 2.5: "c"},
        {"a": None, "b": True, "c": 1.5},
        {"a": ["x", {"y": "z"}]},
        {_Str("k"): _Str("v")},
        {"a": 'x":"y'},
        {"a": "x", 'b","c': "d"},
    ]
    for props in cases:
        assert properties_json(props) == _json(props), props  # type: ignore[arg-type]
