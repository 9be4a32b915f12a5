#!/usr/bin/env bash
# Builds olm-validate (tests/cluster/olm-validate/main.go: operator-framework's bundle loader and
# validators) from the Go module proxy into a versioned cache under $HOME, like
# build-k8s-bins.sh builds the control plane. Idempotent; prints the binary's path.
#
#   tests/cluster/build-olm-validate.sh
#
# The version can be overridden with OLM_API_VERSION.
set -euo pipefail

OLM_API_VERSION=${OLM_API_VERSION:-v0.35.0}
CACHE_ROOT=${NMO_BIN_CACHE:-$HOME/.cache/nmo-k8s-bins}
SRC="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/olm-validate/main.go"
# The source's hash is part of the directory, so an edited main.go is rebuilt.
HASH=$(sha256sum "$SRC" | cut -c1-12)
OUT="$CACHE_ROOT/olm-validate_api-${OLM_API_VERSION}_${HASH}"
BIN="$OUT/olm-validate"

log() { echo "build-olm-validate: $*" >&2; }
die() { echo "build-olm-validate: error: $*" >&2; exit 1; }

if [[ -x "$BIN" ]]; then echo "$BIN"; exit 0; fi
mkdir -p "$CACHE_ROOT"
exec 9>"$CACHE_ROOT/.olm-validate.lock"
flock 9
if [[ -x "$BIN" ]]; then echo "$BIN"; exit 0; fi

command -v go >/dev/null 2>&1 || die "Go is missing: install a Go toolchain >= 1.26 (it is used only to build test tools)"
export CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS=-modcacherw
WORK=$(mktemp -d "${TMPDIR:-/tmp}/nmo-olm-validate.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
cd "$WORK"
printf 'module local/olmvalidate\n\ngo 1.24.4\n' >go.mod
cp "$SRC" main.go
log "building olm-validate against github.com/operator-framework/api $OLM_API_VERSION"
if ! go get "github.com/operator-framework/api@$OLM_API_VERSION" >get.log 2>&1; then
  tail -n 20 get.log >&2
  die "the Go module proxy did not serve github.com/operator-framework/api@$OLM_API_VERSION"
fi
go mod tidy >tidy.log 2>&1 || { tail -n 20 tidy.log >&2; die "go mod tidy failed"; }
mkdir -p "$OUT"
go build -trimpath -ldflags="-s -w" -o "$BIN.tmp" .
mv "$BIN.tmp" "$BIN"
echo "$BIN"
