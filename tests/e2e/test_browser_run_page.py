"""The run page in a real browser (Debian's chromium driven by Playwright): charts drawn by
the app-served Plotly, the step table, a checkpoint download that matches its digest, and a
phone-width layout. Screenshots go to test-artifacts/ (run-page.png, run-page-phone.png)."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import BrowserContext, Page, Playwright, sync_playwright
from unit.web.web_fixture_run import ServedRun

CHROMIUM = os.environ.get("VERITRAIN_TEST_CHROMIUM", "/usr/bin/chromium")
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"


@pytest.fixture(scope="module")
def playwright() -> Iterator[Playwright]:
    if not Path(CHROMIUM).exists():
        pytest.fail(
            f"chromium not found at {CHROMIUM} (Debian "
            "package `chromium`; set VERITRAIN_TEST_CHROMIUM)"
        )
    with sync_playwright() as instance:
        yield instance


def launch(playwright: Playwright, profile: Path, **options: Any) -> BrowserContext:
    """Debian's chromium with a fresh user-data dir (never a downloaded browser)."""
    return playwright.chromium.launch_persistent_context(
        str(profile), executable_path=CHROMIUM, args=ARGS, headless=True, **options
    )


@pytest.fixture(scope="module")
def browser(
    playwright: Playwright, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[BrowserContext]:
    context = launch(
        playwright,
        tmp_path_factory.mktemp("chromium-profile"),
        accept_downloads=True,
        viewport={"width": 1280, "height": 900},
    )
    yield context
    context.close()


@pytest.fixture
def page(browser: BrowserContext) -> Iterator[Page]:
    page = browser.new_page()
    errors: list[str] = []
    refused: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on(
        "console",
        lambda message: (
            refused.append(message.text) if "Content Security Policy" in message.text else None
        ),
    )
    yield page
    page.close()
    assert errors == [], f"JavaScript errors on the page: {errors}"
    assert refused == [], f"the page breaks its own Content-Security-Policy: {refused}"


def test_the_run_page_draws_its_charts_and_table(page: Page, served_demo: ServedRun) -> None:
    run = served_demo.run
    response = page.goto(f"{served_demo.url}/runs/{run.run_id}")

    assert response is not None
    assert response.headers["x-content-type-options"] == "nosniff"
    assert "script-src 'self'" in response.headers["content-security-policy"]

    # Plotly draws an SVG per chart; with a few points it marks each one.
    page.wait_for_selector("#chart-loss .main-svg", timeout=30_000)
    loss_traces = page.locator("#chart-loss .scatterlayer .trace")
    assert loss_traces.count() == 2  # train and eval loss
    assert page.locator("#chart-loss .scatterlayer .trace .points path").count() == 2 * run.steps
    for chart in ("perplexity", "bytes", "rank"):
        assert (
            page.locator(f"#chart-{chart} .scatterlayer .trace .points path").count() == run.steps
        )
    assert page.locator("table.steps tbody tr").count() == run.steps
    assert "this server's own check" in page.locator("#status").inner_text()

    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "run-page.png"), full_page=True)


def test_a_checkpoint_download_link_delivers_the_recorded_bytes(
    page: Page, served_demo: ServedRun, tmp_path: Path
) -> None:
    run = served_demo.run
    page.goto(f"{served_demo.url}/runs/{run.run_id}")
    link = page.locator("a.download", has_text="model.safetensors.index.json")

    with page.expect_download() as download_info:
        link.click()
    saved = tmp_path / "downloaded"
    download_info.value.save_as(saved)

    digest = hashlib.sha256(saved.read_bytes()).hexdigest()
    manifest = httpx.get(
        f"{served_demo.url}/api/v1/runs/{run.run_id}/steps/{run.last_step}/checkpoint"
    ).json()
    assert download_info.value.suggested_filename == "model.safetensors.index.json"
    assert digest == link.get_attribute("data-sha256")
    assert (
        digest
        == {f["name"]: f["digest"] for f in manifest["files"]}["model.safetensors.index.json"]
    )


def test_the_page_fits_a_phone_and_its_tables_scroll_sideways(
    browser: BrowserContext, served_demo: ServedRun
) -> None:
    phone = browser.new_page()
    phone.set_viewport_size({"width": 390, "height": 844})
    try:
        phone.goto(f"{served_demo.url}/runs/{served_demo.run.run_id}")
        phone.wait_for_selector("#chart-loss .main-svg", timeout=30_000)

        assert phone.evaluate("document.documentElement.scrollWidth") <= 390
        wrap = phone.locator("#steps .table-wrap").first
        assert wrap.evaluate(
            "e => e.scrollWidth > e.clientWidth"
        )  # the table scrolls inside its box
        assert phone.locator("#chart-loss").bounding_box()["width"] <= 390
        ARTIFACTS.mkdir(exist_ok=True)
        phone.screenshot(path=str(ARTIFACTS / "run-page-phone.png"), full_page=False)
    finally:
        phone.close()


def test_without_javascript_the_tables_are_still_there(
    playwright: Playwright, tmp_path: Path, served_demo: ServedRun
) -> None:
    context = launch(playwright, tmp_path / "profile", java_script_enabled=False)
    try:
        page = context.new_page()
        page.goto(f"{served_demo.url}/runs/{served_demo.run.run_id}")
        assert page.locator("table.steps tbody tr").count() == served_demo.run.steps
        assert "needs JavaScript" in page.locator("#chart-loss").inner_text()
    finally:
        context.close()
