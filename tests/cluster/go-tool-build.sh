#!/usr/bin/env bash
# Sourced by the build-<tool>.sh scripts (build-test-tools.sh runs them all): builds one Go
# test tool, either our main.go from this directory (go_tool_build) or a published module's
# command (go_cmd_build), with modules from the Go module proxy, into a versioned cache
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
# shellcheck source=versions.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/versions.sh"

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
  local start=$SECONDS
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
  log "built $name in $((SECONDS - start)) s"
  echo "$bin"
}

log() { echo "build-${TOOL:-go-tool}: $*" >&2; }
die() { echo "build-${TOOL:-go-tool}: error: $*" >&2; exit 1; }

# Builds one command of a published Go module (no main.go of ours), e.g. promtool:
#
#   go_cmd_build NAME TAG PACKAGE MODULE@VERSION [BUILD_TAGS]
#
# into $CACHE_ROOT/<NAME>_<TAG>/<NAME>, printed on stdout; the build time goes to stderr.
# BUILD_TAGS (comma-separated) are the module's own build options; they apply to `go get` too,
# so modules only other tags need are not downloaded.
# The module is required by a wrapper module, so its own go.mod `replace`s do not apply: a
# module that needs them fails here with the compiler's message.
go_cmd_build() {
  local name=$1 tag=$2 pkg=$3 modver=$4 tags=${5:-}
  TOOL=$name
  local out="$CACHE_ROOT/${name}_${tag}" bin
  bin="$out/$name"
  if [[ -x "$bin" ]]; then echo "$bin"; return 0; fi
  mkdir -p "$CACHE_ROOT"
  exec 9>"$CACHE_ROOT/.lock-$name"
  flock 9
  if [[ -x "$bin" ]]; then echo "$bin"; return 0; fi
  command -v go >/dev/null 2>&1 || die "Go is missing: install a Go toolchain >= 1.26 (it is used only to build test tools)"
  export CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS="-modcacherw${tags:+ -tags=$tags}"
  local start=$SECONDS
  WORK=$(mktemp -d "${TMPDIR:-/tmp}/nmo-$name.XXXXXX")
  trap 'rm -rf "$WORK"' EXIT
  cd "$WORK"
  printf 'module local/%s\n\ngo 1.24.0\n' "${name//-/}" >go.mod
  log "building $name from $modver"
  if ! go get "$pkg@${modver#*@}" >get.log 2>&1; then
    tail -n 20 get.log >&2
    die "the Go module proxy did not serve $modver"
  fi
  mkdir -p "$out"
  go build -trimpath -ldflags="-s -w" -o "$bin.tmp" "$pkg" 2>build.log || { tail -n 30 build.log >&2; die "go build $pkg failed"; }
  mv "$bin.tmp" "$bin"
  log "built $name in $((SECONDS - start)) s"
  echo "$bin"
}

# go_client_go_build NAME SRC: go_tool_build of our SRC against client-go, api and apimachinery
# at the staging version that matches the test control plane (KUBE_VERSION of versions.sh, as
# build-k8s-bins.sh: client-go v0.<minor>.<patch>). `go get` may resolve client-go to another
# version when the others pull it up; the tool must be the one matching the control plane.
go_client_go_build() {
  local name=$1 src=$2
  local kube_version=$KUBE_VERSION
  local minor=${kube_version#v1.}; minor=${minor%%.*}
  local patch=${kube_version##*.}
  local staging_ver="v0.${minor}.${patch}"
  verify_modules() {
    grep -q "k8s.io/client-go $staging_ver" go.mod ||
      die "client-go resolved to another version than $staging_ver: $(grep client-go go.mod)"
  }
  go_tool_build "$name" "client-go-$staging_ver" "$src" 1.24.0 \
    "k8s.io/client-go@$staging_ver" "k8s.io/api@$staging_ver" "k8s.io/apimachinery@$staging_ver"
}
