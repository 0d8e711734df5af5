"""Driving the dashboard in Chromium: where the browser is, signing in, screenshots."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gemm_worker import GemmWorker
from helpers import REPO, LiveService

CHROMIUM = os.environ.get("PARETUNE_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
ARTIFACTS = REPO / "test-artifacts"
VIEWPORT = {"width": 1440, "height": 900}


@dataclass
class Dashboard:
    service: LiveService
    member: str
    viewer: str
    worker: GemmWorker  # serves pool "default"
    batch_worker: GemmWorker  # serves pool "batch"
    finished: int  # a completed study with a front
    live: int  # one result short of its budget; its last trial is queued
    running: int  # stays running (pool "batch" has no worker after set-up)

    @property
    def url(self) -> str:
        return self.service.url


def sign_in(page: Any, url: str, token: str) -> None:
    """Sign in through the login form and wait for the studies list."""
    page.goto(f"{url}/ui/")
    page.wait_for_url("**/ui/login**")
    page.fill("#token", token)
    page.press("#token", "Enter")
    page.wait_for_selector("#studies tbody tr")


def open_study(page: Any, url: str, study_id: int, query: str = "") -> None:
    page.goto(f"{url}/ui/studies/{study_id}{query}")
    page.wait_for_selector("#study[data-front=ready][data-cloud=complete]")
    page.wait_for_selector("#trials tbody tr[data-number]")


def chart_marks(page: Any) -> list[dict[str, Any]]:
    """Front and baseline points as drawn, in CSS pixels relative to the canvas."""
    return json.loads(page.get_attribute("#scatter canvas", "data-marks"))  # type: ignore[no-any-return]


def click_mark(page: Any, mark: dict[str, Any]) -> None:
    box = page.locator("#scatter canvas").bounding_box()
    page.mouse.move(box["x"] + mark["x"], box["y"] + mark["y"])
    page.mouse.click(box["x"] + mark["x"], box["y"] + mark["y"])


def screenshot(page: Any, name: str, *, full_page: bool = False) -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / name
    page.screenshot(path=str(path), full_page=full_page)
    return path
