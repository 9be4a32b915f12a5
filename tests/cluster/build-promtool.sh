#!/usr/bin/env bash
# Builds Prometheus's promtool (for `promtool check rules` and `promtool test rules` on
# manifests/overlays/monitoring/) from the Go module proxy into a versioned cache under $HOME
# (go-tool-build.sh). Idempotent; prints the binary's path.
#
#   tests/cluster/build-promtool.sh
#
# PROMETHEUS_VERSION (the module version of github.com/prometheus/prometheus; v0.316.0 is
# Prometheus 3.x) overrides the version.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=go-tool-build.sh
source "$HERE/go-tool-build.sh"
PROMETHEUS_VERSION=${PROMETHEUS_VERSION:-v0.316.0}
# `remove_all_sd` is Prometheus' own build option that leaves out the cloud service discoveries
# (plugins/): the rule checker and the unit-test runner are the same code, and the cold build
# needs a fraction of the modules.
go_cmd_build promtool "prometheus-$PROMETHEUS_VERSION-nosd" github.com/prometheus/prometheus/cmd/promtool \
  "github.com/prometheus/prometheus@$PROMETHEUS_VERSION" remove_all_sd
