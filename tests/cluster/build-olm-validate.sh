#!/usr/bin/env bash
# Builds olm-validate (tests/cluster/olm-validate/main.go: operator-framework's bundle loader and
# validators) from the Go module proxy into a versioned cache under $HOME (go-tool-build.sh).
# Idempotent; prints the binary's path.
#
#   tests/cluster/build-olm-validate.sh
#
# The version can be overridden with OLM_API_VERSION.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=go-tool-build.sh
source "$HERE/go-tool-build.sh"

OLM_API_VERSION=${OLM_API_VERSION:-v0.35.0}
go_tool_build olm-validate "api-$OLM_API_VERSION" "$HERE/olm-validate/main.go" 1.24.4 \
  "github.com/operator-framework/api@$OLM_API_VERSION"
