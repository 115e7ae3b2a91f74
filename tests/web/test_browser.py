"""The page in a real browser (Debian's chromium, driven by Playwright) while the demo's feed
streams: one node per unit, figures that change, a query deployed from the page that appears on
the path and produces rows, and its undeploy. With SPLICE_DOCS_SCREENSHOTS=1 the screenshots
go to docs/images/ (docs/web.md shows them)."""

from __future__ import annotations

import os
import shutil
import threading
from pathlib import Path

import pytest

from splice.cli.serve import serve_demo

playwright_api = pytest.importorskip("playwright.sync_api")

DOCS = Path(__file__).resolve().parents[2] / "docs" / "images"


def _chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    raise AssertionError("no chromium on PATH: .ci/run installs Debian's chromium with apt-get")


@pytest.fixture(scope="module")
def demo():
    stop, ready, holder = threading.Event(), threading.Event(), {}
    runner = threading.Thread(target=serve_demo, args=(0.01, 1024, "127.0.0.1", 0, 0.03),
                              kwargs={"stop": stop, "ready": ready, "holder": holder}, daemon=True)
    runner.start()
    assert ready.wait(120), "the demo did not start"
    yield holder["web"]
    stop.set()
    runner.join(30)


def _shots(tmp_path: Path) -> Path:
    if os.environ.get("SPLICE_DOCS_SCREENSHOTS") == "1":
        DOCS.mkdir(parents=True, exist_ok=True)
        return DOCS
    return tmp_path


def test_the_page_follows_the_engine_and_deploys_from_the_browser(demo, tmp_path):
    shots = _shots(tmp_path)
    with playwright_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=_chromium(), args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.goto(f"{demo.url}?token={demo.token}")
        page.wait_for_selector("svg#topology g.unit")
        units = sum(len(b["units"]) for b in demo.service.topology()["bricks"])
        assert page.locator("svg#topology g.unit").count() == units
        page.wait_for_function("document.querySelectorAll('#queries tbody tr').length >= 4")

        def rows_in() -> int:  # what the first unit of q1 shows
            text = page.locator("svg#topology g.unit[data-query='q1'] text").nth(1).text_content()
            return int((text or "").split(" ")[0].replace(",", ""))

        def rate() -> str:
            return page.locator("#queries tr[data-query='q1'] td").nth(1).inner_text()

        before, first_rate = rows_in(), rate()
        page.wait_for_timeout(1500)
        assert rows_in() > before  # the figures move while the feed streams
        assert rate() != "–" and (rate() != first_rate or first_rate != "0")
        page.screenshot(path=str(shots / "web-page.png"), full_page=True)

        page.fill("#qname", "heavy")
        page.fill("#sql", "SELECT l_orderkey, l_quantity FROM lineitem WHERE l_quantity > 45")
        page.click("#deploy button")
        page.wait_for_selector("#deploy-result:has-text('deployed heavy')")
        page.wait_for_selector("svg#topology g.unit[data-query='heavy']")
        page.wait_for_function(
            "() => { const r = document.querySelector(\"#queries tr[data-query='heavy']\");"
            " return r && Number(r.children[3].textContent.replace(/,/g, '')) > 0; }")
        page.screenshot(path=str(shots / "web-deployed.png"), full_page=True)
        page.click("#queries tr[data-query='heavy'] button.undeploy")
        page.wait_for_selector("svg#topology g.unit[data-query='heavy']", state="detached")
        assert page.locator("#queries tr[data-query='heavy']").count() == 0
        browser.close()
