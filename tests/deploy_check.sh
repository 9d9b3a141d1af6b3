#!/usr/bin/env bash
# Checks deploy/ with the tools that read it:
#   1. promtool check rules deploy/kvasir.rules.yml       (syntax, PromQL, templates; lint fatal)
#   2. promtool test rules deploy/kvasir.rules.test.yml   (every alert fires / stays silent)
#   3. node tests/deploy_validate_dashboard.mjs           (the Grafana dashboard against
#      deploy/grafana/dashboard.schema.json with ajv, plus grid/id/variable checks)
#   4. promtool check rules on the dashboard's PromQL      (every panel and variable expression)
# usage: tests/deploy_check.sh [SOURCE_DIR]   (default: this script's repository)
# Exits 0 when all pass; 1 when a check fails or a tool is missing (promtool: Debian's prometheus
# package, which scripts/install-deps.sh installs; node and ajv: scripts/install-openai-sdk.sh).
# Whether deploy/ names only metrics Kvasir exposes is tests/server/deploy_metrics_test.cc's job.
set -uo pipefail

SRC="${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}"
DEPLOY="$SRC/deploy"
failures=0
fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}
step() { echo "== $*"; }

for f in "$DEPLOY/kvasir.rules.yml" "$DEPLOY/kvasir.rules.test.yml" \
         "$DEPLOY/grafana/kvasir-dashboard.json" "$DEPLOY/grafana/dashboard.schema.json" \
         "$SRC/tests/deploy_validate_dashboard.mjs"; do
  [ -f "$f" ] || { echo "FAIL: $f is missing" >&2; exit 1; }
done

if ! command -v promtool >/dev/null 2>&1; then
  fail "promtool not found: install Debian's prometheus package (apt-get install prometheus;" \
       "scripts/install-deps.sh does) to check the rules"
else
  step "promtool check rules deploy/kvasir.rules.yml"
  promtool check rules --lint=all --lint-fatal "$DEPLOY/kvasir.rules.yml" ||
    fail "promtool check rules deploy/kvasir.rules.yml"
  step "promtool test rules deploy/kvasir.rules.test.yml"
  # rule_files in the test file are relative to deploy/.
  (cd "$DEPLOY" && promtool test rules kvasir.rules.test.yml) ||
    fail "promtool test rules deploy/kvasir.rules.test.yml"
fi

if ! command -v node >/dev/null 2>&1; then
  fail "node not found: install nodejs (scripts/install-deps.sh) and ajv" \
       "(scripts/install-openai-sdk.sh) to validate the dashboard"
else
  step "validate deploy/grafana/kvasir-dashboard.json"
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  if node "$SRC/tests/deploy_validate_dashboard.mjs" "$DEPLOY/grafana/kvasir-dashboard.json" \
       "$DEPLOY/grafana/dashboard.schema.json" --emit-rules "$tmp/dashboard.rules.yml"; then
    if command -v promtool >/dev/null 2>&1; then
      step "promtool check rules (the dashboard's expressions)"
      promtool check rules --lint=none "$tmp/dashboard.rules.yml" ||
        fail "the dashboard's PromQL (deploy/grafana/kvasir-dashboard.json) does not parse"
    fi
  else
    fail "deploy/grafana/kvasir-dashboard.json does not validate (see above)"
  fi
fi

if [ "$failures" -ne 0 ]; then
  echo "deploy_check: $failures check(s) failed" >&2
  exit 1
fi
echo "deploy_check: all ok"
