#!/usr/bin/env bash
# Builds tests/cluster/kubevirt-standin (KubeVirt's eviction webhook and migration controller,
# stood in; tests/evacuation.rs) with client-go at the staging version that matches the test
# control plane, from the Go module proxy, into a versioned cache under $HOME
# (go-tool-build.sh). Idempotent: a cached binary for the same version and source is reused.
#
#   tests/cluster/build-kubevirt-standin.sh   # build if missing, print the binary's path
#
# KUBE_VERSION (default v1.36.3, as build-k8s-bins.sh) selects client-go v0.<minor>.<patch>.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=go-tool-build.sh
source "$HERE/go-tool-build.sh"

KUBE_VERSION=${KUBE_VERSION:-v1.36.3}
minor=${KUBE_VERSION#v1.}; minor=${minor%%.*}
patch=${KUBE_VERSION##*.}
staging_ver="v0.${minor}.${patch}"

verify_modules() {
  grep -q "k8s.io/client-go $staging_ver" go.mod ||
    die "client-go resolved to another version than $staging_ver: $(grep client-go go.mod)"
}

go_tool_build kubevirt-standin "client-go-$staging_ver" "$HERE/kubevirt-standin/main.go" 1.24.0 \
  "k8s.io/client-go@$staging_ver" "k8s.io/api@$staging_ver" "k8s.io/apimachinery@$staging_ver"
