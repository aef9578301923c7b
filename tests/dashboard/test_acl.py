"""The dashboard against a broker with ACL: its own admin keys sign the reads; a change needs
a person to sign in with an admin's keys, else it is refused with a banner (read-only); a
dashboard with no keys shows the broker up but refusing.

Method: a broker with ``--acl-file`` (one admin user), ``txmq dashboard --access-key
--secret-key`` and a second dashboard without keys, Debian's Chromium via Playwright.
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


def test_changes_need_a_signed_in_admin(tmp_path: Path, browser: Any) -> None:
    acl = tmp_path / "acl.toml"
    acl.write_text(ACL)
    acl.chmod(0o600)
    broker = BrokerProcess(tmp_path / "broker", [*FAST, "--acl-file", str(acl)])
    broker.start()
    try:
        call(broker.endpoints, "TopicCreate", {"name": "guarded", "queues": 1}, credentials=OPS)
        keys = ("--access-key", OPS.access_key, "--secret-key", OPS.secret_key)
        with dashboard_process(broker.endpoints, log=tmp_path / "d.log", extra_args=keys) as url:
            delete_read_only_then_signed_in(browser.new_page(), url)
        with dashboard_process(broker.endpoints, log=tmp_path / "anon.log") as url:
            page = browser.new_page()
            reload_until(page, url + "/", "[data-state=refused]", "the broker up but refusing")
            page.goto(url + "/topics")
            assert "Sign in" in page.inner_text("[role=alert]")
    finally:
        broker.stop()


def delete_read_only_then_signed_in(page: Any, url: str) -> None:
    page.goto(url + "/topics")
    row = page.locator("tr[data-topic=guarded]")
    row.locator("button.danger").click()
    page.click("#confirm-button")
    assert "Sign in with an admin's keys" in page.inner_text("[role=alert]")
    assert page.locator("tr[data-topic=guarded]").count() == 1  # read-only: still there
    page.screenshot(path=str(artifacts_dir() / "acl-read-only.png"), full_page=True)
    page.goto(url + "/login")
    page.fill("input[name=access_key]", OPS.access_key)
    page.fill("input[name=secret_key]", OPS.secret_key)
    page.click("main form button")
    assert "signed in as ops" in page.inner_text("[role=status]")
    page.goto(url + "/topics")
    page.locator("tr[data-topic=guarded] button.danger").click()
    page.click("#confirm-button")
    assert "deleted topic guarded" in page.inner_text("[role=status]")
