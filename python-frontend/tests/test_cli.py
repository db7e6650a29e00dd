"""The llmopt command: in process (main) and as python -m llmopt."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from llmopt._tool import LLMOptError, run_llm_opt
from llmopt.cli import main

PLAN = ["plan", "--cluster", "dgx-h100", "--gpus", "16", "--global-batch", "64",
        "--seq-len", "4096"]


def test_plan_table_export_and_html(examples: Path, tmp_path: Path,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    html = tmp_path / "plan.html"
    exported = tmp_path / "args.txt"
    assert main([*PLAN[:1], str(examples / "llama3-8b.json"), *PLAN[1:], "--top-k", "2",
                 "--export", "megatron", "--export-file", str(exported),
                 "--html", str(html)]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("llama3-8b: 8.03 B parameters")
    assert "\n2    dp" in out and "\n3    dp" not in out
    assert exported.read_text().startswith("# Megatron-LM (main 2026-08 with Megatron-Core 0.16")
    assert html.read_text().startswith("<!DOCTYPE html>")
    assert f"wrote {html}" in err and f"wrote {exported}" in err
    # Without --export-file only the export is on standard output.
    assert main([*PLAN[:1], str(examples / "llama3-8b.json"), *PLAN[1:], "--top-k", "1",
                 "--stack", "deepspeed", "--export", "deepspeed"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["train_batch_size"] == 64
    assert err.startswith("llama3-8b: 8.03 B parameters")
    # A plan exports to its own stack's trainer only; the error is the
    # tool's message without its file location or source excerpt.
    assert main([*PLAN[:1], str(examples / "llama3-8b.json"), *PLAN[1:],
                 "--export", "torchtitan"]) == 1
    out, err = capsys.readouterr()
    assert "searched for stack megatron" in err and "plan with stack=torchtitan" in err
    assert "\n^" not in err and "llama3-8b.json:1:1" not in err


def test_plan_json_with_fix_and_overrides(examples: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*PLAN[:1], str(examples / "llama3-8b.json"), *PLAN[1:], "--json",
                 "--fix", "tp:4,pp:1", "--set", "gpu.hbm_gib=96", "--grad-dtype", "fp32",
                 "--no-flash-attention", "--dropout"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["cluster"]["gpu"]["hbm_gib"] == 96
    assert report["job"]["grad_bytes"] == 4 and report["job"]["flash_attention"] is False
    assert all(p["config"]["tp"] == 4 and p["config"]["pp"] == 1 for p in report["plans"])


def test_errors_exit_1_with_the_message(examples: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*PLAN[:1], str(examples / "llama3-70b.json"), "--cluster", "dgx-a100-40gb",
                 "--gpus", "4", "--global-batch", "64", "--seq-len", "4096"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("llmopt: error: ")
    assert "no valid configuration of llama3-70b fits 4 x A100-SXM4-40GB" in err
    assert main(["plan", str(examples / "nope.json"), "--cluster", "dgx-h100",
                 "--global-batch", "8"]) == 1
    assert "no model file" in capsys.readouterr().err
    assert main(["plan", str(examples / "gpt2-124m.json"), "--cluster", "dgx-q",
                 "--global-batch", "8"]) == 1
    assert "unknown cluster preset 'dgx-q'" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        main(["plan", str(examples / "gpt2-124m.json"), "--cluster", "dgx-h100"])
    assert e.value.code == 2  # argparse: --global-batch is required


def test_stats_and_mlir(examples: Path, tmp_path: Path,
                        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["stats", str(examples / "gpt2-124m.json"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["params_total"] == 124_439_808
    assert main(["stats", str(examples / "gpt2-124m.json")]) == 0
    assert "124,439,808" in capsys.readouterr().out
    out = tmp_path / "gpt2.mlir"
    assert main(["mlir", str(examples / "gpt2-124m.json"), "-o", str(out)]) == 0
    assert 'llm.name = "gpt2-124m"' in out.read_text()


def test_python_dash_m(examples: Path) -> None:
    env = dict(os.environ)
    src = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = src + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run(
        [sys.executable, "-m", "llmopt", "plan", str(examples / "gpt2-124m.json"),
         "--cluster", "dgx-a100-80gb", "--global-batch", "64", "--top-k", "1",
         "--stack", "deepspeed", "--export", "deepspeed"],
        capture_output=True, text=True, env=env, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.startswith("gpt2-124m: 124.44 M parameters")
    assert json.loads(proc.stdout)["train_batch_size"] == 64
    version = subprocess.run([sys.executable, "-m", "llmopt", "--version"],
                             capture_output=True, text=True, env=env, check=True)
    assert version.stdout.startswith("llmopt ")


def test_bad_outputs_and_numbers_are_one_line_errors(
        examples: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An output path that is a directory, or a number past llm-opt's bounds,
    is one `llmopt: error:` line naming it, exit 1: no traceback, no empty
    `error: error:` (issue 31)."""
    model = str(examples / "gpt2-124m.json")
    base = ["plan", model, "--cluster", "dgx-h100", "--global-batch", "8", "--top-k", "1"]
    # A directory as the export file, the page or the IR file: refused
    # before the search, and nothing is written inside it.
    for argv in ([*base, "--stack", "deepspeed", "--export", "deepspeed", "--export-file",
                  str(tmp_path)],
                 [*base, "--html", str(tmp_path)],
                 ["mlir", model, "-o", str(tmp_path)]):
        assert main(argv) == 1
        err = capsys.readouterr().err
        assert err == f"llmopt: error: {argv[-2]} {tmp_path}: is a directory; give a file path\n"
    assert list(tmp_path.iterdir()) == []
    assert main([*base, "--stack", "deepspeed", "--export", "deepspeed", "--export-file",
                 str(tmp_path / "nodir" / "ds.json")]) == 1
    assert "does not exist" in capsys.readouterr().err
    # Numbers too large for llm-opt, and negative ones.
    for flag, value, name in (("--gpus", "99999999999999999999", "gpus"),
                              ("--gpus", "-1", "gpus"),
                              ("--global-batch", "99999999999999999999", "global_batch"),
                              ("--seq-len", "-1", "seq_len")):
        assert main([*base, flag, value]) == 1
        err = capsys.readouterr().err
        assert err.startswith(f"llmopt: error: {name} must be an integer from 1 to "), err
        assert value in err and err.count("\n") == 1 and "error: error" not in err
    # Past the Python checks, llm-opt's option parser says what is wrong on a
    # line of its own and MLIR adds an empty `error:`: the message is the
    # former.
    with pytest.raises(LLMOptError) as e:
        run_llm_opt([model, "-o", "/dev/null",
                     "--llm-auto-parallel=cluster=dgx-h100 global-batch=8 "
                     "gpus=99999999999999999999"])
    assert str(e.value) == ("llm-opt: for the --gpus option: '99999999999999999999' value "
                            "invalid for long argument!")
    assert e.value.errors == []
    # llm-opt's own errors say `error:` once.
    assert main([*base, "--fix", "tq:2"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("llmopt: error: llm-auto-parallel: fix: unknown key 'tq'"), err


def test_write_is_whole_or_nothing(examples: Path, tmp_path: Path,
                                   monkeypatch: pytest.MonkeyPatch,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    """A write that fails leaves the previous file and no temporary."""
    out = tmp_path / "gpt2.mlir"
    out.write_text("previous")

    def full_disk(*args: object, **kwargs: object) -> None:
        raise OSError(28, "No space left on device", str(out))

    monkeypatch.setattr("llmopt.cli.os.replace", full_disk)
    assert main(["mlir", str(examples / "gpt2-124m.json"), "-o", str(out)]) == 1
    assert capsys.readouterr().err == f"llmopt: error: {out}: No space left on device\n"
    assert out.read_text() == "previous"
    assert [p.name for p in tmp_path.iterdir()] == ["gpt2.mlir"]
