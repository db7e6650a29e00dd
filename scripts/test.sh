#!/usr/bin/env bash
# Quick start, command 2: build everything and run every test (lit, GoogleTest)
# through ctest.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

install_deps
configure
build
ctest --test-dir "$LLMOPT_BUILD" --output-on-failure -j"$(nproc)"
