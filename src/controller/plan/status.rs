//! The status steps of a pass: each turns the status before it and what was observed into the
//! status to record, the events to publish once it is recorded, and when to come back.
//!
//! Upstream's observable contract (docs/compat.md §3–§5: phases, events, lastError texts, the
//! errorOnLeaseCount rules) is kept, with the improvements of §13: events only on transitions, no
//! status write when nothing changed, lastError cleared on success, drainProgress never negative,
//! lease ownership tracked explicitly (the `LeaseHeld` condition) instead of `drainProgress > 0`.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::*;
use crate::api::{MaintenancePhase, NodeMaintenanceStatus, PodReference};
use crate::drain::{self, DrainReport, Survey};

pub(crate) use super::condition::{self, condition, set_condition};
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
    /// A Normal event.
    pub(crate) fn normal(target: EventTarget, (reason, message): (&'static str, &str)) -> Self {
        Self {
            target,
            warning: false,
            reason,
            message: message.to_string(),
            pod: None,
            vmi: None,
            migration: None,
        }
    }
    /// A Warning event.
    pub(crate) fn warning(
        target: EventTarget,
        reason: &'static str,
        message: impl Into<String>,
    ) -> Self {
        Self {
            target,
            warning: true,
            reason,
            message: message.into(),
            pod: None,
            vmi: None,
            migration: None,
        }
    }

    /// The same event, about `pod` besides (its `related` object).
    pub(crate) fn about(self, pod: &crate::api::PodBlocker) -> Self {
        Self {
            pod: Some(PodReference {
                namespace: pod.namespace.clone(),
                name: pod.name.clone(),
            }),
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

/// `(evictionPods - pending) * 100 / evictionPods`, clamped to 0..=100; 0 when nothing was up
/// for eviction (upstream leaves it unset then and can go negative).
pub(crate) fn drain_progress(eviction_pods: i32, pending: usize) -> i32 {
    if eviction_pods <= 0 {
        return 0;
    }
    let pending = i64::try_from(pending).unwrap_or(i64::MAX);
    ((i64::from(eviction_pods) - pending) * 100 / i64::from(eviction_pods)).clamp(0, 100) as i32
}

fn count(n: usize) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

fn names(refs: &[PodReference]) -> Vec<String> {
    refs.iter().map(|r| r.name.clone()).collect()
}

fn non_empty<T>(v: Vec<T>) -> Option<Vec<T>> {
    (!v.is_empty()).then_some(v)
}

fn touch(status: &mut NodeMaintenanceStatus, generation: Option<i64>, now: jiff::Timestamp) {
    status.last_update = Some(now_time(now));
    status.observed_generation = generation;
}

fn to_failed(
    old: &NodeMaintenanceStatus,
    status: &mut NodeMaintenanceStatus,
    events: &mut Vec<PlannedEvent>,
) {
    if old.phase != Some(MaintenancePhase::Failed) {
        let (reason, message) = event::FAILED;
        events.push(PlannedEvent::warning(
            EventTarget::Maintenance,
            reason,
            message,
        ));
    }
    status.phase = Some(MaintenancePhase::Failed);
}

/// The status patch that records a failed pass's error in `lastError` (the error sink: best
/// effort, no precondition, the next successful pass replaces it); `None` when it says so
/// already. An API server's or a webhook's message can be any length, so it is bounded
/// (docs/drain-contract.md §5).
pub(crate) fn last_error_patch(
    nm: &crate::api::NodeMaintenance,
    error: &str,
    now: jiff::Timestamp,
) -> Option<serde_json::Value> {
    let text = crate::bounds::truncate(error, crate::bounds::MAX_ERROR * 4);
    if nm.status.as_ref().and_then(|s| s.last_error.as_deref()) == Some(text.as_str()) {
        return None;
    }
    Some(serde_json::json!({"status": {"lastError": text, "lastUpdate": now_time(now)}}))
}

/// Status initialisation (upstream's `initMaintenanceStatus`), only while `phase` is unset:
/// phase Running, `totalpods`, `evictionPods`, pending pods, drainStartTime, lastUpdate,
/// observedGeneration. `None` when the phase is already set (upstream test "Should not modify
/// the CR after initalization").
pub(crate) fn init_status(
    old: &NodeMaintenanceStatus,
    survey: &Survey,
    generation: Option<i64>,
    now: jiff::Timestamp,
) -> Option<NodeMaintenanceStatus> {
    if old.phase.is_some() {
        return None;
    }
    let mut s = old.clone();
    s.phase = Some(MaintenancePhase::Running);
    s.total_pods = Some(count(survey.total_pods));
    s.eviction_pods = Some(count(survey.evictable.len()));
    let (refs, _) = crate::bounds::cap_pending(&survey.evictable);
    s.pending_pods = non_empty(names(&refs));
    s.pending_pods_refs = non_empty(refs);
    s.drain_progress = Some(0);
    s.drain_start_time = Some(now_time(now));
    touch(&mut s, generation, now);
    Some(s)
}

/// The NodeMaintenance names an invalid node: phase Failed, a lastError that says so, Warning
/// `FailedMaintenance` on the transition; no node or lease is touched.
pub(crate) fn invalid_node_name(
    old: &NodeMaintenanceStatus,
    node: &str,
    why: &str,
    generation: Option<i64>,
    now: jiff::Timestamp,
) -> Step {
    let mut s = old.clone();
    let mut events = Vec::new();
    to_failed(old, &mut s, &mut events);
    s.last_error = Some(invalid_node_name_error(node, why));
    set_condition(
        &mut s,
        condition::CORDONED,
        false,
        "InvalidNodeName",
        "spec.nodeName is invalid",
        generation,
        now,
    );
    touch(&mut s, generation, now);
    Step {
        status: s,
        events,
        requeue: Requeue::After(REQUEUE_INVALID),
    }
}

/// `lastError` for a nodeName that cannot name a Node: upstream's text for the same input first
/// (it looks the node up and reports the API's answer: `nodes "<n>" not found`, or client-go's
/// `resource name may not be empty`), then why (docs/compat.md §5).
///
/// A valid Node name that cannot be leased names a node that may well exist: no "not found".
pub(crate) fn invalid_node_name_error(node: &str, why: &str) -> String {
    let upstream = if node.is_empty() {
        "resource name may not be empty: ".to_string()
    } else if crate::api::validate_node_name(node).is_ok() {
        String::new()
    } else {
        format!("nodes \"{node}\" not found: ")
    };
    format!("{upstream}invalid nodeName, {why}; no node was changed")
}

/// The node does not exist: phase Failed, lastError `nodes "<n>" not found`, Warning
/// `FailedMaintenance` on the transition only. The maintenance resumes when the node appears
/// (the Node watch, or the slow requeue).
pub(crate) fn node_missing(
    old: &NodeMaintenanceStatus,
    node: &str,
    generation: Option<i64>,
    now: jiff::Timestamp,
) -> Step {
    let mut s = old.clone();
    let mut events = Vec::new();
    to_failed(old, &mut s, &mut events);
    s.last_error = Some(format!("nodes \"{node}\" not found"));
    set_condition(
        &mut s,
        condition::CORDONED,
        false,
        "NodeNotFound",
        format!("node {node} does not exist; maintenance resumes when it appears"),
        generation,
        now,
    );
    touch(&mut s, generation, now);
    Step {
        status: s,
        events,
        requeue: Requeue::After(REQUEUE_NODE_MISSING),
    }
}

/// The node under the name entered is another machine ([`Replaced`]): phase Failed, a lastError
/// that names both providerIDs, Warning `FailedMaintenance` on the transition and
/// `NodeReplaced` whenever that text changes; nothing on the node is touched. Not terminal: a
/// Node that shows the recorded providerID (the machine back) resumes the maintenance, checked
/// on the Node's changes and every 30 s (docs/drain-contract.md §3).
pub(crate) fn node_replaced(
    old: &NodeMaintenanceStatus,
    node: &str,
    replaced: &Replaced,
    generation: Option<i64>,
    now: jiff::Timestamp,
) -> Step {
    let mut s = old.clone();
    let mut events = Vec::new();
    to_failed(old, &mut s, &mut events);
    let found = if replaced.found.is_empty() {
        "none".to_owned()
    } else {
        format!("{:?}", replaced.found)
    };
    let text = format!(
        "node {node} was replaced: its spec.providerID is {found}, the node this maintenance \
         entered had {:?}; the maintenance leaves the new machine alone (nothing on it was \
         changed) and resumes if the machine entered comes back",
        replaced.entered
    );
    let text = crate::bounds::truncate(&text, crate::bounds::MAX_EVENT_NOTE);
    if old.last_error.as_deref() != Some(text.as_str()) {
        events.push(PlannedEvent::warning(
            EventTarget::Maintenance,
            event::NODE_REPLACED,
            text.clone(),
        ));
    }
    s.last_error = Some(text.clone());
    set_condition(
        &mut s,
        condition::CORDONED,
        false,
        "NodeReplaced",
        text,
        generation,
        now,
    );
    touch(&mut s, generation, now);
    Step {
        status: s,
        events,
        requeue: Requeue::After(REQUEUE_NODE_MISSING),
    }
}

/// The node exists: a maintenance that failed because it was missing is Running again.
pub(crate) fn node_present(status: &NodeMaintenanceStatus) -> NodeMaintenanceStatus {
    let mut s = status.clone();
    if s.phase == Some(MaintenancePhase::Failed) && !is_terminal(&s) {
        s.phase = Some(MaintenancePhase::Running);
    }
    s
}

/// What requesting the medik8s lease returned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum LeaseObservation {
    /// Ours (created, renewed, taken over or still current).
    Held,
    /// Held by another holder; the error text
    /// (`can't update or invalidate the lease because it is held by different owner: <holder>`).
    AlreadyHeld(String),
}

/// What to do after the lease request.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum LeaseStep {
    /// Carry on with this status (record it first if it differs from the old one: it may carry
    /// the `LeaseHeld` ownership that later counting depends on).
    Proceed(NodeMaintenanceStatus),
    /// Don't touch the node now; record the step and come back.
    Wait(Step),
    /// The lease is lost for good: record the step's status, take the node out of maintenance
    /// (emitting `UncordonNode` if it was uncordoned), invalidate the lease, then mark the
    /// maintenance Failed with [`lease_failed`].
    Stop(Step),
}

/// Upstream's errorOnLeaseCount rules (docs/compat.md §3), with ownership tracked by the
/// `LeaseHeld` condition: AlreadyHeld for a lease we never held is not counted (lastError
/// `failed to obtain a lease that is not owned by us : <err> errorOnLeaseCount <n>`, wait with
/// backoff); AlreadyHeld for a lease we held counts (lastError
/// `failed to extend a lease that used to be owned by us, incrementing error on lease count: <err>, errorOnLeaseCount: <n>`),
/// and a count above [`MAX_LEASE_ERRORS`] stops the maintenance. Success resets the count.
///
/// "Used to be ours" never rests on a field upstream's schema lacks alone (a CRD installed by
/// upstream prunes `conditions`): `entered` is the caller's evidence from outside the status (the
/// node carries our holder record, and we enter a node only after obtaining its lease), and a
/// non-zero `errorOnLeaseCount` (an upstream field, only ever raised for a lease we held) counts
/// too (docs/compat.md §3).
pub(crate) fn lease_result(
    old: &NodeMaintenanceStatus,
    observed: &LeaseObservation,
    entered: bool,
    generation: Option<i64>,
    now: jiff::Timestamp,
) -> LeaseStep {
    let mut s = old.clone();
    let n = old.error_on_lease_count.unwrap_or(0);
    let held_before = entered || n > 0 || held_lease_before(old);
    match observed {
        LeaseObservation::Held => {
            s.error_on_lease_count = None;
            touch(&mut s, generation, now);
            set_condition(
                &mut s,
                condition::LEASE_HELD,
                true,
                "LeaseObtained",
                "the medik8s lease of the node is held by node-maintenance",
                generation,
                now,
            );
            LeaseStep::Proceed(s)
        }
        LeaseObservation::AlreadyHeld(err) if !held_before => {
            s.last_error = Some(format!(
                "failed to obtain a lease that is not owned by us : {err} errorOnLeaseCount {n}"
            ));
            set_condition(
                &mut s,
                condition::LEASE_HELD,
                false,
                condition::HELD_BY_OTHER,
                err.clone(),
                generation,
                now,
            );
            touch(&mut s, generation, now);
            LeaseStep::Wait(Step {
                status: s,
                events: Vec::new(),
                requeue: Requeue::LeaseWait,
            })
        }
        LeaseObservation::AlreadyHeld(err) => {
            // Our own status write wakes the controller at once; without spacing, the four
            // strikes would be spent in well under a second (upstream's tight loop). A strike
            // counts only once REQUEUE_LEASE_LOST has passed since the last one (lastUpdate has
            // one-second precision, hence the second of slack).
            if n > 0
                && let Some(last) = &old.last_update
            {
                let spacing = jiff::SignedDuration::try_from(REQUEUE_LEASE_LOST)
                    .unwrap_or_default()
                    .saturating_sub(jiff::SignedDuration::from_secs(1));
                let elapsed = now.duration_since(last.0);
                if elapsed < spacing {
                    let remaining = Duration::try_from(spacing.saturating_sub(elapsed))
                        .unwrap_or(REQUEUE_LEASE_LOST);
                    return LeaseStep::Wait(Step {
                        status: old.clone(),
                        events: Vec::new(),
                        requeue: Requeue::After(remaining.max(Duration::from_millis(100))),
                    });
                }
            }
            let n = n.saturating_add(1);
            s.error_on_lease_count = Some(n);
            set_condition(
                &mut s,
                condition::LEASE_HELD,
                false,
                condition::LEASE_LOST,
                err.clone(),
                generation,
                now,
            );
            touch(&mut s, generation, now);
            if n > MAX_LEASE_ERRORS {
                s.last_error = Some(format!(
                    "maintenance failed: lease could not be extended after {n} attempts"
                ));
                LeaseStep::Stop(Step {
                    status: s,
                    events: Vec::new(),
                    requeue: Requeue::Never,
                })
            } else {
                s.last_error = Some(format!(
                    "failed to extend a lease that used to be owned by us, incrementing error on lease count: {err}, errorOnLeaseCount: {n}"
                ));
                LeaseStep::Wait(Step {
                    status: s,
                    events: Vec::new(),
                    requeue: Requeue::Fixed(REQUEUE_LEASE_LOST),
                })
            }
        }
    }
}

/// After the node was taken out of maintenance because the lease was lost for good: phase
/// Failed (terminal), Warning `FailedMaintenance` on the transition, `UncordonNode` on the Node
/// when the node was uncordoned.
pub(crate) fn lease_failed(
    recorded: &NodeMaintenanceStatus,
    uncordoned: bool,
    generation: Option<i64>,
    now: jiff::Timestamp,
) -> Step {
    let mut s = recorded.clone();
    let mut events = Vec::new();
    if uncordoned {
        events.push(PlannedEvent::normal(EventTarget::Node, event::UNCORDON));
    }
    to_failed(recorded, &mut s, &mut events);
    set_condition(
        &mut s,
        condition::CORDONED,
        false,
        condition::LEASE_LOST,
        "the node was taken out of maintenance because the medik8s lease could not be extended",
        generation,
        now,
    );
    touch(&mut s, generation, now);
    Step {
        status: s,
        events,
        requeue: Requeue::Never,
    }
}

/// Retry delay for a lease we never held, after `attempt` earlier waits: 2 s doubling to 30 s.
pub(crate) fn lease_wait(attempt: u32) -> Duration {
    LEASE_WAIT_INITIAL
        .saturating_mul(2u32.saturating_pow(attempt.min(16)))
        .min(LEASE_WAIT_MAX)
}

/// Another NodeMaintenance holds the node: this one does not drain; its status names the holder.
pub(crate) fn held_by_other(
    old: &NodeMaintenanceStatus,
    node: &str,
    other: &str,
    generation: Option<i64>,
    now: jiff::Timestamp,
) -> Step {
    let mut s = old.clone();
    let msg = format!(
        "node {node} is held by NodeMaintenance {other}; this one takes over when that one is deleted"
    );
    s.last_error = Some(msg.clone());
    set_condition(
        &mut s,
        condition::CORDONED,
        false,
        "HeldByOtherMaintenance",
        msg,
        generation,
        now,
    );
    touch(&mut s, generation, now);
    Step {
        status: s,
        events: Vec::new(),
        requeue: Requeue::After(REQUEUE_HELD_BY_OTHER),
    }
}

/// The node is in maintenance for us. `repaired` lists what someone had undone and we re-applied
/// (a Warning `MaintenanceReapplied` event names it).
pub(crate) fn entered(
    old: &NodeMaintenanceStatus,
    node: &str,
    repaired: &[&str],
    generation: Option<i64>,
    now: jiff::Timestamp,
) -> (NodeMaintenanceStatus, Vec<PlannedEvent>) {
    let mut s = old.clone();
    set_condition(
        &mut s,
        condition::CORDONED,
        true,
        "NodeCordoned",
        "the node is cordoned, tainted medik8s.io/drain:NoSchedule and \
         node.kubernetes.io/unschedulable:NoSchedule, and excluded from remediation",
        generation,
        now,
    );
    let mut events = Vec::new();
    if !repaired.is_empty() {
        events.push(PlannedEvent::warning(
            EventTarget::Maintenance,
            event::REAPPLIED,
            format!(
                "Re-applied maintenance to node {node}: {} had been removed",
                repaired.join(", ")
            ),
        ));
    }
    (s, events)
}

fn pending_summary(report: &DrainReport) -> String {
    let mut by_reason: std::collections::BTreeMap<&str, usize> = Default::default();
    for b in &report.pending {
        *by_reason.entry(b.reason.as_str()).or_default() += 1;
    }
    let parts: Vec<String> = by_reason.iter().map(|(r, n)| format!("{n} {r}")).collect();
    format!(
        "{} pods still on the node: {}",
        report.pending.len(),
        parts.join(", ")
    )
}

/// `; not evicted: ns/a (reason), ns/b (reason)` for the pods the drain leaves on the node on
/// purpose, or nothing: at most [`crate::bounds::MAX_NAMED_KEPT`] named, then `and N more`.
/// Names, not counts, so it changes only when the set does.
fn skipped_summary(report: &DrainReport) -> String {
    if report.skipped.is_empty() {
        return String::new();
    }
    let mut names: Vec<String> = report
        .skipped
        .iter()
        .take(crate::bounds::MAX_NAMED_KEPT)
        .map(|b| format!("{}/{} ({})", b.namespace, b.name, b.reason))
        .collect();
    if report.skipped.len() > crate::bounds::MAX_NAMED_KEPT {
        names.push(format!(
            "and {} more",
            report.skipped.len() - crate::bounds::MAX_NAMED_KEPT
        ));
    }
    format!("; not evicted: {}", names.join(", "))
}

/// `; the status lists N of them (blockers: M)` when the lists were capped, or nothing.
fn capped_summary(pending: usize, listed: usize, blockers: usize) -> String {
    if listed == pending && blockers == pending {
        return String::new();
    }
    format!("; the status lists {listed} of them (blockers: {blockers})")
}

/// After a drain pass. Nothing pending: phase Succeeded, drainProgress 100, pending lists and
/// lastError cleared, `SucceedMaintenance` on the transition only, next check in 5 min.
/// Otherwise: phase Running, pending pods with their blockers, drainProgress, the pass's
/// aggregated error as lastError (cleared when the pods are only terminating), next pass in 1 s
/// (only terminating) or 5 s (blocked). Both are logged as upstream's `Reconciling with fixed
/// duration`: upstream logs it whenever a pass ends with pods left (its e2e test greps for it),
/// and a drain whose pods only take long to terminate is such a pass.
pub(crate) fn drained(
    old: &NodeMaintenanceStatus,
    report: &DrainReport,
    generation: Option<i64>,
    now: jiff::Timestamp,
) -> Step {
    let mut s = old.clone();
    let mut events = Vec::new();
    // A maintenance initialised while its node was missing counted nothing; count now.
    if s.eviction_pods.unwrap_or(0) == 0 && !report.evictable.is_empty() {
        s.eviction_pods = Some(count(report.evictable.len()));
    }
    if s.total_pods.unwrap_or(0) == 0 && report.total_pods > 0 {
        s.total_pods = Some(count(report.total_pods));
    }
    s.drain_start_time.get_or_insert_with(|| now_time(now));
    let requeue;
    let about_pods = [
        (&report.newly_skipped, false, event::POD_SKIPPED),
        (&report.forced, true, event::POD_FORCE_DELETED),
        (
            &report.newly_not_migratable,
            true,
            event::POD_NOT_MIGRATABLE,
        ),
    ];
    for (pods, warning, reason) in about_pods {
        for b in pods {
            let note = format!(
                "Pod {}/{} {}",
                b.namespace,
                b.name,
                b.message.as_deref().unwrap_or(&b.reason)
            );
            let note = crate::bounds::truncate(&note, crate::bounds::MAX_EVENT_NOTE);
            let e = if warning {
                PlannedEvent::warning(EventTarget::Maintenance, reason, note)
            } else {
                PlannedEvent::normal(EventTarget::Maintenance, (reason, &note))
            };
            events.push(e.about(b));
        }
    }
    // About the failed migration, not the pod: an event recorder folds events of one reason
    // about one related object into a series that keeps the first one's note.
    for f in &report.newly_failed_migrations {
        let b = &f.blocker;
        let note = format!(
            "Pod {}/{} {}",
            b.namespace,
            b.name,
            b.message.as_deref().unwrap_or(&b.reason)
        );
        let note = crate::bounds::truncate(&note, crate::bounds::MAX_EVENT_NOTE);
        let mut e =
            PlannedEvent::warning(EventTarget::Maintenance, event::POD_MIGRATION_FAILED, note);
        e.migration = Some(crate::drain::cancel::VmiRef {
            namespace: b.namespace.clone(),
            name: f.migration.clone(),
        });
        events.push(e);
    }
    if report.done() {
        if old.phase != Some(MaintenancePhase::Succeeded) {
            events.push(PlannedEvent::normal(
                EventTarget::Maintenance,
                event::SUCCEED,
            ));
        }
        s.phase = Some(MaintenancePhase::Succeeded);
        s.drain_progress = Some(100);
        s.pending_pods = None;
        s.pending_pods_refs = None;
        s.blockers = None;
        s.evacuating_pods = None;
        s.last_error = None;
        set_condition(
            &mut s,
            condition::DRAINED,
            true,
            "AllPodsEvicted",
            crate::bounds::truncate(
                &format!("all pods were evicted{}", skipped_summary(report)),
                crate::bounds::MAX_CONDITION_MESSAGE,
            ),
            generation,
            now,
        );
        requeue = Requeue::After(REQUEUE_SUCCEEDED);
    } else {
        let all = drain::refs(&report.pending);
        let (refs, _) = crate::bounds::cap_pending(&all);
        let (blockers, _) = drain::pass::cap_blockers(&report.pending);
        let capped = capped_summary(all.len(), refs.len(), blockers.len());
        s.phase = Some(MaintenancePhase::Running);
        s.drain_progress = Some(drain_progress(s.eviction_pods.unwrap_or(0), all.len()));
        s.pending_pods = non_empty(names(&refs));
        s.pending_pods_refs = non_empty(refs);
        s.blockers = non_empty(blockers);
        let evacuating = report
            .pending
            .iter()
            .filter(|b| drain::responders::moving(&b.reason))
            .count();
        s.evacuating_pods = (evacuating > 0).then(|| count(evacuating));
        s.last_error = report.last_error();
        let blocked = report.blocked();
        set_condition(
            &mut s,
            condition::DRAINED,
            false,
            match (report.overdue, blocked) {
                (Some(_), _) => condition::DEADLINE_EXCEEDED,
                (None, true) if report.only_evacuating() => "PodsEvacuating",
                (None, true) => "EvictionBlocked",
                (None, false) => "PodsTerminating",
            },
            crate::bounds::truncate(
                &format!(
                    "{}{capped}{}",
                    pending_summary(report),
                    skipped_summary(report)
                ),
                crate::bounds::MAX_CONDITION_MESSAGE,
            ),
            generation,
            now,
        );
        requeue = if blocked {
            // No earlier than the first per-pod eviction retry is due: a pass before it only
            // re-reports (docs/design.md §2).
            Requeue::Fixed(report.retry_in.map_or(REQUEUE_BLOCKED, |d| {
                d.clamp(Duration::from_millis(200), REQUEUE_BLOCKED)
            }))
        } else {
            Requeue::Fixed(REQUEUE_TERMINATING)
        };
    }
    touch(&mut s, generation, now);
    Step {
        status: s,
        events,
        requeue,
    }
}

/// The drain's deadline in status (`docs/drain-contract.md` §10), once `overdue` says it has
/// passed: a Warning event `DrainDeadlineExceeded` naming what `onTimeout` does, once (not when
/// `Drained` already has that reason or `announced`, this process's memory, says it was sent);
/// with `Fail` (and not Succeeded), phase Failed, `lastError` naming the pods the last round left
/// (its blockers, else `pendingPods`), `Drained=False` with reason `DrainDeadlineExceeded`, and
/// `FailedMaintenance` on the transition. `deadline` is when it passes (`None`: no deadline, or
/// the node not entered yet), shown with what happens then in `drainDeadline` and `onTimeout`.
pub(crate) fn deadline(
    status: &NodeMaintenanceStatus,
    (policy, overdue): (&crate::policy::DrainPolicy, Option<crate::api::OnTimeout>),
    deadline: Option<jiff::Timestamp>,
    announced: Option<bool>,
    generation: Option<i64>,
    now: jiff::Timestamp,
) -> (NodeMaintenanceStatus, Vec<PlannedEvent>) {
    use crate::api::OnTimeout;
    let mut s = status.clone();
    let mut events = Vec::new();
    s.drain_deadline = deadline.map(Time);
    s.on_timeout = deadline.map(|_| policy.on_timeout);
    let (Some(on_timeout), Some(timeout)) = (overdue, policy.drain_timeout) else {
        return (s, events);
    };
    let at = deadline.map(|d| d.to_string()).unwrap_or_default();
    let passed = format!(
        "the drain did not finish within its drainTimeout of {}s (deadline {at})",
        timeout.as_secs()
    );
    // The drain round may set the reason first (its pod list came after the deadline): only a
    // new process reads it, to not announce again what its predecessor did.
    let said = announced.unwrap_or_else(|| {
        condition(status, condition::DRAINED)
            .is_some_and(|c| c.reason == condition::DEADLINE_EXCEEDED)
    });
    if !said && status.phase != Some(MaintenancePhase::Succeeded) {
        let then = on_timeout.consequence();
        events.push(PlannedEvent::warning(
            EventTarget::Maintenance,
            event::DEADLINE_EXCEEDED,
            format!("{passed}; {then}"),
        ));
    }
    if on_timeout != OnTimeout::Fail || status.phase == Some(MaintenancePhase::Succeeded) {
        return (s, events);
    }
    let left: Vec<String> = match &status.blockers {
        Some(b) if !b.is_empty() => b
            .iter()
            .map(|b| format!("{}/{} ({})", b.namespace, b.name, b.reason))
            .collect(),
        _ => status.pending_pods.clone().unwrap_or_default(),
    };
    let text = crate::bounds::truncate(
        &format!(
            "{passed}; onTimeout Fail; pods still on the node: {}",
            if left.is_empty() {
                "none listed".to_string()
            } else {
                left.join(", ")
            }
        ),
        crate::bounds::MAX_CONDITION_MESSAGE,
    );
    if s.phase != Some(MaintenancePhase::Failed) {
        events.push(PlannedEvent::warning(
            EventTarget::Maintenance,
            event::FAILED.0,
            event::FAILED.1,
        ));
    }
    s.phase = Some(MaintenancePhase::Failed);
    s.last_error = Some(text.clone());
    set_condition(
        &mut s,
        condition::DRAINED,
        false,
        condition::DEADLINE_EXCEEDED,
        text,
        generation,
        now,
    );
    touch(&mut s, generation, now);
    (s, events)
}

/// The drain budget in status (`docs/drain-contract.md` §10): `DrainQueued=True` with the
/// position while `place` says the maintenance waits (a `DrainQueued` event when it starts to),
/// `False` once a slot is its after it waited (a `DrainStarted` event). `remembered` is whether
/// the last pass of this process found it queued, read when the condition is not there (a CRD
/// that prunes it). A maintenance that never waited keeps upstream's status.
pub(crate) fn queued(
    status: &NodeMaintenanceStatus,
    place: Option<&super::super::queue::Place>,
    remembered: Option<bool>,
    generation: Option<i64>,
    now: jiff::Timestamp,
) -> (NodeMaintenanceStatus, Vec<PlannedEvent>) {
    use super::super::queue::Place;
    let mut s = status.clone();
    let mut events = Vec::new();
    let was = condition(status, condition::DRAIN_QUEUED)
        .map(|c| c.status == "True")
        .or(remembered);
    match place {
        Some(Place::Queued { position, full }) => {
            // No queue length: it changes with every maintenance created behind this one, and
            // each status write starts this maintenance's next pass, which would write again.
            let message = format!(
                "waiting for a drain slot: position {position} in the queue; {full} is full; the \
                 node stays in service until then"
            );
            if was != Some(true) {
                events.push(PlannedEvent::normal(
                    EventTarget::Maintenance,
                    (event::QUEUED, &message),
                ));
            }
            set_condition(
                &mut s,
                condition::DRAIN_QUEUED,
                true,
                "MaxParallelDrains",
                message,
                generation,
                now,
            );
        }
        _ if was == Some(true) => {
            events.push(PlannedEvent::normal(
                EventTarget::Maintenance,
                event::DEQUEUED,
            ));
            set_condition(
                &mut s,
                condition::DRAIN_QUEUED,
                false,
                "SlotHeld",
                "a drain slot is held: evictions run",
                generation,
                now,
            );
        }
        _ => {}
    }
    (s, events)
}

/// The drain policy in status (`docs/drain-contract.md` §10): `DrainPaused` while `policy`
/// pauses the evictions (and `False` once it no longer does), `DrainPolicyValid=False` while an
/// annotation's value is refused; an event on each change. Conditions a maintenance never needed
/// are not written. `remembered` is whether the last pass of this process found it paused, read
/// when the condition is not there (a CRD that prunes it).
pub(crate) fn policy(
    status: &NodeMaintenanceStatus,
    (policy, remembered): (&crate::policy::DrainPolicy, Option<bool>),
    invalid: &[crate::policy::InvalidKnob],
    generation: Option<i64>,
    now: jiff::Timestamp,
) -> (NodeMaintenanceStatus, Vec<PlannedEvent>) {
    let mut s = status.clone();
    let mut events = Vec::new();
    let was = |type_: &str| condition(status, type_).map(|c| c.status == "True");
    match (policy.paused, was(condition::DRAIN_PAUSED).or(remembered)) {
        (true, was_paused) => {
            let message = "no eviction is sent while the maintenance is paused (spec.paused, the \
                           annotation nodemaintenance.medik8s.io/paused or --drain-paused); the \
                           node stays cordoned and tainted and the lease held";
            set_condition(
                &mut s,
                condition::DRAIN_PAUSED,
                true,
                "Paused",
                message,
                generation,
                now,
            );
            if was_paused != Some(true) {
                events.push(PlannedEvent::normal(
                    EventTarget::Maintenance,
                    event::PAUSED,
                ));
            }
        }
        (false, Some(true)) => {
            let message = "evictions resumed";
            set_condition(
                &mut s,
                condition::DRAIN_PAUSED,
                false,
                "Resumed",
                message,
                generation,
                now,
            );
            events.push(PlannedEvent::normal(
                EventTarget::Maintenance,
                event::RESUMED,
            ));
        }
        (false, _) => {}
    }
    let refused = invalid
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ");
    match (refused.is_empty(), was(condition::DRAIN_POLICY_VALID)) {
        (false, _) => {
            let before =
                condition(status, condition::DRAIN_POLICY_VALID).map(|c| c.message.clone());
            let message = format!("{refused}; the default applies");
            if before.as_deref() != Some(message.as_str()) {
                events.push(PlannedEvent::warning(
                    EventTarget::Maintenance,
                    event::INVALID_POLICY,
                    message.clone(),
                ));
            }
            set_condition(
                &mut s,
                condition::DRAIN_POLICY_VALID,
                false,
                "InvalidValue",
                message,
                generation,
                now,
            );
        }
        (true, Some(false)) => {
            set_condition(
                &mut s,
                condition::DRAIN_POLICY_VALID,
                true,
                "Valid",
                "every knob's value is valid",
                generation,
                now,
            );
        }
        (true, _) => {}
    }
    (s, events)
}

/// The stage in status: `Stage=True` with the stage as reason (`Preflight`, `Idle`, `Cordon`,
/// `Drain`), written once a stage other than Drain was first set. A stage short of Drain is
/// phase Running (the maintenance is in force, it just goes no further); one that had Succeeded
/// or Failed is Running again, so moving on to Drain drains again. A maintenance failed for
/// good ([`is_terminal`]) stays Failed.
///
/// `window`: the maintenance waits Idle for its window to open then (`startAt`): reason
/// [`condition::MAINTENANCE_WINDOW`].
pub(crate) fn staged(
    status: &NodeMaintenanceStatus,
    stage: crate::api::Stage,
    window: Option<jiff::Timestamp>,
    generation: Option<i64>,
    now: jiff::Timestamp,
) -> NodeMaintenanceStatus {
    use crate::api::Stage;
    let mut s = status.clone();
    if stage == Stage::Drain && condition(status, condition::STAGE).is_none() {
        return s;
    }
    if let Some(opens) = window {
        let message = format!(
            "idle until the maintenance window opens at {opens} (startAt): nothing on the node \
             is touched and no lease is held"
        );
        let reason = condition::MAINTENANCE_WINDOW;
        set_condition(
            &mut s,
            condition::STAGE,
            true,
            reason,
            message,
            generation,
            now,
        );
        if !is_terminal(&s) {
            s.phase = Some(MaintenancePhase::Running);
        }
        if *status != s {
            touch(&mut s, generation, now);
        }
        return s;
    }
    let message = match stage {
        Stage::Preflight => {
            "status.blockers lists what would keep pods on the node, from dry-run evictions; \
             nothing on the node is touched and no lease is held"
        }
        Stage::Idle => "nothing on the node is touched and no lease is held",
        Stage::Cordon => {
            "the node is cordoned, tainted and excluded from remediation and the lease held; no \
             eviction is sent"
        }
        Stage::Drain => "the node is cordoned, tainted and drained",
    };
    let reason = stage.to_string();
    set_condition(
        &mut s,
        condition::STAGE,
        true,
        &reason,
        message,
        generation,
        now,
    );
    if stage != Stage::Drain && !is_terminal(&s) {
        s.phase = Some(MaintenancePhase::Running);
    }
    if *status != s {
        touch(&mut s, generation, now);
    }
    s
}

/// The node and the lease given up by a stage short of Cordon: `Cordoned` and `LeaseHeld`
/// False with reason [`condition::RELEASED`] where they were written (so a later Cordon counts
/// the lease as never held: another holder's lease is waited for, not a strike), no drain
/// deadline.
pub(crate) fn released(
    status: &NodeMaintenanceStatus,
    generation: Option<i64>,
    now: jiff::Timestamp,
) -> NodeMaintenanceStatus {
    let mut s = status.clone();
    let released = [
        (
            condition::CORDONED,
            "the node is not in maintenance (stage)",
        ),
        (
            condition::LEASE_HELD,
            "the medik8s lease of the node is not held (stage)",
        ),
    ];
    for (type_, message) in released {
        if condition(status, type_).is_some() {
            set_condition(
                &mut s,
                type_,
                false,
                condition::RELEASED,
                message,
                generation,
                now,
            );
        }
    }
    s.drain_deadline = None;
    s.on_timeout = None;
    if *status != s {
        touch(&mut s, generation, now);
    }
    s
}

/// Re-check of a maintenance in stage Preflight: its dry-run evictions ask once per pod, so not
/// at the drain's pace.
pub(crate) const REQUEUE_PREFLIGHT: Duration = Duration::from_secs(60);

/// The stage Preflight's findings: `blockers` (what the dry-run evictions refused, capped as the
/// drain's are) in `status.blockers`, and `lastError` empty; back after [`REQUEUE_PREFLIGHT`].
pub(crate) fn preflight(
    status: &NodeMaintenanceStatus,
    blockers: &[crate::api::PodBlocker],
    generation: Option<i64>,
    now: jiff::Timestamp,
) -> Step {
    let mut s = status.clone();
    s.blockers = non_empty(crate::drain::pass::cap_blockers(blockers).0);
    s.last_error = None;
    if *status != s {
        touch(&mut s, generation, now);
    }
    Step {
        status: s,
        events: Vec::new(),
        requeue: Requeue::After(REQUEUE_PREFLIGHT),
    }
}
