#!/usr/bin/env bash
# Quick start, command 2: build everything and run every test (lit, GoogleTest,
# pytest, and the ecosystem tier: the exports checked by Megatron-Core,
# DeepSpeed and torchtitan themselves; LLMOPT_ECOSYSTEM=0 skips installing
# it) through ctest.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

install_deps
install_ecosystem
install_ecosystem_torchtitan
configure
build
ctest --test-dir "$LLMOPT_BUILD" --output-on-failure -j"$(nproc)"
