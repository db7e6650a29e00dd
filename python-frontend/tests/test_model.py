"""Models: Hugging Face configs, builders, statistics and IR."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import llmopt
from llmopt import Model


def test_gpt2_124m_from_the_config_file(examples: Path) -> None:
    m = Model(examples / "gpt2-124m.json")
    assert m.name == "gpt2-124m"
    s = m.stats()
    assert isinstance(s, llmopt.ModelStats)
    assert s.name == "gpt2-124m"
    assert s.architecture == "GPT2LMHeadModel"
    assert s.params_total == 124_439_808
    assert s.params_embedding == 39_383_808
    assert s.tied_embeddings is True
    assert s.layers == 12 and len(s.per_layer) == 12
    assert s.per_layer[0].params == 7_087_872
    assert s.per_layer[0].activation_bytes.full < s.per_layer[0].activation_bytes.none
    assert s.train_flops_per_token == 854_438_400
    assert s.seq_len == 1024


def test_builders_match_the_published_models(examples: Path) -> None:
    # The defaults are GPT-2 small, Llama 3 8B and Mixtral 8x7B.
    assert Model.gpt().stats().params_total == 124_439_808
    llama = Model.llama().stats()
    assert llama.params_total == 8_030_261_248
    assert llama.params_total == Model(examples / "llama3-8b.json").stats().params_total
    mixtral = Model.mixtral().stats()
    assert mixtral.params_total == 46_702_792_704
    assert mixtral.params_active == 12_879_925_248
    assert mixtral.moe_layers == 32


def test_builder_config_is_a_hugging_face_dict() -> None:
    m = Model.llama(layers=2, hidden=256, heads=4, kv_heads=2, ffn=512, vocab=1000,
                    seq_len=512, name="tiny llama")
    assert m.name == "tiny-llama"
    c = m.config
    assert c is not None
    assert c["architectures"] == ["LlamaForCausalLM"]
    assert c["num_key_value_heads"] == 2 and c["max_position_embeddings"] == 512
    c["hidden_size"] = 1  # a copy: the model does not change
    assert m.config["hidden_size"] == 256
    s = m.stats(seq_len=128, micro_batch=2)
    assert s.name == "tiny-llama" and s.seq_len == 128 and s.micro_batch == 2
    # Extra keywords become config fields.
    g = Model.gpt(layers=2, hidden=128, heads=4, ffn=256, vocab=500, seq_len=64,
                  layer_norm_epsilon=1e-6)
    assert g.config["n_inner"] == 256 and g.config["layer_norm_epsilon"] == 1e-6


def test_a_config_dict_and_a_renamed_file(examples: Path) -> None:
    config = json.loads((examples / "gpt2-124m.json").read_text())
    by_dict = Model(config, name="my-gpt")
    assert by_dict.stats().name == "my-gpt"
    renamed = Model.from_hf(examples / "gpt2-124m.json", name="small")
    assert renamed.stats().name == "small"
    assert renamed.stats().params_total == 124_439_808


def test_to_mlir_and_back(tmp_path: Path, examples: Path) -> None:
    ir = Model(examples / "gpt2-124m.json").to_mlir()
    assert 'llm.name = "gpt2-124m"' in ir
    assert ir.count("llm.layer ") == 12
    assert "tensor<50257x768xbf16>" in ir
    assert "f32>" in Model(examples / "gpt2-124m.json").to_mlir(dtype="f32")
    path = tmp_path / "gpt2.mlir"
    path.write_text(ir)
    m = Model(path)
    assert m.is_mlir and m.config is None
    assert m.stats().params_total == 124_439_808
    assert m.to_mlir().count("llm.layer ") == 12


def test_errors_carry_the_tools_message(tmp_path: Path) -> None:
    with pytest.raises(llmopt.LLMOptError) as e:
        Model.llama(layers=2, hidden=256, heads=3, ffn=512, vocab=1000, kv_heads=None).stats()
    assert "num_attention_heads" in str(e.value)
    assert e.value.errors and e.value.returncode == 1
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    with pytest.raises(llmopt.LLMOptError, match="malformed JSON"):
        Model(bad).stats()
    with pytest.raises(FileNotFoundError):
        Model(tmp_path / "missing.json")
    with pytest.raises(TypeError):
        Model(42)  # type: ignore[arg-type]
