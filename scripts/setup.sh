#!/usr/bin/env bash
# Quick start, command 1: install what is missing, build, and run llm-opt on
# the bundled example models.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

install_deps
configure
build llm-opt llm-translate

cd "$LLMOPT_ROOT"
log "llm-opt examples/models/llama3-8b.json --llm-stats"
"$LLMOPT_BUILD/bin/llm-opt" examples/models/llama3-8b.json --llm-stats
echo
log "parameters and training FLOPs of every example model"
printf '%-16s %16s %16s %8s %14s\n' model params active layers "FLOP/token"
for m in examples/models/*.json; do
  "$LLMOPT_BUILD/bin/llm-opt" "$m" --llm-stats=format=json | python3 -c '
import json, sys
d = json.load(sys.stdin)
print("%-16s %16s %16s %8d %14.4g" % (d["name"], format(d["params_total"], ","),
      format(d["params_active"], ","), d["layers"], d["train_flops_per_token"]))'
done
