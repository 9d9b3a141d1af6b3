#!/usr/bin/env bash
# Installs the Debian packages Kvasir needs to build and test. Idempotent; skips apt when every
# package is already installed (so it also works offline once set up). libtomlplusplus-dev: the
# server's kvasir.toml parser; prometheus: its promtool, which checks deploy/'s rules and metrics.
set -euo pipefail
PKGS=(
  build-essential cmake ninja-build pkg-config clang libclang-rt-14-dev clang-format
  libhwy-dev libfmt-dev nlohmann-json3-dev libcli11-dev libcpp-httplib-dev libspdlog-dev
  libboost-dev libssl-dev libtomlplusplus-dev
  libgtest-dev libgmock-dev libbenchmark-dev libpcre2-dev libicu-dev
  nodejs
  prometheus
)
# Tools that may come from outside dpkg (e.g. a newer npm): only installed when absent.
command -v npm >/dev/null 2>&1 || PKGS+=(npm)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#PKGS[@]} packages present"
  exit 0
fi
echo "install-deps: installing ${missing[*]}"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
