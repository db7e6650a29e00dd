#!/usr/bin/env bash
# Runs issue 7's GPU checks and measurements from .gpukit/ (bench/gpu/make-kit.sh)
# on a machine with an NVIDIA GPU, CUDA 13 and PyTorch, from the repository root:
#   bench/gpu/run.sh OUT_DIR [smoke] [kernels] [tiny] [comm] [sanitize] [gpt2] [gpt2-torch]
#                    [gpt2-compile] [gpt2-gemm] [gpt2-graphs] [llama] [llama-torch]
#                    [llama-compile] [llama-gemm] [gpt2-padded] [bench] [speed] [optin] [nccl]
#                    [comm-graphs]
# Writes OUT_DIR/log.txt and OUT_DIR/results.tgz (metrics, profiles, summaries).
# `smoke` first where device minutes are few: in about a minute, two steps
# of each path written without a GPU (the one-GPU step driver and device
# store, DP2, ZeRO-3, PP2, TP2+SP, EP2, CP2 staged), each against the CPU's
# first step, so that a failure shows before the long parts run.
# On an H200 on 2026-11-26 (the kit of that day, from a warm machine):
# smoke + comm 3 min, speed + kernels 2.5 min, tiny 35 s, sanitize +
# gpt2-compile + llama-compile 2 min. With 15 device minutes, one call of
#   LAUNCH_TMO=30 bench/gpu/run.sh OUT smoke comm speed kernels tiny
# (parts run in this script's order, not the command line's) leaves room
# for one more; add `nccl` on a machine with two GPUs or more. On
# 2026-11-26 (second lease) that call took 205-228 s, `sanitize optin` 130 s;
# `comm-graphs` runs the multi-rank plans under CUDA graphs (opt-in until it
# passes).
set -uo pipefail
out=$(mkdir -p "$1" && cd "$1" && pwd); shift
parts=" ${*:-kernels tiny gpt2 gpt2-torch} "
root=$(cd "$(dirname "$0")/../.." && pwd)
kit=$root/.gpukit
work=$(mktemp -d)
exec > >(tee "$out/log.txt") 2>&1
# Results (metrics, profiles, summaries) are packed however the run ends,
# a time limit included; weights and checkpoints are left out.
finish() {
  trap - EXIT TERM INT
  rm -rf "$work"/*-init "$work"/*.safetensors "$work"/ck
  tar czf "$out/results.tgz" -C "$work" . 2>/dev/null
  exit "${1:-0}"
}
trap 'finish 1' TERM INT
trap 'finish' EXIT
cublas=$(find /usr/local /opt /usr/lib -name 'libcublasLt.so.13*' 2>/dev/null | head -1)
cudnn=$(python3 -c 'import glob, os, nvidia.cudnn as c; print(os.path.join(list(c.__path__)[0], "lib"))' 2>/dev/null ||
  dirname "$(find /usr/local /opt /usr/lib -name 'libcudnn_engines_precompiled.so.9*' 2>/dev/null | head -1)")
# NVRTC (the generated kernels' compiler): the toolkit's, else PyTorch's
# wheel; NCCL (loaded by llm-run for --comm nccl): PyTorch's wheel's.
nvrtc=$(find /usr/local/cuda*/lib64 /usr/local /opt -name 'libnvrtc.so.13*' 2>/dev/null | head -1)
nccl=$(find /usr/local /opt /usr/lib -name 'libnccl.so.2*' 2>/dev/null | head -1)
export LD_LIBRARY_PATH=${cudnn:+$cudnn:}$kit/lib:$(dirname "${cublas:-/usr/local/cuda/lib64/x}"):${nvrtc:+$(dirname "$nvrtc"):}${nccl:+$(dirname "$nccl"):}/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export PATH=$kit/bin:$PATH PYTHONUNBUFFERED=1
cmp=$root/test/Runtime/Inputs/compare_metrics.py
ref=$root/bench/gpu/torch_reference.py
has() { [[ $parts == *" $1 "* ]]; }
step() { echo; echo "=== $*"; }
run() { echo "+ $*"; local t0=$SECONDS; timeout "${TMO:-300}" "$@"; local rc=$?; echo "[rc $rc, $((SECONDS - t0)) s]"; return $rc; }
side() { python3 - "$@" <<'PY'
import json, sys
rows = [{r["step"]: r for r in map(json.loads, open(p))} for p in sys.argv[1:]]
for s in sorted(rows[0]):
    print(s, *("%.6f %.4f" % (r[s]["loss"], r[s]["grad_norm"]) if s in r else "-" for r in rows))
PY
}
# The CPU backend's run of plan $1 into $1-cpu.jsonl: the kit's (made by
# make-kit.sh), else the command that follows.
cpu() {
  local n=$1; shift
  if [ -f "$kit/expected/$n.jsonl" ]; then
    cp "$kit/expected/$n.jsonl" "$n-cpu.jsonl" && echo "(the CPU backend's run of $n: the kit's)"
  else
    "$@"
  fi
}
flops() { grep -o '"train_flops_per_token": [0-9.e+]*' "$1/plan.json" | awk '{print $2}'; }
# The plan's learning rate (its first adamw), for PyTorch to use the same.
lr() { python3 -c 'import json, sys
for p in json.load(open(sys.argv[1]))["programs"]:
    for i in p["step_instructions"]:
        if i.get("kernel") == "adamw":
            print(i["params"]["lr"]); sys.exit()' "$1/plan.json"; }
# After two launches that ran out of time (timeout's 124, launch_env.py's
# 2), the rest of a list is skipped so that a hang does not spend the
# lease's minutes. LAUNCH_TMO: the seconds each comm launch may take.
hangs=0
hung() {
  case $1 in 2 | 124) hangs=$((hangs + 1)) ;; esac
  [ $hangs -ge 2 ] && echo "two launches ran out of time: the rest of this list skipped"
  [ $hangs -ge 2 ]
}
cd "$work"
step "machine"; date -u; nvidia-smi -L; nvidia-smi --query-gpu=driver_version,clocks.max.sm --format=csv
echo "cublasLt: $cublas"; echo "cuDNN: ${cudnn:-none}"; echo "NVRTC: ${nvrtc:-none}"; echo "NCCL: ${nccl:-none}"; python3 -c 'import torch; print("torch", torch.__version__)'
ldd "$kit/bin/llm-run" | grep -E "not found|cublas|cudart|cudnn|nvrtc"

if has smoke; then
  step "smoke: two steps of each path written without a GPU, against the CPU backend's"
  for p in tiny-llama:1 tiny-bf16:1 dp2:2 zero3:2 pp2:2 tp2-sp-bf16:2 tp2-padded:2 ep2:2 cp2:2; do
    n=${p%%:*} ranks=${p##*:}
    if [ "$ranks" = 1 ]; then
      TMO=40 run llm-run "$kit/plans/$n" --data "$kit/data/tiny.bin" --steps 2 --metrics $n-smoke.jsonl --device cuda --quiet
    else
      TMO=40 run python3 "$kit/bin/launch_env.py" -n $ranks --timeout 30 -- llm-run "$kit/plans/$n" --data "$kit/data/tiny.bin" --steps 2 --metrics $n-smoke.jsonl --device cuda --comm staged --quiet
    fi
    hung $? && break
    tol=1e-3
    case $n in *bf16*) tol=2e-2 ;; esac
    [ -f "$kit/expected/$n.jsonl" ] && python3 "$cmp" "$kit/expected/$n.jsonl" $n-smoke.jsonl --rel $tol --to 2
  done
fi

if has kernels; then
  step "kernel unit tests against the CPU references"
  run "$kit/bin/LLMOptKernelCUDATests" --gtest_color=no 2>&1 | grep -v -E "^\[ RUN|^\[-+\]|^$" | head -120
  step "the runtime's CUDA tests (the CUDA executor as the parameter store)"
  run "$kit/bin/LLMOptRuntimeTests" --gtest_color=no --gtest_filter='*Cuda*' 2>&1 | grep -v -E "^\[ RUN|^\[-+\]|^$" | head -60
fi

if has bench; then
  step "GPU kernel benchmarks (bench/GpuKernelBench.cpp)"
  run "$kit/bin/llm-opt-bench-gpu-kernels" --benchmark_min_time=0.2 --benchmark_out=gpu-kernels.json
fi

if has tiny; then
  step "test/Runtime/cuda.test: CUDA vs CPU backend on the tiny models"
  for p in tiny-gpt2:1e-3 tiny-llama:1e-3 tiny-bf16:2e-2 tiny-gpt2-bf16:2e-2 tiny-gpt2-rc-full:1e-3 \
    tiny-gpt2-rc-selective:1e-3 tiny-llama-rc-full:1e-3 tiny-llama-rc-selective:1e-3 \
    tiny-v261:1e-3 tiny-v261-bf16:2e-2 tiny-moe:1e-3 tiny-moe-bf16:2e-2 tiny-fp8:2e-2 tiny-fp8-gpt2:2e-2; do
    n=${p%%:*} tol=${p##*:}
    cpu $n run llm-run "$kit/plans/$n" --data "$kit/data/tiny.bin" --steps 10 --metrics $n-cpu.jsonl --quiet
    run llm-run "$kit/plans/$n" --data "$kit/data/tiny.bin" --steps 10 --metrics $n-gpu.jsonl --device cuda --quiet
    side $n-cpu.jsonl $n-gpu.jsonl
    python3 "$cmp" $n-cpu.jsonl $n-gpu.jsonl --rel $tol
  done
  step "the GEMM attention (LLMOPT_CUDA_ATTENTION=gemm; bf16 plans use cuDNN's by default) vs the CPU backend, bf16"
  for n in tiny-bf16 tiny-gpt2-bf16; do
    LLMOPT_CUDA_ATTENTION=gemm run llm-run "$kit/plans/$n" --data "$kit/data/tiny.bin" --steps 10 --metrics $n-gemm.jsonl --device cuda --quiet
    side $n-cpu.jsonl $n-gemm.jsonl
    python3 "$cmp" $n-cpu.jsonl $n-gemm.jsonl --rel 2e-2
  done
  step "the LM head's logits copied out of padded rows (LLMOPT_CUDA_PAD_LOGITS=0) vs the CPU backend"
  for p in tiny-v261:1e-3 tiny-v261-bf16:2e-2; do
    n=${p%%:*} tol=${p##*:}
    LLMOPT_CUDA_PAD_LOGITS=0 run llm-run "$kit/plans/$n" --data "$kit/data/tiny.bin" --steps 10 --metrics $n-padded.jsonl --device cuda --quiet
    python3 "$cmp" $n-cpu.jsonl $n-padded.jsonl --rel $tol
  done
  step "one AdamW launch per tensor (LLMOPT_CUDA_MULTI_ADAMW=0) vs the multi-tensor default: bit-identical, also under graphs"
  for n in tiny-llama tiny-bf16 tiny-moe-bf16; do
    LLMOPT_CUDA_MULTI_ADAMW=0 run llm-run "$kit/plans/$n" --data "$kit/data/tiny.bin" --steps 10 --metrics $n-single.jsonl --device cuda --quiet
    python3 "$cmp" $n-gpu.jsonl $n-single.jsonl --rel 0
    LLMOPT_CUDA_MULTI_ADAMW=0 LLMOPT_CUDA_GRAPHS=1 run llm-run "$kit/plans/$n" --data "$kit/data/tiny.bin" --steps 10 --metrics $n-single-graphs.jsonl --device cuda --quiet
    LLMOPT_CUDA_GRAPHS=1 run llm-run "$kit/plans/$n" --data "$kit/data/tiny.bin" --steps 10 --metrics $n-multi-graphs.jsonl --device cuda --quiet
    python3 "$cmp" $n-multi-graphs.jsonl $n-single-graphs.jsonl --rel 0
  done
  step "CUDA graphs (LLMOPT_CUDA_GRAPHS=1) vs the CPU backend"
  for p in tiny-llama:1e-3 tiny-bf16:2e-2 tiny-llama-rc-full:1e-3 tiny-moe-bf16:2e-2; do
    n=${p%%:*} tol=${p##*:}
    LLMOPT_CUDA_GRAPHS=1 run llm-run "$kit/plans/$n" --data "$kit/data/tiny.bin" --steps 10 --metrics $n-graphs.jsonl --device cuda --quiet 2> $n-graphs.err
    cat $n-graphs.err
    grep -q "could not be captured" $n-graphs.err && echo "FAIL: no CUDA graph for $n"
    python3 "$cmp" $n-cpu.jsonl $n-graphs.jsonl --rel $tol
  done
  step "resume on the GPU"
  run llm-run "$kit/plans/tiny-llama" --data "$kit/data/tiny.bin" --steps 4 --metrics full.jsonl --device cuda --checkpoint-dir ck --checkpoint-every 2 --quiet
  echo step-00000002 > ck/LATEST
  run llm-run "$kit/plans/tiny-llama" --data "$kit/data/tiny.bin" --steps 4 --resume ck --metrics resumed.jsonl --device cuda --quiet
  python3 "$cmp" full.jsonl resumed.jsonl --rel 0 --from 3
  step "resume on the GPU, bf16 (the working copy remade from the resumed masters)"
  run llm-run "$kit/plans/tiny-bf16" --data "$kit/data/tiny.bin" --steps 4 --metrics full-bf16.jsonl --device cuda --checkpoint-dir ck-bf16 --checkpoint-every 2 --quiet
  echo step-00000002 > ck-bf16/LATEST
  run llm-run "$kit/plans/tiny-bf16" --data "$kit/data/tiny.bin" --steps 4 --resume ck-bf16 --metrics resumed-bf16.jsonl --device cuda --quiet
  python3 "$cmp" full-bf16.jsonl resumed-bf16.jsonl --rel 0 --from 3
  step "a CPU checkpoint resumed on the GPU, against the CPU's own steps 3-4"
  run llm-run "$kit/plans/tiny-llama" --data "$kit/data/tiny.bin" --steps 2 --checkpoint-dir ck-cpu --quiet
  run llm-run "$kit/plans/tiny-llama" --data "$kit/data/tiny.bin" --steps 4 --resume ck-cpu --metrics cpu-to-gpu.jsonl --device cuda --quiet
  python3 "$cmp" tiny-llama-cpu.jsonl cpu-to-gpu.jsonl --rel 1e-3 --from 3
  rm -rf ck-bf16 ck-cpu
fi

# N processes of llm-run on this machine, launched torchrun-style over TCP.
two() { run python3 "$kit/bin/launch_env.py" -n 2 --timeout "${LAUNCH_TMO:-240}" -- llm-run "$@"; }
four() { run python3 "$kit/bin/launch_env.py" -n 4 --timeout "${LAUNCH_TMO:-240}" -- llm-run "$@"; }
eight() { run python3 "$kit/bin/launch_env.py" -n 8 --timeout "${LAUNCH_TMO:-240}" -- llm-run "$@"; }
launcher() { # the launch function for kit plan $1
  case $1 in gpt2-pp | gpt2-dp2tp2 | cp2tp2 | gpt2-pp-zero2 | pp-zero3) echo four ;; 3d) echo eight ;; *) echo two ;; esac
}
if has comm; then
  # Issue 16: two ranks on one GPU (NCCL refuses that) through the host-staged
  # communicator, launched torchrun-style over TCP (no MPI there).
  step "DP2 as two processes on one GPU (--comm staged) vs the CPU backend"
  hangs=0
  for p in dp2:1e-5 dp2-bf16:2e-2 zero1:1e-5 zero1-bf16:2e-2 zero2:1e-5 zero2-bf16:2e-2 \
    zero3:1e-5 zero3-bf16:2e-2; do
    n=${p%%:*} tol=${p##*:}
    cpu $n two "$kit/plans/$n" --data "$kit/data/tiny.bin" --steps 10 --metrics $n-cpu.jsonl --quiet
    two "$kit/plans/$n" --data "$kit/data/tiny.bin" --steps 10 --metrics $n-gpu.jsonl --device cuda --comm staged --quiet
    hung $? && break
    side $n-cpu.jsonl $n-gpu.jsonl
    python3 "$cmp" $n-cpu.jsonl $n-gpu.jsonl --rel $tol
  done
  step "--comm auto picks the staged path for ranks sharing a GPU (bit-identical)"
  two "$kit/plans/dp2" --data "$kit/data/tiny.bin" --steps 10 --metrics dp2-auto.jsonl --device cuda --quiet
  python3 "$cmp" dp2-gpu.jsonl dp2-auto.jsonl --rel 0
  step "pipeline stages, tensor, expert and context parallelism as processes on one GPU (--comm staged) vs the CPU backend"
  for p in pp2:1e-5 pp2-bf16:2e-2 pp2-gpipe:1e-5 vpp:1e-5 gpt2-pp:1e-5 tp2:1e-5 tp2-sp-bf16:2e-2 tp2-padded:1e-5 \
    gpt2-dp2tp2:1e-5 ep2:1e-5 ep2-bf16:2e-2 cp2:1e-5 cp2-bf16:2e-2 gpt2-cp2:1e-5 cp2tp2:1e-5 \
    3d:1e-5 tp2-fp8:2e-2 gpt2-pp-zero2:1e-5 pp-zero3:1e-5 moe-tp2:1e-5 pp-uneven:1e-5 \
    gpt2-zero3:1e-5 gpt2-vpp:1e-5 moe-pp2:1e-5 moe-cp2:1e-5; do
    n=${p%%:*} tol=${p##*:} launch=$(launcher $n)
    cpu $n $launch "$kit/plans/$n" --data "$kit/data/tiny.bin" --steps 10 --metrics $n-cpu.jsonl --quiet
    $launch "$kit/plans/$n" --data "$kit/data/tiny.bin" --steps 10 --metrics $n-gpu.jsonl --device cuda --comm staged --quiet
    hung $? && break
    side $n-cpu.jsonl $n-gpu.jsonl
    python3 "$cmp" $n-cpu.jsonl $n-gpu.jsonl --rel $tol
  done
  step "ZeRO-2 on two GPU ranks: checkpoint at step 2, resumed (bit-exact), and resumed by the CPU backend"
  two "$kit/plans/zero2" --data "$kit/data/tiny.bin" --steps 4 --metrics z2-full.jsonl --device cuda --comm staged --checkpoint-dir ck-z2 --checkpoint-every 2 --quiet
  echo step-00000002 > ck-z2/LATEST
  two "$kit/plans/zero2" --data "$kit/data/tiny.bin" --steps 4 --resume ck-z2 --metrics z2-resumed.jsonl --device cuda --comm staged --quiet
  python3 "$cmp" z2-full.jsonl z2-resumed.jsonl --rel 0 --from 3
  two "$kit/plans/zero2" --data "$kit/data/tiny.bin" --steps 4 --resume ck-z2 --metrics z2-cpu-resumed.jsonl --quiet
  python3 "$cmp" z2-full.jsonl z2-cpu-resumed.jsonl --rel 1e-3 --from 3
  rm -rf ck-z2
  step "--comm nccl for ranks sharing a GPU: refused by name"
  two "$kit/plans/dp2" --data "$kit/data/tiny.bin" --steps 1 --device cuda --comm nccl --quiet 2>&1 | tail -3
fi

if has comm-graphs; then
  # CUDA graphs (LLMOPT_CUDA_GRAPHS=1) on multi-rank plans, which keep them
  # opt-in until they equal the CPU backend here; a plan whose step cannot
  # be captured says so on stderr and launches kernel by kernel.
  step "CUDA graphs on staged multi-rank plans vs the CPU backend"
  hangs=0
  for p in dp2:1e-5 zero1:1e-5 zero3:1e-5 pp2:1e-5 tp2-sp-bf16:2e-2 ep2:1e-5 cp2:1e-5 3d:1e-5; do
    n=${p%%:*} tol=${p##*:} launch=$(launcher $n)
    cpu $n $launch "$kit/plans/$n" --data "$kit/data/tiny.bin" --steps 10 --metrics $n-cpu.jsonl --quiet
    LLMOPT_CUDA_GRAPHS=1 $launch "$kit/plans/$n" --data "$kit/data/tiny.bin" --steps 10 --metrics $n-graphs.jsonl --device cuda --comm staged --quiet 2>&1 | grep -v '^$' | sort -u | head -4
    hung ${PIPESTATUS[0]} && break
    python3 "$cmp" $n-cpu.jsonl $n-graphs.jsonl --rel $tol
  done
fi

if has nccl; then
  # Issue 16 (test/Runtime/cuda-nccl.test as a kit part): NCCL between GPUs,
  # a GPU per rank, launched torchrun-style (the NCCL id over the TCP store).
  gpus=$(nvidia-smi -L | grep -c '^GPU')
  if [ "$gpus" -lt 2 ]; then
    step "NCCL between GPUs: this machine has $gpus GPU, skipped"
  else
    step "NCCL between GPUs ($gpus GPUs, --comm nccl) vs the CPU backend"
    hangs=0
    for p in dp2:2:1e-5 zero3:2:1e-5 zero3-bf16:2:2e-2 pp2:2:1e-5 pp2-gpipe:2:1e-5 vpp:2:1e-5 \
      tp2:2:1e-5 tp2-sp-bf16:2:2e-2 tp2-padded:2:1e-5 ep2:2:1e-5 ep2-bf16:2:2e-2 cp2:2:1e-5 cp2-bf16:2:2e-2 \
      tp2-fp8:2:2e-2 moe-tp2:2:1e-5 pp-uneven:2:1e-5 gpt2-zero3:2:1e-5 gpt2-vpp:2:1e-5 moe-pp2:2:1e-5 \
      moe-cp2:2:1e-5 gpt2-pp:4:1e-5 gpt2-dp2tp2:4:1e-5 cp2tp2:4:1e-5 \
      gpt2-pp-zero2:4:1e-5 pp-zero3:4:1e-5 3d:8:1e-5; do
      IFS=: read -r n ranks tol <<<"$p"
      [ "$ranks" -gt "$gpus" ] && { echo "$n: $ranks ranks, skipped"; continue; }
      run python3 "$kit/bin/launch_env.py" -n $ranks --timeout "${LAUNCH_TMO:-240}" -- llm-run "$kit/plans/$n" \
        --data "$kit/data/tiny.bin" --steps 10 --metrics $n-nccl.jsonl --device cuda --comm nccl --quiet
      hung $? && break
      python3 "$cmp" "$kit/expected/$n.jsonl" $n-nccl.jsonl --rel $tol
    done
    step "--comm auto picks NCCL where each rank has a GPU (bit-identical)"
    run python3 "$kit/bin/launch_env.py" -n 2 --timeout "${LAUNCH_TMO:-240}" -- llm-run "$kit/plans/dp2" \
      --data "$kit/data/tiny.bin" --steps 10 --metrics dp2-nccl-auto.jsonl --device cuda --quiet
    python3 "$cmp" dp2-nccl.jsonl dp2-nccl-auto.jsonl --rel 0
    step "the watchdog over NCCL: rank 1 stops at step 3, rank 0 names it within 2 s"
    TMO=60 run python3 "$kit/bin/launch_env.py" -n 2 --timeout 40 --grace 5 \
      --env 1:LLMOPT_TEST_FAIL_RANK=1 --env 1:LLMOPT_TEST_FAIL_STEP=3 --env 1:LLMOPT_TEST_FAIL_MODE=hang \
      -- llm-run "$kit/plans/dp2" --data "$kit/data/tiny.bin" --steps 10 --device cuda --comm nccl \
      --collective-timeout 2 --quiet 2>&1 | tail -4
  fi
fi

if has sanitize; then
  step "compute-sanitizer memcheck, tiny models, 2 steps"
  for n in tiny-gpt2 tiny-bf16 tiny-moe-bf16; do
    TMO=200 run compute-sanitizer --tool memcheck --print-limit 20 llm-run "$kit/plans/$n" --data "$kit/data/tiny.bin" --steps 2 --device cuda --quiet 2>&1 | tail -40
  done
  # Staged ranks (the page-locked staging pool, ZeRO's chunked sums of
  # squares, the padded vocabulary-parallel loss), each rank under memcheck.
  for n in zero3 tp2-padded; do
    TMO=200 run python3 "$kit/bin/launch_env.py" -n 2 --timeout 180 -- compute-sanitizer --tool memcheck \
      --print-limit 20 llm-run "$kit/plans/$n" --data "$kit/data/tiny.bin" --steps 2 --device cuda \
      --comm staged --quiet 2>&1 | tail -40
  done
fi

# medians FILE LABEL: a run's medians over steps 6 on (the first five warm
# up) and its last loss.
medians() {
  python3 - "$1" "$2" <<'PY'
import json, statistics, sys
r = [json.loads(l) for l in open(sys.argv[1])][5:]
if r:
    print("%s: median step %.4f s, %.0f tok/s, MFU %.3f, device memory %.2f GB, loss at step %d %.4f" % (
        sys.argv[2], statistics.median(x["step_time_s"] for x in r),
        statistics.median(x["tokens_per_s"] for x in r), statistics.median(x.get("mfu", 0) for x in r),
        max(x.get("device_memory_bytes", 0) for x in r) / 1e9, r[-1]["step"], r[-1]["loss"]))
PY
}
bench() { # NAME STEPS
  local n=$1 steps=$2 plan=$kit/plans/$1
  step "$n: llm-opt on the GPU, $steps steps"
  # The initial weights for PyTorch (only where it runs from them: writing
  # and exporting 1B parameters takes minutes).
  if has ${n%%-*}-torch; then
  run llm-run "$plan" --data "$kit/data/text.bin" --steps 0 --checkpoint-dir $n-init --device cuda --quiet ||
    run llm-run "$plan" --data "$kit/data/text.bin" --steps 0 --checkpoint-dir $n-init --overwrite --quiet
  [ -d $n-init ] &&
    run llm-ckpt export $n-init $n-init.safetensors
  fi
  TMO=${OURS_TMO:-240} run llm-run "$plan" --data "$kit/data/text.bin" --steps $steps --metrics $n-ours.jsonl \
    --device cuda --peak-tflops 989
  # Per-kernel times (CUDA events around each instruction) in a separate,
  # short run so that the timed steps above carry no events.
  TMO=120 run llm-run "$plan" --data "$kit/data/text.bin" --steps 3 --device cuda --quiet \
    --profile $n-profile.json
  ours $n
}
torchref() { # NAME CONFIG BATCH SEQ STEPS
  local n=$1 cfg=$2 b=$3 t=$4 steps=$5 f
  f=$(flops "$kit/plans/$n")
  step "$n: PyTorch from the same weights and batches (eager, bf16 autocast)"
  TMO=400 run python3 "$ref" "$cfg" --data "$kit/data/text.bin" --batch $b --seq $t --steps $steps \
    --lr "$(lr "$kit/plans/$n")" --weights $n-init.safetensors --metrics $n-torch.jsonl --summary $n-torch-eager.json --flops-per-token $f
  side $n-ours.jsonl $n-torch.jsonl
  python3 "$cmp" $n-torch.jsonl $n-ours.jsonl --rel 1e-2 --keys loss
  python3 "$cmp" $n-torch.jsonl $n-ours.jsonl --rel 5e-2 --keys grad_norm
}
torchcompile() { # NAME CONFIG BATCH SEQ STEPS
  local n=$1 cfg=$2 b=$3 t=$4 steps=$5 f
  f=$(flops "$kit/plans/$n")
  step "$n: torch.compile"
  local w=""
  [ -f $n-init.safetensors ] && w="--weights $n-init.safetensors"
  TMO=500 run python3 "$ref" "$cfg" --data "$kit/data/text.bin" --batch $b --seq $t --steps $steps \
    --lr "$(lr "$kit/plans/$n")" $w --compile --summary $n-torch-compile.json --flops-per-token $f --warmup 8
}
ours() {
  medians $1-ours.jsonl llm-opt
  python3 - $1-profile.json <<'PY'
import json, sys
try:
    p = json.load(open(sys.argv[1]))
except Exception:
    sys.exit(0)
agg = {}
for k in p["kernels"]:
    a = agg.setdefault(k["kernel"], [0.0, 0, 0.0, 0.0])
    a[0] += k["seconds"]; a[1] += k["calls"]; a[2] += k["flops"]; a[3] += k.get("host_seconds", 0)
steps = 2  # the profile covers steps 2 and 3 of the short run
total = sum(a[0] for a in agg.values()) / steps
hosted = sum(a[3] for a in agg.values()) / steps
print("profile (%s): %.4f s in kernels per step, %.4f s of the host's launches" % (p["device"], total, hosted))
for n, (s, c, f, h) in sorted(agg.items(), key=lambda x: -x[1][0]):
    print("  %-26s %8.2f ms %5d calls %7.1f TFLOP/s, host %7.3f ms" % (n, s * 1e3 / steps, c // steps,
                                                       f / s / 1e12 if s else 0, h * 1e3 / steps))
print("by shape (top 8):")
for k in sorted(p["kernels"], key=lambda k: -k["seconds"])[:8]:
    print("  %-16s %-28s %8.2f ms %7.1f TFLOP/s" % (k["kernel"], k["dims"], k["seconds"] * 1e3 / steps,
                                                 k["flops"] / k["seconds"] / 1e12 if k["seconds"] else 0))
PY
}
gemmbench() { # NAME: the same plan with the GEMM attention instead of cuDNN's
  local n=$1
  step "$n: llm-opt with LLMOPT_CUDA_ATTENTION=gemm"
  LLMOPT_CUDA_ATTENTION=gemm TMO=${OURS_TMO:-240} run llm-run "$kit/plans/$n" --data "$kit/data/text.bin" \
    --steps 20 --metrics $n-gemm.jsonl --device cuda --peak-tflops 989
  [ -f $n-ours.jsonl ] && side $n-ours.jsonl $n-gemm.jsonl && python3 "$cmp" $n-ours.jsonl $n-gemm.jsonl --rel 2e-2 --keys loss
  medians $n-gemm.jsonl "llm-opt + GEMM attention"
}
# `speed`: 20 steps of GPT-2 124M and Llama 3.2 1B with this llm-run and,
# where the kit has one (make-kit.sh BUILD_DIR OLD_BUILD_DIR), an older
# llm-run on its own plans, alternately on the same GPU (item 7 of issue 16:
# nothing slower).
speedrun() { # TAG COMMAND... PLAN
  local tag=$1
  shift
  TMO=${OURS_TMO:-240} run "$@" --data "$kit/data/text.bin" --steps 20 --metrics speed-$tag.jsonl \
    --device cuda --peak-tflops 989 --quiet
  medians speed-$tag.jsonl $tag
}
if has speed; then
  for n in gpt2-124m llama-1b; do
    step "$n: 20 steps, this llm-run and the kit's older one, twice each, alternately"
    for i in 1 2; do
      speedrun $n-new$i llm-run "$kit/plans/$n"
      [ -x "$kit/old/bin/llm-run" ] && speedrun $n-old$i "$kit/old/bin/llm-run" "$kit/old/plans/$n"
    done
    # Where the host's launches outrun the GPU's kernels (--profile's
    # host_seconds against seconds, per kernel): the GPU waits there.
    TMO=120 run llm-run "$kit/plans/$n" --data "$kit/data/text.bin" --steps 3 --device cuda --quiet \
      --profile speed-$n-profile.json
    python3 - speed-$n-profile.json <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
agg = {}
for k in p["kernels"]:
    a = agg.setdefault(k["kernel"], [0.0, 0.0, 0])
    a[0] += k["seconds"] / 2; a[1] += k.get("host_seconds", 0) / 2; a[2] += k["calls"] // 2
print("per step: GPU %.2f ms in kernels, host %.2f ms issuing them" % (
    sum(a[0] for a in agg.values()) * 1e3, sum(a[1] for a in agg.values()) * 1e3))
for n, (g, h, c) in sorted(agg.items(), key=lambda x: -x[1][1]):
    print("  %-22s %5d calls  GPU %8.3f ms  host %7.3f ms (%.1f us a call)" % (n, c, g * 1e3, h * 1e3,
                                                                            h * 1e6 / c if c else 0))
PY
  done
fi
# The switchable paths (issue 19: default where they win): the defaults
# against each path switched alone, alternately, twice (Llama: the defaults
# and CUDA graphs; its vocabulary needs no padding).
# On 2026-11-26 this measured padded logits and multi-tensor AdamW, then
# opt-in, and made them the default.
if has optin; then
  for n in gpt2-124m llama-1b; do
    step "$n: 20 steps, the defaults and the switchable paths, alternately"
    cfgs="default LLMOPT_CUDA_MULTI_ADAMW=0 LLMOPT_CUDA_PAD_LOGITS=0 LLMOPT_CUDA_GRAPHS=1"
    [ $n = llama-1b ] && cfgs="default LLMOPT_CUDA_GRAPHS=1"
    for i in 1 2; do
      for c in $cfgs; do
        env=$c
        [ $c = default ] && env=
        speedrun $n-${c%%=*}$i env $env llm-run "$kit/plans/$n"
      done
    done
  done
fi
has gpt2 && bench gpt2-124m 20
has gpt2-gemm && gemmbench gpt2-124m
if has gpt2-graphs; then
  step "gpt2-124m: CUDA graphs"
  LLMOPT_CUDA_GRAPHS=1 TMO=240 run llm-run "$kit/plans/gpt2-124m" --data "$kit/data/text.bin" \
    --steps 20 --metrics gpt2-124m-graphs.jsonl --device cuda --peak-tflops 989
  [ -f gpt2-124m-ours.jsonl ] && python3 "$cmp" gpt2-124m-ours.jsonl gpt2-124m-graphs.jsonl --rel 1e-2 --keys loss
  medians gpt2-124m-graphs.jsonl "llm-opt + CUDA graphs"
fi
if has gpt2-padded; then
  step "gpt2-124m: the LM head's logits copied out of padded rows (LLMOPT_CUDA_PAD_LOGITS=0)"
  LLMOPT_CUDA_PAD_LOGITS=0 TMO=240 run llm-run "$kit/plans/gpt2-124m" --data "$kit/data/text.bin" \
    --steps 20 --metrics gpt2-124m-padded.jsonl --device cuda --peak-tflops 989
  [ -f gpt2-124m-ours.jsonl ] && python3 "$cmp" gpt2-124m-ours.jsonl gpt2-124m-padded.jsonl --rel 1e-2 --keys loss
fi
has gpt2-torch && torchref gpt2-124m "$root/examples/models/gpt2-124m.json" 16 1024 20
has gpt2-compile && torchcompile gpt2-124m "$root/examples/models/gpt2-124m.json" 16 1024 20
has llama && bench llama-1b 20
has llama-gemm && gemmbench llama-1b
has llama-torch && torchref llama-1b "$root/examples/models/llama3.2-1b.json" 8 2048 20
has llama-compile && torchcompile llama-1b "$root/examples/models/llama3.2-1b.json" 8 2048 20
step "done"
