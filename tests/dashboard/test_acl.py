"""The dashboard against a broker with ACL, in a browser: a visitor who has not signed in is
sent to the sign-in page and sees nothing; wrong keys are refused there; an admin who signs in
reads and changes through the confirmation, and signs out. A dashboard without keys of its own
shows the signed-in admin the broker up but its charts refused.

Method: a broker with ``--acl-file`` (one admin user), ``txmq dashboard --access-key
--secret-key`` and a second dashboard without keys, Debian's Chromium via Playwright. The
HTTP-level attacks (tokens, origins, hosts, limits) are in test_security.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.dashboard.conftest import artifacts_dir
from tests.dashboard.test_browser import reload_until
from tests.integration.conftest import FAST, BrokerProcess
from txmq.client.admin import call
from txmq.dashboard.background import dashboard_process
from txmq.dashboard.link import Credentials

OPS = Credentials("ops", "ops-secret-0123456789abcdef")
ACL = f"""
[[users]]
access_key = "{OPS.access_key}"
secret_key = "{OPS.secret_key}"
admin = true
"""


def test_nothing_without_signing_in_then_an_admin_changes(tmp_path: Path, browser: Any) -> None:
    acl = tmp_path / "acl.toml"
    acl.write_text(ACL)
    acl.chmod(0o600)
    broker = BrokerProcess(tmp_path / "broker", [*FAST, "--acl-file", str(acl)])
    broker.start()
    try:
        call(broker.endpoints, "TopicCreate", {"name": "guarded", "queues": 1}, credentials=OPS)
        keys = ("--access-key", OPS.access_key, "--secret-key", OPS.secret_key)
        with dashboard_process(broker.endpoints, log=tmp_path / "d.log", extra_args=keys) as url:
            sign_in_then_delete(browser.new_page(), url)
        with dashboard_process(broker.endpoints, log=tmp_path / "anon.log") as url:
            page = browser.new_page()
            page.goto(url + "/")
            sign_in(page, OPS)
            reload_until(page, url + "/", "[data-state=refused]", "the charts refused")
            assert "refused the dashboard's own keys" in page.inner_text("[role=alert]")
    finally:
        broker.stop()


def sign_in(page: Any, creds: Credentials) -> None:
    assert page.url.split("?")[0].endswith("/login"), page.url
    page.fill("input[name=access_key]", creds.access_key)
    page.fill("input[name=secret_key]", creds.secret_key)
    page.click("#sign-in button")


def sign_in_then_delete(page: Any, url: str) -> None:
    page.goto(url + "/topics")
    assert "sign in with an admin's keys to see it" in page.inner_text("[role=alert]")
    assert "guarded" not in page.content()
    page.screenshot(path=str(artifacts_dir() / "sign-in.png"), full_page=True)
    sign_in(page, Credentials(OPS.access_key, "a-wrong-secret-0123456789"))
    assert "unknown access key or wrong secret" in page.inner_text("[role=alert]")
    sign_in(page, OPS)
    assert "Signed in." in page.inner_text("[role=status]")
    assert page.inner_text("#who") == "ops"
    page.goto(url + "/topics")
    page.locator("tr[data-topic=guarded] button.danger").click()
    page.click("#confirm-button")
    assert "The topic was deleted" in page.inner_text("[role=status]")
    assert page.locator("tr[data-topic=guarded]").count() == 0
    page.click("#sign-out button")
    assert "Signed out." in page.inner_text("[role=status]")
    page.goto(url + "/topics")
    assert page.url.split("?")[0].endswith("/login")
