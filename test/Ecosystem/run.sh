#!/usr/bin/env bash
# ctest's `ecosystem` test: the pytest suite of this directory in the
# ecosystem virtual environment VENV, against LLM_OPT. Exit 77 (skipped)
# when VENV is absent: scripts/test.sh installs it (LLMOPT_ECOSYSTEM=0 skips).
set -euo pipefail
venv=$1 opt=$2 titan=${3:-}
if [[ ! -x "$venv/bin/python" || ! -f "$venv/.stamp" ]]; then
  echo "ecosystem: no virtual environment at $venv (scripts/test.sh installs it)"
  exit 77
fi
cd "$(dirname "${BASH_SOURCE[0]}")"
# torchtitan 0.3's checks run in its own environment (absent: reported as
# skipped by those cases).
if [[ -n "$titan" && -x "$titan/bin/python" && -f "$titan/.stamp" ]]; then
  export LLMOPT_TITAN_PYTHON="$titan/bin/python"
fi
LLMOPT_OPT="$opt" PYTHONDONTWRITEBYTECODE=1 exec "$venv/bin/python" -m pytest -q \
  -p no:cacheprovider test_exports.py
