#!/usr/bin/env bash
# README command 1: installs dependencies, builds Kvasir (release) and generates text with the demo
# model. Extra arguments are passed to `kvasir run`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh release
MODELS="${KVASIR_MODELS:-../shared/models}"
echo "--- kvasir run -m $MODELS/stories260K.gguf -p \"Once upon a time\" -n 200 --temp 0" >&2
build/release/kvasir run -m "$MODELS/stories260K.gguf" -p "Once upon a time" -n 200 --temp 0 "$@"
