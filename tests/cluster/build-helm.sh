#!/usr/bin/env bash
# Builds helm (for `helm lint` and `helm template` on charts/) from the Go module proxy into a
# versioned cache under $HOME (go-tool-build.sh). Idempotent; prints the binary's path.
#
#   tests/cluster/build-helm.sh
#
# HELM_VERSION overrides the version.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=go-tool-build.sh
source "$HERE/go-tool-build.sh"
HELM_VERSION=${HELM_VERSION:-v3.19.0}
go_cmd_build helm "helm-$HELM_VERSION" helm.sh/helm/v3/cmd/helm "helm.sh/helm/v3@$HELM_VERSION"
