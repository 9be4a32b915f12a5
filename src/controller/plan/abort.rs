//! `onTimeout: Abort` (docs/drain-contract.md §10a, issue 47 item 5, after kured #1129): when a
//! drain cannot finish by its deadline, the node is given back. Pure decisions of the
//! maintenance pass, in two passes so that the fact is recorded before the node is touched:
//!
//! 1. [`at_deadline`]: the pass that finds the deadline passed (`status.drainDeadline`, counted
//!    from the drain's start, `timeline::deadline_start`, by the API server's time of the node
//!    read) records the abort in status and ends: phase `Failed`, `lastError`, condition
//!    [`ABORTED`]`=True` with reason [`DRAIN_ABORTED`]; nothing else is written.
//! 2. [`standing`]: every later pass reads that condition (not a memory of this process, so a
//!    restarted or new leader reads it too) and runs [`super::maintenance::ABORTED_STEPS`]: the node
//!    restored as a delete would restore it and the lease given up (both no-ops once done), no
//!    lease taken, no node entered, no round. The drain gate ([`crate::drain::gate::may_send`])
//!    reads the same condition, so evictions a round decided before the abort are not sent.
//!
//! The abort holds in stages `Drain` and `Cordon` and across pause, an edit of `onTimeout` and a
//! restart; it ends only with a stage that releases the node anyway (`Idle` or `Preflight`):
//! `Aborted` turns False and the phase Running, so moving on to `Drain` again is a new drain
//! with a new start and a new deadline (the node record, which held the old start, went with
//! the release). A Failed maintenance holds no drain slot (`queue::active`), so the abort frees
//! its slot with its phase.

use std::time::Duration;

use super::condition::{
    ABORT_ENDED, ABORT_MARKER, ABORTED, DRAIN_ABORTED, Stamp, is_aborted, set_condition,
};
use super::status::{
    PlannedEvent, Requeue, Step, event, fail_with, is_terminal, passed, pods_left, touch,
};
use crate::api::{MaintenancePhase, NodeMaintenanceStatus, OnTimeout, Stage};

/// The pass after the abort is recorded starts with the status write's own watch event, once the
/// controller's cache holds it (the write changes the phase and a condition: `write::wakes`), so
/// it reads the abort back; this is its fallback. A timer of its own could start that pass on a
/// cache without the write, which would record the abort (and announce it) again.
pub(crate) const REQUEUE_ABORTED: Duration = Duration::from_secs(5);

/// The status a pass of `stage` starts from, and whether the abort it records is in force: a
/// stage short of Cordon (`Idle`, `Preflight`) ends it (`Aborted=False` reason [`ABORT_ENDED`],
/// phase Running, `lastError` cleared), so the next drain starts afresh; in `Cordon` and `Drain`
/// it stays (the status as given, `true`).
pub(crate) fn standing(
    status: &NodeMaintenanceStatus,
    stage: Stage,
    at: Stamp,
) -> (NodeMaintenanceStatus, bool) {
    if !is_aborted(status) {
        return (status.clone(), false);
    }
    if matches!(stage, Stage::Cordon | Stage::Drain) {
        return (status.clone(), true);
    }
    let mut s = status.clone();
    let message = format!(
        "the abort ended with the stage {stage}: moving on to Drain starts a new drain with a new \
         deadline"
    );
    set_condition(&mut s, ABORTED, false, ABORT_ENDED, message, at);
    if !is_terminal(&s) {
        s.phase = Some(MaintenancePhase::Running);
    }
    s.last_error = None;
    touch(&mut s, at);
    (s, false)
}

/// The step of the pass that finds the deadline passed with `onTimeout: Abort` (`overdue`, from
/// [`crate::policy::DrainPolicy::overdue`]); `None` otherwise, after a success (drained once is
/// drained, as with `Fail`) or when the abort is recorded already. `deadline` is when it passed
/// and `timeout` the `drainTimeout`, for the words.
///
/// The step records phase `Failed`, `lastError` (the deadline, then the pods the last round left:
/// its blockers as `<ns>/<pod> (<reason>)`, else `pendingPods`), `Aborted=True` reason
/// [`DRAIN_ABORTED`], the Warning events `DrainDeadlineExceeded` and `FailedMaintenance`; the
/// release is the next pass's, decided from this status as read back ([`REQUEUE_ABORTED`]).
pub(crate) fn at_deadline(
    status: &NodeMaintenanceStatus,
    overdue: Option<OnTimeout>,
    (deadline, timeout): (Option<jiff::Timestamp>, Option<Duration>),
    at: Stamp,
) -> Option<Step> {
    if overdue != Some(OnTimeout::Abort)
        || status.phase == Some(MaintenancePhase::Succeeded)
        || is_aborted(status)
    {
        return None;
    }
    let passed = passed(timeout, deadline);
    let left = pods_left(status);
    let text = crate::bounds::truncate(
        &format!(
            "{passed}; {ABORT_MARKER}, the node restored as on delete and nothing more \
             evicted; pods left on the node: {left}"
        ),
        crate::bounds::MAX_CONDITION_MESSAGE,
    );
    let mut s = status.clone();
    let mut events = vec![PlannedEvent::warning(
        event::DEADLINE_EXCEEDED,
        format!("{passed}; {}", OnTimeout::Abort.consequence()),
    )];
    fail_with(status, &mut s, &mut events, text.clone());
    set_condition(&mut s, ABORTED, true, DRAIN_ABORTED, text, at);
    touch(&mut s, at);
    Some(Step {
        status: s,
        events,
        requeue: Requeue::After(REQUEUE_ABORTED),
    })
}

#[cfg(test)]
#[path = "abort_tests.rs"]
mod tests;
