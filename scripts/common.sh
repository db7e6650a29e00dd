# Shared by scripts/setup.sh and scripts/test.sh: install what is missing,
# configure once, build. Every step is a no-op when already done.
set -euo pipefail

LLMOPT_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
LLMOPT_BUILD="${LLMOPT_BUILD:-$LLMOPT_ROOT/build}"
LLVM_PREFIX=/usr/lib/llvm-22

# Debian bookworm packages the project needs (MLIR/LLVM 22 come from Debian).
LLMOPT_APT_PACKAGES=(
  cmake ninja-build g++ lld ccache python3
  libmlir-22-dev mlir-22-tools llvm-22-dev llvm-22-tools libzstd-dev
  libgtest-dev libbenchmark-dev
  # The CPU backend's multi-process runs (mpirun -np N llm-run ...).
  libopenmpi-dev openmpi-bin
  # The HTML plan report is tested in a real browser (python-frontend/tests).
  chromium fonts-dejavu-core
)

log() { printf '\033[1m[llm-opt]\033[0m %s\n' "$*"; }

install_deps() {
  local missing=()
  for p in "${LLMOPT_APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
      missing+=("$p")
  done
  if ((${#missing[@]} == 0)); then
    log "dependencies present"
  else
    log "installing: ${missing[*]}"
    local sudo=()
    if [[ $(id -u) -ne 0 ]]; then sudo=(sudo); fi
    "${sudo[@]}" apt-get update -qq
    DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends \
      "${missing[@]}" >/dev/null
  fi
  install_pytest
  fetch_cudnn_frontend
}

# The cuDNN frontend's headers (header-only, MIT; NVIDIA's PyPI wheel carries
# them) for the CUDA backend's fused attention, where the toolkit has cuDNN.
# Without them (no network, no cuDNN) the build keeps the GEMM attention.
LLMOPT_CUDNN_FRONTEND_VERSION=1.32.0
fetch_cudnn_frontend() {
  local dest="$LLMOPT_ROOT/.deps/cudnn-frontend"
  if [[ -f "$dest/include/cudnn_frontend.h" ]] || [[ ! -f /usr/local/cuda/include/cudnn.h ]]; then
    return
  fi
  log "fetching the cuDNN frontend headers ($LLMOPT_CUDNN_FRONTEND_VERSION)"
  local tmp
  tmp=$(mktemp -d)
  if python3 -m pip download --quiet --no-deps --only-binary=:all: -d "$tmp" \
      "nvidia-cudnn-frontend==$LLMOPT_CUDNN_FRONTEND_VERSION" >/dev/null 2>&1 &&
    mkdir -p "$dest" && python3 - "$tmp" "$dest" <<'PY'
import glob, sys, zipfile
whl = glob.glob(sys.argv[1] + "/*.whl")[0]
with zipfile.ZipFile(whl) as z:
    for n in z.namelist():
        if n.startswith("include/"):
            z.extract(n, sys.argv[2])
PY
  then
    :
  else
    log "could not fetch the cuDNN frontend: the CUDA backend keeps its GEMM attention"
    rm -rf "$dest"
  fi
  rm -rf "$tmp"
}

# pytest for python-frontend/tests, in the python3 that ctest runs (the first
# on PATH). Debian's own python3 refuses pip installs into it (PEP 668); its
# python3-pytest package is the fallback there.
install_pytest() {
  if python3 -c 'import pytest' 2>/dev/null; then
    return
  fi
  log "installing pytest"
  python3 -m pip install --quiet pytest 2>/dev/null ||
    python3 -m pip install --quiet --user --break-system-packages pytest 2>/dev/null || {
    local sudo=()
    if [[ $(id -u) -ne 0 ]]; then sudo=(sudo); fi
    DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq \
      --no-install-recommends python3-pytest >/dev/null
  }
  python3 -c 'import pytest' || {
    log "pytest is not importable by $(command -v python3)"
    return 1
  }
}

# The ecosystem tier (test/Ecosystem): the trainers whose own code checks
# llm-opt's exports, at the versions the exports target (docs/planner.md),
# in a virtual environment of their own (about 7 GB, 2-3 minutes from PyPI),
# every package pinned by test/Ecosystem/constraints.txt. Rebuilt only when
# the pins change. LLMOPT_ECOSYSTEM=0 skips it (ctest then reports the
# ecosystem test as not run).
LLMOPT_ECOSYSTEM_VENV="$LLMOPT_ROOT/.deps/ecosystem"
LLMOPT_ECOSYSTEM_TORCH=torch==2.10.0
LLMOPT_ECOSYSTEM_DEEPSPEED=deepspeed==0.19.8
LLMOPT_ECOSYSTEM_REST="megatron-core==0.16.1 torchtitan==0.2.2 transformers==5.24.0"
install_ecosystem() {
  if [[ "${LLMOPT_ECOSYSTEM:-1}" == 0 ]]; then
    log "ecosystem tier skipped (LLMOPT_ECOSYSTEM=0)"
    return
  fi
  local venv="$LLMOPT_ECOSYSTEM_VENV" constraints="$LLMOPT_ROOT/test/Ecosystem/constraints.txt"
  local stamp
  stamp=$({
    cat "$constraints"
    echo "$LLMOPT_ECOSYSTEM_TORCH $LLMOPT_ECOSYSTEM_DEEPSPEED $LLMOPT_ECOSYSTEM_REST"
  } | sha256sum | cut -c1-16)
  if [[ -f "$venv/.stamp" && "$(cat "$venv/.stamp")" == "$stamp" ]]; then
    return
  fi
  log "installing the ecosystem tier's trainers into $venv (PyPI, a few minutes)"
  rm -rf "$venv"
  python3 -m venv "$venv" || {
    log "python3 -m venv failed (Debian: apt-get install python3-venv)"
    return 1
  }
  local pip=("$venv/bin/python" -m pip install --quiet --disable-pip-version-check
             -c "$constraints")
  # DeepSpeed builds against the torch already installed (no ops compiled:
  # DS_BUILD_OPS=0), so torch comes first.
  # shellcheck disable=SC2086
  "${pip[@]}" "$LLMOPT_ECOSYSTEM_TORCH" pytest setuptools wheel &&
    DS_BUILD_OPS=0 "${pip[@]}" --no-build-isolation "$LLMOPT_ECOSYSTEM_DEEPSPEED" &&
    "${pip[@]}" $LLMOPT_ECOSYSTEM_REST || {
    log "installing the ecosystem tier failed (no network to PyPI?); LLMOPT_ECOSYSTEM=0 skips it"
    rm -rf "$venv"
    return 1
  }
  echo "$stamp" >"$venv/.stamp"
}

# torchtitan 0.3 (what `pip install torchtitan` gives) needs a newer PyTorch
# than the tier's 2.10: a virtual environment of its own, pinned by
# test/Ecosystem/constraints-torchtitan.txt (about 6 GB, 2-3 minutes).
LLMOPT_TITAN_VENV="$LLMOPT_ROOT/.deps/ecosystem-torchtitan"
install_ecosystem_torchtitan() {
  if [[ "${LLMOPT_ECOSYSTEM:-1}" == 0 ]]; then
    return
  fi
  local venv="$LLMOPT_TITAN_VENV" constraints="$LLMOPT_ROOT/test/Ecosystem/constraints-torchtitan.txt"
  local stamp
  stamp=$(sha256sum "$constraints" | cut -c1-16)
  if [[ -f "$venv/.stamp" && "$(cat "$venv/.stamp")" == "$stamp" ]]; then
    return
  fi
  log "installing torchtitan 0.3 and its PyTorch into $venv (PyPI, a few minutes)"
  rm -rf "$venv"
  python3 -m venv "$venv" &&
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -c "$constraints" \
      torch torchtitan || {
    log "installing torchtitan 0.3 failed (no network to PyPI?); LLMOPT_ECOSYSTEM=0 skips it"
    rm -rf "$venv"
    return 1
  }
  echo "$stamp" >"$venv/.stamp"
}

configure() {
  if [[ -f "$LLMOPT_BUILD/build.ninja" ]]; then
    return # ninja re-runs cmake itself when a CMakeLists.txt changes
  fi
  log "configuring in $LLMOPT_BUILD"
  local launcher=()
  if command -v ccache >/dev/null; then
    launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
  fi
  cmake -G Ninja -S "$LLMOPT_ROOT" -B "$LLMOPT_BUILD" \
    -DCMAKE_BUILD_TYPE=Release \
    -DMLIR_DIR="$LLVM_PREFIX/lib/cmake/mlir" \
    -DLLVM_EXTERNAL_LIT="$LLVM_PREFIX/bin/lit" \
    -DLLVM_USE_LINKER=lld \
    "${launcher[@]}" >/dev/null
}

build() {
  log "building"
  ninja -C "$LLMOPT_BUILD" "$@"
}
