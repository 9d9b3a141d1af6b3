#!/usr/bin/env bash
# Installs the llama.cpp reference harness dependency (node-llama-cpp, pinned) OUTSIDE the
# repository, into ${KVASIR_CACHE:-$HOME/.cache/kvasir}/nlc, and prints that folder.
# Idempotent: does nothing when the pinned version is already installed there.
# node-llama-cpp ships prebuilt llama.cpp CPU binaries, so nothing is compiled here.
# Used by tools/llamacpp-ref/*.mjs (see the header of greedy.mjs).
set -euo pipefail

NLC_VERSION=3.21.1
CACHE="${KVASIR_CACHE:-$HOME/.cache/kvasir}"
DEST="$CACHE/nlc"
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

# Refuse to install inside the repository (the cache must stay out of the source tree).
case "$(realpath -m "$DEST")/" in
  "$REPO"/*) echo "error: $DEST is inside the repository $REPO; set KVASIR_CACHE elsewhere" >&2
             exit 1 ;;
esac

# Node.js + npm (Debian packages) if missing.
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -q && $SUDO apt-get install -y -q nodejs npm
fi

PKG="$DEST/node_modules/node-llama-cpp/package.json"
installed="$(node -p "require('$PKG').version" 2>/dev/null || true)"
if [ "$installed" != "$NLC_VERSION" ]; then
  mkdir -p "$DEST"
  [ -f "$DEST/package.json" ] || (cd "$DEST" && npm init -y >/dev/null)
  # The prebuilt binaries arrive as optional deps (@node-llama-cpp/linux-x64, ...); skipping the
  # postinstall step stops it from ever trying to download or compile llama.cpp sources.
  (cd "$DEST" && NODE_LLAMA_CPP_POSTINSTALL=skip \
     npm i -E --no-audit --no-fund "node-llama-cpp@$NLC_VERSION" >&2)
fi
echo "$DEST"
