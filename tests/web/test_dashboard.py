"""The dashboard in headless Chromium against a live service populated by a scripted worker."""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest
from pages import Dashboard, chart_marks, click_mark, open_study, screenshot, sign_in

pytestmark = pytest.mark.browser
EVERY_ROW = "[...document.querySelectorAll('#trials tbody tr')].every"


def test_sign_in_rejects_a_bad_token_then_lists_studies(page: Any, dashboard: Dashboard) -> None:
    page.goto(f"{dashboard.url}/")
    page.wait_for_url("**/ui/login**")
    page.fill("#token", "ptu_not-a-real-token")
    page.press("#token", "Enter")
    page.wait_for_selector(".form-error:has-text('unknown or revoked')")

    page.fill("#token", dashboard.member)
    page.press("#token", "Enter")
    page.wait_for_selector("#studies tbody tr")
    assert page.text_content("#my-role") == "member"
    finished = page.locator(f"#studies tr[data-study='{dashboard.finished}']")
    assert finished.locator(".badge").text_content() == "completed"
    assert "60 / 60" in finished.locator(".progress-label").text_content()
    assert finished.locator(".best .ratio").count() == 3  # best per objective, against the baseline
    running = page.locator(f"#studies tr[data-study='{dashboard.running}']")
    assert running.locator(".badge").text_content() == "running"
    assert "batch" in running.text_content()

    page.reload()  # the token is remembered
    page.wait_for_selector("#studies tbody tr")
    page.click(f"#studies tr[data-study='{dashboard.finished}'] a")
    page.wait_for_url(f"**/ui/studies/{dashboard.finished}")


def test_studies_list_follows_progress(page: Any, dashboard: Dashboard) -> None:
    sign_in(page, dashboard.url, dashboard.member)
    done = f"#studies tr[data-study='{dashboard.running}'] .progress-label .num"
    before = int(page.text_content(done))
    assert dashboard.batch_worker.run(limit=1) == 1
    page.wait_for_selector(f"{done}:text-is('{before + 1}')")  # no reload: the list refreshes itself


def test_study_front_axes_and_opening_a_trial_from_the_chart(page: Any, dashboard: Dashboard) -> None:
    with dashboard.service.client(dashboard.member) as api:
        study = api.get(f"/v1/studies/{dashboard.finished}").json()
        front = api.get(f"/v1/studies/{dashboard.finished}/front").json()
    sign_in(page, dashboard.url, dashboard.member)
    open_study(page, dashboard.url, dashboard.finished)

    assert page.locator("#study .title-row .badge").text_content() == "completed"
    canvas = page.locator("#scatter canvas")
    assert (canvas.get_attribute("data-x"), canvas.get_attribute("data-y")) == ("runtime_ms", "energy_mj")
    assert canvas.get_attribute("data-color") == "compile_s"
    drawn = int(canvas.get_attribute("data-count"))
    assert drawn == study["progress"]["completed"]
    marks = chart_marks(page)
    assert sorted(m["number"] for m in marks if not m.get("baseline")) == sorted(
        t["number"] for t in front["trials"] if not t["is_baseline"])
    assert [m["number"] for m in marks if m.get("baseline")] == [front["baseline"]["number"]]

    # The front table: the baseline first, then every front trial with its ratios.
    rows = page.locator("#front-table tbody tr")
    assert rows.count() == len([t for t in front["trials"] if not t["is_baseline"]]) + 1
    assert "is-baseline" in rows.first.get_attribute("class")
    assert page.locator("#front-table tbody tr.on-front .ratio").count() >= 3
    assert page.text_content("#hypervolume") != "–"

    # Switch the axes: the chart redraws and the choice is kept in the address.
    page.select_option("#x-axis", "compile_s")
    page.select_option("#y-axis", "runtime_ms")
    page.select_option("#color-by", "energy_mj")
    page.wait_for_function(
        "() => document.querySelector('#scatter canvas').dataset.x === 'compile_s'")
    assert canvas.get_attribute("data-y") == "runtime_ms"
    assert canvas.get_attribute("data-color") == "energy_mj"
    assert "x=compile_s" in page.url and "y=runtime_ms" in page.url
    moved = chart_marks(page)
    assert {m["number"] for m in moved} == {m["number"] for m in marks}
    assert [(m["x"], m["y"]) for m in moved] != [(m["x"], m["y"]) for m in marks]

    page.select_option("#x-axis", "runtime_ms")
    page.select_option("#y-axis", "energy_mj")
    page.select_option("#color-by", "compile_s")
    page.wait_for_function("() => document.querySelector('#scatter canvas').dataset.x === 'runtime_ms'")
    front_marks = [m for m in chart_marks(page) if not m.get("baseline")]
    hovered = max(front_marks, key=lambda m: m["x"])
    box = canvas.bounding_box()
    page.mouse.move(box["x"] + hovered["x"], box["y"] + hovered["y"])
    tooltip = page.locator(".tooltip")
    tooltip.wait_for(state="visible")
    assert f"Trial #{hovered['number']}" in tooltip.text_content()
    assert "BLOCK_M" in tooltip.text_content()  # hover shows the configuration
    screenshot(page, "study.png")
    screenshot(page, "study-full.png", full_page=True)

    target = min(front_marks, key=lambda m: m["x"])  # the fastest configuration

    click_mark(page, target)
    page.wait_for_url(f"**/ui/studies/{dashboard.finished}/trials/{target['number']}")
    page.wait_for_selector(f"#trial[data-number='{target['number']}']")
    trial_page_shows_everything(page)
    screenshot(page, "trial.png")
    screenshot(page, "trial-full.png", full_page=True)

    page.go_back()
    page.wait_for_selector("#study[data-front=ready]")


def test_the_cloud_is_every_completed_trial_read_from_the_points_endpoint(page: Any, dashboard: Dashboard) -> None:
    with dashboard.service.client(dashboard.member) as api:
        study = api.get(f"/v1/studies/{dashboard.finished}").json()
        points = api.get(f"/v1/studies/{dashboard.finished}/points").json()
        front = api.get(f"/v1/studies/{dashboard.finished}/front").json()
    requests: list[str] = []
    page.on("request", lambda request: requests.append(request.url))
    sign_in(page, dashboard.url, dashboard.member)
    open_study(page, dashboard.url, dashboard.finished)

    canvas = page.locator("#scatter canvas")
    assert int(canvas.get_attribute("data-count")) == study["progress"]["completed"] == len(points["numbers"])
    assert page.text_content("#cloud-count").startswith(f"{study['progress']['completed']} completed trials")
    # one request for every point, then the event stream from where the points end: no
    # trial's whole row travels for the cloud
    assert [u.split("?", 1)[1] for u in requests if "/points?" in u] == ["since=0"]
    assert any(f"/events?after={points['cursor']}" in u for u in requests), requests

    # A point of the cloud: where the front's marks say it is drawn. Hovering it shows the
    # trial, and its configuration once fetched.
    marks = {m["number"]: m for m in chart_marks(page) if not m.get("baseline")}
    values = {t["number"]: t["values"] for t in front["trials"]}
    a, b = sorted(marks, key=lambda n: values[n]["runtime_ms"])[::len(marks) - 1]

    def scale(key: str, axis: str) -> tuple[float, float]:
        slope = (marks[a][axis] - marks[b][axis]) / (values[a][key] - values[b][key])
        return slope, marks[a][axis] - slope * values[a][key]
    (kx, cx), (ky, cy) = scale("runtime_ms", "x"), scale("energy_mj", "y")
    box = canvas.bounding_box()
    cloud = [(n, kx * points["values"]["runtime_ms"][i] + cx, ky * points["values"]["energy_mj"][i] + cy)
             for i, n in enumerate(points["numbers"]) if n not in marks and n != front["baseline"]["number"]]
    inside = [(n, x, y) for n, x, y in cloud if 70 < x < box["width"] - 30 and 30 < y < box["height"] - 50]
    far = [p for p in inside if min((p[1] - m["x"]) ** 2 + (p[2] - m["y"]) ** 2 for m in chart_marks(page)) > 15 ** 2
           and min((p[1] - q[1]) ** 2 + (p[2] - q[2]) ** 2 for q in cloud if q[0] != p[0]) > 3 ** 2]
    number, x, y = far[0]
    page.mouse.move(box["x"] + x, box["y"] + y)
    tooltip = page.locator(".tooltip")
    tooltip.wait_for(state="visible")
    assert f"Trial #{number}" in tooltip.text_content()
    page.wait_for_function("() => document.querySelector('.tooltip').textContent.includes('BLOCK_M')")


def trial_page_shows_everything(page: Any) -> None:
    for objective in ("runtime_ms", "energy_mj", "compile_s"):
        card = page.locator(f"#objectives [data-metric='{objective}']")
        text = card.text_content()
        assert re.search(r"95% CI [\d.,]+ – [\d.,]+", text), text
        assert "n = " in text and "median" in text and "p99" in text
        assert card.locator(".ratio").count() == 1  # ratio to the baseline
    assert page.locator("#objectives [data-metric='power_w']").count() == 1  # measured, not optimised
    assert page.locator("#configuration tbody tr").count() == 7
    assert page.text_content("#verdict").startswith("✓")
    assert "registers" in page.text_content("#compile-report")
    assert "NVIDIA H200" in page.text_content("#fingerprint")
    assert "measure_s" in page.text_content("#timings")
    assert "ptxas info" in page.text_content("#log pre")


def test_trials_table_sorts_filters_and_pages_on_the_server(page: Any, dashboard: Dashboard) -> None:
    sign_in(page, dashboard.url, dashboard.member)
    open_study(page, dashboard.url, dashboard.finished)
    table = page.locator("#trials")

    def numbers() -> list[int]:
        return [int(n) for n in table.locator("tbody tr").evaluate_all("rs => rs.map(r => r.dataset.number)")]

    assert numbers()[:3] == [59, 58, 57]  # newest first
    table.locator("th[data-sort='runtime_ms']").click()
    page.wait_for_selector("#trials th.sorted[data-sort='runtime_ms']")
    with dashboard.service.client(dashboard.member) as api:
        fastest = api.get(f"/v1/studies/{dashboard.finished}/trials?sort=runtime_ms&limit=25").json()["items"]
    first = "document.querySelector('#trials tbody tr').dataset.number"
    page.wait_for_function(f"() => {first} === '{fastest[0]['number']}'")
    assert numbers() == [t["number"] for t in fastest]

    page.click("#next-page")
    page.wait_for_selector("#all-trials .page-no:has-text('Page 2')")
    assert not set(numbers()) & {t["number"] for t in fastest}
    page.click("#prev-page")
    page.wait_for_selector("#all-trials .page-no:has-text('Page 1')")
    assert numbers() == [t["number"] for t in fastest]

    page.click("#all-trials button[data-filter='failed']")
    page.wait_for_function(f"() => {EVERY_ROW}(r => r.dataset.state === 'failed')")
    assert table.locator("tbody tr[data-state='failed']").count() == 4  # every 13th of 60 failed

    page.click("#all-trials button[data-filter='all']")
    page.check("#front-only")
    page.wait_for_function(f"() => {EVERY_ROW}(r => r.classList.contains('on-front'))")


def test_a_new_trial_appears_live_without_reloading(page: Any, dashboard: Dashboard) -> None:
    sign_in(page, dashboard.url, dashboard.member)
    requests: list[str] = []
    page.on("request", lambda request: requests.append(request.url))
    open_study(page, dashboard.url, dashboard.live)
    page.evaluate("window.__sameDocument = true")
    assert page.locator("#trials tbody tr[data-number='29'][data-state='queued']").count() == 1
    plotted = int(page.get_attribute("#scatter canvas", "data-count"))

    lease = dashboard.worker.lease()
    assert lease is not None and lease["trial"]["number"] == 29
    page.wait_for_selector("#trials tbody tr[data-number='29'][data-state='running']")
    dashboard.worker.report(lease)

    page.wait_for_selector("#trials tbody tr[data-number='29'][data-state='completed']", timeout=10_000)
    page.wait_for_function(f"() => +document.querySelector('#scatter canvas').dataset.count === {plotted + 1}")
    assert any("/points?since=" in u and not u.endswith("since=0") for u in requests)  # only what changed
    page.wait_for_selector("#study .title-row .badge[data-state='completed']")  # the budget is used up
    page.wait_for_selector("#live[data-state='ended']")
    assert "30 / 30" in page.text_content(".progress-row")
    assert page.evaluate("window.__sameDocument") is True
    assert page.locator("#study-actions #cancel").count() == 0  # nothing left to cancel


def test_viewer_sees_no_cancel_button_and_the_api_refuses(page: Any, dashboard: Dashboard) -> None:
    sign_in(page, dashboard.url, dashboard.member)
    open_study(page, dashboard.url, dashboard.running)
    assert page.locator("#study-actions #cancel").is_visible()
    assert page.locator("#study-actions #pause").is_visible()

    page.click("#sign-out")
    page.wait_for_url("**/ui/login**")
    sign_in(page, dashboard.url, dashboard.viewer)
    assert page.text_content("#my-role") == "viewer"
    open_study(page, dashboard.url, dashboard.running)
    assert page.locator("#study .title-row .badge").text_content() == "running"
    assert page.locator("#study-actions button").count() == 0
    assert page.locator("#study-actions").text_content() == "read-only"

    # The same refusal through the API, from the page and from outside it.
    status, body = page.evaluate(
        """async (id) => {
            const r = await fetch(`/v1/studies/${id}/cancel`, {method: 'POST',
                headers: {Authorization: `Bearer ${localStorage.getItem('paretune.token')}`}});
            return [r.status, await r.json()];
        }""", dashboard.running)
    assert status == 403
    assert body["error"]["code"] and "member" in body["error"]["message"]
    r = httpx.post(f"{dashboard.url}/v1/studies/{dashboard.running}/cancel",
                   headers={"Authorization": f"Bearer {dashboard.viewer}"})
    assert r.status_code == 403, r.text
    with dashboard.service.client(dashboard.member) as api:
        assert api.get(f"/v1/studies/{dashboard.running}").json()["state"] == "running"


def test_member_pauses_and_resumes_from_the_page(page: Any, dashboard: Dashboard) -> None:
    sign_in(page, dashboard.url, dashboard.member)
    open_study(page, dashboard.url, dashboard.running)
    page.click("#study-actions #pause")
    page.wait_for_selector("#study .title-row .badge[data-state='paused']")
    page.click("#study-actions #resume")
    page.wait_for_selector("#study .title-row .badge[data-state='running']")
    page.click("#study-actions #cancel")
    page.click(".modal button:has-text('Keep it')")  # cancelling asks first
    assert page.locator(".modal").count() == 0
    with dashboard.service.client(dashboard.member) as api:
        assert api.get(f"/v1/studies/{dashboard.running}").json()["state"] == "running"
