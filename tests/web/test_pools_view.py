"""The pools page and a study held back by its team's quota, in headless Chromium."""

from __future__ import annotations

from typing import Any

import pytest
from pages import Dashboard, open_study, sign_in

pytestmark = pytest.mark.browser


def test_a_quota_shows_on_the_pools_page_and_on_the_waiting_study(page: Any, dashboard: Dashboard) -> None:
    with dashboard.service.client() as admin:
        team = admin.get("/v1/me").json()["team"]
        r = admin.put("/v1/pools/batch", json={"teams": {team: {"weight": 2, "max_running": 0}}})
        assert r.status_code == 200, r.text
    try:
        sign_in(page, dashboard.url, dashboard.member)
        page.click("#nav-pools")
        page.wait_for_url("**/ui/pools")
        row = page.locator(f"#pool-batch .share-row[data-team='{team}']")
        row.wait_for()
        assert "2" in row.locator("td").nth(1).text_content()
        page.wait_for_selector(f"#pool-batch .share-row[data-team='{team}'] .held-back:has-text('max_running')")
        assert page.locator("#pool-default").count() == 1  # the other pool of the member's studies

        open_study(page, dashboard.url, dashboard.running)
        reason = page.wait_for_selector("#queued-reason")
        assert "max_running" in reason.text_content() and "batch" in reason.text_content()
    finally:
        with dashboard.service.client() as admin:
            assert admin.put("/v1/pools/batch", json={"teams": {}}).status_code == 200
    open_study(page, dashboard.url, dashboard.finished)
    assert page.locator("#queued-reason").count() == 0
