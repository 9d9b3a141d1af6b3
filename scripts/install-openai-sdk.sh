#!/usr/bin/env bash
# Installs the official `openai` npm SDK (pinned) OUTSIDE the repository, into
# ${KVASIR_CACHE:-$HOME/.cache/kvasir}/openai, and prints that folder.
# Idempotent: does nothing when the pinned version is already installed there.
# Used by tests/server/openai_sdk_test.mjs and structured_output_sdk_test.mjs (run from
# test_server: the SDK as a real client of `kvasir serve`'s OpenAI-compatible API), with zod (the
# SDK's zodResponseFormat helper takes zod schemas) and ajv + ajv-formats (an independent JSON
# Schema validator for the answers). The tests skip themselves when this was not run.
set -euo pipefail

OPENAI_VERSION=6.30.1
ZOD_VERSION=3.25.76
AJV_VERSION=8.17.1
AJV_FORMATS_VERSION=3.0.1
CACHE="${KVASIR_CACHE:-$HOME/.cache/kvasir}"
DEST="$CACHE/openai"
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

version_of() { node -p "require('$DEST/node_modules/$1/package.json').version" 2>/dev/null || true; }
if [ "$(version_of openai)" != "$OPENAI_VERSION" ] || [ "$(version_of zod)" != "$ZOD_VERSION" ] ||
   [ "$(version_of ajv)" != "$AJV_VERSION" ] ||
   [ "$(version_of ajv-formats)" != "$AJV_FORMATS_VERSION" ]; then
  mkdir -p "$DEST"
  [ -f "$DEST/package.json" ] || (cd "$DEST" && npm init -y >/dev/null)
  (cd "$DEST" && npm i -E --no-audit --no-fund "openai@$OPENAI_VERSION" "zod@$ZOD_VERSION" \
     "ajv@$AJV_VERSION" "ajv-formats@$AJV_FORMATS_VERSION" >&2)
fi
echo "$DEST"
