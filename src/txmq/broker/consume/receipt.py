"""Receipt handles: the opaque text a consumer returns to ack or change a received message.

Owns: the codec. A handle names (group, topic, queue, queue offset, lease seq) and carries a
128-bit keyed BLAKE2s tag (BLAKE2's MAC mode) under a secret the broker draws at start, so a
forged, truncated or pre-restart handle decodes to InvalidReceiptHandleError. Whether a
well-formed handle is still current (its seq matches the live lease) is the delivery book's
decision, not this module's.
Must not: read the clock, touch files, or know about leases.
"""

from __future__ import annotations

import binascii
import hmac
import struct
from dataclasses import dataclass
from hashlib import blake2s
from typing import Final

from txmq import limits
from txmq.errors import InvalidReceiptHandleError, invariant

_VERSION = 1
_TAG_BYTES = 16
# version, queue id, queue offset, seq, group length, topic length; then the names.
_HEAD = struct.Struct(">BHQQHH")
# Group and topic names are bounded, so a handle is too; longer text is refused unread.
# (UTF-8 takes at most 4 bytes a character; base64 turns 3 bytes into 4 characters.)
_LONGEST_BYTES = (
    _HEAD.size + 4 * (limits.GROUP_NAME_LENGTH_MAX + limits.TOPIC_NAME_LENGTH_MAX) + _TAG_BYTES
)
assert -(-4 * _LONGEST_BYTES // 3) <= limits.RECEIPT_HANDLE_LENGTH_MAX
# URL-safe base64 without padding, straight through binascii: what base64.urlsafe_b64encode and
# urlsafe_b64decode do, without their four Python frames per handle.
_TO_URLSAFE = bytes.maketrans(b"+/", b"-_")
# A handle's text to the standard alphabet: '-' and '_' to '+' and '/'; '+', '/' and '=', never
# in a text we issue, to '!', which no base64 encoding contains, so such a text cannot equal
# its bytes' encoding (``decode``'s canonical check).
_FROM_URLSAFE = bytes.maketrans(b"-_+/=", b"+/!!!")


# The padding a text of each length mod 4 needs (1 cannot be base64: the decoder refuses it).
_PADDING: Final = (b"", b"===", b"==", b"=")


def _b64(blob: bytes) -> str:
    return binascii.b2a_base64(blob, newline=False).translate(_TO_URLSAFE).rstrip(b"=").decode()


@dataclass(frozen=True, slots=True)
class Receipt:
    group: str
    topic: str
    queue_id: int
    queue_offset: int
    seq: int


class ReceiptCodec:
    def __init__(self, secret: bytes) -> None:
        invariant(16 <= len(secret) <= 32, "the receipt secret must be 16 to 32 bytes")
        # BLAKE2s in its keyed (MAC) mode, keyed once; each tag copies the keyed state (the key
        # block already compressed). A tag is computed twice per delivered message (receive,
        # ack): ~4.8k instructions against ~16k for OpenSSL's HMAC-SHA256 by copying a keyed
        # HMAC. Handles do not outlive the run (a fresh secret
        # each start), so the tag's algorithm is this module's own choice.
        self._keyed = blake2s(key=secret, digest_size=_TAG_BYTES)

    def _tag(self, raw: bytes) -> bytes:
        h = self._keyed.copy()
        h.update(raw)
        return h.digest()

    def encode(self, r: Receipt) -> str:
        group, topic = r.group.encode(), r.topic.encode()
        invariant(len(group) < 1 << 16 and len(topic) < 1 << 16, "names too long for a handle")
        invariant(0 <= r.queue_id < 1 << 16, "queue id out of range")
        invariant(r.queue_offset >= 0 and r.seq >= 0, "negative offset or seq")
        raw = _HEAD.pack(_VERSION, r.queue_id, r.queue_offset, r.seq, len(group), len(topic))
        raw += group + topic
        return _b64(raw + self._tag(raw))

    def decode(self, text: str) -> Receipt:
        if not text or len(text) > limits.RECEIPT_HANDLE_LENGTH_MAX:
            raise InvalidReceiptHandleError("receipt handle is empty or too long")
        try:
            std = text.encode("ascii").translate(_FROM_URLSAFE)
            std += _PADDING[len(std) & 3]
            blob = binascii.a2b_base64(std)
        except (binascii.Error, ValueError) as exc:  # UnicodeEncodeError is a ValueError
            raise InvalidReceiptHandleError(f"receipt handle is not base64: {exc}") from exc
        # Only the exact text we issued is valid (not stray characters, which the decoder
        # skips, nor unused trailing bits): ``_b64(blob) == text``, compared in the standard
        # alphabet (no translate, rstrip or decode of the encoding: ~2k instructions).
        if binascii.b2a_base64(blob, newline=False) != std:
            raise InvalidReceiptHandleError("receipt handle is not in canonical form")
        raw, tag = blob[:-_TAG_BYTES], blob[-_TAG_BYTES:]
        if len(raw) < _HEAD.size or not hmac.compare_digest(tag, self._tag(raw)):
            # Also what a handle from before a broker restart looks like: the secret changed.
            raise InvalidReceiptHandleError("receipt handle was not issued by this broker run")
        version, qid, off, seq, glen, tlen = _HEAD.unpack_from(raw)
        names = raw[_HEAD.size :]
        invariant(version == _VERSION, "a handle we signed has an unknown version")
        invariant(len(names) == glen + tlen, "a handle we signed has bad name lengths")
        return Receipt(names[:glen].decode(), names[glen:].decode(), qid, off, seq)
