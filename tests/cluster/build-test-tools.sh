#!/usr/bin/env bash
# Builds every Go test tool into the versioned cache under $HOME, one after the other, and
# prints how long each took (0 s when cached): client-go's elector (tests/leader.rs), the
# KubeVirt stand-in (tests/evacuation.rs),
# operator-framework's validators (tests/bundle.rs), opm (`opm validate catalog/`,
# tests/bundle.rs), helm (tests/chart.rs) and promtool (tests/monitoring.rs). The tests build a
# missing tool on demand as well; this step only puts the builds in one place and shows their
# cost. promtool and opm are the long form (their cold builds take about 15 minutes each on a
# loaded 2-core machine): built only with NMO_LONG_TOOLS set. Their checks are #[ignore]d, so
# libtest reports them as ignored (skipped) unless run with `-- --include-ignored`.
# Idempotent.
#
#   tests/cluster/build-test-tools.sh
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
tools=(go-elector kubevirt-standin olm-validate helm)
if [[ -n "${NMO_LONG_TOOLS:-}" ]]; then
  tools+=(opm promtool)
else
  echo "test-tools: opm and promtool are the long form, not built (NMO_LONG_TOOLS=1 builds them): their checks are ignored unless run with -- --include-ignored"
fi
for tool in "${tools[@]}"; do
  start=$(date +%s)
  bash "$HERE/build-$tool.sh" >/dev/null
  echo "test-tools: $tool ready after $(( $(date +%s) - start )) s"
done
