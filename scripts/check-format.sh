#!/usr/bin/env bash
# ctest `format`: every C++ / CUDA source outside test/ is as clang-format
# (.clang-format: LLVM style, 100 columns) writes it. Formatting differs
# between clang-format versions: the check runs with major version 14 (Debian
# bookworm's, the one the tree was formatted with) and is skipped (exit 77)
# where that is missing. Fix with: scripts/check-format.sh --fix
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
tool=$(command -v clang-format-14 || command -v clang-format || true)
if [ -z "$tool" ] || ! "$tool" --version | grep -q "version 14\."; then
  echo "format: no clang-format 14 here; skipped"
  exit 77
fi
mapfile -t files < <(git ls-files '*.cpp' '*.h' '*.cu' '*.cuh' '*.c' | grep -v '^test/')
if [ "${1:-}" = "--fix" ]; then
  "$tool" -i "${files[@]}"
  exit 0
fi
if ! out=$("$tool" --dry-run "${files[@]}" 2>&1) || [ -n "$out" ]; then
  echo "$out" | grep "warning:" | cut -d: -f1 | sort | uniq -c
  echo "format: the files above are not clang-formatted; run scripts/check-format.sh --fix"
  exit 1
fi
echo "format: ${#files[@]} files clang-formatted"
