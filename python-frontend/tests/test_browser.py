"""The HTML report in a real browser: headless Chromium loads the page, the
script draws the charts without an error, and a screenshot is kept for
people to look at (LLMOPT_TEST_OUTPUT, ctest: build/python-frontend/test-output).
Skipped only when no Chromium is installed (scripts/common.sh installs it)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import List

import pytest

import llmopt
from llmopt import Cluster, Job, Model

NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


@pytest.fixture(scope="module")
def chromium() -> str:
    exe = os.environ.get("LLMOPT_CHROMIUM") or next(
        (p for p in map(shutil.which, NAMES) if p), None)
    if not exe:
        pytest.skip("no Chromium found (install Debian's chromium or set LLMOPT_CHROMIUM)")
    return exe


def run_chromium(exe: str, profile: Path, args: List[str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [exe, "--headless", "--disable-gpu", "--no-sandbox", "--disable-dev-shm-usage",
         "--hide-scrollbars", "--no-first-run", f"--user-data-dir={profile}", *args],
        capture_output=True, text=True, timeout=180, check=False)


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory, examples: Path) -> Path:
    """Llama 3 70B on 64 H100 with tensor parallelism inside a node and the
    plans pipeline over 4 stages, so every chart has something to draw."""
    path = tmp_path_factory.mktemp("page") / "llama3-70b.html"
    llmopt.plan(Model(examples / "llama3-70b.json"), Cluster.preset("dgx-h100", gpus=64),
                Job(global_batch=512, seq_len=8192), fix="tp:8,sp:1,pp:4", top_k=4, html=path)
    return path


def test_the_page_renders(chromium: str, page: Path, tmp_path: Path) -> None:
    proc = run_chromium(chromium, tmp_path / "profile", ["--dump-dom", page.as_uri()])
    dom = proc.stdout
    assert proc.returncode == 0, proc.stderr[-2000:]
    body = re.search(r"<body[^>]*>", dom)
    assert body, dom[:2000]
    assert 'data-rendered="ok"' in body.group(0), body.group(0)
    assert "data-error" not in body.group(0)
    # Every chart was drawn by the script (the page ships without SVG).
    assert "<svg" not in page.read_text(encoding="utf-8")
    for chart in ("memory-chart", "time-chart", "timeline-chart", "rejected-chart"):
        assert re.search(rf'<svg[^>]*id="{chart}"', dom), chart
    timeline = dom[dom.index('id="timeline-chart"'):]
    timeline = timeline[:timeline.index("</svg>")]
    assert timeline.count("<rect") > 100  # blocks of the pipeline schedule
    assert dom.count('class="mini"') == 2 * 4  # time and memory bars per plan
    assert "llama3-70b on 64 × H100-SXM5-80GB" in dom
    assert "best plan: dp" in dom


def test_a_plan_can_be_selected_by_the_address(chromium: str, page: Path,
                                               tmp_path: Path) -> None:
    proc = run_chromium(chromium, tmp_path / "profile", ["--dump-dom", page.as_uri() + "#plan=3"])
    assert 'data-rendered="ok"' in proc.stdout
    assert "plan 3: dp" in proc.stdout


def test_screenshot(chromium: str, page: Path, tmp_path: Path, output_dir: Path) -> None:
    png = output_dir / "llm-opt-report.png"
    if png.exists():
        png.unlink()
    proc = run_chromium(chromium, tmp_path / "profile",
                        ["--window-size=1300,2700", f"--screenshot={png}", page.as_uri()])
    assert proc.returncode == 0, proc.stderr[-2000:]
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(data) > 50_000  # charts, not a blank page
    shutil.copyfile(page, output_dir / "llm-opt-report.html")
