#!/usr/bin/env bash
# Sourced by build-go-elector.sh and build-olm-validate.sh: builds one Go test tool (its
# main.go, from this directory) with modules from the Go module proxy, into a versioned cache
# under $HOME (as build-k8s-bins.sh caches the control plane). Go is used only to build test
# tools; nothing built here is committed.
#
#   go_tool_build NAME TAG SRC GO_DIRECTIVE MODULE@VERSION...
#
# The binary is $CACHE_ROOT/<NAME>_<TAG>_<hash>/<NAME>, where <hash> is the first 12 hex digits
# of SRC's sha256 (an edited main.go is rebuilt); its path is printed on stdout. Idempotent: a
# cached binary is reused. Concurrent builds of one tool wait on a lock. When the caller defines
# a function `verify_modules`, it runs in the module directory after `go mod tidy` and may `die`.
set -euo pipefail

CACHE_ROOT=${NMO_BIN_CACHE:-$HOME/.cache/nmo-k8s-bins}

go_tool_build() {
  local name=$1 tag=$2 src=$3 go_directive=$4
  shift 4
  TOOL=$name
  local hash out bin
  hash=$(sha256sum "$src" | cut -c1-12)
  out="$CACHE_ROOT/${name}_${tag}_${hash}"
  bin="$out/$name"
  if [[ -x "$bin" ]]; then echo "$bin"; return 0; fi

  mkdir -p "$CACHE_ROOT"
  exec 9>"$CACHE_ROOT/.lock-$name"
  flock 9
  if [[ -x "$bin" ]]; then echo "$bin"; return 0; fi

  command -v go >/dev/null 2>&1 || die "Go is missing: install a Go toolchain >= 1.26 (it is used only to build test tools)"
  export CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS=-modcacherw
  WORK=$(mktemp -d "${TMPDIR:-/tmp}/nmo-$name.XXXXXX")
  trap 'rm -rf "$WORK"' EXIT
  cd "$WORK"
  cp "$src" main.go
  printf 'module local/%s\n\ngo %s\n' "${name//-/}" "$go_directive" >go.mod
  log "building $name with $*"
  if ! go get "$@" >get.log 2>&1; then
    tail -n 20 get.log >&2
    die "the Go module proxy did not serve $*"
  fi
  go mod tidy >tidy.log 2>&1 || { tail -n 20 tidy.log >&2; die "go mod tidy failed"; }
  if declare -F verify_modules >/dev/null; then verify_modules; fi
  mkdir -p "$out"
  go build -trimpath -ldflags="-s -w" -o "$bin.tmp" .
  mv "$bin.tmp" "$bin"
  echo "$bin"
}

log() { echo "build-${TOOL:-go-tool}: $*" >&2; }
die() { echo "build-${TOOL:-go-tool}: error: $*" >&2; exit 1; }
