#!/bin/bash
# Lowers the same 21 plans (one rank, bf16, DP2 buckets, ZeRO-3, TP4 + SP, 4D GPT-2 / Llama /
# Mixtral, fp8, GPipe; ZeRO-1/2/3 with buckets, experts, fp16) with two llm-opt binaries and compares the plan files byte for byte:
# a refactoring of the compiler keeps plans identical (issue 18). Build the old binary from a
# worktree (git worktree add /tmp/old REV; configure and ninja llm-opt there).
OLD=${1:?usage: compare-plans.sh OLD_LLM_OPT NEW_LLM_OPT [OUT_DIR]}; NEW=${2:?usage: compare-plans.sh OLD_LLM_OPT NEW_LLM_OPT [OUT_DIR]}
IN="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/test/Runtime/Inputs"
out=${3:-$(mktemp -d)}; rm -rf "$out"; mkdir -p "$out"; status=0
run() { # name json auto-parallel-arg [lower-to-plan-options]
  local name=$1 json=$2 ap=$3 lower=${4:-}; shift 2
  for v in old new; do
    bin=$OLD; [ $v = new ] && bin=$NEW
    "$bin" $json -o /dev/null "$ap" "--llm-lower-to-plan=dir=$out/$name-$v lr=0.003 $lower" > /dev/null 2>$out/$name-$v.err || { echo "$name $v failed"; cat $out/$name-$v.err | tail -2; }
  done
  if cmp -s $out/$name-old/plan.json $out/$name-new/plan.json; then echo "$name: plan.json identical ($(wc -c < $out/$name-new/plan.json) bytes)"; else echo "$name: plan.json DIFFERS (diff $out/$name-old/plan.json $out/$name-new/plan.json)"; status=1; fi
}
sed 's/"n_layer": 2/"n_layer": 4/' $IN/byte-gpt2.json > $out/g4.json
AP="stack=llm-run-cpu cluster=dgx-h100 global-batch=4 seq-len=32"
run gpt2-1 "$IN/byte-gpt2.json --hf-dtype=f32" --llm-auto-parallel="$AP gpus=1 fix=dp:1,micro_batch:4"
run llama-bf16 "$IN/byte-llama.json" --llm-auto-parallel="$AP gpus=1 fix=dp:1,micro_batch:4"
run llama-dp2-buckets "$IN/byte-llama.json --hf-dtype=f32" --llm-auto-parallel="$AP gpus=2 fix=dp:2,micro_batch:1"
run llama-z3 "$IN/byte-llama.json --hf-dtype=f32" --llm-auto-parallel="$AP gpus=2 fix=dp:2,micro_batch:2,zero:3"
run llama-tp2-sp "$IN/byte-llama.json --hf-dtype=f32" --llm-auto-parallel="$AP gpus=4 fix=dp:1,tp:4,sp:1,micro_batch:4"
run gpt2-4d "$out/g4.json --hf-dtype=f32" --llm-auto-parallel="$AP gpus=16 fix=dp:2,cp:2,tp:2,pp:2,vpp:2,sp:1,zero:3,micro_batch:1"
run llama-4d "$IN/byte-llama.json --hf-dtype=f32" --llm-auto-parallel="$AP gpus=16 fix=dp:2,cp:2,tp:2,pp:2,sp:1,zero:1,micro_batch:1"
run mixtral-4d "$IN/byte-mixtral.json --hf-dtype=f32" --llm-auto-parallel="$AP gpus=8 fix=dp:2,ep:2,tp:2,pp:2,sp:1,micro_batch:1"
run llama-fp8 "$IN/byte-llama.json --hf-dtype=f32" --llm-auto-parallel="$AP gpus=1 fp8=true fix=dp:1,micro_batch:4"
run gpt2-gpipe "$out/g4.json --hf-dtype=f32" --llm-auto-parallel="$AP gpus=2 fix=dp:1,pp:2,micro_batch:1,schedule:gpipe"
# The optimizer's sharding and the gradient buckets (exec-shard-optimizer, exec-bucket-gradients):
# ZeRO-1 / 2 in bf16 and fp32 with small buckets, experts over edp with and without ZeRO, tied
# pipeline weights, fp16 loss scaling.
run llama-z1-bf16 "$IN/byte-llama.json" --llm-auto-parallel="$AP gpus=2 fix=dp:2,micro_batch:2,zero:1" "bucket-bytes=8192"
run llama-z2-small "$IN/byte-llama.json --hf-dtype=f32" --llm-auto-parallel="$AP gpus=2 fix=dp:2,micro_batch:2,zero:2" "bucket-bytes=8192"
run gpt2-z2-pp "$out/g4.json --hf-dtype=f32" --llm-auto-parallel="$AP gpus=4 fix=dp:2,pp:2,micro_batch:1,zero:2" "bucket-bytes=8192"
run gpt2-dp-pp "$out/g4.json --hf-dtype=f32" --llm-auto-parallel="$AP gpus=4 fix=dp:2,pp:2,micro_batch:1" "bucket-bytes=8192"
run mixtral-dp4-ep2 "$IN/byte-mixtral.json --hf-dtype=f32" --llm-auto-parallel="$AP gpus=4 fix=dp:4,ep:2,micro_batch:1" "bucket-bytes=8192"
run mixtral-z1-ep2 "$IN/byte-mixtral.json --hf-dtype=f32" --llm-auto-parallel="$AP gpus=4 fix=dp:4,ep:2,micro_batch:1,zero:1"
run mixtral-z2-ep2 "$IN/byte-mixtral.json --hf-dtype=f32" --llm-auto-parallel="$AP gpus=4 fix=dp:4,ep:2,micro_batch:1,zero:2" "bucket-bytes=8192"
run mixtral-z3-ep2-tp "$IN/byte-mixtral.json --hf-dtype=f32" --llm-auto-parallel="$AP gpus=8 fix=dp:4,ep:2,tp:2,sp:1,micro_batch:1,zero:3"
run llama-fp16-z1 "$IN/byte-llama.json --hf-dtype=f16" --llm-auto-parallel="$AP gpus=2 fix=dp:2,micro_batch:1,zero:1"
run llama-fp16-dp-tp "$IN/byte-llama.json --hf-dtype=f16" --llm-auto-parallel="$AP gpus=4 fix=dp:2,tp:2,micro_batch:1"
run llama-cp-z2 "$IN/byte-llama.json --hf-dtype=f32" --llm-auto-parallel="$AP gpus=4 fix=dp:2,cp:2,micro_batch:1,zero:2"
exit $status
