#!/usr/bin/env bash
# Builds tests/cluster/go-elector (client-go's tools/leaderelection, at the staging version that
# matches the test control plane) from the Go module proxy into a versioned cache under $HOME
# (go-tool-build.sh). Idempotent: a cached binary for the same client-go version and source is
# reused.
#
#   tests/cluster/build-go-elector.sh   # build if missing, print the binary's path
#
# KUBE_VERSION (tests/cluster/versions.sh, as build-k8s-bins.sh) selects client-go v0.<minor>.<patch>.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=go-tool-build.sh
source "$HERE/go-tool-build.sh"

go_client_go_build go-elector "$HERE/go-elector/main.go"
