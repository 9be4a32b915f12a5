#!/usr/bin/env bash
# Builds tests/cluster/go-elector (client-go's tools/leaderelection, at the staging version that
# matches the test control plane) from the Go module proxy into a versioned cache under $HOME.
# Idempotent: a cached binary for the same client-go version and source is reused.
#
#   tests/cluster/build-go-elector.sh   # build if missing, print the binary's path
#
# KUBE_VERSION (default v1.36.3, as build-k8s-bins.sh) selects client-go v0.<minor>.<patch>.
set -euo pipefail

KUBE_VERSION=${KUBE_VERSION:-v1.36.3}
CACHE_ROOT=${NMO_BIN_CACHE:-$HOME/.cache/nmo-k8s-bins}
SRC="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/go-elector/main.go"

log() { echo "build-go-elector: $*" >&2; }
die() { echo "build-go-elector: error: $*" >&2; exit 1; }

minor=${KUBE_VERSION#v1.}; minor=${minor%%.*}
patch=${KUBE_VERSION##*.}
staging_ver="v0.${minor}.${patch}"
src_hash=$(sha256sum "$SRC" | cut -c1-12)
OUT="$CACHE_ROOT/go-elector_client-go-${staging_ver}_${src_hash}"
BIN="$OUT/go-elector"
if [[ -x "$BIN" ]]; then echo "$BIN"; exit 0; fi

mkdir -p "$CACHE_ROOT"
exec 9>"$CACHE_ROOT/.lock-go-elector"
flock 9
if [[ -x "$BIN" ]]; then echo "$BIN"; exit 0; fi

command -v go >/dev/null 2>&1 || die "Go is missing: install a Go toolchain >= 1.26 (it is used only to build test tools)"
export CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS=-modcacherw
WORK=$(mktemp -d "${TMPDIR:-/tmp}/nmo-go-elector.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
cd "$WORK"
cp "$SRC" main.go
printf 'module local/goelector\n\ngo 1.24.0\n' >go.mod
log "building go-elector with k8s.io/client-go@$staging_ver"
if ! go get "k8s.io/client-go@$staging_ver" "k8s.io/api@$staging_ver" "k8s.io/apimachinery@$staging_ver" >get.log 2>&1; then
  tail -n 20 get.log >&2
  die "the Go module proxy did not serve k8s.io/client-go@$staging_ver"
fi
go mod tidy >tidy.log 2>&1 || { tail -n 20 tidy.log >&2; die "go mod tidy failed"; }
grep -q "k8s.io/client-go $staging_ver" go.mod || die "client-go resolved to another version than $staging_ver: $(grep client-go go.mod)"
mkdir -p "$OUT"
go build -trimpath -ldflags="-s -w" -o "$BIN.tmp" .
mv "$BIN.tmp" "$BIN"
echo "$BIN"
