#!/usr/bin/env bash
# README command 2: installs dependencies (and the pinned llama.cpp reference from npm, outside the
# repository), builds and runs the whole test suite: release build, then the ASan+UBSan build.
# Options: --fast (release only), --no-reference (skip installing the llama.cpp reference and the
# openai SDK client; their tests then report themselves skipped).
set -euo pipefail
cd "$(dirname "$0")/.."
fast=0
reference=1
for a in "$@"; do
  case "$a" in
    --fast) fast=1 ;;
    --no-reference) reference=0 ;;
    *) echo "test.sh: unknown option $a" >&2; exit 2 ;;
  esac
done
scripts/install-deps.sh
if [ "$reference" = 1 ]; then
  scripts/install-llamacpp-ref.sh || echo "test.sh: llama.cpp reference unavailable; its tests will be skipped" >&2
  scripts/install-openai-sdk.sh >/dev/null || echo "test.sh: openai SDK unavailable; its test will be skipped" >&2
fi
start=$(date +%s)
scripts/build.sh release
ctest --preset release
if [ "$fast" = 0 ]; then
  scripts/build.sh debug
  # The sanitizer run covers every library module's tests; it skips the llama.cpp comparison and
  # the CLI end-to-end tests, which exercise the same code and already ran above in release.
  KVASIR_SANITIZER_RUN=1 ctest --preset debug -E '^Cli\.'
fi
echo "test.sh: all tests passed in $(( $(date +%s) - start )) s"
