"""The MQv2-HMAC-SHA1 header parser, date window and signature, and the ACL text parser.

Goal: the broker accepts exactly what the official client sends (its own Signature code builds
the header here), refuses everything else with UnauthorizedError (ConfigError for ACL text), and
no input crashes the parsers with anything else (hypothesis, as h11's fuzz harness does).
"""

from __future__ import annotations

import contextlib
from datetime import UTC, datetime
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rocketmq.v5.util.signature import Signature

from txmq import limits
from txmq.errors import ConfigError, UnauthorizedError
from txmq.protocol import auth
from txmq.protocol.acl import parse_acl

SECRET = "s3cret-s3cret-s3cret"


def official_metadata(access_key: str, secret: str) -> dict[str, str]:
    config = SimpleNamespace(credentials=SimpleNamespace(ak=access_key, sk=secret), namespace="")
    return dict(Signature.metadata(config, "client-1"))


def test_official_header_parses_and_verifies() -> None:
    meta = official_metadata("orders-app", SECRET)
    header = auth.parse_authorization(meta["authorization"])
    assert header.access_key == "orders-app"
    assert header.signed_headers == ("x-mq-date-time",)
    date = meta["x-mq-date-time"]
    assert auth.signature_matches(header.signature, auth.sign(SECRET, date))
    assert not auth.signature_matches(header.signature, auth.sign(SECRET + "x", date))


SKEW_MS = limits.AUTH_DATE_SKEW_S_DEFAULT * 1000


def test_official_header_in_utc_is_inside_the_default_window() -> None:
    # 5.1.2 writes datetime.now() (local time) with a "Z": the suite runs in UTC (conftest).
    meta = official_metadata("orders-app", SECRET)
    date_ms = auth.parse_date_ms(meta["x-mq-date-time"])
    now_ms = int(datetime.now(tz=UTC).timestamp() * 1000)
    auth.check_date(date_ms, now_ms, SKEW_MS)


def test_a_local_time_as_utc_is_refused_by_default_and_says_why() -> None:
    now_ms = 1_800_000_000_000
    for zone_h in (-12, -5, 1, 5.5, 14):
        date_ms = now_ms + int(zone_h * 3600_000)
        with pytest.raises(UnauthorizedError, match="must run with TZ=UTC"):
            auth.check_date(date_ms, now_ms, SKEW_MS)
        # The widest skew admits every zone.
        auth.check_date(date_ms, now_ms, limits.AUTH_DATE_SKEW_S_MAX * 1000)


def test_dates_outside_the_window_are_refused() -> None:
    now_ms = 1_800_000_000_000
    auth.check_date(now_ms + SKEW_MS, now_ms, SKEW_MS)
    auth.check_date(now_ms - SKEW_MS, now_ms, SKEW_MS)
    for off in (SKEW_MS + 1000, -SKEW_MS - 1000, 20 * 60_000, -20 * 60_000):
        with pytest.raises(UnauthorizedError, match="away from the broker's clock") as info:
            auth.check_date(now_ms + off, now_ms, SKEW_MS)
        assert "900 s either side" in str(info.value) and "TZ=UTC" not in str(info.value)
    auth.check_date(now_ms + 20 * 60_000, now_ms, 30 * 60_000)  # a wider window
    with pytest.raises(UnauthorizedError):
        auth.check_date(now_ms + 15 * 3600_000, now_ms, limits.AUTH_DATE_SKEW_S_MAX * 1000)


def test_signed_metadata_round_trips() -> None:
    now_ms = 1_800_000_000_000
    meta = dict(auth.signed_metadata("cli", SECRET, now_ms))
    header = auth.parse_authorization(meta["authorization"])
    assert auth.parse_date_ms(meta["x-mq-date-time"]) == now_ms
    assert header.signature == auth.sign(SECRET, meta["x-mq-date-time"])


@pytest.mark.parametrize(
    ("header", "message"),
    [
        ("", "no authorization header"),
        ("Basic abc", "scheme"),
        (
            "MQv2-HMAC-SHA1 Credential=, SignedHeaders=x-mq-date-time, Signature=" + "a" * 40,
            "no access key",
        ),
        ("MQv2-HMAC-SHA1 Credential=a, SignedHeaders=x-mq-date-time, Signature=", "no signature"),
        ("MQv2-HMAC-SHA1 Credential=a, SignedHeaders=x-mq-date-time", "exactly"),
        ("MQv2-HMAC-SHA1 Credential=a, SignedHeaders=host, Signature=" + "a" * 40, "cover"),
        ("MQv2-HMAC-SHA1 Credential=a, SignedHeaders=x-mq-date-time, Signature=zz", "hex"),
        (
            "MQv2-HMAC-SHA1 Credential=a b, SignedHeaders=x-mq-date-time, Signature=" + "a" * 40,
            "malformed access key",
        ),
        ("MQv2-HMAC-SHA1 " + "x" * 2000, "longer than"),
    ],
)
def test_malformed_headers_are_refused(header: str, message: str) -> None:
    with pytest.raises(UnauthorizedError, match=message):
        auth.parse_authorization(header)


@pytest.mark.parametrize("date", ["", "2026-11-23T16:10:50Z", "20261323T161050Z", "20261123T1610"])
def test_malformed_dates_are_refused(date: str) -> None:
    with pytest.raises(UnauthorizedError):
        auth.parse_date_ms(date)


_HEADERISH = st.one_of(
    st.text(max_size=300),
    st.builds(
        lambda ak, sh, sig, sep: (
            f"MQv2-HMAC-SHA1 Credential={ak}{sep} SignedHeaders={sh}{sep} Signature={sig}"
        ),
        st.text(max_size=40),
        st.text(max_size=40),
        st.text(alphabet="0123456789abcdefABCDEFxyz=, ", max_size=60),
        st.sampled_from([",", ",,", "", "=", ";"]),
    ),
)


@settings(max_examples=300, deadline=None)
@given(header=_HEADERISH, date=st.text(max_size=30))
def test_fuzz_parsers_raise_only_unauthorized(header: str, date: str) -> None:
    # Any input: a parsed value or UnauthorizedError, never another exception.
    try:
        parsed = auth.parse_authorization(header)
    except UnauthorizedError:
        pass
    else:
        assert parsed.access_key and len(parsed.signature) == auth.SIGNATURE_HEX_LENGTH
    with contextlib.suppress(UnauthorizedError):
        auth.parse_date_ms(date)


@settings(max_examples=100, deadline=None)
@given(raw=st.binary(max_size=200))
def test_fuzz_parser_on_undecodable_bytes(raw: bytes) -> None:
    # gRPC hands binary-looking metadata as text decoded with replacement characters.
    text = raw.decode("utf-8", "replace")
    with pytest.raises(UnauthorizedError):
        auth.parse_authorization("MQv2-HMAC-SHA1 Credential=" + text + "\x00")


ACL = """
[[users]]
access_key = "orders-app"
secret_key = "0123456789abcdef"
publish = ["orders", "audit-*"]
subscribe = ["orders"]
groups = ["inventory"]

[[users]]
access_key = "ops"
secret_key = "fedcba9876543210"
admin = true
"""


def test_acl_parses_rights_and_patterns() -> None:
    acl = parse_acl(ACL, "acl.toml")
    user = acl.user("orders-app")
    assert user is not None and not user.admin
    assert user.publish.allows("orders") and user.publish.allows("audit-2026")
    assert not user.publish.allows("orders2") and not user.publish.allows("audit")
    assert user.subscribe.allows("orders") and not user.subscribe.allows("audit-x")
    assert user.groups.allows("inventory") and not user.groups.allows("billing")
    ops = acl.user("ops")
    assert ops is not None and ops.admin and not ops.publish.allows("orders")
    assert "0123" not in repr(user)
    assert acl.user("nobody") is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "[[users]]\naccess_key='a'\nsecret_key='0123456789abcdef'\npublsh=['x']\n",
            r"acl.toml: users\[0\].publsh: unknown key",
        ),
        (
            "[[users]]\naccess_key='a'\nsecret_key='0123456789abcdef'\npublish=['a b']\n",
            r"users\[0\].publish: malformed pattern 'a b'",
        ),
        (
            "[[users]]\naccess_key='a'\nsecret_key='0123456789abcdef'\ngroups=['x?']\n",
            "malformed pattern",
        ),
        ("[[users]]\naccess_key='a'\nsecret_key='short'\n", r"users\[0\].secret_key"),
        ("[[users]]\nsecret_key='0123456789abcdef'\n", r"users\[0\].access_key: required"),
        ("[[users]]\naccess_key='a'\nsecret_key='0123456789abcdef'\nadmin='yes'\n", "admin"),
        ("[roles]\nx=1\n", "roles: unknown key"),
        ("[[users]]\naccess_key='a'\nsecret_key='0123456789abcdef'\n" * 2, "appears twice"),
        ("users = [", "not valid TOML"),
    ],
)
def test_acl_refusals_name_file_and_key(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        parse_acl(text, "acl.toml")
    assert str(info.value).startswith("acl.toml")
    assert "0123456789abcdef" not in str(info.value)
    assert "\n" not in str(info.value).strip() or "not valid TOML" in message
