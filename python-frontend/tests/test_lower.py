"""PlanResult.lower: a plan directory llm-run can train."""

from __future__ import annotations

import hashlib
import json

import pytest

import llmopt


@pytest.fixture(scope="module")
def tiny_tp(examples):
    return llmopt.plan(
        llmopt.Model(examples / "byte-gpt2-tiny.json"),
        llmopt.Cluster.preset("dgx-h100", gpus=2),
        llmopt.Job(global_batch=8, seq_len=64),
        fix={"tp": 2},
        top_k=1,
    )


def test_lower_writes_the_chosen_plan(tiny_tp, tmp_path):
    out = tiny_tp.lower(tmp_path / "plan", dtype="f32", lr=0.003)
    plan = json.loads((out / "plan.json").read_text())
    assert plan["world_size"] == 2
    assert plan["mesh"]["tp"] == 2
    assert all(p["dtype"] == "f32" for p in plan["params"])
    # The checksum file matches, and the Slurm script launches 2 tasks.
    digest = hashlib.sha256((out / "plan.json").read_bytes()).hexdigest()
    sums = (out / "checksums.sha256").read_text().splitlines()
    assert sums[0] == f"{digest}  plan.json"
    # The fused kernels' CUDA source is checksummed beside it.
    cuda = hashlib.sha256((out / "kernels.cu").read_bytes()).hexdigest()
    assert sums[1:] == [f"{cuda}  kernels.cu"]
    assert "#SBATCH --ntasks-per-node=2" in (out / "run.slurm").read_text()
    adamw = [i for prog in plan["programs"] for i in prog["step_instructions"]
             if i.get("kernel") == "adamw"]
    assert adamw and all(i["params"]["lr"] == pytest.approx(0.003) for i in adamw)


def test_lower_expert_with_tensor_parallelism(tmp_path):
    config = tmp_path / "moe.json"
    config.write_text(json.dumps({
        "model_type": "mixtral", "hidden_size": 32, "intermediate_size": 48,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "num_local_experts": 4, "num_experts_per_tok": 2, "vocab_size": 256,
        "max_position_embeddings": 64}))
    r = llmopt.plan(
        llmopt.Model(config),
        llmopt.Cluster.preset("dgx-h100", gpus=4),
        llmopt.Job(global_batch=4, seq_len=32),
        fix={"dp": 2, "ep": 2, "tp": 2, "micro_batch": 1},
        top_k=1,
    )
    out = r.lower(tmp_path / "eptp", moe_aux_loss=0.01)
    plan = json.loads((out / "plan.json").read_text())
    assert plan["mesh"]["ep"] == 2 and plan["mesh"]["tp"] == 2
    routers = [i for p in plan["programs"] for i in p["micro_batch_instructions"]
               if i.get("kernel") == "moe_router_bwd"]
    assert routers and all(i["params"]["aux_loss"] == pytest.approx(0.01) for i in routers)
    w1 = [p for p in plan["params"] if p["name"] == "model.layers.0.block_sparse_moe.experts.*.w1.weight"]
    assert [(p["shape"], p["shard"]["axis"]) for p in w1] == [([2, 48, 32], "ep")]


def test_lower_refuses_a_directory_it_cannot_write(examples, tmp_path):
    blocker = tmp_path / "taken"
    blocker.write_text("a file, not a directory")
    r = llmopt.plan(
        llmopt.Model(examples / "byte-gpt2-tiny.json"),
        llmopt.Cluster.preset("dgx-h100", gpus=2),
        llmopt.Job(global_batch=8, seq_len=64),
        fix={"dp": 2, "micro_batch": 2},
        top_k=1,
    )
    with pytest.raises(llmopt.LLMOptError, match="taken"):
        r.lower(blocker)
    assert blocker.read_text() == "a file, not a directory"


def test_lower_passes_the_lowering_options(tiny_tp, tmp_path):
    out = tiny_tp.lower(tmp_path / "unfused", dtype="f32", fuse=False, bucket_bytes=0)
    plan = json.loads((out / "plan.json").read_text())
    kernels = {i.get("kernel") for p in plan["programs"] for i in p["micro_batch_instructions"]}
    assert "fused" not in kernels and not (out / "kernels.cu").exists()


def test_lower_prefetch_option(examples, tmp_path):
    r = llmopt.plan(
        llmopt.Model(examples / "byte-gpt2-tiny.json"),
        llmopt.Cluster.preset("dgx-h100", gpus=2),
        llmopt.Job(global_batch=8, seq_len=64),
        fix={"dp": 2, "zero": 3},
        top_k=1,
    )

    def events(out):
        plan = json.loads((out / "plan.json").read_text())
        return sum("event" in i for p in plan["programs"] for i in p["micro_batch_instructions"])

    assert events(r.lower(tmp_path / "pf", dtype="f32")) > 0
    assert events(r.lower(tmp_path / "nopf", dtype="f32", prefetch=False)) == 0


def test_lower_checks_its_arguments(tiny_tp, tmp_path):
    with pytest.raises(ValueError, match="moe_aux_loss must be"):
        tiny_tp.lower(tmp_path / "x", moe_aux_loss=-1)
    with pytest.raises(ValueError, match="lr must be positive"):
        tiny_tp.lower(tmp_path / "x", lr=0)
    with pytest.raises(ValueError, match="cp_comm must be"):
        tiny_tp.lower(tmp_path / "x", cp_comm="p2p")
    with pytest.raises(ValueError, match="bucket_bytes must be"):
        tiny_tp.lower(tmp_path / "x", bucket_bytes=-1)
