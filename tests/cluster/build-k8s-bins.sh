#!/usr/bin/env bash
# Builds the real control plane used by the tests and the demo, from the Go module proxy, into a
# versioned cache under $HOME. Idempotent: a complete cache directory is reused as it is.
#
#   tests/cluster/build-k8s-bins.sh   # build if missing, print the directory
#
# Versions: tests/cluster/versions.sh (KUBE_VERSION, ETCD_VERSION, KWOK_VERSION, each
# overridable from the environment).
set -euo pipefail

# shellcheck source=versions.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/versions.sh"
CACHE_ROOT=${NMO_BIN_CACHE:-$HOME/.cache/nmo-k8s-bins}
OUT="$CACHE_ROOT/k8s-${KUBE_VERSION}_etcd-${ETCD_VERSION}_kwok-${KWOK_VERSION}"
BINS=(kube-apiserver kube-controller-manager kube-scheduler kubectl etcd kwok)

log() { echo "build-k8s-bins: $*" >&2; }
die() { echo "build-k8s-bins: error: $*" >&2; exit 1; }

complete() {
  for b in "${BINS[@]}"; do [[ -x "$OUT/bin/$b" ]] || return 1; done
  [[ -s "$OUT/stages.yaml" ]]
}
if complete; then echo "$OUT"; exit 0; fi

mkdir -p "$CACHE_ROOT"
# One builder at a time per machine: a second caller waits, then finds the cache complete.
exec 9>"$CACHE_ROOT/.lock"
flock 9
if complete; then echo "$OUT"; exit 0; fi

command -v go >/dev/null 2>&1 || die "Go is missing: install a Go toolchain >= 1.26 (it is used only to build the test control plane)"

export CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS=-modcacherw
# No DWARF from the compiler: the links strip it anyway (-s -w), so generating it is wasted
# compile time and build-cache space. Optimisation stays on: the tests and benchmarks measure
# against these binaries.
GCFLAGS="all=-dwarf=false"
mkdir -p "$OUT/bin"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/nmo-k8s-build.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

# `go get` packages of one module version, and when the proxy does not serve it, name it and the
# nearest served one.
get_or_explain() {
  local mod=$1 ver=$2
  shift 2
  if ! go get -tool "${@/%/@$ver}" >"$WORK/get.log" 2>&1; then
    local served
    served=$(go list -m -versions "$mod" 2>/dev/null | tr ' ' '\n' | tail -n +2 | grep -E "^${ver%.*}\." | tail -3 | tr '\n' ' ')
    tail -n 20 "$WORK/get.log" >&2
    die "the Go module proxy did not serve $mod@$ver; served versions of the same minor: ${served:-none}"
  fi
}

minor=${KUBE_VERSION#v1.}; minor=${minor%%.*}
patch=${KUBE_VERSION##*.}
staging_ver="v0.${minor}.${patch}"

# --- Kubernetes: a wrapper module that pins every staging module to its published tag.
if [[ ! -x "$OUT/bin/kube-apiserver" || ! -x "$OUT/bin/kube-controller-manager" || ! -x "$OUT/bin/kube-scheduler" || ! -x "$OUT/bin/kubectl" ]]; then
  log "building Kubernetes $KUBE_VERSION (staging $staging_ver); a cold build takes 10-20 minutes on 2 cores"
  mkdir -p "$WORK/k8s" && cd "$WORK/k8s"
  staging=(api apiextensions-apiserver apimachinery apiserver cli-runtime client-go cloud-provider
    cluster-bootstrap code-generator component-base component-helpers controller-manager cri-api
    cri-client cri-streaming csi-translation-lib dynamic-resource-allocation endpointslice externaljwt
    kms kube-aggregator kube-controller-manager kube-proxy kube-scheduler kubectl kubelet metrics
    mount-utils pod-security-admission sample-apiserver sample-cli-plugin sample-controller streaming)
  {
    echo "module local/k8sbins"
    echo
    echo "go 1.24.0"
    echo
    echo "replace ("
    for m in "${staging[@]}"; do echo "	k8s.io/$m => k8s.io/$m $staging_ver"; done
    echo ")"
  } >go.mod
  cmds=(kube-apiserver kube-controller-manager kube-scheduler kubectl)
  get_or_explain k8s.io/kubernetes "$KUBE_VERSION" "${cmds[@]/#/k8s.io/kubernetes/cmd/}"
  date=$(date -u +%Y-%m-%dT%H:%M:%SZ)
  ld="-s -w"
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ld+=" -X $p.gitVersion=$KUBE_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean"
    ld+=" -X $p.gitCommit=0000000000000000000000000000000000000000 -X $p.buildDate=$date"
  done
  # One `go build` for the four commands: one package load and one action graph, so the links
  # of the four overlap with the compiles still running instead of following one another.
  log "go build ${cmds[*]}"
  mkdir -p "$WORK/out"
  go build -trimpath -tags=selinux,notest -gcflags="$GCFLAGS" -ldflags="$ld" -o "$WORK/out/" \
    "${cmds[@]/#/k8s.io/kubernetes/cmd/}"
  for c in "${cmds[@]}"; do mv "$WORK/out/$c" "$OUT/bin/$c"; done
fi

# --- etcd: a bare wrapper module (the server module's own go.mod has relative replaces).
if [[ ! -x "$OUT/bin/etcd" ]]; then
  log "building etcd $ETCD_VERSION"
  mkdir -p "$WORK/etcd" && cd "$WORK/etcd"
  printf 'module local/etcdbin\n\ngo 1.24.0\n' >go.mod
  get_or_explain go.etcd.io/etcd/server/v3 "$ETCD_VERSION" go.etcd.io/etcd/server/v3
  go build -trimpath -gcflags="$GCFLAGS" -ldflags="-s -w" -o "$OUT/bin/etcd.tmp" go.etcd.io/etcd/server/v3
  mv "$OUT/bin/etcd.tmp" "$OUT/bin/etcd"
fi

# --- kwok, and its "fast" stages taken from the module cache (generated, never committed).
if [[ ! -x "$OUT/bin/kwok" || ! -s "$OUT/stages.yaml" ]]; then
  log "building kwok $KWOK_VERSION"
  mkdir -p "$WORK/kwok" && cd "$WORK/kwok"
  printf 'module local/kwokbin\n\ngo 1.24.0\n' >go.mod
  get_or_explain sigs.k8s.io/kwok "$KWOK_VERSION" sigs.k8s.io/kwok/cmd/kwok
  go build -trimpath -gcflags="$GCFLAGS" -ldflags="-s -w" -o "$OUT/bin/kwok.tmp" sigs.k8s.io/kwok/cmd/kwok
  mv "$OUT/bin/kwok.tmp" "$OUT/bin/kwok"
  stages="$(go env GOMODCACHE)/sigs.k8s.io/kwok@$KWOK_VERSION/kustomize/stage"
  {
    cat "$stages/node/fast/node-initialize.yaml"
    for s in pod-ready pod-complete pod-delete; do echo "---"; cat "$stages/pod/fast/$s.yaml"; done
  } >"$OUT/stages.yaml.tmp"
  mv "$OUT/stages.yaml.tmp" "$OUT/stages.yaml"
fi

complete || die "build finished but $OUT is incomplete"
"$OUT/bin/kube-apiserver" --version >&2
# sed reads to the end: with `head -1` etcd could get SIGPIPE, which pipefail makes the script's
# exit status (141) after a complete build.
"$OUT/bin/etcd" --version | sed -n 1p >&2
echo "$OUT"
