#!/usr/bin/env bash
# Packaging test (ctest Packaging.InstallAndEmbed): `cmake --install` of the build into a scratch
# prefix puts the binary, the headers, the module libraries and kvasir.pc where they belong; a
# program built against that prefix with `pkg-config --cflags --libs kvasir` alone (no source
# tree on its include path) links, loads the demo model and generates its greedy continuation.
# Usage: install_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build="$1"
src="$2"
models="${KVASIR_MODELS:-$src/../shared/models}"
prefix="$(mktemp -d)"
trap 'rm -rf "$prefix"' EXIT
cmake --install "$build" --prefix "$prefix" >/dev/null
fail() { echo "install_test: $*" >&2; exit 1; }
[ -x "$prefix/bin/kvasir" ] || fail "bin/kvasir not installed"
[ -f "$prefix/include/kvasir/engine.h" ] || fail "include/kvasir/engine.h not installed"
[ -f "$prefix/include/kvasir/model/model.h" ] || fail "module headers not installed"
pc="$(find "$prefix" -name kvasir.pc | head -1)"
[ -n "$pc" ] || fail "kvasir.pc not installed"
libdir="$(dirname "$(dirname "$pc")")"
[ -f "$libdir/libkvasir_engine.a" ] || fail "libkvasir_engine.a not next to kvasir.pc's folder"
"$prefix/bin/kvasir" --version | grep -q "^kvasir [0-9]" || fail "kvasir --version"
export PKG_CONFIG_PATH="$(dirname "$pc")"
[ "$(realpath "$(pkg-config --variable=prefix kvasir)")" = "$(realpath "$prefix")" ] ||
  fail "kvasir.pc's prefix $(pkg-config --variable=prefix kvasir) is not the install prefix $prefix"
[ "$(pkg-config --modversion kvasir)" = "$("$prefix/bin/kvasir" --version | head -1 | cut -d' ' -f2)" ] ||
  fail "kvasir.pc's version differs from the binary's"
# shellcheck disable=SC2046
c++ -std=c++20 -O1 "$src/tests/packaging/embed.cc" -o "$prefix/embed" $(pkg-config --cflags --libs kvasir)
out="$("$prefix/embed" "$models/stories260K.gguf" "Once upon a time")"
echo "$out"
# The greedy continuation of the published sample (as CliServe's test checks through the server).
case "$out" in
  "kvasir "*": , there was a little girl"*) ;;
  *) fail "unexpected output: $out" ;;
esac
