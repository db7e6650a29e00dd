#!/usr/bin/env bash
# Prepares .gpukit/ for a run on a GPU machine that has CUDA and PyTorch but
# neither MLIR nor OpenMPI (the workplace's lent H100/H200): the runtime's
# binaries built here, the shared libraries they need beyond CUDA's, the
# plans (lowered here by llm-opt) and the token shards. bench/gpu/run.sh then
# runs there from the repository root:
#   bench/gpu/make-kit.sh [BUILD_DIR [OLD_BUILD_DIR]]   # here, after ./scripts/test.sh
#   bench/gpu/run.sh OUT_DIR [PART...]    # there
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
# An older build's llm-opt and llm-run (a checkout of an earlier revision,
# built with `ninja llm-opt llm-run`): run.sh's `speed` part times its plans
# beside this build's on the same GPU. The checkout needs this one's cuDNN
# frontend headers (else its bf16 attention is the GEMM path, about half the
# speed): `git worktree add /tmp/old REV; mkdir /tmp/old/.deps; ln -s
# $root/.deps/cudnn-frontend /tmp/old/.deps/`, then configure as
# scripts/common.sh does.
old=${2:-}
kit=$root/.gpukit
rm -rf "$kit" && mkdir -p "$kit/bin" "$kit/lib" "$kit/plans" "$kit/data"
cp "$build"/bin/{llm-run,llm-data,llm-ckpt} "$build/kernels/tests/LLMOptKernelCUDATests" \
  "$build/runtime/tests/LLMOptRuntimeTests" "$build/bench/llm-opt-bench-gpu-kernels" "$kit/bin/"
# Shared libraries other than glibc's and CUDA's (OpenMPI and what it loads).
for b in "$kit"/bin/*; do
  ldd "$b" | awk '/=> \// {print $3}'
done | sort -u | grep -v -E '/(libc|libm|libdl|libpthread|librt|libgcc_s|libstdc\+\+|ld-linux[^/]*)\.so|/usr/local/cuda' |
  while read -r lib; do cp -L "$lib" "$kit/lib/"; done
# cuDNN's dispatcher library (small) so that llm-run starts where no cuDNN
# is installed; run.sh puts the machine's own cuDNN (PyTorch's) first.
if ldd "$kit/bin/llm-run" | grep -q libcudnn.so.9; then
  cp -L "$(ldd "$kit/bin/llm-run" | awk '/libcudnn.so.9/ {print $3}')" "$kit/lib/"
fi
opt=$build/bin/llm-opt
lower() { "$opt" "$1" ${3:-} -o /dev/null --llm-lower-to-plan="$2"; }
in=$root/test/Runtime/Inputs
# test/Runtime/cuda.test's plans: tiny fp32 GPT-2 and Llama, bf16 Llama.
lower "$in/byte-gpt2.json" "dir=$kit/plans/tiny-gpt2 batch=4 seq=32 lr=0.003" --hf-dtype=f32
lower "$in/byte-llama.json" "dir=$kit/plans/tiny-llama batch=4 seq=32 lr=0.003" --hf-dtype=f32
lower "$in/byte-llama.json" "dir=$kit/plans/tiny-bf16 batch=4 seq=32 lr=0.003"
lower "$in/byte-gpt2.json" "dir=$kit/plans/tiny-gpt2-bf16 batch=4 seq=32 lr=0.003"
# A vocabulary of 261 (rows not a multiple of 16 bytes, as GPT-2's 50257):
# the LM head on padded weights and its logits in padded rows.
sed 's/"vocab_size": 256/"vocab_size": 261/' "$in/byte-gpt2.json" >"$kit/byte-gpt2-v261.json"
lower "$kit/byte-gpt2-v261.json" "dir=$kit/plans/tiny-v261 batch=4 seq=32 lr=0.003" --hf-dtype=f32
lower "$kit/byte-gpt2-v261.json" "dir=$kit/plans/tiny-v261-bf16 batch=4 seq=32 lr=0.003"
# fp8 linears on the GPU's fp8 GEMMs.
"$opt" "$in/byte-llama.json" --hf-dtype=f32 -o /dev/null --llm-auto-parallel="cluster=dgx-h100 gpus=1 global-batch=4 seq-len=32 fp8=true fix=dp:1,micro_batch:4" --llm-lower-to-plan="dir=$kit/plans/tiny-fp8 lr=0.003" >/dev/null
"$opt" "$in/byte-gpt2.json" --hf-dtype=f32 -o /dev/null --llm-auto-parallel="cluster=dgx-h100 gpus=1 global-batch=4 seq-len=32 fp8=true fix=dp:1,micro_batch:4" --llm-lower-to-plan="dir=$kit/plans/tiny-fp8-gpt2 lr=0.003" >/dev/null
# Mixtral-style MoE (router, dispatch, experts, combine on the GPU).
lower "$in/byte-mixtral.json" "dir=$kit/plans/tiny-moe batch=4 seq=32 lr=0.003" --hf-dtype=f32
lower "$in/byte-mixtral.json" "dir=$kit/plans/tiny-moe-bf16 batch=4 seq=32 lr=0.003"
# Recomputation and two micro-batches (kept norm / loss statistics, graph
# replays), fp32 GPT-2 and Llama.
for m in gpt2 llama; do
  for rc in full selective; do
    "$opt" "$in/byte-$m.json" --hf-dtype=f32 -o /dev/null \
      --llm-auto-parallel="cluster=dgx-h100 gpus=1 global-batch=4 seq-len=32 fix=dp:1,micro_batch:2,recompute:$rc" \
      --llm-lower-to-plan="dir=$kit/plans/tiny-$m-rc-$rc lr=0.003" >/dev/null
  done
done
# Issue 16's GPU proof (test/Runtime/cuda-comm.test as a kit part): DP2 as two
# processes on one GPU through the host-staged communicator, fp32 with small
# gradient buckets and bf16, against the CPU backend's run of the same plans.
# dist NAME MODEL GPUS FIX [DTYPE] [LOWER OPTIONS]: MODEL's plan for GPUS
# ranks of the CPU stack with FIX, global batch 4 of 32 tokens (DTYPE f32:
# fp32, else the model's bf16).
dist() {
  local dtype=
  [ "${5:-}" = f32 ] && dtype=--hf-dtype=f32
  "$opt" "$2" $dtype -o /dev/null \
    --llm-auto-parallel="stack=llm-run-cpu cluster=dgx-h100 gpus=$3 global-batch=4 seq-len=32 fix=$4" \
    --llm-lower-to-plan="dir=$kit/plans/$1 lr=0.003 ${6:-}" >/dev/null
}
llama=$in/byte-llama.json gpt2=$in/byte-gpt2.json mixtral=$in/byte-mixtral.json
dist dp2 "$llama" 2 dp:2,micro_batch:1 f32 bucket-bytes=8192
dist dp2-bf16 "$llama" 2 dp:2,micro_batch:1
# ZeRO-1/2/3 over the same two ranks (the step driver's reduce-scatters,
# gathers and prefetched parameter gathers on device memory), two
# micro-batches, small buckets, fp32 and bf16.
for z in 1 2 3; do
  dist zero$z "$llama" 2 dp:2,micro_batch:2,zero:$z f32 bucket-bytes=8192
  dist zero$z-bf16 "$llama" 2 dp:2,micro_batch:2,zero:$z
done
# Pipeline stages on the GPU (two processes; four for GPT-2's DP2 x PP2 with
# ZeRO-1 and tied embeddings): 1F1B fp32 and bf16, GPipe, interleaved.
dist pp2 "$llama" 2 dp:1,pp:2,micro_batch:1 f32
dist pp2-bf16 "$llama" 2 dp:1,pp:2,micro_batch:1
dist pp2-gpipe "$llama" 2 dp:1,pp:2,micro_batch:1,schedule:gpipe f32
sed 's/"num_hidden_layers": 2/"num_hidden_layers": 4/' "$llama" >"$kit/byte-llama-l4.json"
dist vpp "$kit/byte-llama-l4.json" 2 dp:1,pp:2,vpp:2,micro_batch:1 f32
dist gpt2-pp "$gpt2" 4 dp:2,pp:2,zero:1,micro_batch:1 f32
# Tensor parallelism (vocabulary-parallel embedding and loss), with sequence
# parallelism in bf16, and GPT-2 DP2 x TP2 (tied embeddings, four processes).
dist tp2 "$llama" 2 dp:1,tp:2,micro_batch:4 f32
dist tp2-sp-bf16 "$llama" 2 dp:1,tp:2,sp:1,micro_batch:4
dist gpt2-dp2tp2 "$gpt2" 4 dp:2,tp:2,micro_batch:2 f32
# A vocabulary TP pads (261 rows over tp 2): the padding out of the loss.
dist tp2-padded "$kit/byte-gpt2-v261.json" 2 dp:1,tp:2,micro_batch:4 f32
# Expert parallelism: Mixtral DP2 x EP2 (the experts' all-to-alls), fp32 and bf16.
dist ep2 "$mixtral" 2 dp:2,ep:2,micro_batch:1 f32
dist ep2-bf16 "$mixtral" 2 dp:2,ep:2,micro_batch:1
# Context parallelism: ring attention (Llama fp32 and bf16), the learned
# position embedding at the chunks' positions (GPT-2).
dist cp2 "$llama" 2 dp:1,cp:2,micro_batch:2 f32
dist cp2-bf16 "$llama" 2 dp:1,cp:2,micro_batch:2
dist gpt2-cp2 "$gpt2" 2 dp:1,cp:2,micro_batch:2 f32
# Combinations: CP2 x TP2 (four processes), DP2 x TP2 x PP2 with sequence
# parallelism and ZeRO-1 (eight).
dist cp2tp2 "$llama" 4 dp:1,cp:2,tp:2,micro_batch:2 f32
dist 3d "$llama" 8 dp:2,tp:2,pp:2,sp:1,zero:1,micro_batch:1 f32
# Combinations first run on a GPU on 2026-11-26 (second lease; the llm-run
# stack offers ZeRO-2/3 with PP since): ZeRO-2 and ZeRO-3 with pipeline
# stages, MoE layers under TP + SP, stages of uneven depth (3 layers over 2
# stages).
dist gpt2-pp-zero2 "$gpt2" 4 dp:2,pp:2,zero:2,micro_batch:1 f32
dist pp-zero3 "$llama" 4 dp:2,pp:2,zero:3,micro_batch:1 f32
dist moe-tp2 "$mixtral" 2 dp:1,tp:2,sp:1,micro_batch:4 f32
sed 's/"num_hidden_layers": 2/"num_hidden_layers": 3/' "$llama" >"$kit/byte-llama-l3.json"
dist pp-uneven "$kit/byte-llama-l3.json" 2 dp:1,pp:2,micro_batch:1 f32
# More cells of test/Runtime/plan-matrix.test's matrix: GPT-2 ZeRO-3 and
# four layers interleaved (the tied head on the first and last stage),
# Mixtral over pipeline stages and over context parallelism.
dist gpt2-zero3 "$gpt2" 2 dp:2,micro_batch:2,zero:3 f32
sed 's/"n_layer": 2/"n_layer": 4/' "$gpt2" >"$kit/byte-gpt2-l4.json"
dist gpt2-vpp "$kit/byte-gpt2-l4.json" 2 dp:1,pp:2,vpp:2,micro_batch:1 f32
dist moe-pp2 "$mixtral" 2 dp:1,pp:2,micro_batch:1 f32
dist moe-cp2 "$mixtral" 2 dp:1,cp:2,micro_batch:2 f32
# fp8 linears under TP2 (each operand's amax the maximum over tp), on a
# Llama wide enough for fp8 GEMMs' multiples of 16 once split.
sed 's/"hidden_size": 32/"hidden_size": 64/; s/"intermediate_size": 48/"intermediate_size": 128/' \
  "$llama" >"$kit/byte-llama-wide.json"
"$opt" "$kit/byte-llama-wide.json" --hf-dtype=f32 -o /dev/null \
  --llm-auto-parallel="stack=llm-run-cpu cluster=dgx-h100 gpus=2 global-batch=4 seq-len=32 fp8=true fix=dp:1,tp:2,micro_batch:4" \
  --llm-lower-to-plan="dir=$kit/plans/tp2-fp8 lr=0.003" >/dev/null
cp "$in/launch_env.py" "$in/compare_metrics.py" "$kit/bin/"
# Issue 7's measurements: GPT-2 124M B=16 T=1024 and Llama 3.2 1B, bf16.
lower "$root/examples/models/gpt2-124m.json" "dir=$kit/plans/gpt2-124m batch=16 seq=1024"
# lr 1e-4: at 3e-4 the 1B model's first steps spike (loss 8.8 -> 14.1 on
# the H100, in PyTorch too), which makes two implementations' runs diverge.
lower "$root/examples/models/llama3.2-1b.json" "dir=$kit/plans/llama-1b batch=8 seq=2048 lr=1e-4"
if [ -n "$old" ]; then
  mkdir -p "$kit/old/bin" "$kit/old/plans"
  cp "$old/bin/llm-run" "$kit/old/bin/"
  "$old/bin/llm-opt" "$root/examples/models/gpt2-124m.json" -o /dev/null \
    --llm-lower-to-plan="dir=$kit/old/plans/gpt2-124m batch=16 seq=1024"
  "$old/bin/llm-opt" "$root/examples/models/llama3.2-1b.json" -o /dev/null \
    --llm-lower-to-plan="dir=$kit/old/plans/llama-1b batch=8 seq=2048 lr=1e-4"
fi
"$build/bin/llm-data" bytes "$root/examples/data/tiny.txt" "$kit/data/tiny.bin"
# About 1 MB of text (this repository's docs and sources) as byte tokens:
# more than 20 steps of 16 x 1024 tokens without wrapping.
# From a fixed revision (58bada9, 2026-11-22), so that every run trains on
# the same text whatever the working tree holds.
(cd "$root" && git archive 58bada9 docs lib runtime/src kernels/cpu | tar -x -O --wildcards \
  'docs/*.md' 'lib/*/*.cpp' 'runtime/src/*.cpp' 'kernels/cpu/*.cpp' | head -c 1200000) >"$kit/data/text.txt"
"$build/bin/llm-data" bytes "$kit/data/text.txt" "$kit/data/text.bin"
rm "$kit/data/text.txt"
# The CPU backend's runs of the tiny and comm parts' plans, the references
# the GPU runs are compared with, made here so that a lent GPU's minutes go
# to the GPU runs (bench/gpu/run.sh takes them from expected/ where there).
mkdir -p "$kit/expected"
ref() { # plan ranks
  if [ "$2" = 1 ]; then
    "$build/bin/llm-run" "$kit/plans/$1" --data "$kit/data/tiny.bin" --steps 10 \
      --metrics "$kit/expected/$1.jsonl" --quiet
  else
    PATH="$build/bin:$PATH" python3 "$in/launch_env.py" -n "$2" --timeout 300 -- llm-run \
      "$kit/plans/$1" --data "$kit/data/tiny.bin" --steps 10 --metrics "$kit/expected/$1.jsonl" --quiet
  fi
}
for n in tiny-gpt2 tiny-llama tiny-bf16 tiny-gpt2-bf16 tiny-gpt2-rc-full tiny-gpt2-rc-selective \
  tiny-llama-rc-full tiny-llama-rc-selective tiny-v261 tiny-v261-bf16 tiny-moe tiny-moe-bf16 \
  tiny-fp8 tiny-fp8-gpt2; do
  ref $n 1
done
for n in dp2 dp2-bf16 zero1 zero1-bf16 zero2 zero2-bf16 zero3 zero3-bf16 pp2 pp2-bf16 pp2-gpipe vpp \
  tp2 tp2-sp-bf16 tp2-padded ep2 ep2-bf16 cp2 cp2-bf16 gpt2-cp2 tp2-fp8 moe-tp2 pp-uneven \
  gpt2-zero3 gpt2-vpp moe-pp2 moe-cp2; do
  ref $n 2
done
for n in gpt2-pp gpt2-dp2tp2 cp2tp2 gpt2-pp-zero2 pp-zero3; do
  ref $n 4
done
ref 3d 8
du -sh "$kit"
