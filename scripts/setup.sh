#!/usr/bin/env bash
# Quick start, command 1: install what is missing, build, and plan real
# models on real clusters.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

install_deps
# --ecosystem: also the trainers that check the exports (scripts/test.sh
# installs them anyway; test/Ecosystem).
if [[ "${1:-}" == --ecosystem ]]; then
  install_ecosystem
  install_ecosystem_torchtitan
fi
configure
build llm-opt llm-translate

cd "$LLMOPT_ROOT"
opt="$LLMOPT_BUILD/bin/llm-opt"

log "llm-opt examples/models/llama3-70b.json --llm-stats"
"$opt" examples/models/llama3-70b.json --llm-stats
echo
log "how should Llama-3 70B train on 64 H100 (8 DGX nodes), 512 x 8192 tokens per step?"
"$opt" examples/models/llama3-70b.json -o /dev/null \
  --llm-auto-parallel="cluster=dgx-h100 gpus=64 global-batch=512 seq-len=8192 top-k=5"
echo
log "and GPT-3 175B on 1024 H100, 1536 x 2048 tokens, as Megatron-LM arguments?"
"$opt" examples/models/gpt3-175b.json -o /dev/null \
  --llm-auto-parallel="cluster=dgx-h100 gpus=1024 global-batch=1536 seq-len=2048 top-k=3 export=megatron"
