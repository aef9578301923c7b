"""The commit-log record's properties block: a str -> str mapping as compact JSON (ASCII,
``separators=(",", ":")``, docs/formats.md), encoded as cheaply as the standard library allows.
Pure: no I/O."""

from __future__ import annotations

import json
import json.scanner
from typing import Any, Final

# Made once: ``json.dumps`` with non-default separators builds a new JSONEncoder per call (~1.6 us
# of its ~3.6 us per record); the bytes are the same.
_ENCODER: Final = json.JSONEncoder(separators=(",", ":"))
# What ``JSONEncoder.encode`` builds per call (through ``iterencode(o, _one_shot=True)``), built
# once with _ENCODER's settings: two Python frames and a C encoder object less per record (issue
# 17). None where the C accelerator is missing. No circular-reference markers: a str -> str
# mapping holds no containers.
_C_MAKE_ENCODER: Any = getattr(json.encoder, "c_make_encoder", None)  # not in typeshed
_C_ENCODER: Final = (
    _C_MAKE_ENCODER(
        None,
        _ENCODER.default,
        json.encoder.encode_basestring_ascii,
        None,
        _ENCODER.key_separator,
        _ENCODER.item_separator,
        _ENCODER.sort_keys,
        _ENCODER.skipkeys,
        _ENCODER.allow_nan,
    )
    if _C_MAKE_ENCODER is not None
    else None
)


# A ``bytes.translate`` table that keeps the bytes the encoder writes as themselves inside a
# string (printable ASCII, and ``"``, which ``properties_json`` counts) and changes every other.
_PLAIN: Final = bytes(c if 0x20 <= c <= 0x7E and c != 0x5C else 0x20 for c in range(256))


# The C scanner ``json.loads`` ends in, made once: ``loads`` on bytes first guesses their
# encoding (``detect_encoding``) and goes through ``JSONDecoder.decode`` and ``raw_decode``, four
# Python frames per record read. None where the C accelerator is missing.
_C_MAKE_SCANNER: Any = getattr(json.scanner, "c_make_scanner", None)  # not in typeshed
_C_SCANNER: Final = _C_MAKE_SCANNER(json.JSONDecoder()) if _C_MAKE_SCANNER is not None else None


def properties_json(props: dict[str, str]) -> bytes:
    """``json.dumps(props, separators=(",", ":")).encode()``, byte for byte.

    Why by hand: the C encoder cost ~2.5k instructions a pair (a half's seven: 18k of ~0.81 M
    per transaction). When a join is exact: the encoder writes a ``str`` with nothing
    to escape (printable ASCII but ``"`` and ``\\``) as itself in quotes, so for a str -> str
    mapping whose keys and values are all such, its output is ``{"k":"v",...}`` joined. Checked
    on the joined bytes: the join's own ``"`` are 4 a pair, so one more is inside a key or
    value; ``_PLAIN`` changes every other byte the encoder would escape. Anything else (a key
    or value not a ``str``, or with something to escape) goes through the encoder.
    """
    pieces: list[str] = []
    unchecked: dict[Any, Any] = props  # not trusted to be str -> str: checked here
    for k, v in unchecked.items():
        if type(k) is not str or type(v) is not str:
            return _encoded(props)
        pieces.append('","')
        pieces.append(k)
        pieces.append('":"')
        pieces.append(v)
    if not pieces:
        return b"{}"
    quotes = len(pieces)  # the join's: 4 a pair
    pieces[0] = '{"'
    pieces.append('"}')
    text = "".join(pieces)
    # (A lone surrogate is encoded too, as bytes the table changes.)
    raw = text.encode("utf-8", "surrogatepass")
    if text.count('"') != quotes or raw.translate(_PLAIN) != raw:
        return _encoded(props)
    return raw


def _encoded(props: dict[str, str]) -> bytes:
    """``properties_json`` through the standard library's encoder."""
    if _C_ENCODER is None:
        return _ENCODER.encode(props).encode()
    return "".join(_C_ENCODER(props, 0)).encode()


def properties_value(raw: bytes | memoryview) -> Any:
    """``json.loads(raw)``, value for value and error for error: a block our encoder wrote
    (compact UTF-8 JSON) is scanned straight from its text; anything else, and every error,
    goes through ``json.loads`` itself.

    Raises:
        ValueError: what ``json.loads`` raises (JSONDecodeError, UnicodeDecodeError).
    """
    if _C_SCANNER is not None:
        try:
            text = str(raw, "utf-8")
            value, end = _C_SCANNER(text, 0)
            if end == len(text):
                return value
        except (StopIteration, ValueError):
            pass  # json.loads below raises the error it would have
    return json.loads(bytes(raw))
