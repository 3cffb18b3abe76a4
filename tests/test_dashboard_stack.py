"""The dashboard on the real stack: ``aios-rl up`` runs every service as a process, the
dashboard among them; its page, open in real Chromium before ``aios-rl shell train`` starts a
two-epoch campaign, shows each epoch as it finishes without a reload, marks the three pointers
the registry holds at the end, and a click on a compared episode shows its steps. On the way:
every endpoint of every running service names its request and response contracts in its
``$SRV.INFO`` metadata, and they exist."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest

from aios_rl.bus._discovery import gather
from aios_rl.state.checkpoints import CheckpointRegistry
from contracts.codec import registered

from .support import stack_env, until_every_service, up_stack

REPO = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"
CAMPAIGN = "dash-live"


@pytest.mark.slow
async def test_the_page_follows_a_campaign_on_the_real_stack(tmp_path: Path) -> None:
    from playwright.async_api import async_playwright

    env = stack_env()
    async with up_stack(tmp_path) as up, up.connect("test-dashboard-stack") as bus:
        views = await until_every_service(bus)
        (page_url,) = [v.metadata["url"] for v in views if v.name == "dashboard"]
        # Every endpoint of every service names its contracts, and they exist.
        known = set(registered())
        for info in await gather(bus.nc, "$SRV.INFO"):
            eps = info.get("endpoints") or []
            names = [ep["name"] for ep in eps]
            assert len(names) == len(set(names)), (info["name"], names)
            for ep in eps:
                md = ep.get("metadata") or {}
                assert md.get("response_schema") in known, (info["name"], ep)
                assert md.get("request_schema") in known | {""}, (info["name"], ep)
                assert md["request_schema"] or ep["name"] == "status", (info["name"], ep)
        async with async_playwright() as pw:
            browser = await pw.chromium.launch(
                executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"]
            )
            page = await browser.new_page(viewport={"width": 1400, "height": 1100})
            await page.goto(page_url)
            await page.locator('[data-testid="services"] td', has_text="sampler").first.wait_for(
                timeout=30_000
            )
            await page.evaluate("window.loadedOnce = true")
            train = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "aios_rl.cli", "shell", "train",
                "--epochs", "2", "--tasks-per-epoch", "3", "--group-size", "2",
                "--train-tasks", "6", "--heldout", "3", "--campaign-id", CAMPAIGN,
                "--nats-url", up.url, "--credentials", str(up.credentials),
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env,
            )  # fmt: skip
            done = asyncio.create_task(train.communicate())
            campaign = page.locator(f'[data-testid="campaign"][data-campaign="{CAMPAIGN}"]')
            for epoch in (0, 1):
                finished = campaign.locator(
                    f'[data-testid="epoch-row"][data-epoch="{epoch}"]', has_text="done"
                )
                await finished.wait_for(timeout=600_000)
            out, err = await asyncio.wait_for(done, 600)
            assert train.returncode == 0, (out.decode()[-3000:], err.decode()[-3000:])
            assert await page.evaluate("window.loadedOnce === true")  # never reloaded
            pointers, _ = await CheckpointRegistry(bus).pointers()
            for name in ("active", "pre_update_ref", "last_stable"):
                cid = getattr(pointers, name)
                assert cid, (name, pointers)
                node = page.locator(f'[data-testid="checkpoint"][data-id="{cid}"]')
                await node.wait_for(timeout=30_000)
                await page.wait_for_function(
                    "([id, name]) => document.querySelector("
                    '`[data-testid=checkpoint][data-id="${id}"]`)'
                    "?.dataset.markers.split(' ').includes(name)",
                    arg=[cid, name],
                    timeout=30_000,
                )
            # The held-out scores the command stored arrive too.
            await (
                campaign.locator('[data-testid="epoch-row"][data-epoch="1"] td.num')
                .nth(4)
                .filter(has_text="%")
                .wait_for(timeout=30_000)
            )
            await _shot(page, "dashboard.png", tmp_path)
            row = page.locator('[data-testid="episode-row"]').first
            await row.wait_for(timeout=30_000)
            await row.click()
            detail = page.locator('[data-testid="episode-detail"]')
            await detail.locator('[data-testid="step"]').first.wait_for(timeout=30_000)
            text = await detail.inner_text()
            assert "step 0" in text and "log-prob" in text
            assert "comparison:" in text and "teacher:" in text
            await _shot(page.locator("#detail-box"), "dashboard-episode.png", tmp_path)
            await browser.close()


async def _shot(target: object, name: str, tmp: Path) -> None:
    """A screenshot of a page (whole) or an element (into docs/ when AIOS_DOCS_SCREENSHOTS=1):
    it must be a real PNG."""
    out = REPO / "docs" if os.environ.get("AIOS_DOCS_SCREENSHOTS") == "1" else tmp
    whole = {"full_page": True} if hasattr(target, "goto") else {}
    data = await target.screenshot(path=str(out / name), **whole)  # type: ignore[attr-defined]
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
