"""App tier, in a real browser: Debian's Chromium driven by Playwright against the launched app."""
from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.app

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
DOCS_SCREENSHOT = Path(__file__).parent.parent / "docs" / "screenshots" / "app.png"
REFRESH_ENV = "TALON_REFRESH_SCREENSHOT"
COUNT_NODES_JS = """() => {
  const gd = document.querySelector('#tree-plot .js-plotly-plot');
  if (!gd || !gd.data) return -1;
  return gd.data.filter(t => t.meta === 'node').reduce((n, t) => n + t.x.length, 0);
}"""


@pytest.fixture(scope="module")
def browser():
    if not Path(CHROMIUM).exists():
        if os.environ.get("CI"):
            pytest.fail(f"{CHROMIUM} is missing: .ci/run installs Debian's chromium")
        pytest.skip(f"{CHROMIUM} not installed (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        yield b
        b.close()


def screenshot_path(tmp_path: Path) -> Path:
    """Where the screenshot goes: ``docs/screenshots/app.png`` when ``$TALON_REFRESH_SCREENSHOT=1``
    (to refresh the README's picture), else a temporary file, so a test run leaves the checkout alone."""
    return DOCS_SCREENSHOT if os.environ.get(REFRESH_ENV) == "1" else tmp_path / "app.png"


def test_example_run_draws_the_tree(browser, app_url, tmp_path):
    page = browser.new_page(viewport={"width": 1500, "height": 1100})
    page.goto(app_url)
    page.locator("#run").wait_for(timeout=60_000)
    page.get_by_text(re.compile(r"^extraction: Extract every")).first.click()
    page.wait_for_function("() => document.querySelector('#prompt textarea').value.includes('Amara Okafor')",
                           timeout=30_000)
    page.locator("#run").click()
    # The summary says how the run ended only once the last step is in.
    page.get_by_text("Stopped by").wait_for(timeout=240_000)
    caption = page.locator("#step-caption").inner_text()
    steps, drafts = re.search(r"Step \d+ of (\d+): (\d+) draft nodes", caption).groups()
    page.wait_for_function(f"() => ({COUNT_NODES_JS})() === {int(drafts) + 1}", timeout=30_000)
    assert page.locator("#tree-plot .scatterlayer .point").count() >= int(drafts) + 1
    assert int(steps) >= 1
    shot = screenshot_path(tmp_path)
    shot.parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 10_000
    page.close()
