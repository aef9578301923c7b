"""The dashboard in front of a broker with ACL, tried as an attacker would, over plain HTTP.

Goal: a visitor who has not signed in with an admin's keys sees nothing and changes nothing;
sign-in checks the keys with the broker, is limited per address and carries a token; a
confirmation token works once, in its own session, for its own action; a POST from another
site, a foreign Host, and a link's banner text get nowhere; every response carries the
hardening headers.
Method: a real broker with an ACL file (an admin, a non-admin reader), the official client to
store a message, ``txmq dashboard`` as a subprocess started with the admin's keys (as the README
shows), and ``http.client`` visitors (tests/dashboard/visitor.py).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from rocketmq import ClientConfiguration, Producer
from rocketmq import Credentials as OfficialCredentials

from tests.dashboard.visitor import Reply, Visitor
from tests.integration import clients
from tests.integration.conftest import FAST, BrokerProcess
from txmq.client.admin import call
from txmq.dashboard.background import dashboard_process
from txmq.dashboard.guard import CSP
from txmq.dashboard.link import Credentials
from txmq.limits import DASHBOARD_SIGN_IN_ATTEMPTS_MAX as SIGN_IN_ATTEMPTS_MAX

OPS = Credentials("ops", "ops-secret-0123456789abcdef")
READER = Credentials("reader", "reader-secret-0123456789")
ACL = f"""
[[users]]
access_key = "{OPS.access_key}"
secret_key = "{OPS.secret_key}"
admin = true
publish = ["*"]

[[users]]
access_key = "{READER.access_key}"
secret_key = "{READER.secret_key}"
subscribe = ["*"]
groups = ["*"]
"""
SECRET_BODY = b"card 4111-1111-1111-1111"
OWN_KEYS = ("--access-key", OPS.access_key, "--secret-key", OPS.secret_key)
GUARDED = ["/", "/topics", "/groups", "/groups/g", "/transactions", "/messages?key=pay-1"]


@pytest.fixture(scope="module")
def acl_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    work = tmp_path_factory.mktemp("acl")
    acl = work / "acl.toml"
    acl.write_text(ACL)
    acl.chmod(0o600)
    broker = BrokerProcess(work / "broker", [*FAST, "--acl-file", str(acl)])
    broker.start()
    try:
        call(broker.endpoints, "TopicCreate", {"name": "payments", "queues": 1}, credentials=OPS)
        config = ClientConfiguration(
            broker.endpoints, OfficialCredentials(OPS.access_key, OPS.secret_key)
        )
        producer = Producer(config, ("payments",))
        producer.startup()
        try:
            producer.send(clients.message("payments", SECRET_BODY, keys="pay-1"))
        finally:
            producer.shutdown()
        yield broker
    finally:
        broker.stop()


@pytest.fixture
def dash(acl_broker: BrokerProcess, tmp_path: Path) -> Iterator[str]:
    """A dashboard with the admin's own keys, as the README runs it."""
    log = tmp_path / "dashboard.log"
    with dashboard_process(acl_broker.endpoints, log=log, extra_args=OWN_KEYS) as url:
        yield url


def signed_in(url: str, creds: Credentials = OPS) -> Visitor:
    v = Visitor(url)
    r = v.sign_in(creds)
    assert r.status == 303 and r.location == "/?done=signed-in", (r.status, r.text)
    return v


def topics(ep: str) -> list[str]:
    return [t["name"] for t in call(ep, "TopicList", {}, credentials=OPS)["topics"]]


def test_an_anonymous_visitor_sees_and_changes_nothing(
    acl_broker: BrokerProcess, dash: str
) -> None:
    anonymous = Visitor(dash)
    for path in GUARDED:
        r = anonymous.get(path)
        assert r.status == 303 and r.location == "/login?error=sign-in-needed", (path, r.status)
        assert "payments" not in r.text and "4111" not in r.text
    r = anonymous.post("/topics/delete", {"name": "payments"})
    assert r.status == 303 and r.location.startswith("/login")
    assert "payments" in topics(acl_broker.endpoints)
    page = anonymous.get("/login?error=sign-in-needed")
    assert page.status == 200
    assert "sign in with an admin's keys to see it" in page.text
    assert "payments" not in page.text and "open-broker" not in page.text
    assert acl_broker.endpoints not in page.text  # not even where the broker is
    # The same visitor signed in reads what its keys may read.
    admin = signed_in(dash)
    assert "payments" in admin.get("/topics").text
    found = admin.get("/messages?key=pay-1")
    assert found.status == 200 and SECRET_BODY.decode() in found.text


def test_sign_in_checks_the_keys_with_the_broker(dash: str) -> None:
    v = Visitor(dash)
    wrong = v.sign_in(Credentials(OPS.access_key, "not-the-secret-0123456789"))
    assert wrong.status == 401
    assert "The broker refused these keys: unknown access key or wrong secret." in wrong.text
    assert v.get("/topics").status == 303  # no session came of it
    assert v.sign_in(Credentials("nobody", "whatever-secret-012345")).status == 401
    reader = v.sign_in(READER)
    assert reader.status == 403
    assert "The broker knows access key 'reader', but it is not an admin" in reader.text
    # Login CSRF: the form's token is needed, and only this session's.
    page = v.get("/login")
    keys = {"access_key": OPS.access_key, "secret_key": OPS.secret_key}
    assert v.post("/login", keys).status == 400
    other = Visitor(dash)
    foreign = other.get("/login").token("sign-in")
    r = v.post("/login", {"token": foreign, **keys})
    assert r.status == 400 and "sign-in form expired or was not this browser's" in r.text
    before = v.cookie
    r = v.post("/login", {"token": page.token("sign-in"), **keys})
    assert r.status == 303 and r.location == "/?done=signed-in"
    assert v.cookie and v.cookie != before  # a new session id: a planted cookie is worthless
    home = v.get(r.location)
    assert home.status == 200 and "Signed in." in home.text
    assert 'signed in as <span id="who">ops</span>' in home.body
    # Sign-out carries the session's form key: a forged one signs nobody out.
    for forged in ("x", "é" * 43):
        assert v.post("/logout", {"token": forged}).location == "/?error=sign-out-invalid"
    assert v.get("/topics").status == 200
    key = home.token("sign-out")
    assert v.post("/logout", {"token": key}).location == "/login?done=signed-out"
    assert v.get("/topics").status == 303


def confirmation(v: Visitor, name: str) -> str:
    step_one = v.post("/topics/delete", {"name": name})
    assert step_one.status == 200 and f"Delete topic {name}?" in step_one.text
    return step_one.token("confirm")


def test_a_confirmation_token_works_once_in_its_session(
    acl_broker: BrokerProcess, dash: str
) -> None:
    ep = acl_broker.endpoints
    call(ep, "TopicCreate", {"name": "victim", "queues": 1}, credentials=OPS)
    alice, mallory = signed_in(dash), signed_in(dash)
    token = confirmation(alice, "victim")
    # Another session (even an admin's) cannot spend it, nor an anonymous visitor.
    r = mallory.post("/topics/delete", {"name": "victim", "token": token})
    assert r.location == "/topics?error=confirm-invalid"
    r = Visitor(dash).post("/topics/delete", {"name": "victim", "token": token})
    assert r.location.startswith("/login")
    assert "victim" in topics(ep)
    # Bound to its target: a token for "victim" deletes nothing else.
    call(ep, "TopicCreate", {"name": "bystander", "queues": 1}, credentials=OPS)
    r = alice.post("/topics/delete", {"name": "bystander", "token": confirmation(alice, "victim")})
    assert r.location == "/topics?error=confirm-invalid"
    assert "bystander" in topics(ep)
    token = confirmation(alice, "victim")
    r = alice.post("/topics/delete", {"name": "victim", "token": token})
    assert r.location == "/topics?done=topic-deleted"
    assert "victim" not in topics(ep)
    assert "The topic was deleted" in alice.get(r.location).text
    # Once: replayed after the topic is made again, it deletes nothing.
    call(ep, "TopicCreate", {"name": "victim", "queues": 1}, credentials=OPS)
    r = alice.post("/topics/delete", {"name": "victim", "token": token})
    assert r.location == "/topics?error=confirm-invalid"
    assert "victim" in topics(ep)


def test_posts_from_another_site_are_refused(acl_broker: BrokerProcess, dash: str) -> None:
    ep = acl_broker.endpoints
    call(ep, "TopicCreate", {"name": "target", "queues": 1}, credentials=OPS)
    alice = signed_in(dash)
    token = confirmation(alice, "target")
    form = {"name": "target", "token": token}
    for headers in (
        {"Origin": "http://attacker.example"},
        {"Origin": "null"},
        {"Origin": f"http://127.0.0.1:{alice.port + 1}"},
        {"Referer": "http://attacker.example/page"},
        {},  # neither Origin nor Referer
    ):
        r = alice.post("/topics/delete", form, headers=headers, origin=False)
        assert r.status == 403 and "another site" in r.text, headers
    assert "target" in topics(ep)
    cross_login = Visitor(dash)
    page = cross_login.get("/login")
    keys = {
        "token": page.token("sign-in"),
        "access_key": OPS.access_key,
        "secret_key": OPS.secret_key,
    }
    assert cross_login.post("/login", keys, headers={"Origin": "http://x.example"}).status == 403
    # The refused POSTs never reached the token: from the dashboard's own page it still works,
    # and a same-origin Referer stands in for a missing Origin.
    r = alice.post("/topics/delete", form, origin=False, headers={"Referer": alice.origin + "/"})
    assert r.location == "/topics?done=topic-deleted"
    assert "target" not in topics(ep)


def test_sign_in_attempts_are_limited_per_address(dash: str) -> None:
    alice = signed_in(dash)  # attempt 1
    flood = Visitor(dash)
    bad = Credentials(OPS.access_key, "guess-0123456789abcdef")
    for _ in range(SIGN_IN_ATTEMPTS_MAX - 1):
        assert flood.sign_in(bad).status == 401
    limited = flood.sign_in(OPS)  # even the right keys, once over the limit
    assert limited.status == 429 and "Too many sign-in attempts" in limited.text
    assert 1 <= int(limited.headers["retry-after"]) <= 60
    assert flood.get("/topics").status == 303
    assert alice.get("/topics").status == 200  # the live session is untouched


def test_only_known_host_names_are_answered(acl_broker: BrokerProcess, tmp_path: Path) -> None:
    args = ("--allowed-host", "dash.example", "--allowed-host", "proxy.example:8443")
    with dashboard_process(acl_broker.endpoints, log=tmp_path / "d.log", extra_args=args) as url:
        v = Visitor(url)
        port = v.port
        answered = [f"127.0.0.1:{port}", f"localhost:{port}", "dash.example", "proxy.example:8443"]
        for host in answered:
            assert v.get("/login", headers={"Host": host}).status == 200, host
        refused = ["attacker.example", f"attacker.example:{port}", f"127.0.0.1:{port + 1}"]
        for host in [*refused, "proxy.example", "127.0.0.1"]:
            r = v.get("/login", headers={"Host": host})
            assert r.status == 421 and "--allowed-host" in r.text, host
            assert r.headers["x-frame-options"] == "DENY"


INLINE = re.compile(r"<script(?![^>]*\ssrc=)|\son[a-z]+\s*=|\sstyle\s*=|<style", re.IGNORECASE)


def test_every_response_carries_the_hardening_headers(dash: str) -> None:
    anonymous, admin = Visitor(dash), signed_in(dash)
    replies: list[Reply] = [
        anonymous.get("/login"),
        anonymous.get("/"),
        anonymous.get("/static/style.css"),
        anonymous.get("/static/dashboard.js"),
        anonymous.get("/no-such-page"),
        anonymous.get("/login", headers={"Host": "elsewhere.example"}),
        anonymous.post("/topics/delete", {"name": "x"}, origin=False),
        admin.get("/"),
        admin.get("/topics"),
        admin.get("/messages?key=pay-1"),
        admin.get("/groups/nope"),
    ]
    statuses = sorted({r.status for r in replies})
    assert statuses == [200, 303, 403, 404, 421], statuses
    for r in replies:
        assert r.headers["content-security-policy"] == CSP
        assert "frame-ancestors 'none'" in CSP and "script-src 'self'" in CSP
        assert r.headers["x-frame-options"] == "DENY"
        assert r.headers["x-content-type-options"] == "nosniff"
        assert r.headers["referrer-policy"] == "same-origin"
        if r.headers.get_content_type() == "text/html":
            assert INLINE.search(r.body) is None, r.body  # nothing the CSP would block
            assert r.headers["cache-control"] == "no-store"


def test_banners_come_from_codes_never_from_the_link(dash: str) -> None:
    v = Visitor(dash)
    for param in ("error", "done"):
        r = v.get(f"/login?{param}=Your+session+expired%2C+call+%2B1-555-0100")
        assert r.status == 200 and "555-0100" not in r.text
        assert 'role="alert"' not in r.body and 'role="status"' not in r.body
    assert "Signed out." in v.get("/login?done=signed-out").text
    assert "sign in with an admin's keys to see it" in v.get("/login?error=sign-in-needed").text
