#!/usr/bin/env python3
"""PyTorch side of llm-opt's GPU measurements (issue 7).

Trains the model of a Hugging Face style config.json (GPT-2 or Llama) the way
`llm-run` does: the same initial weights (`llm-ckpt export` of a `--steps 0`
checkpoint, or a fresh init when none is given), the same batches (an llm.c
token shard read in llm-run's order: step k takes the B x T tokens from
k * B * T on, wrapping, targets shifted by one), AdamW with decoupled weight
decay on every tensor, betas (0.9, 0.95), eps 1e-8, weight decay 0.1, global
norm clipping at 1.0 and a constant learning rate, as llm-lower-to-plan's
defaults. Writes llm-run's metrics format (one JSON line per step) so that
test/Runtime/Inputs/compare_metrics.py compares the two.

  python3 torch_reference.py CONFIG.json --data SHARD.bin --batch 16 --seq 1024 \
      --steps 20 --dtype bf16 [--weights init.safetensors] [--compile] \
      [--metrics out.jsonl] [--summary out.json] [--warmup 5]

bf16 runs keep fp32 weights and run under torch.autocast (bf16 GEMMs with
fp32 accumulation, norms and the loss in fp32), as llm-opt's bf16 plans keep
fp32 masters and compute in bf16. Attention is F.scaled_dot_product_attention
(flash attention on an H100).
"""

import argparse
import json
import math
import statistics
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F


def read_shard(path):
    header = np.fromfile(path, dtype=np.int32, count=256)
    if len(header) < 3 or header[0] != 20240520:
        sys.exit(f"{path}: not an llm.c token shard (magic 20240520)")
    dtype = np.uint16 if header[1] == 1 else np.uint32
    return np.fromfile(path, dtype=dtype, offset=1024, count=int(header[2])).astype(np.int64)


def batch(tokens, step, b, t, device):
    idx = (step * b * t + np.arange(b * t)) % len(tokens)
    x = torch.from_numpy(tokens[idx]).view(b, t)
    y = torch.from_numpy(tokens[(idx + 1) % len(tokens)]).view(b, t)
    return x.to(device, non_blocking=True), y.to(device, non_blocking=True)


# --------------------------------------------------------------------------
# Models: parameters in a dict under the Hugging Face names llm-ckpt writes
# (GPT-2's Conv1D weights [in, out]; Llama's Linear weights [out, in]).


def gpt2_shapes(c):
    d, v, p = c["n_embd"], c["vocab_size"], c["n_positions"]
    f = c.get("n_inner") or 4 * d
    s = {"transformer.wte.weight": (v, d), "transformer.wpe.weight": (p, d)}
    for i in range(c["n_layer"]):
        h = f"transformer.h.{i}."
        s.update({h + "ln_1.weight": (d,), h + "ln_1.bias": (d,),
                  h + "attn.c_attn.weight": (d, 3 * d), h + "attn.c_attn.bias": (3 * d,),
                  h + "attn.c_proj.weight": (d, d), h + "attn.c_proj.bias": (d,),
                  h + "ln_2.weight": (d,), h + "ln_2.bias": (d,),
                  h + "mlp.c_fc.weight": (d, f), h + "mlp.c_fc.bias": (f,),
                  h + "mlp.c_proj.weight": (f, d), h + "mlp.c_proj.bias": (d,)})
    s.update({"transformer.ln_f.weight": (d,), "transformer.ln_f.bias": (d,)})
    if not c.get("tie_word_embeddings", True):
        s["lm_head.weight"] = (v, d)
    return s


def gpt2_forward(c, w, x, y):
    b, t = x.shape
    d, nh = c["n_embd"], c["n_head"]
    eps = c.get("layer_norm_epsilon", 1e-5)
    hx = w["transformer.wte.weight"][x] + w["transformer.wpe.weight"][:t]
    for i in range(c["n_layer"]):
        p = f"transformer.h.{i}."
        a = F.layer_norm(hx, (d,), w[p + "ln_1.weight"], w[p + "ln_1.bias"], eps)
        qkv = torch.addmm(w[p + "attn.c_attn.bias"], a.view(-1, d), w[p + "attn.c_attn.weight"])
        q, k, v = qkv.view(b, t, 3, nh, d // nh).permute(2, 0, 3, 1, 4)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        o = o.transpose(1, 2).reshape(-1, d)
        hx = hx + torch.addmm(w[p + "attn.c_proj.bias"], o, w[p + "attn.c_proj.weight"]).view(b, t, d)
        m = F.layer_norm(hx, (d,), w[p + "ln_2.weight"], w[p + "ln_2.bias"], eps)
        m = torch.addmm(w[p + "mlp.c_fc.bias"], m.view(-1, d), w[p + "mlp.c_fc.weight"])
        m = F.gelu(m, approximate="tanh")
        hx = hx + torch.addmm(w[p + "mlp.c_proj.bias"], m, w[p + "mlp.c_proj.weight"]).view(b, t, d)
    hx = F.layer_norm(hx, (d,), w["transformer.ln_f.weight"], w["transformer.ln_f.bias"], eps)
    head = w.get("lm_head.weight", w["transformer.wte.weight"])
    logits = hx.view(-1, d) @ head.t()
    return F.cross_entropy(logits.float(), y.reshape(-1))


def llama_shapes(c):
    d, v, f = c["hidden_size"], c["vocab_size"], c["intermediate_size"]
    nh = c["num_attention_heads"]
    kv = c.get("num_key_value_heads", nh)
    hd = c.get("head_dim") or d // nh
    s = {"model.embed_tokens.weight": (v, d)}
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        s.update({p + "input_layernorm.weight": (d,),
                  p + "self_attn.q_proj.weight": (nh * hd, d),
                  p + "self_attn.k_proj.weight": (kv * hd, d),
                  p + "self_attn.v_proj.weight": (kv * hd, d),
                  p + "self_attn.o_proj.weight": (d, nh * hd),
                  p + "post_attention_layernorm.weight": (d,),
                  p + "mlp.gate_proj.weight": (f, d), p + "mlp.up_proj.weight": (f, d),
                  p + "mlp.down_proj.weight": (d, f)})
    s["model.norm.weight"] = (d,)
    if not c.get("tie_word_embeddings", False):
        s["lm_head.weight"] = (v, d)
    return s


def rope_inverse_frequencies(c, hd):
    theta = c.get("rope_theta", 10000.0)
    inv = 1.0 / theta ** (np.arange(0, hd, 2, dtype=np.float64) / hd)
    rs = c.get("rope_scaling") or {}
    if rs.get("rope_type", rs.get("type")) == "llama3":
        # Llama 3.1's frequency-dependent extension (its published recipe).
        factor, lo, hi = rs["factor"], rs.get("low_freq_factor", 1.0), rs.get("high_freq_factor", 4.0)
        old = rs.get("original_max_position_embeddings", 8192)
        wavelen = 2 * math.pi / inv
        smooth = np.clip((old / wavelen - lo) / (hi - lo), 0.0, 1.0)
        inv = np.where(wavelen > old / lo, inv / factor,
                       np.where(wavelen < old / hi, inv, (1 - smooth) * inv / factor + smooth * inv))
    return inv


def rotate(x, cos, sin):
    h = x.shape[-1] // 2
    x1, x2 = x[..., :h], x[..., h:]
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


def llama_forward(c, w, x, y, rope):
    b, t = x.shape
    d, nh = c["hidden_size"], c["num_attention_heads"]
    kv = c.get("num_key_value_heads", nh)
    hd = c.get("head_dim") or d // nh
    eps = c.get("rms_norm_eps", 1e-6)
    cos, sin = rope[0][:t], rope[1][:t]
    hx = w["model.embed_tokens.weight"][x]
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        a = F.rms_norm(hx, (d,), w[p + "input_layernorm.weight"], eps)
        q = (a @ w[p + "self_attn.q_proj.weight"].t()).view(b, t, nh, hd)
        k = (a @ w[p + "self_attn.k_proj.weight"].t()).view(b, t, kv, hd)
        v = (a @ w[p + "self_attn.v_proj.weight"].t()).view(b, t, kv, hd)
        q = rotate(q, cos[:, None], sin[:, None]).transpose(1, 2)
        k = rotate(k, cos[:, None], sin[:, None]).transpose(1, 2)
        o = F.scaled_dot_product_attention(q, k, v.transpose(1, 2), is_causal=True,
                                           enable_gqa=kv != nh)
        hx = hx + o.transpose(1, 2).reshape(b, t, nh * hd) @ w[p + "self_attn.o_proj.weight"].t()
        m = F.rms_norm(hx, (d,), w[p + "post_attention_layernorm.weight"], eps)
        m = F.silu(m @ w[p + "mlp.gate_proj.weight"].t()) * (m @ w[p + "mlp.up_proj.weight"].t())
        hx = hx + m @ w[p + "mlp.down_proj.weight"].t()
    hx = F.rms_norm(hx, (d,), w["model.norm.weight"], eps)
    head = w.get("lm_head.weight", w["model.embed_tokens.weight"])
    logits = hx.view(-1, d) @ head.t()
    return F.cross_entropy(logits.float(), y.reshape(-1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("config")
    ap.add_argument("--data", required=True)
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--seq", type=int, required=True)
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--dtype", choices=["fp32", "bf16"], default="bf16")
    ap.add_argument("--weights", help="safetensors from llm-ckpt export (default: a fresh init)")
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--metrics")
    ap.add_argument("--summary")
    ap.add_argument("--warmup", type=int, default=5, help="steps left out of the speed summary")
    ap.add_argument("--flops-per-token", type=float, default=0.0,
                    help="the plan's train_flops_per_token, for MFU")
    ap.add_argument("--peak-tflops", type=float, default=989.0)
    a = ap.parse_args()

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = "cuda"
    c = json.load(open(a.config))
    llama = c.get("model_type") != "gpt2"
    shapes = llama_shapes(c) if llama else gpt2_shapes(c)
    if a.weights:
        from safetensors.torch import load_file
        st = load_file(a.weights)
        missing = sorted(set(shapes) - set(st))
        extra = sorted(set(st) - set(shapes))
        if missing or extra:
            sys.exit(f"{a.weights}: missing {missing[:4]}, unexpected {extra[:4]}")
        w = {}
        for n, s in shapes.items():
            if tuple(st[n].shape) != s:
                sys.exit(f"{a.weights}: {n} is {tuple(st[n].shape)}, expected {s}")
            w[n] = st[n].to(dev, torch.float32).requires_grad_()
    else:
        g = torch.Generator(device=dev).manual_seed(0)
        std = c.get("initializer_range", 0.02)
        w = {}
        for n, s in shapes.items():
            t = torch.empty(s, device=dev)
            if len(s) == 1:
                t.fill_(0.0 if n.endswith("bias") else 1.0)
            else:
                t.normal_(0.0, std, generator=g)
            w[n] = t.requires_grad_()
    params = list(w.values())

    if llama:
        hd = c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]
        inv = torch.tensor(rope_inverse_frequencies(c, hd), dtype=torch.float64)
        ang = torch.arange(a.seq, dtype=torch.float64)[:, None] * inv[None]
        rope = (ang.cos().float().to(dev), ang.sin().float().to(dev))
        fwd = lambda x, y: llama_forward(c, w, x, y, rope)
    else:
        fwd = lambda x, y: gpt2_forward(c, w, x, y)
    if a.compile:
        fwd = torch.compile(fwd)

    opt = torch.optim.AdamW(params, lr=a.lr, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1,
                            fused=True)
    tokens = read_shard(a.data)
    out = open(a.metrics, "w") if a.metrics else None
    times = []
    torch.cuda.reset_peak_memory_stats()
    for step in range(a.steps):
        x, y = batch(tokens, step, a.batch, a.seq, dev)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=a.dtype == "bf16"):
            loss = fwd(x, y)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        lv, nv = loss.item(), norm.item()
        torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        times.append(dt)
        tps = a.batch * a.seq / dt
        if out:
            out.write(json.dumps({"step": step + 1, "loss": lv, "grad_norm": nv,
                                  "tokens_per_s": tps, "step_time_s": dt}) + "\n")
        print(f"step {step + 1}/{a.steps}  loss {lv:.4f}  grad norm {nv:.3f}  {tps:.0f} tok/s",
              flush=True)
    if out:
        out.close()
    timed = times[a.warmup:] if len(times) > a.warmup else times
    med = statistics.median(timed)
    summary = {"framework": "pytorch " + torch.__version__ + (" compile" if a.compile else " eager"),
               "device": torch.cuda.get_device_name(), "dtype": a.dtype,
               "batch": a.batch, "seq": a.seq, "steps_timed": len(timed),
               "median_step_s": med, "tokens_per_s": a.batch * a.seq / med,
               "peak_allocated_bytes": torch.cuda.max_memory_allocated(),
               "peak_reserved_bytes": torch.cuda.max_memory_reserved()}
    if a.flops_per_token:
        summary["mfu"] = a.flops_per_token * summary["tokens_per_s"] / (a.peak_tflops * 1e12)
    print(json.dumps(summary))
    if a.summary:
        json.dump(summary, open(a.summary, "w"), indent=1)


if __name__ == "__main__":
    main()
