#!/usr/bin/env bash
# Builds operator-registry's opm (for `opm validate catalog/`) from the Go module proxy into a
# versioned cache under $HOME (go-tool-build.sh). Idempotent; prints the binary's path.
#
#   tests/cluster/build-opm.sh
#
# OPM_VERSION overrides the version.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=go-tool-build.sh
source "$HERE/go-tool-build.sh"
OPM_VERSION=${OPM_VERSION:-v1.60.0}
# operator-registry's own release tags: pure-Go OpenPGP instead of gpgme (cgo) for image
# signatures; sqlite is cgo-only and falls back to its stub, which `opm validate` never calls.
go_cmd_build opm "operator-registry-$OPM_VERSION" github.com/operator-framework/operator-registry/cmd/opm \
  "github.com/operator-framework/operator-registry@$OPM_VERSION" json1,netgo,osusergo,containers_image_openpgp
