"""RocketMQ 5 request signatures (``MQv2-HMAC-SHA1``), pure: text and clocks in, values out.

Owns: parsing the ``authorization`` header and the ``x-mq-date-time`` header every official
RocketMQ 5 client sends with each RPC, checking the date against a clock handed in, computing and
comparing the signature in constant time, and building the same headers for txmq's own clients.
Must not: read a clock, a file or a socket (the broker does, in txmq/broker/security/auth.py), or
put a
secret into an error message.

Theory of operation. The header is

    authorization: MQv2-HMAC-SHA1 Credential=<access key>, SignedHeaders=x-mq-date-time,
                   Signature=<lower-case hex HMAC-SHA1(secret key, value of x-mq-date-time)>
    x-mq-date-time: 20261123T161050Z

The signature covers the date only, not the request: it proves the caller knew the secret at
some time close to that date, nothing more. So a captured header can be replayed with any
request until the date falls out of the accepted window; TLS is what keeps headers from being
captured (docs/security.md). The accepted window is the broker's clock (UTC) plus or minus a
skew the broker is configured with (15 minutes by default). rocketmq-client-nodejs sends UTC;
rocketmq-python-client 5.1.2 formats its *local* time with the "Z" suffix
(``datetime.now().strftime("%Y%m%dT%H%M%SZ")``), so outside UTC it is off by its zone's
offset: run it with ``TZ=UTC`` (txmq's own commands make it sign UTC, client/official_dates.py)
or widen the skew past that offset.

Every failure raises UnauthorizedError and nothing else, whatever the input (a hypothesis test
holds the parser to that, as h11's fuzz harness does).
"""

from __future__ import annotations

import binascii
import hashlib
import hmac
import re
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final

from txmq import limits
from txmq.errors import UnauthorizedError

SCHEME: Final = "MQv2-HMAC-SHA1"
HEADER_AUTHORIZATION: Final = "authorization"
HEADER_DATE: Final = "x-mq-date-time"
DATE_FORMAT: Final = "%Y%m%dT%H%M%SZ"
SIGNATURE_HEX_LENGTH: Final = 40  # SHA-1 is 20 bytes
# The nearest a time zone is to UTC but UTC itself (the farthest: limits.TIME_ZONE_OFFSET_MS_MAX).
ZONE_OFFSET_MS_MIN_NONZERO: Final = 3600 * 1000

# What an access key may contain: the official clients accept any string, but one that can hold
# ", " or "=" could not be parsed back out of the header.
ACCESS_KEY_PATTERN: Final = re.compile(
    "[A-Za-z0-9_.@:/+-]{1," + str(limits.ACCESS_KEY_LENGTH_MAX) + "}"
)
_DATE_PATTERN: Final = re.compile(r"[0-9]{8}T[0-9]{6}Z")
_HEX_PATTERN: Final = re.compile("[0-9a-fA-F]{" + str(SIGNATURE_HEX_LENGTH) + "}")


@dataclass(frozen=True, slots=True)
class Authorization:
    """A parsed ``authorization`` header (the signature not yet checked)."""

    access_key: str
    signed_headers: tuple[str, ...]
    # Lower-case hex, SIGNATURE_HEX_LENGTH digits.
    signature: str


def parse_authorization(header: str) -> Authorization:
    """Parse an ``authorization`` header value.

    Raises:
        UnauthorizedError: missing parts, another scheme, a malformed or oversized value.
    """
    if not isinstance(header, str) or not header:
        raise UnauthorizedError("no authorization header (credentials are required)")
    if len(header) > limits.AUTH_HEADER_LENGTH_MAX:
        raise UnauthorizedError(
            f"authorization header longer than {limits.AUTH_HEADER_LENGTH_MAX} characters"
        )
    scheme, _, rest = header.strip().partition(" ")
    if scheme != SCHEME:
        raise UnauthorizedError(f"authorization scheme must be {SCHEME}")
    fields: dict[str, str] = {}
    for part in rest.split(","):
        name, sep, value = part.strip().partition("=")
        if not sep or name in fields:
            raise UnauthorizedError("malformed authorization header")
        fields[name] = value.strip()
    if set(fields) != {"Credential", "SignedHeaders", "Signature"}:
        raise UnauthorizedError(
            "authorization header needs exactly Credential, SignedHeaders and Signature"
        )
    access_key = fields["Credential"]
    if not access_key:
        raise UnauthorizedError("no access key in the authorization header (empty credentials)")
    if ACCESS_KEY_PATTERN.fullmatch(access_key) is None:
        raise UnauthorizedError("malformed access key in the authorization header")
    signed = tuple(h.strip().lower() for h in fields["SignedHeaders"].split(";"))
    if HEADER_DATE not in signed:
        raise UnauthorizedError(f"the signature must cover {HEADER_DATE}")
    signature = fields["Signature"]
    if not signature:
        raise UnauthorizedError("no signature in the authorization header")
    if _HEX_PATTERN.fullmatch(signature) is None:
        raise UnauthorizedError(f"signature must be {SIGNATURE_HEX_LENGTH} hex digits")
    return Authorization(access_key, signed, signature.lower())


def parse_date_ms(text: str) -> int:
    """Milliseconds since the epoch of an ``x-mq-date-time`` value (read as UTC).

    Raises:
        UnauthorizedError: missing or not ``YYYYMMDDTHHMMSSZ``.
    """
    if not isinstance(text, str) or not text:
        raise UnauthorizedError(f"no {HEADER_DATE} header")
    if _DATE_PATTERN.fullmatch(text) is None:
        raise UnauthorizedError(f"{HEADER_DATE} must be YYYYMMDDTHHMMSSZ")
    try:  # by hand: strptime costs ~10x more, and this runs for every uncached signature
        moment = datetime(
            int(text[0:4]),
            int(text[4:6]),
            int(text[6:8]),
            int(text[9:11]),
            int(text[11:13]),
            int(text[13:15]),
            tzinfo=UTC,
        )
    except ValueError as exc:
        raise UnauthorizedError(f"{HEADER_DATE} is not a valid date") from exc
    return int(moment.timestamp()) * 1000


def check_date(date_ms: int, now_ms: int, skew_ms: int) -> None:
    """Accept a signed date within ``skew_ms`` of ``now_ms`` (UTC), either side.

    Raises:
        UnauthorizedError: the date is outside that window (a stale or replayed header, a
            client clock that is far off, or a client that sends its local time as UTC).
    """
    assert skew_ms > 0, "a window around the broker's clock"
    offset_ms = date_ms - now_ms
    if -skew_ms <= offset_ms <= skew_ms:
        return
    hint = ""
    zone_ms_max = limits.TIME_ZONE_OFFSET_MS_MAX
    if ZONE_OFFSET_MS_MIN_NONZERO - skew_ms <= abs(offset_ms) <= zone_ms_max + skew_ms:
        # About a time zone's offset: most likely a client that signs its local time as UTC.
        hint = (
            "; a client that sends local time as UTC (rocketmq-python-client 5.1.2 does) must "
            "run with TZ=UTC, or the broker's --auth-date-skew-s be wider than its zone's offset"
        )
    raise UnauthorizedError(
        f"{HEADER_DATE} is {offset_ms // 1000} s away from the broker's clock (UTC; accepted: "
        f"{skew_ms // 1000} s either side){hint}"
    )


def sign(secret_key: str, date: str) -> str:
    """The lower-case hex HMAC-SHA1 of ``date`` keyed with ``secret_key`` (UTF-8), as the
    official clients compute it."""
    mac = hmac.new(secret_key.encode("utf-8"), date.encode("utf-8"), hashlib.sha1)
    return binascii.hexlify(mac.digest()).decode("ascii")


def signature_matches(given: str, expected: str) -> bool:
    """Compare two hex signatures in constant time (``hmac.compare_digest``)."""
    assert len(expected) == SIGNATURE_HEX_LENGTH, "expected signature is a SHA-1 hex digest"
    return hmac.compare_digest(given.encode("ascii"), expected.encode("ascii"))


def format_date(now_ms: int) -> str:
    """``now_ms`` as an ``x-mq-date-time`` value, in UTC (not local time, unlike 5.1.2)."""
    assert now_ms >= 0, "a date after the epoch"
    return datetime.fromtimestamp(now_ms / 1000, tz=UTC).strftime(DATE_FORMAT)


def signed_metadata(access_key: str, secret_key: str, now_ms: int) -> list[tuple[str, str]]:
    """The headers a txmq client sends with each call: the official clients' signature."""
    assert ACCESS_KEY_PATTERN.fullmatch(access_key), "access key checked by the caller"
    date = format_date(now_ms)
    header = (
        f"{SCHEME} Credential={access_key}, SignedHeaders={HEADER_DATE}, "
        f"Signature={sign(secret_key, date)}"
    )
    return [
        (HEADER_DATE, date),
        ("x-mq-request-id", str(uuid.uuid4())),
        (HEADER_AUTHORIZATION, header),
    ]
