#!/usr/bin/env bash
# Builds tests/cluster/kubevirt-standin (KubeVirt's eviction webhook and migration controller,
# stood in; tests/evacuation.rs) with client-go at the staging version that matches the test
# control plane, from the Go module proxy, into a versioned cache under $HOME
# (go-tool-build.sh). Idempotent: a cached binary for the same version and source is reused.
#
#   tests/cluster/build-kubevirt-standin.sh   # build if missing, print the binary's path
#
# KUBE_VERSION (tests/cluster/versions.sh, as build-k8s-bins.sh) selects client-go v0.<minor>.<patch>.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=go-tool-build.sh
source "$HERE/go-tool-build.sh"

go_client_go_build kubevirt-standin "$HERE/kubevirt-standin/main.go"
