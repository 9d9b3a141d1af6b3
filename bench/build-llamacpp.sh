#!/usr/bin/env bash
# Builds llama.cpp's own tools OUTSIDE the repository, from the llama.cpp source bundled with the
# pinned node-llama-cpp package, and prints the folder holding the binaries: the benchmarks
# (llama-bench, llama-batched-bench; llama-server for bench/compare-serving) and the
# quantization references (llama-quantize, llama-perplexity, llama-imatrix:
# tests/fixtures/llamacpp-quant/make.sh uses them).
#
#   bench/build-llamacpp.sh            # build (or reuse) and print the bin folder
#
# Layout (cache = ${KVASIR_CACHE:-$HOME/.cache/kvasir}):
#   $cache/nlc/node_modules/node-llama-cpp/llama/gitRelease.bundle   source (git bundle)
#   $cache/llama.cpp-bench/src      clone of the bundle
#   $cache/llama.cpp-bench/build    CMake build (GGML_NATIVE=ON, CPU only, no network)
# Idempotent: when all the tools exist and the source commit is unchanged it only prints the
# folder. Offline: nothing is downloaded (node-llama-cpp is installed by
# scripts/install-llamacpp-ref.sh only when the bundle is missing). The compile runs under
# `nice -n 19` so that it never competes with interactive work on a shared machine; it takes
# about 15 minutes on 2 cores. Set JOBS to change the parallelism (default: all cores).
# LLAMA_NO_AMX=1 builds into build-noamx/ with Intel AMX compiled out (-mno-amx-*): on the
# Sapphire Rapids VMs seen here the native build's AMX path for Q4_0/Q8_0 dies with SIGSEGV in
# ggml_backend_amx_mul_mat (F16 runs), so quantized comparisons there need this build.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${KVASIR_CACHE:-$HOME/.cache/kvasir}"
BUNDLE="$CACHE/nlc/node_modules/node-llama-cpp/llama/gitRelease.bundle"
ROOT="$CACHE/llama.cpp-bench"
SRC="$ROOT/src"
BUILD="$ROOT/build"
cflags=""
if [ "${LLAMA_NO_AMX:-0}" = 1 ]; then
  BUILD="$ROOT/build-noamx"
  cflags="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
fi
BIN="$BUILD/bin"
JOBS="${JOBS:-$(nproc)}"

# The cache must stay out of the source tree.
case "$(realpath -m "$ROOT")/" in
  "$REPO"/*) echo "error: $ROOT is inside the repository $REPO; set KVASIR_CACHE elsewhere" >&2
             exit 1 ;;
esac

if [ ! -f "$BUNDLE" ]; then
  echo "llama.cpp bundle missing; installing node-llama-cpp via scripts/install-llamacpp-ref.sh" >&2
  "$REPO/scripts/install-llamacpp-ref.sh" >/dev/null
fi
[ -f "$BUNDLE" ] || { echo "error: no llama.cpp bundle at $BUNDLE" >&2; exit 1; }

mkdir -p "$ROOT"
if [ ! -d "$SRC/.git" ]; then
  echo "cloning $BUNDLE -> $SRC" >&2
  rm -rf "$SRC"
  git clone -q "$BUNDLE" "$SRC"
fi
commit="$(git -C "$SRC" rev-parse HEAD)"
stamp="$BUILD/.kvasir-built-commit"

TOOLS=(llama-bench llama-batched-bench llama-quantize llama-perplexity llama-imatrix llama-server)
all_built=1
for t in "${TOOLS[@]}"; do [ -x "$BIN/$t" ] || all_built=0; done
if [ "$all_built" = 1 ] && [ "$(cat "$stamp" 2>/dev/null || true)" = "$commit" ]; then
  echo "$BIN"
  exit 0
fi

generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
if [ ! -f "$BUILD/CMakeCache.txt" ]; then
  # Everything that could reach the network (curl/openssl downloads, web UI, server) is off;
  # tests and examples are off to save build time; the CPU backend is built for this machine.
  cmake -S "$SRC" -B "$BUILD" "${generator[@]}" \
    -DCMAKE_BUILD_TYPE=Release \
    -DGGML_NATIVE=ON \
    -DCMAKE_C_FLAGS="$cflags" -DCMAKE_CXX_FLAGS="$cflags" \
    -DLLAMA_CURL=OFF \
    -DLLAMA_OPENSSL=OFF \
    -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_BUILD_SERVER=ON \
    -DLLAMA_BUILD_APP=OFF \
    -DLLAMA_BUILD_UI=OFF \
    -DLLAMA_USE_PREBUILT_UI=OFF \
    -DLLAMA_BUILD_TOOLS=ON \
    -DBUILD_SHARED_LIBS=OFF >&2
fi
nice -n 19 cmake --build "$BUILD" --target "${TOOLS[@]}" -j "$JOBS" >&2
echo "$commit" >"$stamp"
echo "$BIN"
