//! The stage Preflight's findings: what the dry-run evictions refused, in status.

use std::time::Duration;

use super::condition::Stamp;
use super::outcome::{DrainRound, Plan};
use super::status::{Requeue, Step, non_empty, touch};
use crate::api::NodeMaintenanceStatus;

/// Re-check of a maintenance in stage Preflight: its dry-run evictions ask once per pod, so not
/// at the drain's pace.
pub(crate) const REQUEUE_PREFLIGHT: Duration = Duration::from_secs(60);

/// The preflight's writes, from the refusals of its dry-run evictions: the status
/// [`preflight`] makes of them (written when it changed), its requeue.
pub(crate) fn preflight_plan(
    round: &DrainRound,
    blockers: &[crate::api::PodBlocker],
    now: jiff::Timestamp,
) -> Plan {
    let at = Stamp {
        generation: round.generation,
        now,
    };
    let step = preflight(&round.status, blockers, at);
    let mut writes = round.writes();
    writes.status(&step.status);
    Plan::after_round(writes, step)
}

/// The stage Preflight's findings: `blockers` (what the dry-run evictions refused, capped as the
/// drain's are) in `status.blockers`, and `lastError` empty; back after [`REQUEUE_PREFLIGHT`].
pub(crate) fn preflight(
    status: &NodeMaintenanceStatus,
    blockers: &[crate::api::PodBlocker],
    at: Stamp,
) -> Step {
    let mut s = status.clone();
    s.blockers = non_empty(crate::drain::report::cap_blockers(blockers).0);
    s.last_error = None;
    if *status != s {
        touch(&mut s, at);
    }
    Step::quiet(s, Requeue::After(REQUEUE_PREFLIGHT))
}
