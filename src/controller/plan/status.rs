//! What every step of a pass yields ([`Step`]: the status to record, the events to publish once
//! it is recorded, when to come back) and the status helpers the steps share; each step's own
//! status lives with its flow, in the file named for the step. A leaf of the plan.
//!
//! Upstream's observable contract (docs/compat.md §3–§5: phases, events, lastError texts, the
//! errorOnLeaseCount rules) is kept, with the improvements of §13: events only on transitions, no
//! status write when nothing changed, lastError cleared on success, drainProgress never negative,
//! lease ownership tracked explicitly (the `LeaseHeld` condition) instead of `drainProgress > 0`.

use std::time::Duration;

use super::condition::{self, Stamp, condition, set_condition};
use crate::api::{MaintenancePhase, NodeMaintenanceStatus, PodReference};

pub(crate) use crate::server_time::now_time;

/// Upstream's event reasons and exact messages (docs/compat.md §4), plus ours.
pub(crate) mod event {
    /// Normal, on the NodeMaintenance, when its evictions were paused (ours).
    pub(crate) const PAUSED: (&str, &str) = (
        "DrainPaused",
        "Evictions paused: the node stays cordoned and tainted and the lease held",
    );
    /// Normal, on the NodeMaintenance, when its evictions resumed (ours).
    pub(crate) const RESUMED: (&str, &str) = ("DrainResumed", "Evictions resumed");
    /// Warning, on the NodeMaintenance, when a knob's annotation has a value the operator
    /// refuses; once per change of what it says (ours).
    pub(crate) const INVALID_POLICY: &str = "InvalidDrainPolicy";
    /// Normal, on the NodeMaintenance, after the finalizer was added.
    pub(crate) const BEGIN: (&str, &str) = ("BeginMaintenance", "Begin a node maintenance");
    /// Normal, on the NodeMaintenance, on the transition to Succeeded.
    pub(crate) const SUCCEED: (&str, &str) =
        ("SucceedMaintenance", "Node maintenance was succeeded");
    /// Warning, on the NodeMaintenance, on the transition to Failed.
    pub(crate) const FAILED: (&str, &str) = ("FailedMaintenance", "Failed a node maintenance");
    /// Normal, on the Node, when leaving maintenance uncordoned it.
    pub(crate) const UNCORDON: (&str, &str) = ("UncordonNode", "Uncordon a node");
    /// Normal, on the NodeMaintenance, after the finalizer was removed.
    pub(crate) const REMOVED: (&str, &str) = ("RemovedMaintenance", "Removed a node maintenance");
    /// Normal, once per VMI: its evacuation off the restored node was cancelled.
    pub(crate) const EVACUATION_CANCELLED: &str = "EvacuationCancelled";
    /// Warning, once per VMI: the cancel of its evacuation failed (the error appended).
    pub(crate) const EVACUATION_NOT_CANCELLED: &str = "EvacuationNotCancelled";
    /// Normal, once per VMI: the server offers no `evacuate/cancel`, its migration continues.
    pub(crate) const EVACUATION_CONTINUES: &str = "EvacuationContinues";
    /// Warning, on the NodeMaintenance, when someone undid part of the maintenance (ours).
    pub(crate) const REAPPLIED: &str = "MaintenanceReapplied";
    /// Warning, on the NodeMaintenance, when the node of the name entered is another machine
    /// (another `spec.providerID`); once per change of what it says (ours).
    pub(crate) const NODE_REPLACED: &str = "NodeReplaced";
    /// Normal, on the NodeMaintenance, once per pod the drain leaves on the node on purpose
    /// (a replacement tolerating the maintenance taints, or a pod labelled `skip`; ours,
    /// `docs/compat.md §7`).
    pub(crate) const POD_SKIPPED: &str = "PodNotEvicted";
    /// Normal, on the NodeMaintenance, once per Deployment the drain restarted instead of
    /// evicting its pod (`surge: RolloutRestart`; ours), naming the Deployment and the pod.
    pub(crate) const WORKLOAD_RESTARTED: &str = "WorkloadRestarted";
    /// Warning, on the NodeMaintenance, once when the drain's deadline passes, naming what
    /// `onTimeout` does then (ours).
    pub(crate) const DEADLINE_EXCEEDED: &str = "DrainDeadlineExceeded";
    /// Warning, on the NodeMaintenance, per pod deleted after the deadline (`ForceDelete`).
    pub(crate) const POD_FORCE_DELETED: &str = "PodForceDeleted";
    /// Warning, once per pod: KubeVirt refuses to evict the launcher pod of a VMI that must
    /// live-migrate and cannot (the note names the VMI, in KubeVirt's words).
    pub(crate) const POD_NOT_MIGRATABLE: &str = "PodNotMigratable";
    /// Warning, once per failed live migration of a launcher pod's VMI (docs/drain-contract.md
    /// §4a).
    pub(crate) const POD_MIGRATION_FAILED: &str = "PodMigrationFailed";
    /// Normal, on the NodeMaintenance, when it starts waiting for a drain slot (ours).
    pub(crate) const QUEUED: &str = "DrainQueued";
    /// Normal, on the NodeMaintenance, when the operator deletes it `expireAfter` after it
    /// Succeeded (ours).
    pub(crate) const EXPIRED: &str = "MaintenanceExpired";
    /// Normal, on the NodeMaintenance, when a drain slot is its after it waited (ours).
    pub(crate) const DEQUEUED: (&str, &str) = (
        "DrainStarted",
        "A drain slot is free (--max-parallel-drains): evictions start",
    );
}

/// The object an event is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum EventTarget {
    /// The NodeMaintenance being reconciled.
    Maintenance,
    /// Its Node.
    Node,
}

/// An event to publish after the status write it belongs to succeeded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct PlannedEvent {
    /// What it is about.
    pub target: EventTarget,
    /// Warning (true) or Normal.
    pub warning: bool,
    /// Event reason.
    pub reason: &'static str,
    /// Event message (note).
    pub message: String,
    /// The pod it is about besides (the event's `related` object): events about several pods
    /// are told apart by it, since an event recorder folds events of the same reason about the
    /// same object into one series that keeps the first one's message.
    pub pod: Option<PodReference>,
    /// The KubeVirt VMI it is about besides (the event's `related` object, as `pod`).
    pub vmi: Option<crate::drain::cancel::VmiRef>,
    /// The KubeVirt migration it is about besides (the event's `related` object, as `pod`).
    pub migration: Option<crate::drain::cancel::VmiRef>,
}

impl PlannedEvent {
    /// A Normal event on the NodeMaintenance ([`Self::on_node`] moves it to the node).
    pub(crate) fn normal((reason, message): (&'static str, &str)) -> Self {
        Self {
            target: EventTarget::Maintenance,
            warning: false,
            reason,
            message: message.to_string(),
            pod: None,
            vmi: None,
            migration: None,
        }
    }
    /// A Warning event on the NodeMaintenance.
    pub(crate) fn warning(reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            warning: true,
            message: message.into(),
            ..Self::normal((reason, ""))
        }
    }

    /// The same event, on the node.
    pub(crate) fn on_node(self) -> Self {
        Self {
            target: EventTarget::Node,
            ..self
        }
    }

    /// The same event, about `pod` besides (its `related` object).
    pub(crate) fn about(self, pod: &crate::api::PodBlocker) -> Self {
        Self {
            pod: Some(pod.pod()),
            ..self
        }
    }
}

/// When to reconcile again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Requeue {
    /// After this long.
    After(Duration),
    /// After this long; the reconciler logs upstream's `Reconciling with fixed duration`.
    Fixed(Duration),
    /// After the per-object wait for a lease we never held ([`lease_wait`]).
    LeaseWait,
    /// Only when the object changes.
    Never,
}

/// The outcome of one step: the status to record, the events to emit once it is recorded, and
/// when to come back.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Step {
    /// The new status.
    pub status: NodeMaintenanceStatus,
    /// Events to publish after the status write succeeded.
    pub events: Vec<PlannedEvent>,
    /// Next reconcile.
    pub requeue: Requeue,
}

impl Step {
    /// A step that records `status` without an event and comes back after `requeue`.
    pub(crate) fn quiet(status: NodeMaintenanceStatus, requeue: Requeue) -> Self {
        Self {
            status,
            events: Vec::new(),
            requeue,
        }
    }
}

/// Re-check of a Succeeded maintenance: renews the 3600 s lease well before it expires and
/// corrects drift the Node watch might have missed.
pub(crate) const REQUEUE_SUCCEEDED: Duration = Duration::from_secs(300);

/// Next pass while evicted pods are only terminating (the pass is cheap: one pod list).
pub(crate) const REQUEUE_TERMINATING: Duration = Duration::from_secs(1);

/// First wait for a lease we never held; doubles per attempt up to [`LEASE_WAIT_MAX`].
pub(crate) const LEASE_WAIT_INITIAL: Duration = Duration::from_secs(2);

/// Longest wait for a lease we never held.
pub(crate) const LEASE_WAIT_MAX: Duration = Duration::from_secs(30);

/// Retry delay for a lease we never held, after `attempt` earlier waits: 2 s doubling to 30 s.
pub(crate) fn lease_wait(attempt: u32) -> Duration {
    LEASE_WAIT_INITIAL
        .saturating_mul(2u32.saturating_pow(attempt.min(16)))
        .min(LEASE_WAIT_MAX)
}

/// Upstream's `maxAllowedErrorToUpdateOwnedLease`: a count above this fails the maintenance.
pub(crate) const MAX_LEASE_ERRORS: i32 = 3;

/// Failed for good: the lease could not be recovered and the node was restored.
pub(crate) fn is_terminal(status: &NodeMaintenanceStatus) -> bool {
    status.phase == Some(MaintenancePhase::Failed)
        && status.error_on_lease_count.unwrap_or(0) > MAX_LEASE_ERRORS
}

/// Whether the lease was ours at some point: `LeaseHeld` is True, or False because it was lost.
pub(crate) fn held_lease_before(status: &NodeMaintenanceStatus) -> bool {
    condition(status, condition::LEASE_HELD)
        .is_some_and(|c| c.status == "True" || c.reason == condition::LEASE_LOST)
}

pub(crate) fn count(n: usize) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

/// The pods' names.
pub(crate) fn names(refs: &[PodReference]) -> Vec<String> {
    refs.iter().map(|r| r.name.clone()).collect()
}

/// `v`, or `None` when it is empty (a list the status leaves out).
pub(crate) fn non_empty<T>(v: Vec<T>) -> Option<Vec<T>> {
    (!v.is_empty()).then_some(v)
}

/// Stamps `status` as written `at` by this pass: `lastUpdate` and `observedGeneration`.
pub(crate) fn touch(status: &mut NodeMaintenanceStatus, at: Stamp) {
    status.last_update = Some(now_time(at.now));
    status.observed_generation = at.generation;
}

/// Phase Failed, with Warning `FailedMaintenance` on the transition from `old`.
pub(crate) fn fail(
    old: &NodeMaintenanceStatus,
    status: &mut NodeMaintenanceStatus,
    events: &mut Vec<PlannedEvent>,
) {
    if old.phase != Some(MaintenancePhase::Failed) {
        let (reason, message) = event::FAILED;
        events.push(PlannedEvent::warning(reason, message));
    }
    status.phase = Some(MaintenancePhase::Failed);
}

/// [`fail`], with `lastError` saying `error`: the failures that say why (an unusable or missing
/// node, another machine under its name, the drain's deadline with `onTimeout` Fail or Abort).
pub(crate) fn fail_with(
    old: &NodeMaintenanceStatus,
    status: &mut NodeMaintenanceStatus,
    events: &mut Vec<PlannedEvent>,
    error: String,
) {
    fail(old, status, events);
    status.last_error = Some(error);
}

/// `the drain did not finish within its drainTimeout of <s>s (deadline <RFC 3339>)`: how
/// `lastError` and the events of a passed deadline begin (`timeout`: `drainTimeout`, 0 when
/// unset; `deadline`: when it passed, empty when unknown).
pub(crate) fn passed(timeout: Option<Duration>, deadline: Option<jiff::Timestamp>) -> String {
    let at = deadline.map(|d| d.to_string()).unwrap_or_default();
    let secs = timeout.map_or(0, |t| t.as_secs());
    format!("the drain did not finish within its drainTimeout of {secs}s (deadline {at})")
}

/// The pods the last round left, as a passed deadline names them: its blockers as
/// `<ns>/<pod> (<reason>)`, else `pendingPods`, comma-separated; `none listed` when neither.
pub(crate) fn pods_left(status: &NodeMaintenanceStatus) -> String {
    let left: Vec<String> = match &status.blockers {
        Some(b) if !b.is_empty() => b
            .iter()
            .map(|b| format!("{}/{} ({})", b.namespace, b.name, b.reason))
            .collect(),
        _ => status.pending_pods.clone().unwrap_or_default(),
    };
    if left.is_empty() {
        "none listed".to_string()
    } else {
        left.join(", ")
    }
}

/// `s` with `Cordoned=False` (`reason`, `message`) and stamped: the step of a pass that does not
/// hold the node (its name unusable, the node missing, replaced or another maintenance's, the
/// lease lost for good), with its `events`, back after `requeue`.
pub(crate) fn not_cordoned(
    mut s: NodeMaintenanceStatus,
    events: Vec<PlannedEvent>,
    (reason, message): (&str, impl Into<String>),
    requeue: Requeue,
    at: Stamp,
) -> Step {
    set_condition(&mut s, condition::CORDONED, false, reason, message, at);
    touch(&mut s, at);
    Step {
        status: s,
        events,
        requeue,
    }
}
