#!/usr/bin/env bash
# Packaging test (ctest Packaging.DockerfileAndUnitFollowTheReadme): `docker build` cannot run
# here (no registry for base images), so this checks what can drift instead:
#  - the Dockerfile's build steps are the README's: the scripts that scripts/demo.sh (README
#    command 1) runs before its demo, in the same order, then `cmake --install`;
#  - its base is Debian 12 and its runtime packages are exactly those of the shared libraries
#    the built binary links (ldd), so a new dependency cannot be forgotten;
#  - every `kvasir serve` option in the Dockerfile's ENTRYPOINT, the systemd unit's ExecStart and
#    the README's serving example exists (`kvasir serve --help`).
# Usage: dockerfile_test.sh SOURCE_DIR KVASIR_BINARY
set -euo pipefail
src="$1"
bin="$2"
fail() { echo "dockerfile_test: $*" >&2; exit 1; }
df="$src/Dockerfile"
unit="$src/packaging/kvasir.service"
[ -f "$df" ] || fail "no Dockerfile"
[ -f "$unit" ] || fail "no packaging/kvasir.service"

grep -q '^FROM debian:12 AS build$' "$df" || fail "the build stage is not FROM debian:12"
grep -q '^FROM debian:12-slim$' "$df" || fail "the runtime stage is not FROM debian:12-slim"

# The README's set-up command and the build steps it runs.
grep -q '^scripts/demo.sh' "$src/README.md" || fail "README no longer starts with scripts/demo.sh"
demo_steps="$(grep -E '^scripts/[a-z-]+\.sh' "$src/scripts/demo.sh" | sed 's/ *$//')"
docker_steps="$(sed -n 's/^RUN \(scripts\/[a-z-]*\.sh.*\)$/\1/p' "$df" | sed 's/ *$//')"
[ -n "$demo_steps" ] || fail "no build steps found in scripts/demo.sh"
[ "$demo_steps" = "$docker_steps" ] ||
  fail "the Dockerfile's steps differ from scripts/demo.sh's:"$'\n'"demo.sh:"$'\n'"$demo_steps"$'\n'"Dockerfile:"$'\n'"$docker_steps"
grep -q '^RUN cmake --install build/release --prefix /opt/kvasir$' "$df" || fail "no cmake --install step"

# Runtime packages = the packages of the libraries the binary links (a sanitized build's ASan/UBSan
# runtimes aside: the image is built from the release preset).
if command -v dpkg >/dev/null && command -v ldd >/dev/null; then
  want="$(ldd "$bin" | awk '$3 ~ /^\// {print $3}' | while read -r lib; do
            dpkg -S "$lib" 2>/dev/null || dpkg -S "/usr$lib" 2>/dev/null || true
          done | cut -d: -f1 | grep -v -E '^(libc6|libgcc-s1|zlib1g|lib(a|ub|t|l)san[0-9]+)$' | sort -u | tr '\n' ' ')"
  have="$(awk '/^FROM debian:12-slim/{s=1} s && /apt-get install/{p=1} p{print} p && !/\\$/{exit}' "$df" |
            tr ' \\' '\n\n' | grep -E '^lib[a-z0-9.+-]+$' | sort -u | tr '\n' ' ')"
  [ "$want" = "$have" ] || fail "runtime packages: the binary needs [$want], the Dockerfile installs [$have]"
fi

# Every serve option used exists.
help="$("$bin" serve --help)"
check_opts() {  # $1: where, then the words
  local where="$1"; shift
  for w in "$@"; do
    case "$w" in
      --*) opt="${w%%=*}"
           grep -q -- "$opt" <<<"$help" || fail "$where uses $opt, which kvasir serve does not have" ;;
    esac
  done
}
entry="$(sed -n 's/^ENTRYPOINT \[\(.*\)\]$/\1/p' "$df" | tr -d '",')"
[[ "$entry" == "/usr/local/bin/kvasir serve "* ]] || fail "ENTRYPOINT does not run kvasir serve: $entry"
# shellcheck disable=SC2086
check_opts Dockerfile $entry
exec_start="$(awk '/^ExecStart=/{p=1} p{print} p && !/\\$/{exit}' "$unit" | tr -d '\\' | sed 's/^ExecStart=//')"
[[ "$exec_start" == "/usr/local/bin/kvasir serve "* ]] || fail "ExecStart does not run kvasir serve"
# shellcheck disable=SC2086
check_opts kvasir.service $exec_start
# The unit's environment variables are options too (KVASIR_LOG_FORMAT -> --log-format).
for v in $(sed -n 's/^Environment=\(KVASIR_[A-Z_]*\)=.*/\1/p' "$unit"); do
  opt="--$(tr 'A-Z_' 'a-z-' <<<"${v#KVASIR_}")"
  grep -q -- "$opt" <<<"$help" || fail "kvasir.service sets $v, but kvasir serve has no $opt"
done
readme_serve="$(awk '/^\$K serve /{p=1} p{print} p && !/\\$/{exit}' "$src/README.md" | tr -d '\\[]')"
[ -n "$readme_serve" ] || fail "no \$K serve line in the README"
# shellcheck disable=SC2086
check_opts README $readme_serve
grep -q 'docker build' "$src/README.md" || fail "the README does not say how to build the image"
grep -q 'kvasir.service' "$src/README.md" || fail "the README does not point at the systemd unit"
echo "dockerfile_test: Dockerfile, kvasir.service and README agree"
