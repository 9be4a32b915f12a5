//! `onTimeout: Abort` (docs/drain-contract.md §10a, issue 47 item 5, after kured #1129): when a
//! drain cannot finish by its deadline, the node is given back. Pure decisions of the
//! maintenance pass, in two passes so that the fact is recorded before the node is touched:
//!
//! 1. [`at_deadline`]: the pass that finds the deadline passed (`status.drainDeadline`, counted
//!    from the drain's start, `timeline::deadline_start`, by the API server's time of the node
//!    read) records the abort in status and ends: phase `Failed`, `lastError`, condition
//!    [`ABORTED`]`=True` with reason [`DRAIN_ABORTED`]; nothing else is written.
//! 2. [`standing`]: every later pass reads that condition (not a memory of this process, so a
//!    restarted or new leader reads it too) and runs [`super::steps::ABORTED_STEPS`]: the node
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

use super::*;
use crate::api::{MaintenancePhase, OnTimeout, Stage};

/// Condition type recording that the drain was aborted at its deadline (`True`), or that the
/// abort is over (`False`: a stage short of Cordon ended it).
pub(crate) const ABORTED: &str = crate::api::ABORTED_CONDITION;
/// Reason of `Aborted=True`: the drain did not finish by its deadline and `onTimeout` is `Abort`.
pub(crate) const DRAIN_ABORTED: &str = crate::api::DRAIN_ABORTED_REASON;
/// Reason of `Aborted=False` once a stage short of Cordon ended the abort.
pub(crate) const ABORT_ENDED: &str = "AbortEnded";
/// The pass after the abort is recorded starts with the status write's own watch event, once the
/// controller's cache holds it (the write changes the phase and a condition: `write::wakes`), so
/// it reads the abort back; this is its fallback. A timer of its own could start that pass on a
/// cache without the write, which would record the abort (and announce it) again.
pub(crate) const REQUEUE_ABORTED: Duration = Duration::from_secs(5);

/// What `lastError` says of an abort; read back only where the CRD prunes conditions.
pub(crate) const ABORT_MARKER: &str = "onTimeout Abort: the drain is aborted";

/// Whether `status` records an abort in force: `Aborted=True`; on a CRD that prunes conditions
/// (upstream's, which keeps `phase` and `lastError`), no `Aborted` condition at all, phase
/// Failed and `lastError` saying so ([`ABORT_MARKER`]).
pub(crate) fn is_aborted(status: &NodeMaintenanceStatus) -> bool {
    match condition(status, ABORTED) {
        Some(c) => c.status == "True",
        None => {
            status.phase == Some(MaintenancePhase::Failed)
                && status
                    .last_error
                    .as_deref()
                    .is_some_and(|e| e.contains(ABORT_MARKER))
        }
    }
}

/// The status a pass of `stage` starts from, and whether the abort it records is in force: a
/// stage short of Cordon (`Idle`, `Preflight`) ends it (`Aborted=False` reason [`ABORT_ENDED`],
/// phase Running, `lastError` cleared), so the next drain starts afresh; in `Cordon` and `Drain`
/// it stays (the status as given, `true`).
pub(crate) fn standing(
    status: &NodeMaintenanceStatus,
    stage: Stage,
    generation: Option<i64>,
    now: jiff::Timestamp,
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
    set_condition(
        &mut s,
        ABORTED,
        false,
        ABORT_ENDED,
        message,
        generation,
        now,
    );
    if !is_terminal(&s) {
        s.phase = Some(MaintenancePhase::Running);
    }
    s.last_error = None;
    s.last_update = Some(now_time(now));
    s.observed_generation = generation;
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
    generation: Option<i64>,
    now: jiff::Timestamp,
) -> Option<Step> {
    if overdue != Some(OnTimeout::Abort)
        || status.phase == Some(MaintenancePhase::Succeeded)
        || is_aborted(status)
    {
        return None;
    }
    let at = deadline.map(|d| d.to_string()).unwrap_or_default();
    let secs = timeout.map_or(0, |t| t.as_secs());
    let passed =
        format!("the drain did not finish within its drainTimeout of {secs}s (deadline {at})");
    let left: Vec<String> = match &status.blockers {
        Some(b) if !b.is_empty() => b
            .iter()
            .map(|b| format!("{}/{} ({})", b.namespace, b.name, b.reason))
            .collect(),
        _ => status.pending_pods.clone().unwrap_or_default(),
    };
    let left = if left.is_empty() {
        "none listed".to_string()
    } else {
        left.join(", ")
    };
    let text = crate::bounds::truncate(
        &format!(
            "{passed}; {ABORT_MARKER}, the node restored as on delete and nothing more \
             evicted; pods left on the node: {left}"
        ),
        crate::bounds::MAX_CONDITION_MESSAGE,
    );
    let mut s = status.clone();
    let mut events = vec![PlannedEvent::warning(
        EventTarget::Maintenance,
        event::DEADLINE_EXCEEDED,
        format!("{passed}; {}", OnTimeout::Abort.consequence()),
    )];
    if s.phase != Some(MaintenancePhase::Failed) {
        events.push(PlannedEvent::warning(
            EventTarget::Maintenance,
            event::FAILED.0,
            event::FAILED.1,
        ));
    }
    s.phase = Some(MaintenancePhase::Failed);
    s.last_error = Some(text.clone());
    set_condition(&mut s, ABORTED, true, DRAIN_ABORTED, text, generation, now);
    s.last_update = Some(now_time(now));
    s.observed_generation = generation;
    Some(Step {
        status: s,
        events,
        requeue: Requeue::After(REQUEUE_ABORTED),
    })
}

/// Whether the maintenance `nm`, as the controller's cache holds it, records an abort in force:
/// the drain gate's reading ([`crate::drain::gate::may_send`]).
pub(crate) fn aborted(nm: &NodeMaintenance) -> bool {
    nm.status.as_ref().is_some_and(is_aborted)
}

#[cfg(test)]
#[path = "abort_tests.rs"]
mod tests;
