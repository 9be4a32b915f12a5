//! The conditions of a NodeMaintenance's `status.conditions`: their types and reasons, and how
//! one is set (`lastTransitionTime` moves only with its status) and read. Part of the API, below
//! everything that reads or writes it: the plan's steps (`crate::controller::plan`, which names
//! it `plan::condition`) and the drain's gates set them alike; the drain's gate reads the abort
//! here.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

use crate::api::{MaintenancePhase, NodeMaintenance, NodeMaintenanceStatus};
use crate::server_time::now_time;

/// The node is cordoned, tainted and labelled for this maintenance.
pub(crate) const CORDONED: &str = "Cordoned";
/// Every evictable pod is gone.
pub(crate) const DRAINED: &str = "Drained";
/// The medik8s lease of the node is ours. `False` with reason [`LEASE_LOST`] remembers that
/// it used to be ours (upstream used `drainProgress > 0` as a proxy for this).
pub(crate) const LEASE_HELD: &str = "LeaseHeld";
/// Reason of `LeaseHeld=False` after we held the lease.
pub(crate) const LEASE_LOST: &str = "LeaseLost";
/// Reason of `LeaseHeld=False` when we never held it.
pub(crate) const HELD_BY_OTHER: &str = "HeldByOther";
/// No new eviction is sent (the `paused` knob, `crate::policy`); written once the knob was
/// first set, so a maintenance that never paused keeps upstream's status.
pub(crate) const DRAIN_PAUSED: &str = "DrainPaused";
/// `False` while a knob's annotation has a value the operator refuses (the default applies);
/// written once one was first refused.
pub(crate) const DRAIN_POLICY_VALID: &str = "DrainPolicyValid";
/// Reason of `Drained=False` once the drain's deadline (`drainTimeout`) has passed.
pub(crate) const DEADLINE_EXCEEDED: &str = "DrainDeadlineExceeded";
/// `True` while the maintenance waits for a slot of the drain budget
/// (`--max-parallel-drains`); written once it first waited.
pub(crate) const DRAIN_QUEUED: &str = "DrainQueued";
/// How far the maintenance goes (the `stage` knob); the reason names the stage. Written once
/// a stage other than Drain was first set, so a maintenance that never used the knob keeps
/// upstream's status.
pub(crate) const STAGE: &str = "Stage";
/// Reason of `Cordoned=False` and `LeaseHeld=False` once a stage short of Cordon released
/// the node and the lease.
pub(crate) const RELEASED: &str = "Released";
/// Reason of `Stage` while the maintenance waits for its window (`startAt`).
pub(crate) const MAINTENANCE_WINDOW: &str = "MaintenanceWindow";

/// When a status is written: the generation of the object it observed
/// (`observedGeneration`) and the time it stamps (`lastTransitionTime`, `lastUpdate`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Stamp {
    pub generation: Option<i64>,
    pub now: jiff::Timestamp,
}

/// Sets condition `type_` on `status` as written `at`, keeping `lastTransitionTime` when its
/// status is unchanged.
pub(crate) fn set_condition(
    status: &mut NodeMaintenanceStatus,
    type_: &str,
    value: bool,
    reason: &str,
    message: impl Into<String>,
    at: Stamp,
) {
    let value = if value { "True" } else { "False" }.to_string();
    let conditions = status.conditions.get_or_insert_with(Vec::new);
    let message = message.into();
    match conditions.iter_mut().find(|c| c.type_ == type_) {
        Some(c) => {
            if c.status != value {
                c.last_transition_time = now_time(at.now);
                c.status = value;
            }
            c.reason = reason.to_string();
            c.message = message;
            c.observed_generation = at.generation;
        }
        None => conditions.push(Condition {
            type_: type_.to_string(),
            status: value,
            reason: reason.to_string(),
            message,
            observed_generation: at.generation,
            last_transition_time: now_time(at.now),
        }),
    }
}

/// The condition `type_` of `status`, if written.
pub(crate) fn condition<'a>(
    status: &'a NodeMaintenanceStatus,
    type_: &str,
) -> Option<&'a Condition> {
    status
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
}

/// Condition type recording that the drain was aborted at its deadline (`True`), or that the
/// abort is over (`False`: a stage short of Cordon ended it).
pub(crate) const ABORTED: &str = crate::api::ABORTED_CONDITION;

/// Reason of `Aborted=True`: the drain did not finish by its deadline and `onTimeout` is `Abort`.
pub(crate) const DRAIN_ABORTED: &str = crate::api::DRAIN_ABORTED_REASON;

/// Reason of `Aborted=False` once a stage short of Cordon ended the abort.
pub(crate) const ABORT_ENDED: &str = "AbortEnded";

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

/// Whether the maintenance `nm`, as the controller's cache holds it, records an abort in force:
/// the drain gate's reading ([`crate::drain::gate::may_send`]).
pub(crate) fn aborted(nm: &NodeMaintenance) -> bool {
    nm.status.as_ref().is_some_and(is_aborted)
}
