"""Receipt handle codec: round trip, and every kind of bad handle is INVALID_RECEIPT_HANDLE."""

from __future__ import annotations

import base64
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from txmq import errors, limits
from txmq.broker.consume import receipt
from txmq.broker.consume.receipt import Receipt, ReceiptCodec
from txmq.errors import InvalidReceiptHandleError

R = Receipt("group-é", "topic", 7, 123456789, 42)


def test_round_trip() -> None:
    codec = ReceiptCodec(b"s" * 32)
    text = codec.encode(R)
    assert codec.decode(text) == R
    assert text.isascii() and len(text) <= limits.RECEIPT_HANDLE_LENGTH_MAX
    long = Receipt("g" * 255, "t" * 127, 65535, 2**63, 2**63)
    assert codec.decode(codec.encode(long)) == long
    # The longest handle: both names at their bounds in 4-byte UTF-8 characters.
    widest = Receipt(
        "\U0001d11e" * limits.GROUP_NAME_LENGTH_MAX,
        "\U0001f600" * limits.TOPIC_NAME_LENGTH_MAX,
        65535,
        2**64 - 1,
        2**64 - 1,
    )
    longest = codec.encode(widest)
    assert len(longest) == 2090 and len(longest) <= limits.RECEIPT_HANDLE_LENGTH_MAX
    assert codec.decode(longest) == widest


def test_other_secret_forgery_and_garbage_are_refused(seed: int) -> None:
    codec = ReceiptCodec(b"s" * 32)
    text = codec.encode(R)
    bad = [
        "",
        "x" * (limits.RECEIPT_HANDLE_LENGTH_MAX + 1),
        "not base64 !!",
        "AAAA",
        ReceiptCodec(b"t" * 32).encode(R),  # another broker run
        text[:-2],
    ]
    rng = random.Random(seed)
    for _ in range(200):  # flip one character anywhere
        i = rng.randrange(len(text))
        c = rng.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
        if c != text[i]:
            bad.append(text[:i] + c + text[i + 1 :])
    for b in bad:
        with pytest.raises(InvalidReceiptHandleError) as info:
            codec.decode(b)
        assert info.value.code == errors.CODE_INVALID_RECEIPT_HANDLE


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=120))
def test_handle_text_is_unpadded_urlsafe_base64(blob: bytes) -> None:
    """The handle's text is what base64.urlsafe_b64encode gives, padding stripped, whatever
    shortcut encodes it."""
    assert receipt._b64(blob) == base64.urlsafe_b64encode(blob).decode().rstrip("=")


def test_standard_alphabet_and_non_ascii_are_refused() -> None:
    codec = ReceiptCodec(b"s" * 32)
    texts = (codec.encode(Receipt("g", "t", 0, 0, seq)) for seq in range(1000))
    text = next(t for t in texts if "-" in t and "_" in t)
    for i, c in enumerate(text):  # a handle with a '-' or '_' written as '+' or '/' instead
        std = {"-": "+", "_": "/"}.get(c)
        if std is not None:
            with pytest.raises(InvalidReceiptHandleError):
                codec.decode(text[:i] + std + text[i + 1 :])
    with pytest.raises(InvalidReceiptHandleError, match="not base64"):
        codec.decode(text[:-1] + "é")


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_only_the_exact_text_issued_decodes(data: st.DataObject) -> None:
    """Any other spelling of an issued handle's bytes is refused: padding, a character base64
    decoders skip (space, newline, '!'), the standard alphabet's '+' and '/', or a last
    character that differs only in bits the decoder drops."""
    codec = ReceiptCodec(b"s" * 32)
    r = Receipt(
        data.draw(st.text(min_size=1, max_size=20)), "topic", 7, 9, data.draw(st.integers(0, 2**40))
    )
    text = codec.encode(r)
    assert codec.decode(text) == r
    odd = data.draw(st.sampled_from(["=", "==", " ", "\n", "!", "+", "/", "A", "-", "_"]))
    at = data.draw(st.integers(0, len(text)))
    spelled = [text[:at] + odd + text[at:], text + "=" * (-len(text) % 4 or 4)]
    last = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    unused = {2: 4, 3: 2}.get(len(text) % 4, 0)  # bits of the last character no byte holds
    i = last.index(text[-1])
    spelled += [text[:-1] + last[i ^ bit] for bit in range(1, 1 << unused)]
    for other in spelled:
        with pytest.raises(InvalidReceiptHandleError):
            codec.decode(other)
