#!/usr/bin/env bash
# Copies the Prometheus Operator's ServiceMonitor and PrometheusRule CRDs (from the Go module
# github.com/prometheus-operator/prometheus-operator, whose example/ ships them) into a
# versioned cache under $HOME, so the end-to-end tests can install them and have the API server
# validate the monitoring objects against the real schemas. Nothing is built. Idempotent;
# prints the directory.
#
#   tests/cluster/fetch-prometheus-operator-crds.sh
#
# PROMETHEUS_OPERATOR_VERSION overrides the version.
set -euo pipefail
VERSION=${PROMETHEUS_OPERATOR_VERSION:-v0.85.0}
CACHE_ROOT=${NMO_BIN_CACHE:-$HOME/.cache/nmo-k8s-bins}
OUT="$CACHE_ROOT/prometheus-operator-crds_$VERSION"
FILES=(monitoring.coreos.com_servicemonitors.yaml monitoring.coreos.com_prometheusrules.yaml)
complete() { for f in "${FILES[@]}"; do [[ -s "$OUT/$f" ]] || return 1; done; }
if complete; then echo "$OUT"; exit 0; fi
mkdir -p "$CACHE_ROOT"
exec 9>"$CACHE_ROOT/.lock-prometheus-operator-crds"
flock 9
if complete; then echo "$OUT"; exit 0; fi
command -v go >/dev/null 2>&1 || { echo "fetch-prometheus-operator-crds: error: Go is missing" >&2; exit 1; }
export GOTOOLCHAIN=local GOFLAGS=-modcacherw
dir=$(cd "${TMPDIR:-/tmp}" && go mod download -json "github.com/prometheus-operator/prometheus-operator@$VERSION" |
  sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
[[ -n "$dir" ]] || { echo "fetch-prometheus-operator-crds: error: the Go module proxy did not serve $VERSION" >&2; exit 1; }
mkdir -p "$OUT.tmp"
for f in "${FILES[@]}"; do cp "$dir/example/prometheus-operator-crd/$f" "$OUT.tmp/$f"; done
rm -rf "$OUT" && mv "$OUT.tmp" "$OUT"
echo "$OUT"
