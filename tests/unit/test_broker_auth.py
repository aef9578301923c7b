"""The broker's Guard: authentication with its cache of verified headers, client-id binding,
the ACL file checks and reload. Real files, the official client's own header code, an injected
clock; no server (the wire is tests/integration/test_security.py)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from rocketmq.v5.util.signature import Signature

from txmq import limits
from txmq.broker.security.auth import Guard, read_acl_file
from txmq.errors import ConfigError, UnauthorizedError
from txmq.protocol import auth
from txmq.protocol.acl import parse_acl

ACL = """
[[users]]
access_key = "a"
secret_key = "secret-of-a-0123456789"
publish = ["t"]

[[users]]
access_key = "b"
secret_key = "secret-of-b-0123456789"

[[users]]
access_key = "ops"
secret_key = "secret-of-ops-0123456789"
admin = true
"""


def meta(key: str, secret: str, client: str = "c1") -> list[tuple[str, str]]:
    cfg = SimpleNamespace(credentials=SimpleNamespace(ak=key, sk=secret), namespace="")
    return list(Signature.metadata(cfg, client))


def now_of(m: list[tuple[str, str]]) -> int:
    return auth.parse_date_ms(dict(m)["x-mq-date-time"])


@pytest.fixture
def guard(tmp_path: Path) -> Guard:
    path = tmp_path / "acl.toml"
    path.write_text(ACL)
    path.chmod(0o600)
    return Guard(read_acl_file(path), source=path, transaction_topic=lambda t: None)


def test_a_cached_header_never_admits_another_signature(guard: Guard) -> None:
    good = meta("a", "secret-of-a-0123456789")
    now = now_of(good)
    assert guard.authenticate(good, now).access_key == "a"
    assert guard.authenticate(good, now).access_key == "a"  # cached
    # Same access key and date, another signature: the cache is keyed by the whole header.
    forged = [
        (k, v[:-1] + ("0" if v[-1] != "0" else "1")) if k == "authorization" else (k, v)
        for k, v in good
    ]
    with pytest.raises(UnauthorizedError, match="wrong signature for access key 'a'"):
        guard.authenticate(forged, now)
    # A cached header ages out of the window like any other.
    late = now + limits.AUTH_DATE_SKEW_S_DEFAULT * 1000 + 1000
    with pytest.raises(UnauthorizedError, match="away from the broker's clock"):
        guard.authenticate(good, late)


def test_new_rules_forget_cached_headers(guard: Guard) -> None:
    good = meta("a", "secret-of-a-0123456789")
    guard.authenticate(good, now_of(good))
    guard.replace(parse_acl(ACL.replace("secret-of-a", "rotated-a-x"), "acl"))
    with pytest.raises(UnauthorizedError, match="wrong signature"):
        guard.authenticate(good, now_of(good))


def test_a_client_id_stays_with_its_first_access_key(guard: Guard) -> None:
    first = meta("a", "secret-of-a-0123456789", client="producer-1")
    guard.authenticate(first, now_of(first))
    other = meta("b", "secret-of-b-0123456789", client="producer-1")
    with pytest.raises(UnauthorizedError, match="client id 'producer-1' is in use"):
        guard.authenticate(other, now_of(other))
    mine = meta("b", "secret-of-b-0123456789", client="producer-2")
    assert guard.authenticate(mine, now_of(mine)).access_key == "b"
    # New rules that still have "a": its client id stays its own (anyone could take a live
    # producer's id right after a reload otherwise); rules without "a" free it.
    guard.replace(guard.acl)
    with pytest.raises(UnauthorizedError, match="client id 'producer-1' is in use"):
        guard.authenticate(other, now_of(other))
    guard.replace(parse_acl(ACL.replace('access_key = "a"', 'access_key = "a2"'), "acl"))
    assert guard.authenticate(other, now_of(other)).access_key == "b"


def test_acl_file_permissions_and_reload(guard: Guard, tmp_path: Path) -> None:
    path = guard.source
    path.chmod(0o640)
    with pytest.raises(ConfigError, match=r"mode 0640 lets group or others read"):
        read_acl_file(path)
    assert guard.reload_read() is None  # refused: the caller keeps the old rules
    path.chmod(0o600)
    path.write_text(ACL.replace('publish = ["t"]', 'publish = ["t", "u-*"]'))
    acl = guard.reload_read()
    assert acl is not None
    user = acl.user("a")
    assert user is not None and user.publish.allows("u-1")
    with pytest.raises(ConfigError, match="cannot read ACL file"):
        read_acl_file(tmp_path / "missing.toml")


@pytest.mark.parametrize(
    "text",
    ["", "# every user removed\n", ACL.replace("admin = true", "admin = false")],
    ids=["empty", "comment-only", "no-admin"],
)
def test_rules_without_an_admin_are_refused_at_reload_as_at_start(
    guard: Guard, text: str, caplog: pytest.LogCaptureFixture
) -> None:
    guard.source.write_text(text)
    with pytest.raises(ConfigError, match=r"acl.toml: no user has admin = true"):
        read_acl_file(guard.source)
    caplog.set_level("INFO", logger="txmq.broker")
    assert guard.reload_read() is None  # the caller keeps the old rules
    (line,) = [r for r in caplog.records if r.name == "txmq.broker"]
    assert line.levelname == "ERROR" and "ACL reload refused" in line.getMessage()


def test_refusal_lines_are_bounded_per_second(
    guard: Guard, caplog: pytest.LogCaptureFixture
) -> None:
    from txmq.broker.security.interceptor import AuthInterceptor
    from txmq.errors import ForbiddenError

    now = [1_000_000]
    edge = AuthInterceptor(guard, lambda: now[0])
    caplog.set_level("WARNING", logger="txmq.broker")
    burst = limits.REFUSAL_LOG_LINES_PER_SECOND_MAX + 5
    for _ in range(burst):
        edge._log_refusal("/m", "peer", ForbiddenError("no"))
    assert len(caplog.records) == limits.REFUSAL_LOG_LINES_PER_SECOND_MAX
    now[0] += 1000
    edge._log_refusal("/m", "peer", ForbiddenError("no"))
    assert caplog.records[-1].getMessage().endswith("(5 more refusals not logged)")
