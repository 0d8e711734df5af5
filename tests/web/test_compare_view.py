"""The comparison page in Chromium: two studies of one GEMM measured on two GPUs and toolchains
in two pools, reached from the studies list; their fronts in one scatter, normalised to each
study's baseline or raw; the differences of their targets; a point opening its trial; and
the page's state kept in its URL through a reload and in a fresh browser."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from gemm_worker import OBJECTIVES, GemmWorker, study_document
from helpers import LiveService, start_service
from pages import VIEWPORT, chart_marks, click_mark, screenshot, sign_in

pytestmark = pytest.mark.browser
H100 = {"gpu_name": "NVIDIA H100 80GB HBM3", "compilers": {"ptxas": "13.0.88", "triton": "3.4.0"}}


@dataclass
class Compared:
    service: LiveService
    member: str
    h200: int
    h100: int
    other_objectives: int

    def url(self, query: str = "") -> str:
        return f"{self.service.url}/ui/compare?studies={self.h200},{self.h100}{query}"

    def api(self) -> Any:
        with self.service.client(self.member) as api:
            return api.get("/v1/compare", params={"studies": f"{self.h200},{self.h100}"}).json()


@pytest.fixture(scope="module")
def compared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Compared]:
    workdir: Path = tmp_path_factory.mktemp("compare-view")
    service = start_service(f"sqlite:///{workdir / 'paretune.db'}", workdir)
    workers: list[GemmWorker] = []
    try:
        member = service.make_user_token("member")
        h200 = GemmWorker(service.url, service.make_worker_token("default"))
        h100 = GemmWorker(service.url, service.make_worker_token("h100"), pool="h100", name="gpu-node-31",
                          fingerprint=H100)
        workers += [h200, h100]
        with service.client(member) as api:
            ids = []
            for name, pool, worker in (("gemm on h200", "default", h200), ("gemm on h100", "h100", h100)):
                r = api.post("/v1/studies", json={**study_document(name, 24, seed=3), "pool": pool})
                assert r.status_code == 201, r.text
                ids.append(r.json()["id"])
                worker.run()
            r = api.post("/v1/studies", json={**study_document("gemm, runtime only", 10),
                                              "objectives": OBJECTIVES[:1]})
            assert r.status_code == 201, r.text
        yield Compared(service, member, ids[0], ids[1], r.json()["id"])
    finally:
        for w in workers:
            w.close()
        service.stop()


def open_compare(page: Any, url: str) -> None:
    page.goto(url)
    drawn(page)


def drawn(page: Any, shown: str | None = None) -> None:
    """Wait for the scatter to have drawn (`shown`: these axes and values, "x y values")."""
    page.wait_for_selector(f"#compare[data-drawn='{shown}']" if shown else "#compare[data-drawn]")


def point_values(data: dict[str, Any], mode: str) -> dict[tuple[int, int], dict[str, float]]:
    """(study, trial) -> the values plotted in `mode`, from the API."""
    found: dict[tuple[int, int], dict[str, float]] = {}
    for study in data["studies"]:
        for point in study["points"]:
            found[study["id"], point["number"]] = point["values" if mode == "raw" else "normalised"]
        if study["baseline"]:
            found[study["id"], study["baseline_number"]] = (
                study["baseline"] if mode == "raw" else {k: 1.0 for k in study["baseline"]})
    return found


def assert_plotted(marks: list[dict[str, Any]], values: dict[tuple[int, int], dict[str, float]], x: str,
                   y: str) -> None:
    """Every point is drawn once, and further right (up) exactly where its value on x (y) is
    larger: the scatter shows these values, whichever study a point is of."""
    assert sorted((m["group"], m["number"]) for m in marks) == sorted(values)
    for a in marks:
        for b in marks:
            va, vb = values[a["group"], a["number"]], values[b["group"], b["number"]]
            if va[x] > vb[x] * 1.01:
                assert a["x"] > b["x"], (a, b)
            if va[y] > vb[y] * 1.01:
                assert a["y"] < b["y"], (a, b)


def test_studies_compared_from_the_list_with_their_differences(page: Any, compared: Compared) -> None:
    data = compared.api()
    sign_in(page, compared.service.url, compared.member)
    assert page.locator("#compare-selected").is_disabled()
    for study in (compared.h200, compared.h100):
        page.check(f"#studies tr[data-study='{study}'] .compare-pick")
    assert page.text_content("#compare-selected") == "Compare 2 selected"
    page.click("#compare-selected")
    page.wait_for_url(f"**/ui/compare?studies={compared.h200},{compared.h100}**")
    drawn(page, "runtime_ms energy_mj normalised")

    legend = page.text_content("#compare-legend")
    assert f"#{compared.h200} gemm on h200" in legend and f"#{compared.h100} gemm on h100" in legend
    differences = {li.get_attribute("data-field"): li.text_content()
                   for li in page.locator("#differences li").all()}
    assert set(differences) == {"gpu", "toolchain.triton", "pool"} == {d["field"] for d in data["differences"]}
    assert "NVIDIA H200" in differences["gpu"] and "NVIDIA H100 80GB HBM3" in differences["gpu"]
    assert "3.5.0" in differences["toolchain.triton"] and "3.4.0" in differences["toolchain.triton"]
    assert page.locator("#targets tr.differs").count() == 3
    assert page.locator("#targets tr[data-field='toolchain.cuda']:not(.differs)").count() == 1

    canvas = page.locator("#scatter canvas")
    assert (canvas.get_attribute("data-x"), canvas.get_attribute("data-y")) == ("runtime_ms", "energy_mj")
    marks = chart_marks(page)
    assert_plotted(marks, point_values(data, "normalised"), "runtime_ms", "energy_mj")
    baselines = {(m["x"], m["y"]) for m in marks if m.get("baseline")}
    assert len(baselines) == 1  # each baseline normalises to 1 on every objective: one place

    rows = page.locator("#fronts-table tbody tr[data-number]")
    assert rows.count() == len(marks)
    for study in data["studies"]:
        base = study["baseline"]
        for point in study["points"][:3]:
            if point["number"] == study["baseline_number"]:
                continue
            row = page.locator(f"#fronts-table tr[data-study='{study['id']}'][data-number='{point['number']}']")
            assert row.locator(".trial-link").get_attribute("href") == \
                f"/ui/studies/{study['id']}/trials/{point['number']}"
            ratio = point["values"]["runtime_ms"] / base["runtime_ms"]  # worked out here, from the raw values
            assert f"{ratio:.3f}×" in row.locator(".ratio").first.text_content()
    screenshot(page, "compare.png", full_page=True)


def test_a_point_opens_its_trial(page: Any, compared: Compared) -> None:
    sign_in(page, compared.service.url, compared.member)
    open_compare(page, compared.url())
    mark = next(m for m in chart_marks(page) if m["group"] == compared.h100 and not m.get("baseline"))
    click_mark(page, mark)
    page.wait_for_url(f"**/ui/studies/{compared.h100}/trials/{mark['number']}")
    page.wait_for_selector(f"text=Trial #{mark['number']}")
    page.go_back()
    drawn(page)
    page.click(f"#fronts-table tr[data-study='{compared.h200}'] .trial-link >> nth=0")
    page.wait_for_url(f"**/ui/studies/{compared.h200}/trials/*")


def state(page: Any) -> tuple[Any, ...]:
    return (page.input_value("#x-axis"), page.input_value("#y-axis"),
            page.get_attribute("#values-raw", "aria-pressed"), page.get_attribute("#compare", "data-values"),
            chart_marks(page))


def test_the_url_keeps_axes_and_values(page: Any, compared: Compared, browser: Any) -> None:
    data = compared.api()
    sign_in(page, compared.service.url, compared.member)
    open_compare(page, compared.url())
    before = chart_marks(page)
    page.select_option("#x-axis", "compile_s")
    page.select_option("#y-axis", "runtime_ms")
    page.click("#values-raw")
    drawn(page, "compile_s runtime_ms raw")
    url = page.url
    assert url.endswith(f"/ui/compare?studies={compared.h200},{compared.h100}&x=compile_s&y=runtime_ms&values=raw")
    shown = state(page)
    assert shown[:4] == ("compile_s", "runtime_ms", "true", "raw") and shown[4] != before
    assert_plotted(shown[4], point_values(data, "raw"), "compile_s", "runtime_ms")

    page.reload()
    drawn(page, "compile_s runtime_ms raw")
    assert page.url == url and state(page) == shown

    fresh = browser.new_context(viewport=VIEWPORT)  # a colleague opening the link: signs in, sees the same
    try:
        other = fresh.new_page()
        other.goto(url)
        other.wait_for_url("**/ui/login**")
        other.fill("#token", compared.member)
        other.press("#token", "Enter")
        drawn(other, "compile_s runtime_ms raw")
        assert other.url == url and state(other) == shown
    finally:
        fresh.close()

    page.click("#values-normalised")  # and back: normalised, the axes kept
    drawn(page, "compile_s runtime_ms normalised")
    assert page.url.endswith("&x=compile_s&y=runtime_ms&values=normalised")
    assert_plotted(chart_marks(page), point_values(data, "normalised"), "compile_s", "runtime_ms")


def test_studies_that_cannot_be_compared_say_why(page: Any, compared: Compared) -> None:
    sign_in(page, compared.service.url, compared.member)
    page.goto(f"{compared.service.url}/ui/compare?studies={compared.h200},{compared.other_objectives}")
    error = page.locator("#compare-error")
    error.wait_for()
    assert "422" in error.text_content() and "different objectives" in error.text_content()
    page.goto(f"{compared.service.url}/ui/compare")
    page.wait_for_selector("text=No studies to compare")
