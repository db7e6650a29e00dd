"""The HTML report, as llm-opt writes it (report-html) for plan() and to_html()."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import llmopt
from llmopt import Cluster, Job, Model

DATA = re.compile(r'<script type="application/json" id="llmopt-data">(.*?)</script>', re.S)


def embedded(page: str) -> dict:
    m = DATA.search(page)
    assert m, "no embedded data"
    return json.loads(m.group(1))


def test_plan_writes_a_self_contained_page(examples: Path, tmp_path: Path) -> None:
    path = tmp_path / "plan.html"
    r = llmopt.plan(Model(examples / "llama3-8b.json"), Cluster.preset("dgx-h100", gpus=16),
                    Job(global_batch=64, seq_len=4096), fix={"pp": 2, "tp": 2}, top_k=3,
                    html=path)
    page = path.read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>")
    assert "<title>llm-opt plan: llama3-8b on 16 x H100-SXM5-80GB</title>" in page
    # Nothing from the network: no remote src/href/import; the only URL is
    # the SVG namespace the script creates elements in.
    assert not re.search(r'(src|href)\s*=\s*["\']?(https?:)?//', page)
    assert "@import" not in page and "<link" not in page
    assert set(re.findall(r"https?://[^\s\"'<>]+", page)) == {"http://www.w3.org/2000/svg"}
    # The renderer and the data.
    assert 'setAttribute("data-rendered", "ok")' in page
    data = embedded(page)
    assert data["report"]["plans"] == r.report["plans"]
    assert data["report"]["rejected"] == r.report["rejected"]
    timelines = data["timelines"]
    assert len(timelines) == len(r.plans) == 3
    for t, p in zip(timelines, r.plans):
        assert t["stages"] == p.config.pp == 2
        assert t["total_micro_batches"] == p.config.num_micro_batches
        assert len(t["blocks"]) == 2 * t["stages"] * t["chunks"] * t["micro_batches"]
        # [stage, chunk, micro-batch, backward, start, end], ends inside the makespan.
        assert max(b[5] for b in t["blocks"]) == t["makespan"]
        assert all(0 <= b[4] < b[5] for b in t["blocks"])


def test_to_html_reruns_the_same_search(llama8b_16: llmopt.PlanResult, tmp_path: Path) -> None:
    out = llama8b_16.to_html(tmp_path / "again.html")
    data = embedded(out.read_text(encoding="utf-8"))
    assert data["report"]["plans"] == llama8b_16.report["plans"]
    assert len(data["timelines"]) == 5


def test_unwritable_path_is_an_error_and_writes_nothing(examples: Path, tmp_path: Path) -> None:
    target = tmp_path / "missing-dir" / "plan.html"
    with pytest.raises(llmopt.LLMOptError, match="cannot write .*plan.html.: No such file or directory"):
        llmopt.plan(Model(examples / "gpt2-124m.json"), Cluster.preset("dgx-a100-80gb"),
                    Job(global_batch=64), html=target)
    assert not target.exists()
