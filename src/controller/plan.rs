//! The decision of a reconcile, without I/O or clock: [`plan`] turns what one pass observed
//! ([`Observed`]) into everything the pass does ([`Plan`]: the finalizer, the ordered steps, the
//! status to write, the events and the requeue), built from the per-step functions below
//! (docs/design.md §1). The reconciler (`reconcile.rs`) observes and acts.
//!
//! Upstream's observable contract (docs/compat.md §3–§5: phases, events, lastError texts, the
//! errorOnLeaseCount rules) is kept, with the improvements of §13: events only on transitions, no
//! status write when nothing changed, lastError cleared on success, drainProgress never negative,
//! lease ownership tracked explicitly (the `LeaseHeld` condition) instead of `drainProgress > 0`.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::ResourceExt;

use crate::api::{
    FINALIZER, MaintenancePhase, NodeMaintenance, NodeMaintenanceStatus, PodReference,
};
use crate::drain::{self, DrainReport, Survey};

/// Next pass while evicted pods are only terminating (the pass is cheap: one pod list).
pub(crate) const REQUEUE_TERMINATING: Duration = Duration::from_secs(1);
/// Next pass while an eviction is refused (upstream's `waitDurationOnDrainError`).
pub(crate) const REQUEUE_BLOCKED: Duration = Duration::from_secs(5);
/// Re-check of a Succeeded maintenance: renews the 3600 s lease well before it expires and
/// corrects drift the Node watch might have missed.
pub(crate) const REQUEUE_SUCCEEDED: Duration = Duration::from_secs(300);
/// Re-check while the node does not exist (the Node watch usually comes first).
pub(crate) const REQUEUE_NODE_MISSING: Duration = Duration::from_secs(30);
/// Re-check while another NodeMaintenance holds the node.
pub(crate) const REQUEUE_HELD_BY_OTHER: Duration = Duration::from_secs(30);
/// Re-check after a lease we held was found held by someone else.
pub(crate) const REQUEUE_LEASE_LOST: Duration = Duration::from_secs(5);
/// First wait for a lease we never held; doubles per attempt up to [`LEASE_WAIT_MAX`].
pub(crate) const LEASE_WAIT_INITIAL: Duration = Duration::from_secs(2);
/// Longest wait for a lease we never held.
pub(crate) const LEASE_WAIT_MAX: Duration = Duration::from_secs(30);
/// Re-check of a NodeMaintenance with an invalid nodeName (the webhook forbids editing it, so
/// this is only a safety net).
pub(crate) const REQUEUE_INVALID: Duration = Duration::from_secs(300);
/// Upstream's `maxAllowedErrorToUpdateOwnedLease`: a count above this fails the maintenance.
pub(crate) const MAX_LEASE_ERRORS: i32 = 3;

/// Condition types in `status.conditions`.
pub(crate) mod condition {
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
}

/// Upstream's event reasons and exact messages (docs/compat.md §4), plus ours.
pub(crate) mod event {
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
    /// Warning, on the NodeMaintenance, when someone undid part of the maintenance (ours).
    pub(crate) const REAPPLIED: &str = "MaintenanceReapplied";
    /// Normal, on the NodeMaintenance, once per pod the drain leaves on the node on purpose
    /// (it tolerates the maintenance taints; ours, `docs/compat.md §7`).
    pub(crate) const POD_SKIPPED: &str = "PodNotEvicted";
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
}

impl PlannedEvent {
    /// A Normal event.
    pub(crate) fn normal(target: EventTarget, (reason, message): (&'static str, &str)) -> Self {
        Self {
            target,
            warning: false,
            reason,
            message: message.to_string(),
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

/// What to do with a NodeMaintenance before looking at its node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Entry {
    /// Being deleted with our finalizer: restore the node, then remove the finalizer.
    Cleanup,
    /// Being deleted without our finalizer: nothing to do, and never fall through to
    /// maintenance (upstream bug #154).
    Ignore,
    /// Add the finalizer (then emit BeginMaintenance and continue).
    AddFinalizer,
    /// Failed for good (the lease could not be recovered): no writes, no events.
    Terminal,
    /// `spec.nodeName` is unusable; the text says why. No node is touched.
    InvalidNodeName(String),
    /// Carry on with the maintenance.
    Maintain,
}

/// The first decision of every reconcile. Deletion comes first.
pub(crate) fn entry(nm: &NodeMaintenance) -> Entry {
    let has_finalizer = nm.finalizers().iter().any(|f| f == FINALIZER);
    if nm.metadata.deletion_timestamp.is_some() {
        return if has_finalizer {
            Entry::Cleanup
        } else {
            Entry::Ignore
        };
    }
    if !has_finalizer {
        return Entry::AddFinalizer;
    }
    if let Some(status) = &nm.status
        && is_terminal(status)
    {
        return Entry::Terminal;
    }
    match validate_node_name(&nm.spec.node_name) {
        Err(why) => Entry::InvalidNodeName(why),
        Ok(()) => Entry::Maintain,
    }
}

/// Whether `name` can be a Node name ([`crate::api::validate_node_name`], the webhook's rule
/// too) and that node can have a medik8s lease ([`crate::lease::lease_name_error`]: a name of
/// more than 248 characters cannot, `docs/drain-contract.md` §7); the error says why not, for
/// `status.lastError`. Such a name is maintained by nobody: no node or lease is touched.
///
/// # Errors
/// The reason as a clause (`it is empty`).
pub(crate) fn validate_node_name(name: &str) -> Result<(), String> {
    crate::api::validate_node_name(name).map_err(|e| e.to_string())?;
    crate::lease::lease_name_error(name).map_or(Ok(()), Err)
}

/// Failed for good: the lease could not be recovered and the node was restored.
pub(crate) fn is_terminal(status: &NodeMaintenanceStatus) -> bool {
    status.phase == Some(MaintenancePhase::Failed)
        && status.error_on_lease_count.unwrap_or(0) > MAX_LEASE_ERRORS
}

/// `now` with the 1 s precision of `metav1.Time`, so a value read back compares equal.
pub(crate) fn now_time(now: jiff::Timestamp) -> Time {
    Time(jiff::Timestamp::from_second(now.as_second()).unwrap_or(now))
}

/// Sets condition `type_` on `status`, keeping `lastTransitionTime` when its status is unchanged.
pub(crate) fn set_condition(
    status: &mut NodeMaintenanceStatus,
    type_: &str,
    value: bool,
    reason: &str,
    message: impl Into<String>,
    generation: Option<i64>,
    now: jiff::Timestamp,
) {
    let value = if value { "True" } else { "False" }.to_string();
    let conditions = status.conditions.get_or_insert_with(Vec::new);
    let message = message.into();
    match conditions.iter_mut().find(|c| c.type_ == type_) {
        Some(c) => {
            if c.status != value {
                c.last_transition_time = now_time(now);
                c.status = value;
            }
            c.reason = reason.to_string();
            c.message = message;
            c.observed_generation = generation;
        }
        None => conditions.push(Condition {
            type_: type_.to_string(),
            status: value,
            reason: reason.to_string(),
            message,
            observed_generation: generation,
            last_transition_time: now_time(now),
        }),
    }
}

fn condition<'a>(status: &'a NodeMaintenanceStatus, type_: &str) -> Option<&'a Condition> {
    status
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
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
    let (refs, _) = drain::bounds::cap_pending(&survey.evictable);
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
/// purpose, or nothing: at most [`drain::bounds::MAX_NAMED_KEPT`] named, then `and N more`.
/// Names, not counts, so it changes only when the set does.
fn skipped_summary(report: &DrainReport) -> String {
    if report.skipped.is_empty() {
        return String::new();
    }
    let mut names: Vec<String> = report
        .skipped
        .iter()
        .take(drain::bounds::MAX_NAMED_KEPT)
        .map(|b| format!("{}/{} ({})", b.namespace, b.name, b.reason))
        .collect();
    if report.skipped.len() > drain::bounds::MAX_NAMED_KEPT {
        names.push(format!(
            "and {} more",
            report.skipped.len() - drain::bounds::MAX_NAMED_KEPT
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
    for b in &report.newly_skipped {
        let note = format!(
            "Pod {}/{} {}",
            b.namespace,
            b.name,
            b.message.as_deref().unwrap_or(&b.reason)
        );
        events.push(PlannedEvent::normal(
            EventTarget::Maintenance,
            (
                event::POD_SKIPPED,
                &drain::bounds::truncate(&note, drain::bounds::MAX_EVENT_NOTE),
            ),
        ));
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
        s.last_error = None;
        set_condition(
            &mut s,
            condition::DRAINED,
            true,
            "AllPodsEvicted",
            drain::bounds::truncate(
                &format!("all pods were evicted{}", skipped_summary(report)),
                drain::bounds::MAX_CONDITION_MESSAGE,
            ),
            generation,
            now,
        );
        requeue = Requeue::After(REQUEUE_SUCCEEDED);
    } else {
        let all = drain::refs(&report.pending);
        let (refs, _) = drain::bounds::cap_pending(&all);
        let (blockers, _) = drain::bounds::cap_blockers(&report.pending);
        let capped = capped_summary(all.len(), refs.len(), blockers.len());
        s.phase = Some(MaintenancePhase::Running);
        s.drain_progress = Some(drain_progress(s.eviction_pods.unwrap_or(0), all.len()));
        s.pending_pods = non_empty(names(&refs));
        s.pending_pods_refs = non_empty(refs);
        s.blockers = non_empty(blockers);
        s.last_error = report.last_error();
        let blocked = report.blocked();
        set_condition(
            &mut s,
            condition::DRAINED,
            false,
            if blocked {
                "EvictionBlocked"
            } else {
                "PodsTerminating"
            },
            drain::bounds::truncate(
                &format!(
                    "{}{capped}{}",
                    pending_summary(report),
                    skipped_summary(report)
                ),
                drain::bounds::MAX_CONDITION_MESSAGE,
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

/// Whether `new` differs from `old` in anything the API server keeps but `lastUpdate` (which
/// every step bumps), i.e. whether a status write is due. `pruned` names the status fields (JSON
/// names) the API server drops (those of [`crate::api::ADDED_STATUS_FIELDS`] when upstream's CRD
/// is installed): `old` was read back without them, so comparing them would call for a write on
/// every pass (docs/design.md §1).
pub(crate) fn needs_write(
    old: &NodeMaintenanceStatus,
    new: &NodeMaintenanceStatus,
    pruned: &[String],
) -> bool {
    let kept = |s: &NodeMaintenanceStatus| {
        let mut v = serde_json::to_value(s).unwrap_or_default();
        if let Some(map) = v.as_object_mut() {
            map.remove("lastUpdate");
            for f in pruned {
                map.remove(f);
            }
        }
        v
    };
    kept(old) != kept(new)
}

/// What the API server keeps of the status fields, as far as seen: a field sent and read back
/// is kept, one sent and missing from the answer is pruned (upstream's CRD lacks our additions).
/// Fields never sent yet are unknown; a write carrying one is preceded by a dry run.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct StatusSchema {
    /// Fields (JSON names) the API server was seen to keep.
    pub kept: std::collections::BTreeSet<String>,
    /// Fields (JSON names) the API server was seen to prune.
    pub pruned: std::collections::BTreeSet<String>,
}

fn field_names(status: &NodeMaintenanceStatus) -> Vec<String> {
    serde_json::to_value(status)
        .ok()
        .and_then(|v| v.as_object().map(|m| m.keys().cloned().collect()))
        .unwrap_or_default()
}

impl StatusSchema {
    /// The pruned fields, for [`needs_write`].
    pub(crate) fn pruned(&self) -> Vec<String> {
        self.pruned.iter().cloned().collect()
    }

    /// Whether `status` sets a field whose fate is not known yet.
    pub(crate) fn has_unknown(&self, status: &NodeMaintenanceStatus) -> bool {
        field_names(status)
            .iter()
            .any(|f| !self.kept.contains(f) && !self.pruned.contains(f))
    }

    /// Learns from a write of `sent` answered with `stored`; returns the fields newly found
    /// pruned.
    pub(crate) fn learn(
        &mut self,
        sent: &NodeMaintenanceStatus,
        stored: Option<&NodeMaintenanceStatus>,
    ) -> Vec<String> {
        let stored = stored.map(field_names).unwrap_or_default();
        let mut fresh = Vec::new();
        for f in field_names(sent) {
            if stored.contains(&f) {
                self.kept.insert(f);
            } else if self.pruned.insert(f.clone()) {
                fresh.push(f);
            }
        }
        fresh
    }
}

/// Every status field's JSON name, for explicit nulls in a merge patch (kept in step with
/// `NodeMaintenanceStatus` by a unit test).
const STATUS_FIELDS: [&str; 13] = [
    "phase",
    "drainProgress",
    "lastUpdate",
    "lastError",
    "pendingPods",
    "pendingPodsRefs",
    "totalpods",
    "evictionPods",
    "errorOnLeaseCount",
    "blockers",
    "drainStartTime",
    "observedGeneration",
    "conditions",
];

/// The JSON merge patch for the status subresource that makes the stored status equal `status`:
/// unset fields are sent as explicit `null` (a merge patch otherwise leaves them), lists are
/// replaced whole. With `resource_version`, the API server rejects the write with 409 when the
/// object changed since it was read (optimistic concurrency).
pub(crate) fn status_patch(
    status: &NodeMaintenanceStatus,
    resource_version: Option<&str>,
) -> serde_json::Value {
    let mut body = serde_json::to_value(status).unwrap_or_else(|_| serde_json::json!({}));
    if let Some(map) = body.as_object_mut() {
        for f in STATUS_FIELDS {
            map.entry(f).or_insert(serde_json::Value::Null);
        }
    }
    let mut patch = serde_json::json!({ "status": body });
    if let Some(rv) = resource_version {
        patch["metadata"] = serde_json::json!({ "resourceVersion": rv });
    }
    patch
}

/// How the node looked when its NodeMaintenance is being deleted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum NodeSeen<'a> {
    /// The node does not exist.
    Missing,
    /// The node exists; its holder annotation.
    Holder(Option<&'a str>),
}

/// What deleting a NodeMaintenance does to its node and lease.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum DeletionPlan {
    /// Take the node out of maintenance and invalidate the lease (emit `UncordonNode` when it was
    /// uncordoned).
    Exit,
    /// Another live NodeMaintenance for the node takes it over; node and lease stay.
    Transfer {
        /// The successor.
        to: String,
    },
    /// Nobody holds the node (it is missing, or we never got to enter it): invalidate the lease
    /// by name, which we may have taken.
    InvalidateLease,
    /// Someone else holds the node (or will): leave node and lease alone.
    Nothing,
}

/// Decides the cleanup of NodeMaintenance `me` (upstream's stop-on-deletion, docs/compat.md §2,
/// plus the handover of docs/design.md §1): only the holder restores the node, and not while
/// another live NodeMaintenance for the same node (`successor`) still wants it.
pub(crate) fn deletion_plan(node: NodeSeen<'_>, me: &str, successor: Option<&str>) -> DeletionPlan {
    match (node, successor) {
        (NodeSeen::Holder(Some(h)), Some(to)) if h == me => {
            DeletionPlan::Transfer { to: to.to_string() }
        }
        (NodeSeen::Holder(Some(h)), None) if h == me => DeletionPlan::Exit,
        (NodeSeen::Holder(Some(_)), _) => DeletionPlan::Nothing,
        (NodeSeen::Missing | NodeSeen::Holder(None), None) => DeletionPlan::InvalidateLease,
        (NodeSeen::Missing | NodeSeen::Holder(None), Some(_)) => DeletionPlan::Nothing,
    }
}

/// The live NodeMaintenance (not being deleted, for `node`, another name) that should hold
/// `node`, the node `me` entered, after `me` goes: the oldest, then by name.
pub(crate) fn successor<'a>(
    me: &NodeMaintenance,
    node: &str,
    all: impl IntoIterator<Item = &'a NodeMaintenance>,
) -> Option<&'a NodeMaintenance> {
    let me_name = me.name_any();
    all.into_iter()
        .filter(|o| {
            o.spec.node_name == node
                && o.metadata.deletion_timestamp.is_none()
                && o.name_any() != me_name
        })
        .min_by(|a, b| {
            let key = |o: &NodeMaintenance| {
                (
                    o.metadata.creation_timestamp.as_ref().map(|t| t.0),
                    o.name_any(),
                )
            };
            key(a).cmp(&key(b))
        })
}

/// Everything one pass reads (the output of the reconcile's `observe`, the input of [`plan`]).
#[derive(Clone, Debug)]
pub(crate) struct Observed {
    /// The NodeMaintenance as the pass began with it.
    pub(crate) nm: NodeMaintenance,
    /// What was read besides it; which part depends on [`entry_with_finalizer`].
    pub(crate) world: World,
}

/// What a pass read besides the NodeMaintenance.
#[derive(Clone, Debug)]
pub(crate) enum World {
    /// Nothing: the pass ends without touching node or lease.
    Nothing,
    /// The deletion pass's reads.
    Deletion(Box<ObservedDeletion>),
    /// The maintenance pass's reads.
    Maintenance(Box<ObservedMaintenance>),
}

/// What a maintenance pass read: pods, node and lease, each only when the pass gets that far
/// (`None` otherwise, or when absent).
#[derive(Clone, Debug, Default)]
pub(crate) struct ObservedMaintenance {
    /// The pods on the node, read only while `status.phase` is unset (status initialisation).
    pub(crate) survey: Option<Survey>,
    /// The node (`None`: it does not exist, or it was not read).
    pub(crate) node: Option<Node>,
    /// The node's medik8s lease (`None`: there is none, or it was not read).
    pub(crate) lease: Option<Lease>,
    /// Whether the NodeMaintenance recorded as the node's holder still exists (`true` while the
    /// cache has not listed everything).
    pub(crate) holder_live: bool,
}

/// Everything one pass does, in order: the finalizer first, then the work.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Plan {
    /// Add our finalizer, then publish `BeginMaintenance`; the rest of the pass follows, as
    /// upstream carries on in the same pass.
    pub(crate) add_finalizer: bool,
    /// The rest of the pass.
    pub(crate) work: Work,
}

/// The part of a pass after the finalizer.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Work {
    /// Nothing (deleted without our finalizer, failed for good): wait for a change.
    Nothing,
    /// The deletion steps, in order; then wait for a change.
    Deletion(Vec<DeletionStep>),
    /// The maintenance steps, in order, then how the pass ends.
    Maintenance {
        /// Carried out in order; the first failure ends the pass.
        steps: Vec<MaintenanceStep>,
        /// The last step, which sets the status, the events and the requeue.
        end: Box<PassEnd>,
    },
}

/// One step of a maintenance pass.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum MaintenanceStep {
    /// `spec.nodeName` no longer names the node entered (possible only where neither the
    /// webhook nor the CRD's rule guards it): take that node out of maintenance if it is still
    /// ours, and invalidate its lease when it was.
    LeaveEnteredNode(String),
    /// Record (`Some`) or clear (`None`) the entered node on the NodeMaintenance, with the
    /// drain's start ([`crate::api::DRAIN_STARTED_ANNOTATION`]), in one write.
    RecordEnteredNode(Option<String>, Option<jiff::Timestamp>),
    /// Write this status (when it differs in more than `lastUpdate`).
    WriteStatus(NodeMaintenanceStatus),
    /// Create, renew or take over the lease (planned as ours: a lease found held meanwhile
    /// fails the pass).
    RequestLease,
    /// Take the node out of maintenance after the lease was lost for good.
    ExitNodeAfterLeaseLoss,
    /// Invalidate the lease (one held by another holder is left alone).
    InvalidateLease,
    /// Cordon, taint, label the node (one patch, re-applied when partly undone). A node found
    /// held by another or gone meanwhile ends the pass with an immediate requeue.
    EnterNode,
}

/// How a maintenance pass ends.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum PassEnd {
    /// Write the step's status, publish its events, requeue as it says.
    Finish(Step),
    /// One drain pass; its report decides the final status through [`drained`] from `status`
    /// (the one decision that needs what the evictions answered). `events` (the node entry's)
    /// are published after that status, or alone when the drain pass fails.
    Drain {
        /// The status before the drain pass.
        status: NodeMaintenanceStatus,
        /// Events of the node entry.
        events: Vec<PlannedEvent>,
        /// When the drain started ([`drain_started`], or this pass's time when it records it).
        drain_started: Option<jiff::Timestamp>,
    },
}

/// The entry decision, with our finalizer taken as added when it is missing: whether to add it,
/// and what the pass does then.
pub(crate) fn entry_with_finalizer(nm: &NodeMaintenance) -> (bool, Entry) {
    match entry(nm) {
        Entry::AddFinalizer => {
            let mut with = nm.clone();
            with.finalizers_mut().push(FINALIZER.to_string());
            (true, entry(&with))
        }
        e => (false, e),
    }
}

/// The whole decision of one pass (pure: no I/O, no clock).
pub(crate) fn plan(o: &Observed, now: jiff::Timestamp) -> Plan {
    let (add_finalizer, e) = entry_with_finalizer(&o.nm);
    let work = match (&o.world, e) {
        (World::Deletion(d), Entry::Cleanup) => Work::Deletion(plan_deletion(d)),
        (World::Maintenance(m), Entry::Maintain) => plan_maintenance(&o.nm, m, None, now),
        (World::Maintenance(m), Entry::InvalidNodeName(why)) => {
            plan_maintenance(&o.nm, m, Some(&why), now)
        }
        _ => Work::Nothing,
    };
    Plan {
        add_finalizer,
        work,
    }
}

/// The node a NodeMaintenance entered (its annotation), if recorded.
pub(crate) fn entered_node(nm: &NodeMaintenance) -> Option<&str> {
    nm.annotations()
        .get(crate::api::ENTERED_NODE_ANNOTATION)
        .map(String::as_str)
}

/// Whether `nm` entered a node other than the one `spec.nodeName` names now.
pub(crate) fn node_changed(nm: &NodeMaintenance) -> bool {
    entered_node(nm).is_some_and(|n| n != nm.spec.node_name)
}

/// The maintenance pass (upstream's reconcile, docs/design.md §1): status initialised before the
/// node is touched, the lease, its ownership recorded before entering, the node entered, one
/// drain pass. `invalid` says why `spec.nodeName` cannot name a node.
fn plan_maintenance(
    nm: &NodeMaintenance,
    o: &ObservedMaintenance,
    invalid: Option<&str>,
    now: jiff::Timestamp,
) -> Work {
    use MaintenanceStep as S;
    let done = |steps, end| Work::Maintenance {
        steps,
        end: Box::new(end),
    };
    let node_name = nm.spec.node_name.as_str();
    let generation = nm.metadata.generation;
    let old = nm.status.clone().unwrap_or_default();
    if let Some(entered) = entered_node(nm).filter(|n| *n != node_name) {
        // Restore the node entered first; the next pass starts over on the new one.
        let steps = vec![
            S::LeaveEnteredNode(entered.to_string()),
            S::RecordEnteredNode(None, None),
        ];
        return done(
            steps,
            PassEnd::Finish(Step {
                status: NodeMaintenanceStatus::default(),
                events: Vec::new(),
                requeue: Requeue::After(Duration::from_millis(100)),
            }),
        );
    }
    if let Some(why) = invalid {
        let step = invalid_node_name(&old, node_name, why, generation, now);
        return done(Vec::new(), PassEnd::Finish(step));
    }
    let mut steps = Vec::new();
    let mut status = old.clone();
    if let Some(s) = o
        .survey
        .as_ref()
        .and_then(|survey| init_status(&old, survey, generation, now))
    {
        steps.push(S::WriteStatus(s.clone()));
        status = s;
    }
    let Some(node) = &o.node else {
        let step = node_missing(&status, node_name, generation, now);
        return done(steps, PassEnd::Finish(step));
    };
    let status = node_present(&status);
    let name = nm.name_any();
    let me = crate::node::Claimant {
        name: &name,
        uid: nm.metadata.uid.as_deref(),
    };
    let lease = match crate::lease::plan_request(o.lease.as_ref(), now) {
        crate::lease::LeasePlan::AlreadyHeld { holder } => LeaseObservation::AlreadyHeld(
            crate::lease::LeaseError::AlreadyHeld { holder }.to_string(),
        ),
        _ => LeaseObservation::Held,
    };
    let record = crate::node::observe(node);
    let holds_node = record
        .holder
        .as_deref()
        .is_some_and(|h| me.owns(h, record.holder_uid.as_deref()));
    let status = match lease_result(&status, &lease, holds_node, generation, now) {
        LeaseStep::Proceed(s) => {
            // Ownership (and a phase back from Failed) is recorded before touching the node.
            steps.extend([S::RequestLease, S::WriteStatus(s.clone())]);
            s
        }
        LeaseStep::Wait(step) => return done(steps, PassEnd::Finish(step)),
        LeaseStep::Stop(step) => {
            let uncordon = matches!(
                crate::node::plan_exit_for(node, me),
                crate::node::ExitPlan::Apply { uncordon: true, .. }
            );
            let failed = lease_failed(&step.status, uncordon, generation, now);
            steps.extend([
                S::WriteStatus(step.status),
                S::ExitNodeAfterLeaseLoss,
                S::InvalidateLease,
            ]);
            return done(steps, PassEnd::Finish(failed));
        }
    };
    // The node to restore at the end is recorded before it is touched, and the drain's start
    // with it.
    let mut started = drain_started(nm);
    if entered_node(nm) != Some(node_name) {
        started = Some(now);
        steps.push(S::RecordEnteredNode(Some(node_name.to_string()), started));
    }
    let live = |_: &str, _: Option<&str>| o.holder_live;
    let repaired = match crate::node::plan_enter_outcome(node, me, nm.spec.reason.as_deref(), &live)
    {
        crate::node::EnterOutcome::HeldBy(other) => {
            let step = held_by_other(&status, node_name, &other, generation, now);
            return done(steps, PassEnd::Finish(step));
        }
        crate::node::EnterOutcome::Repaired(what) => what,
        _ => Vec::new(),
    };
    steps.push(S::EnterNode);
    let (status, events) = entered(&status, node_name, &repaired, generation, now);
    if status.phase == Some(MaintenancePhase::Succeeded) {
        // Drained once is drained: a pod that arrives later (an admin's maintenance job) stays.
        // The node, lease and label are still enforced above (upstream never drains again).
        let step = Step {
            status,
            events,
            requeue: Requeue::After(REQUEUE_SUCCEEDED),
        };
        return done(steps, PassEnd::Finish(step));
    }
    done(
        steps,
        PassEnd::Drain {
            status,
            events,
            drain_started: started,
        },
    )
}

/// When the drain of `nm` started: its [`crate::api::DRAIN_STARTED_ANNOTATION`]; for a
/// maintenance entered before that annotation existed (or by upstream), `status.drainStartTime`,
/// else its creation. `None` when none is readable: then no pod counts as arrived after it.
pub(crate) fn drain_started(nm: &NodeMaintenance) -> Option<jiff::Timestamp> {
    nm.annotations()
        .get(crate::api::DRAIN_STARTED_ANNOTATION)
        .and_then(|v| v.parse().ok())
        .or_else(|| nm.status.as_ref()?.drain_start_time.as_ref().map(|t| t.0))
        .or_else(|| nm.metadata.creation_timestamp.as_ref().map(|t| t.0))
}

/// What the deletion pass of a NodeMaintenance observed (the input of [`plan_deletion`]).
#[derive(Clone, Debug, Default)]
pub(crate) struct ObservedDeletion {
    /// `metadata.name` of the NodeMaintenance being deleted.
    pub(crate) name: String,
    /// Its `metadata.uid`.
    pub(crate) uid: Option<String>,
    /// The node it entered ([`ENTERED_NODE_ANNOTATION`](crate::api::ENTERED_NODE_ANNOTATION)),
    /// else `spec.nodeName`.
    pub(crate) node_name: String,
    /// The node as read; `None` when it does not exist or `node_name` is no valid node name
    /// (then it was not read).
    pub(crate) node: Option<Node>,
    /// The live NodeMaintenance that should take the node over ([`successor`]): name and uid.
    pub(crate) successor: Option<(String, Option<String>)>,
    /// `status.phase` is set: the maintenance was started (by us or by upstream NMO).
    pub(crate) started: bool,
}

/// One step of the deletion pass, carried out in the order [`plan_deletion`] lists them; the
/// first failure ends the pass (the finalizer stays, so the next pass starts over).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum DeletionStep {
    /// Take the node out of maintenance (emit `UncordonNode` when it was uncordoned); a node
    /// gone meanwhile counts as restored.
    ExitNode,
    /// Hand the node over to the successor; node and lease stay.
    TransferNode {
        /// The successor's name.
        to: String,
        /// The successor's uid.
        to_uid: Option<String>,
    },
    /// A node left in maintenance by upstream NMO (its drain taint, none of our records):
    /// adopt it and exit at once, as upstream would have restored it.
    AdoptAndExit,
    /// Invalidate the node's lease; one held by another holder (remediation) is left alone.
    InvalidateLease,
    /// Remove our finalizer (a 404 counts as removed).
    RemoveFinalizer,
    /// Publish an event about the NodeMaintenance (after the finalizer write it belongs to).
    Publish(PlannedEvent),
}

/// Plans the deletion pass (docs/design.md §3: restore, or hand over to a successor): the node
/// steps, the lease, then the finalizer and `RemovedMaintenance`. An invalid node name touches
/// no node and no lease.
pub(crate) fn plan_deletion(o: &ObservedDeletion) -> Vec<DeletionStep> {
    let mut steps = Vec::new();
    if validate_node_name(&o.node_name).is_ok() {
        let record = o.node.as_ref().map(crate::node::observe);
        let me = crate::node::Claimant {
            name: &o.name,
            uid: o.uid.as_deref(),
        };
        // A record of our name but another uid is an earlier object's: not ours to restore.
        let holder = record.as_ref().and_then(|r| {
            let h = r.holder.as_deref()?;
            Some(if me.owns(h, r.holder_uid.as_deref()) || h != o.name {
                h.to_string()
            } else {
                format!("{h} (uid {})", r.holder_uid.as_deref().unwrap_or_default())
            })
        });
        let seen = match &record {
            None => NodeSeen::Missing,
            Some(_) => NodeSeen::Holder(holder.as_deref()),
        };
        let successor = o.successor.as_ref().map(|(n, _)| n.as_str());
        match deletion_plan(seen, &o.name, successor) {
            DeletionPlan::Exit => {
                steps.extend([DeletionStep::ExitNode, DeletionStep::InvalidateLease])
            }
            DeletionPlan::Transfer { to } => steps.push(DeletionStep::TransferNode {
                to,
                to_uid: o.successor.as_ref().and_then(|(_, u)| u.clone()),
            }),
            DeletionPlan::InvalidateLease => {
                if o.started && record.is_some_and(|r| r.drain_taint) {
                    steps.push(DeletionStep::AdoptAndExit);
                }
                steps.push(DeletionStep::InvalidateLease);
            }
            DeletionPlan::Nothing => {}
        }
    }
    steps.push(DeletionStep::RemoveFinalizer);
    steps.push(DeletionStep::Publish(PlannedEvent::normal(
        EventTarget::Maintenance,
        event::REMOVED,
    )));
    steps
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{NodeMaintenanceSpec, PodBlocker};
    use crate::drain::reason;

    fn t(s: i64) -> jiff::Timestamp {
        jiff::Timestamp::from_second(1_800_000_000 + s).unwrap()
    }
    const GEN: Option<i64> = Some(1);
    fn pods(names: &[&str]) -> Vec<PodReference> {
        names
            .iter()
            .map(|n| PodReference {
                namespace: "test-namespace".into(),
                name: n.to_string(),
            })
            .collect()
    }
    fn survey(names: &[&str]) -> Survey {
        Survey {
            total_pods: names.len(),
            evictable: pods(names),
        }
    }
    fn report(evictable: &[&str], pending: &[(&str, &str)], errors: &[&str]) -> DrainReport {
        DrainReport {
            total_pods: evictable.len(),
            evictable: pods(evictable),
            pending: pending
                .iter()
                .map(|(n, r)| PodBlocker {
                    namespace: "test-namespace".into(),
                    name: n.to_string(),
                    reason: r.to_string(),
                    ..PodBlocker::default()
                })
                .collect(),
            errors: errors.iter().map(|e| e.to_string()).collect(),
            ..DrainReport::default()
        }
    }
    fn nm(name: &str, node: &str) -> NodeMaintenance {
        let mut nm = NodeMaintenance::new(
            name,
            NodeMaintenanceSpec {
                node_name: node.into(),
                reason: None,
            },
        );
        nm.metadata.finalizers = Some(vec![FINALIZER.into()]);
        nm
    }
    const HELD_ERR: &str = "can't update or invalidate the lease because it is held by different owner: NodeHealthCheck-x";
    fn already_held() -> LeaseObservation {
        LeaseObservation::AlreadyHeld(HELD_ERR.into())
    }
    fn reasons(events: &[PlannedEvent]) -> Vec<&str> {
        events.iter().map(|e| e.reason).collect()
    }

    /// One maintenance reconcile as the reconciler runs it, for a node that exists and is ours to
    /// enter: lease, enter, drain. Returns the new status and the events of this pass.
    fn pass(
        old: &NodeMaintenanceStatus,
        lease: LeaseObservation,
        drain: &DrainReport,
        now: jiff::Timestamp,
    ) -> (NodeMaintenanceStatus, Vec<PlannedEvent>, Requeue) {
        if is_terminal(old) {
            return (old.clone(), vec![], Requeue::Never);
        }
        let s = node_present(old);
        match lease_result(&s, &lease, false, GEN, now) {
            LeaseStep::Wait(step) => (step.status, step.events, step.requeue),
            LeaseStep::Stop(step) => {
                let failed = lease_failed(&step.status, true, GEN, now);
                (failed.status, failed.events, failed.requeue)
            }
            LeaseStep::Proceed(s) => {
                let (s, mut events) = entered(&s, "node01", &[], GEN, now);
                let step = drained(&s, drain, GEN, now);
                events.extend(step.events);
                (step.status, events, step.requeue)
            }
        }
    }
    fn running_with_two() -> NodeMaintenanceStatus {
        init_status(
            &NodeMaintenanceStatus::default(),
            &survey(&["test-pod-1", "test-pod-2"]),
            GEN,
            t(0),
        )
        .unwrap()
    }

    // Upstream's contract: initialisation with 2 pods to drain.
    #[test]
    fn init_sets_running_with_the_pods_to_drain() {
        let s = running_with_two();
        assert_eq!(s.phase, Some(MaintenancePhase::Running));
        assert_eq!(s.pending_pods.as_ref().unwrap().len(), 2);
        assert_eq!(s.pending_pods_refs.as_ref().unwrap().len(), 2);
        assert_eq!(
            (s.eviction_pods, s.total_pods, s.drain_progress),
            (Some(2), Some(2), Some(0))
        );
        assert!(s.last_update.is_some() && s.drain_start_time.is_some());
        assert_eq!(s.observed_generation, GEN);
    }

    // Upstream's contract: no re-initialisation once a phase is set.
    #[test]
    fn init_leaves_a_set_phase_alone() {
        let failed = NodeMaintenanceStatus {
            phase: Some(MaintenancePhase::Failed),
            ..Default::default()
        };
        assert_eq!(init_status(&failed, &survey(&["a"]), GEN, t(0)), None);
    }

    // Upstream's contract: a valid maintenance drains and succeeds once.
    #[test]
    fn valid_maintenance_succeeds_once_and_then_stays_quiet() {
        let s0 = running_with_two();
        let (s1, ev1, rq1) = pass(
            &s0,
            LeaseObservation::Held,
            &report(&["test-pod-1", "test-pod-2"], &[], &[]),
            t(1),
        );
        assert_eq!(s1.phase, Some(MaintenancePhase::Succeeded));
        assert_eq!(
            (s1.pending_pods.as_ref(), s1.pending_pods_refs.as_ref()),
            (None, None)
        );
        assert_eq!(
            (s1.eviction_pods, s1.total_pods, s1.drain_progress),
            (Some(2), Some(2), Some(100))
        );
        assert_eq!(s1.last_error, None);
        assert_eq!(s1.error_on_lease_count.unwrap_or(0), 0);
        assert_eq!(reasons(&ev1), vec!["SucceedMaintenance"]);
        assert_eq!(ev1[0].message, "Node maintenance was succeeded");
        assert!(!ev1[0].warning);
        assert_eq!(rq1, Requeue::After(REQUEUE_SUCCEEDED));
        // Re-reconciled later with nothing changed: no write, no event.
        let (s2, ev2, _) = pass(&s1, LeaseObservation::Held, &report(&[], &[], &[]), t(400));
        assert!(ev2.is_empty());
        assert!(!needs_write(&s1, &s2, &[]), "{s1:?}\n{s2:?}");
    }

    // Upstream's contract: a node that does not exist.
    #[test]
    fn missing_node_fails_once_and_resumes_when_it_appears() {
        let s0 = init_status(&NodeMaintenanceStatus::default(), &survey(&[]), GEN, t(0)).unwrap();
        let step = node_missing(&s0, "non-existing", GEN, t(1));
        let s = &step.status;
        assert_eq!(s.phase, Some(MaintenancePhase::Failed));
        assert_eq!(
            s.last_error.as_deref(),
            Some("nodes \"non-existing\" not found")
        );
        assert_eq!(
            (s.eviction_pods, s.total_pods, s.drain_progress),
            (Some(0), Some(0), Some(0))
        );
        assert_eq!(s.error_on_lease_count.unwrap_or(0), 0);
        assert_eq!(reasons(&step.events), vec!["FailedMaintenance"]);
        assert!(step.events[0].warning);
        assert_eq!(step.events[0].message, "Failed a node maintenance");
        // Still missing: no second event, no write.
        let again = node_missing(s, "non-existing", GEN, t(31));
        assert!(again.events.is_empty());
        assert!(!needs_write(s, &again.status, &[]));
        // The node appears with a pod: Running, counted, drained.
        let (s2, ev, _) = pass(
            s,
            LeaseObservation::Held,
            &report(&["p"], &[("p", reason::TERMINATING)], &[]),
            t(60),
        );
        assert_eq!(s2.phase, Some(MaintenancePhase::Running));
        assert_eq!(s2.eviction_pods, Some(1));
        assert_eq!(s2.last_error, None);
        assert!(ev.is_empty());
    }

    // Upstream's contract: a lease held by someone else from the start is waited for, not counted.
    #[test]
    fn foreign_lease_from_the_start_is_not_counted() {
        let mut s = running_with_two();
        for i in 0..6 {
            let (next, ev, rq) = pass(&s, already_held(), &report(&[], &[], &[]), t(i));
            assert_eq!(rq, Requeue::LeaseWait);
            assert!(ev.is_empty());
            s = next;
        }
        assert!(s.last_error.as_deref().unwrap().starts_with(&format!(
            "failed to obtain a lease that is not owned by us : {HELD_ERR} errorOnLeaseCount 0"
        )));
        assert_eq!(s.error_on_lease_count.unwrap_or(0), 0);
        assert_eq!(s.drain_progress, Some(0));
        assert_eq!(s.phase, Some(MaintenancePhase::Running));
    }

    // Upstream's contract: held 5 times, then released: succeeds without ever failing.
    #[test]
    fn lease_released_later_leads_straight_to_success() {
        let mut s = running_with_two();
        let mut all = Vec::new();
        for i in 0..5 {
            let (next, ev, _) = pass(&s, already_held(), &report(&[], &[], &[]), t(i));
            all.extend(ev);
            s = next;
        }
        assert!(
            s.last_error
                .as_deref()
                .unwrap()
                .contains("failed to obtain a lease that is not owned by us")
        );
        let (s, ev, _) = pass(&s, LeaseObservation::Held, &report(&[], &[], &[]), t(10));
        all.extend(ev);
        assert_eq!(s.phase, Some(MaintenancePhase::Succeeded));
        assert_eq!(
            (s.error_on_lease_count.unwrap_or(0), s.drain_progress),
            (0, Some(100))
        );
        assert_eq!(reasons(&all), vec!["SucceedMaintenance"]);
    }

    // Upstream's contract: lease lost twice during the drain, then recovered.
    #[test]
    fn transiently_lost_lease_is_counted_then_reset() {
        let s0 = running_with_two();
        let blocked = report(
            &["test-pod-1", "test-pod-2"],
            &[("test-pod-1", reason::PDB)],
            &["e"],
        );
        let (s1, _, _) = pass(&s0, LeaseObservation::Held, &blocked, t(1));
        let (s2, _, rq) = pass(&s1, already_held(), &blocked, t(2));
        assert_eq!(rq, Requeue::Fixed(REQUEUE_LEASE_LOST));
        // Woken at once by its own status write: not a new strike, come back when one is due.
        let (again, ev, rq) = pass(&s2, already_held(), &blocked, t(3));
        assert_eq!((&again, ev.len()), (&s2, 0));
        assert!(matches!(rq, Requeue::After(d) if d <= REQUEUE_LEASE_LOST));
        let (s3, _, _) = pass(&s2, already_held(), &blocked, t(8));
        assert_eq!(s3.error_on_lease_count, Some(2));
        assert_eq!(
            s3.last_error.as_deref(),
            Some(&*format!(
                "failed to extend a lease that used to be owned by us, incrementing error on lease count: {HELD_ERR}, errorOnLeaseCount: 2"
            ))
        );
        let (s4, ev, _) = pass(&s3, LeaseObservation::Held, &report(&[], &[], &[]), t(9));
        assert_eq!(s4.phase, Some(MaintenancePhase::Succeeded));
        assert_eq!(
            (s4.error_on_lease_count.unwrap_or(0), s4.drain_progress),
            (0, Some(100))
        );
        assert_eq!(reasons(&ev), vec!["SucceedMaintenance"]);
    }

    // Upstream's contract: lease lost for good: Failed after more than 3 counted errors, then quiet.
    #[test]
    fn permanently_lost_lease_fails_the_maintenance_once() {
        let s0 = running_with_two();
        let (mut s, _, _) = pass(
            &s0,
            LeaseObservation::Held,
            &report(&["test-pod-1"], &[("test-pod-1", reason::PDB)], &[]),
            t(1),
        );
        assert!(s.drain_progress.unwrap() > 0);
        let mut all = Vec::new();
        for i in 0..4 {
            let (next, ev, _) = pass(&s, already_held(), &report(&[], &[], &[]), t(2 + 5 * i));
            all.extend(ev);
            s = next;
        }
        assert_eq!(s.phase, Some(MaintenancePhase::Failed));
        assert!(s.error_on_lease_count.unwrap() > 3);
        assert!(is_terminal(&s));
        assert_eq!(
            s.last_error.as_deref(),
            Some("maintenance failed: lease could not be extended after 4 attempts")
        );
        assert_eq!(reasons(&all), vec!["UncordonNode", "FailedMaintenance"]);
        assert_eq!(all[0].target, EventTarget::Node);
        // Terminal: later reconciles neither write nor emit.
        let (s2, ev, rq) = pass(&s, already_held(), &report(&[], &[], &[]), t(100));
        assert!(ev.is_empty() && !needs_write(&s, &s2, &[]) && rq == Requeue::Never);
        let mut obj = nm("nm", "node01");
        obj.status = Some(s);
        assert_eq!(entry(&obj), Entry::Terminal);
    }

    // Upstream's contract (bug #154): a deleting object never falls through to maintenance.
    #[test]
    fn deletion_comes_first_and_never_falls_through() {
        let mut obj = nm("nm", "node01");
        obj.metadata.deletion_timestamp = Some(now_time(t(0)));
        assert_eq!(entry(&obj), Entry::Cleanup);
        obj.metadata.finalizers = Some(vec!["test/blocker".into()]);
        assert_eq!(entry(&obj), Entry::Ignore);
        obj.spec.node_name = String::new();
        assert_eq!(entry(&obj), Entry::Ignore);
        let mut fresh = nm("nm", "node01");
        fresh.metadata.finalizers = None;
        assert_eq!(entry(&fresh), Entry::AddFinalizer);
        assert_eq!(entry(&nm("nm", "node01")), Entry::Maintain);
    }

    #[test]
    fn deletion_restores_only_what_this_maintenance_holds() {
        assert_eq!(
            deletion_plan(NodeSeen::Holder(Some("a")), "a", None),
            DeletionPlan::Exit
        );
        assert_eq!(
            deletion_plan(NodeSeen::Holder(Some("a")), "a", Some("b")),
            DeletionPlan::Transfer { to: "b".into() }
        );
        assert_eq!(
            deletion_plan(NodeSeen::Holder(Some("b")), "a", None),
            DeletionPlan::Nothing
        );
        assert_eq!(
            deletion_plan(NodeSeen::Holder(None), "a", None),
            DeletionPlan::InvalidateLease
        );
        assert_eq!(
            deletion_plan(NodeSeen::Missing, "a", None),
            DeletionPlan::InvalidateLease
        );
        assert_eq!(
            deletion_plan(NodeSeen::Missing, "a", Some("b")),
            DeletionPlan::Nothing
        );
    }

    /// One pass as a table of observations -> plans: whether the finalizer is added, the
    /// ordered steps, and how the pass ends (its status phase, events and requeue).
    #[test]
    fn one_pass_is_planned_whole_from_one_observation() {
        use crate::node::{
            DRAIN_TAINT_KEY, EXCLUDE_LABEL, HOLDER_ANNOTATION, HOLDER_UID_ANNOTATION,
            UNSCHEDULABLE_TAINT_KEY,
        };
        use k8s_openapi::api::coordination::v1::LeaseSpec;
        use k8s_openapi::api::core::v1::{NodeSpec, Taint};
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
        let now = t(100);
        // A node; `holder` records a NodeMaintenance (name, uid); `marks`: cordoned, both
        // maintenance taints, excluded from remediation.
        let node = |holder: Option<(&str, &str)>, marks: bool| {
            let mut n = Node::default();
            n.metadata.name = Some("node01".into());
            if let Some((h, uid)) = holder {
                n.metadata.annotations = Some(
                    [
                        (HOLDER_ANNOTATION.to_string(), h.to_string()),
                        (HOLDER_UID_ANNOTATION.to_string(), uid.to_string()),
                    ]
                    .into(),
                );
            }
            if marks {
                n.metadata.labels = Some([(EXCLUDE_LABEL.to_string(), "true".into())].into());
                let taint = |key: &str| Taint {
                    key: key.into(),
                    effect: "NoSchedule".into(),
                    ..Taint::default()
                };
                n.spec = Some(NodeSpec {
                    unschedulable: Some(true),
                    taints: Some(vec![taint(DRAIN_TAINT_KEY), taint(UNSCHEDULABLE_TAINT_KEY)]),
                    ..NodeSpec::default()
                });
            }
            Some(n)
        };
        let foreign_lease = || {
            Some(Lease {
                spec: Some(LeaseSpec {
                    holder_identity: Some("NodeHealthCheck-x".into()),
                    lease_duration_seconds: Some(3600),
                    renew_time: Some(MicroTime(t(90))),
                    ..LeaseSpec::default()
                }),
                ..Lease::default()
            })
        };
        let mine = || {
            let mut o = nm("nm", "node01");
            o.metadata.uid = Some("uid-nm".into());
            o.status = Some(running_with_two());
            o
        };
        let seen = |node: Option<Node>, lease: Option<Lease>, holder_live: bool| {
            World::Maintenance(Box::new(ObservedMaintenance {
                survey: None,
                node,
                lease,
                holder_live,
            }))
        };
        fn label(step: &MaintenanceStep) -> String {
            match step {
                MaintenanceStep::LeaveEnteredNode(n) => format!("leave {n}"),
                MaintenanceStep::RecordEnteredNode(n, _) => format!("record {n:?}"),
                MaintenanceStep::WriteStatus(s) => format!("write {:?}", s.phase),
                MaintenanceStep::RequestLease => "request lease".into(),
                MaintenanceStep::ExitNodeAfterLeaseLoss => "exit".into(),
                MaintenanceStep::InvalidateLease => "invalidate lease".into(),
                MaintenanceStep::EnterNode => "enter".into(),
            }
        }
        // (what, the NodeMaintenance, the reads, finalizer added, steps, end)
        type Case<'a> = (&'a str, NodeMaintenance, World, bool, Vec<&'a str>, &'a str);
        let mut fresh = nm("nm", "node01");
        fresh.metadata.finalizers = None;
        let mut deleted = nm("nm", "node01");
        deleted.metadata.finalizers = Some(vec!["test/blocker".into()]);
        deleted.metadata.deletion_timestamp = Some(now_time(t(0)));
        let mut terminal = mine();
        terminal.status = Some(NodeMaintenanceStatus {
            phase: Some(MaintenancePhase::Failed),
            error_on_lease_count: Some(MAX_LEASE_ERRORS + 1),
            ..NodeMaintenanceStatus::default()
        });
        let mut moved = mine();
        moved
            .annotations_mut()
            .insert(crate::api::ENTERED_NODE_ANNOTATION.into(), "node02".into());
        let mut entered_here = mine();
        entered_here
            .annotations_mut()
            .insert(crate::api::ENTERED_NODE_ANNOTATION.into(), "node01".into());
        let mut succeeded = entered_here.clone();
        if let Some(s) = succeeded.status.as_mut() {
            s.phase = Some(MaintenancePhase::Succeeded);
        }
        let mut striking = entered_here.clone();
        if let Some(s) = striking.status.as_mut() {
            s.error_on_lease_count = Some(MAX_LEASE_ERRORS);
            s.last_update = Some(now_time(t(0)));
        }
        let cases: Vec<Case> = vec![
            (
                "new: finalizer, status initialised before anything else, node missing",
                fresh,
                World::Maintenance(Box::new(ObservedMaintenance {
                    survey: Some(survey(&["a", "b"])),
                    ..ObservedMaintenance::default()
                })),
                true,
                vec!["write Some(Running)"],
                "finish Some(Failed) After(30s) [FailedMaintenance]",
            ),
            (
                "deleted without our finalizer: nothing",
                deleted,
                World::Nothing,
                false,
                vec![],
                "nothing",
            ),
            (
                "failed for good: nothing",
                terminal,
                World::Nothing,
                false,
                vec![],
                "nothing",
            ),
            (
                "invalid nodeName: failed, no node touched",
                nm("nm", "Node_01"),
                World::Maintenance(Box::default()),
                false,
                vec![],
                "finish Some(Failed) After(300s) [FailedMaintenance]",
            ),
            (
                "nodeName changed: restore the node entered, clear record and status, start over",
                moved,
                World::Maintenance(Box::default()),
                false,
                vec!["leave node02", "record None"],
                "finish None After(100ms) []",
            ),
            (
                "free node, no lease: lease, ownership recorded, node recorded, entered, drain",
                mine(),
                seen(node(None, false), None, true),
                false,
                vec![
                    "request lease",
                    "write Some(Running)",
                    "record Some(\"node01\")",
                    "enter",
                ],
                "drain []",
            ),
            (
                "lease held by another holder, never ours: wait, the node untouched",
                mine(),
                seen(node(None, false), foreign_lease(), true),
                false,
                vec![],
                "finish Some(Running) LeaseWait []",
            ),
            (
                "node held by another live NodeMaintenance: no drain",
                mine(),
                seen(node(Some(("other", "uid-o")), true), None, true),
                false,
                vec![
                    "request lease",
                    "write Some(Running)",
                    "record Some(\"node01\")",
                ],
                "finish Some(Running) After(30s) []",
            ),
            (
                "node held by a vanished NodeMaintenance: taken over, drain",
                mine(),
                seen(node(Some(("other", "uid-o")), true), None, false),
                false,
                vec![
                    "request lease",
                    "write Some(Running)",
                    "record Some(\"node01\")",
                    "enter",
                ],
                "drain []",
            ),
            (
                "ours, partly undone: re-applied and said so",
                entered_here.clone(),
                seen(node(Some(("nm", "uid-nm")), false), None, true),
                false,
                vec!["request lease", "write Some(Running)", "enter"],
                "drain [MaintenanceReapplied]",
            ),
            (
                "Succeeded: node and lease still enforced, no drain pass (upstream drains once)",
                succeeded,
                seen(node(Some(("nm", "uid-nm")), false), None, true),
                false,
                vec!["request lease", "write Some(Succeeded)", "enter"],
                "finish Some(Succeeded) After(300s) [MaintenanceReapplied]",
            ),
            (
                "ours, complete: nothing to write on the node but the pass goes on",
                entered_here,
                seen(node(Some(("nm", "uid-nm")), true), None, true),
                false,
                vec!["request lease", "write Some(Running)", "enter"],
                "drain []",
            ),
            (
                "lease lost past the limit: count recorded before leaving, then node, then lease",
                striking,
                seen(node(Some(("nm", "uid-nm")), true), foreign_lease(), true),
                false,
                vec!["write Some(Running)", "exit", "invalidate lease"],
                "finish Some(Failed) Never [UncordonNode,FailedMaintenance]",
            ),
        ];
        for (what, nm, world, add, steps, end) in cases {
            let got = plan(&Observed { nm, world }, now);
            assert_eq!(got.add_finalizer, add, "{what}");
            let (got_steps, got_end) = match &got.work {
                Work::Nothing => (vec![], "nothing".to_string()),
                Work::Deletion(_) => panic!("{what}: deletion work"),
                Work::Maintenance { steps, end } => (
                    steps.iter().map(label).collect::<Vec<_>>(),
                    match end.as_ref() {
                        PassEnd::Finish(step) => format!(
                            "finish {:?} {:?} [{}]",
                            step.status.phase,
                            step.requeue,
                            reasons(&step.events).join(",")
                        ),
                        PassEnd::Drain { events, .. } => {
                            format!("drain [{}]", reasons(events).join(","))
                        }
                    },
                ),
            };
            assert_eq!(got_steps, steps, "{what}");
            assert_eq!(got_end, end, "{what}");
        }
    }

    /// The drain's start: recorded with the entered node in the pass that first enters it, and
    /// read back from the annotation; older maintenances fall back to drainStartTime, then to
    /// their creation.
    #[test]
    fn the_drain_start_is_recorded_with_the_entered_node_and_read_back() {
        let mut o = nm("nm", "node01");
        o.metadata.uid = Some("uid-nm".into());
        o.status = Some(running_with_two());
        let node = {
            let mut n = Node::default();
            n.metadata.name = Some("node01".into());
            n.metadata.resource_version = Some("1".into());
            Some(n)
        };
        let world = World::Maintenance(Box::new(ObservedMaintenance {
            node,
            holder_live: true,
            ..ObservedMaintenance::default()
        }));
        let now = t(50);
        let got = plan(
            &Observed {
                nm: o.clone(),
                world,
            },
            now,
        );
        let Work::Maintenance { steps, end } = got.work else {
            panic!("maintenance work expected");
        };
        assert!(
            steps.contains(&MaintenanceStep::RecordEnteredNode(
                Some("node01".into()),
                Some(now)
            )),
            "{steps:?}"
        );
        assert!(
            matches!(*end, PassEnd::Drain { drain_started: Some(s), .. } if s == now),
            "{end:?}"
        );
        let created = t(-100);
        o.metadata.creation_timestamp = Some(now_time(created));
        o.status.as_mut().unwrap().drain_start_time = Some(now_time(t(-50)));
        assert_eq!(drain_started(&o), Some(t(-50)));
        o.status.as_mut().unwrap().drain_start_time = None;
        assert_eq!(drain_started(&o), Some(created));
        o.annotations_mut().insert(
            crate::api::DRAIN_STARTED_ANNOTATION.into(),
            t(7).to_string(),
        );
        assert_eq!(drain_started(&o), Some(t(7)));
    }

    /// The deletion pass as a table of observations -> ordered steps.
    #[test]
    fn deletion_pass_is_planned_whole_in_order() {
        use crate::node::{DRAIN_TAINT_KEY, HOLDER_ANNOTATION, HOLDER_UID_ANNOTATION};
        use k8s_openapi::api::core::v1::{NodeSpec, Taint};
        fn node(holder: Option<(&str, &str)>, drain_taint: bool) -> Option<Node> {
            let mut n = Node::default();
            n.metadata.name = Some("node01".into());
            if let Some((h, uid)) = holder {
                n.metadata.annotations = Some(
                    [
                        (HOLDER_ANNOTATION.to_string(), h.to_string()),
                        (HOLDER_UID_ANNOTATION.to_string(), uid.to_string()),
                    ]
                    .into(),
                );
            }
            if drain_taint {
                n.spec = Some(NodeSpec {
                    taints: Some(vec![Taint {
                        key: DRAIN_TAINT_KEY.into(),
                        effect: "NoSchedule".into(),
                        ..Taint::default()
                    }]),
                    ..NodeSpec::default()
                });
            }
            Some(n)
        }
        let observed = |node_name: &str, node: Option<Node>, successor: Option<&str>, started| {
            ObservedDeletion {
                name: "a".into(),
                uid: Some("uid-a".into()),
                node_name: node_name.into(),
                node,
                successor: successor.map(|s| (s.to_string(), Some(format!("uid-{s}")))),
                started,
            }
        };
        use DeletionStep as S;
        let tail = || {
            vec![
                S::RemoveFinalizer,
                S::Publish(PlannedEvent::normal(
                    EventTarget::Maintenance,
                    event::REMOVED,
                )),
            ]
        };
        let with_tail = |mut v: Vec<DeletionStep>| {
            v.extend(tail());
            v
        };
        let cases: Vec<(&str, ObservedDeletion, Vec<DeletionStep>)> = vec![
            (
                "held by us, nobody else wants it: exit, then the lease",
                observed("node01", node(Some(("a", "uid-a")), true), None, true),
                with_tail(vec![S::ExitNode, S::InvalidateLease]),
            ),
            (
                "held by us, a successor: hand over, lease stays",
                observed("node01", node(Some(("a", "uid-a")), true), Some("b"), true),
                with_tail(vec![S::TransferNode {
                    to: "b".into(),
                    to_uid: Some("uid-b".into()),
                }]),
            ),
            (
                "held under our name by an earlier object (other uid): not ours",
                observed("node01", node(Some(("a", "uid-old")), true), None, true),
                tail(),
            ),
            (
                "held by another NodeMaintenance: node and lease alone",
                observed("node01", node(Some(("b", "uid-b")), true), None, true),
                tail(),
            ),
            (
                "node missing: the lease by name",
                observed("node01", None, None, true),
                with_tail(vec![S::InvalidateLease]),
            ),
            (
                "node missing, a successor: nothing",
                observed("node01", None, Some("b"), true),
                tail(),
            ),
            (
                "left in maintenance by upstream NMO: adopt and exit, then the lease",
                observed("node01", node(None, true), None, true),
                with_tail(vec![S::AdoptAndExit, S::InvalidateLease]),
            ),
            (
                "drain taint but never started: only the lease",
                observed("node01", node(None, true), None, false),
                with_tail(vec![S::InvalidateLease]),
            ),
            (
                "no record, no taint: only the lease",
                observed("node01", node(None, false), None, true),
                with_tail(vec![S::InvalidateLease]),
            ),
            (
                "invalid node name: no node, no lease",
                observed("Node_01", None, None, true),
                tail(),
            ),
        ];
        for (what, o, want) in cases {
            assert_eq!(plan_deletion(&o), want, "{what}");
        }
    }

    /// Issue 10 item 3: on upstream's schema the stored status lacks our additions; once the
    /// schema is learnt, a pass that changes only those (or lastUpdate) writes nothing, and a
    /// field never sent before calls for a dry run first.
    #[test]
    fn status_comparison_ignores_what_the_api_server_prunes() {
        let running = running_with_two();
        let (s, _, _) = pass(
            &running,
            LeaseObservation::Held,
            &report(&["a", "b"], &[], &[]),
            t(5),
        );
        assert_eq!(s.phase, Some(MaintenancePhase::Succeeded));
        let pruned_copy = |s: &NodeMaintenanceStatus| NodeMaintenanceStatus {
            conditions: None,
            observed_generation: None,
            drain_start_time: None,
            blockers: None,
            ..s.clone()
        };
        let stored = pruned_copy(&s);
        let mut schema = StatusSchema::default();
        assert!(schema.has_unknown(&s));
        let fresh = schema.learn(&s, Some(&stored));
        assert_eq!(
            fresh,
            ["conditions", "drainStartTime", "observedGeneration"]
        );
        assert!(!schema.has_unknown(&s));
        // The next pass, later: only lastUpdate, conditions' times and drainStartTime differ.
        let (again, _, _) = pass(
            &stored,
            LeaseObservation::Held,
            &report(&["a", "b"], &[], &[]),
            t(60),
        );
        assert!(
            needs_write(&stored, &again, &[]),
            "without the schema: a write every pass"
        );
        assert!(!needs_write(&stored, &again, &schema.pruned()));
        // A kept field that changes is still written.
        let failed = NodeMaintenanceStatus {
            last_error: Some("x".into()),
            ..again.clone()
        };
        assert!(needs_write(&stored, &failed, &schema.pruned()));
        assert!(schema.has_unknown(&failed), "lastError not seen yet");
        // With our own CRD nothing is pruned.
        let mut ours = StatusSchema::default();
        assert!(ours.learn(&s, Some(&s)).is_empty());
        assert!(ours.pruned().is_empty());
    }

    #[test]
    fn successor_is_the_oldest_live_maintenance_of_the_same_node() {
        let me = nm("a", "n1");
        let mut b = nm("b", "n1");
        b.metadata.creation_timestamp = Some(now_time(t(5)));
        let mut c = nm("c", "n1");
        c.metadata.creation_timestamp = Some(now_time(t(1)));
        let mut deleting = nm("d", "n1");
        deleting.metadata.creation_timestamp = Some(now_time(t(0)));
        deleting.metadata.deletion_timestamp = Some(now_time(t(9)));
        let other_node = nm("e", "n2");
        let all = [me.clone(), b, c, deleting, other_node];
        assert_eq!(
            successor(&me, "n1", all.iter()).map(ResourceExt::name_any),
            Some("c".into())
        );
        assert_eq!(successor(&me, "n1", [me.clone()].iter()), None);
    }

    #[test]
    fn invalid_node_names_fail_without_touching_anything() {
        assert!(validate_node_name("").unwrap_err().contains("empty"));
        assert!(validate_node_name("Node_1").is_err());
        assert!(validate_node_name("-a").is_err());
        assert!(validate_node_name("a..b").is_err());
        assert!(validate_node_name(&"a".repeat(254)).is_err());
        assert!(validate_node_name("worker-1.example.com").is_ok());
        let mut obj = nm("nm", "");
        assert!(matches!(entry(&obj), Entry::InvalidNodeName(_)));
        obj.spec.node_name = "ok".into();
        assert_eq!(entry(&obj), Entry::Maintain);
        let step = invalid_node_name(
            &NodeMaintenanceStatus::default(),
            "",
            "it is empty",
            GEN,
            t(0),
        );
        assert_eq!(step.status.phase, Some(MaintenancePhase::Failed));
        assert_eq!(
            step.status.last_error.as_deref(),
            Some(
                "resource name may not be empty: invalid nodeName, it is empty; no node was changed"
            )
        );
        assert_eq!(reasons(&step.events), vec!["FailedMaintenance"]);
        assert!(
            invalid_node_name_error("doesNotExist", "it is not a valid node name")
                .starts_with(r#"nodes "doesNotExist" not found"#)
        );
        assert!(
            invalid_node_name(&step.status, "", "it is empty", GEN, t(5))
                .events
                .is_empty()
        );
    }

    /// `docs/drain-contract.md` §7: a valid node name of 251 characters has no valid lease name; the
    /// maintenance fails at once, saying so, and the plan touches no node and no lease.
    #[test]
    fn a_node_name_too_long_for_its_lease_fails_without_touching_anything() {
        let long = format!("{}.example", "a".repeat(61) + &".b".repeat(91));
        assert_eq!(long.len(), 251);
        assert!(crate::api::validate_node_name(&long).is_ok());
        let why = validate_node_name(&long).unwrap_err();
        assert!(validate_node_name(&"a".repeat(248)).is_ok());
        let obj = nm("nm", &long);
        assert_eq!(entry(&obj), Entry::InvalidNodeName(why.clone()));
        let text = invalid_node_name_error(&long, &why);
        assert!(
            text.starts_with(
                "invalid nodeName, its medik8s lease name node-<nodeName> would have 256 characters"
            ) && text.ends_with("; no node was changed"),
            "{text}"
        );
        let step = invalid_node_name(&NodeMaintenanceStatus::default(), &long, &why, GEN, t(0));
        assert_eq!(step.status.phase, Some(MaintenancePhase::Failed));
        assert_eq!(step.status.last_error.as_deref(), Some(text.as_str()));
        assert_eq!(reasons(&step.events), vec!["FailedMaintenance"]);
    }

    #[test]
    fn drain_progress_is_clamped_and_never_negative() {
        assert_eq!(drain_progress(2, 1), 50);
        assert_eq!(drain_progress(3, 1), 66);
        assert_eq!(drain_progress(2, 5), 0);
        assert_eq!(drain_progress(0, 3), 0);
        assert_eq!(drain_progress(2, 0), 100);
        // And through a pass where more pods are pending than were counted at the start.
        let s0 = init_status(
            &NodeMaintenanceStatus::default(),
            &survey(&["a"]),
            GEN,
            t(0),
        )
        .unwrap();
        let rep = report(
            &["a", "b", "c"],
            &[("a", reason::PDB), ("b", reason::PDB), ("c", reason::PDB)],
            &[],
        );
        let (s, _, _) = pass(&s0, LeaseObservation::Held, &rep, t(1));
        assert_eq!(s.drain_progress, Some(0));
    }

    #[test]
    fn blocked_pass_requeues_at_the_first_per_pod_retry_and_names_skipped_pods_once() {
        let s0 = running_with_two();
        let mut rep = report(&["test-pod-1"], &[("test-pod-1", reason::PDB)], &[]);
        rep.retry_in = Some(Duration::from_millis(4900));
        let skipped = drain::skipped_entry(&PodReference {
            namespace: "test-namespace".into(),
            name: "tolerant".into(),
        });
        rep.skipped = vec![skipped.clone()];
        rep.newly_skipped = vec![skipped];
        let step = drained(&s0, &rep, GEN, t(1));
        assert_eq!(step.requeue, Requeue::Fixed(Duration::from_millis(4900)));
        assert_eq!(reasons(&step.events), vec![event::POD_SKIPPED]);
        let cond = step.status.conditions.as_ref().unwrap();
        let drained_cond = cond.iter().find(|c| c.type_ == condition::DRAINED).unwrap();
        assert!(
            drained_cond
                .message
                .ends_with("; not evicted: test-namespace/tolerant (ToleratesMaintenanceTaints)"),
            "{}",
            drained_cond.message
        );
        // Announced already: no second event; a retry due at once is not a busy loop.
        rep.newly_skipped.clear();
        rep.retry_in = Some(Duration::ZERO);
        let again = drained(&step.status, &rep, GEN, t(2));
        assert!(again.events.is_empty());
        assert_eq!(again.requeue, Requeue::Fixed(Duration::from_millis(200)));
        assert!(!needs_write(&step.status, &again.status, &[]));
    }

    #[test]
    fn blocked_pass_records_blockers_and_requeues_with_the_fixed_duration() {
        let s0 = running_with_two();
        let rep = report(
            &["test-pod-1", "test-pod-2"],
            &[
                ("test-pod-1", reason::PDB),
                ("test-pod-2", reason::TERMINATING),
            ],
            &[
                "error when evicting pods/\"test-pod-1\" -n \"test-namespace\": Cannot evict pod as it would violate the pod's disruption budget.",
            ],
        );
        let (s, ev, rq) = pass(&s0, LeaseObservation::Held, &rep, t(1));
        assert!(ev.is_empty());
        assert_eq!(rq, Requeue::Fixed(REQUEUE_BLOCKED));
        assert_eq!(s.phase, Some(MaintenancePhase::Running));
        assert_eq!(
            s.pending_pods,
            Some(vec!["test-pod-1".to_string(), "test-pod-2".to_string()])
        );
        assert_eq!(s.blockers.as_ref().unwrap().len(), 2);
        assert_eq!(s.drain_progress, Some(0));
        assert!(
            s.last_error
                .as_deref()
                .unwrap()
                .starts_with("error when evicting pods/\"test-pod-1\"")
        );
        let drained_cond = s
            .conditions
            .as_ref()
            .unwrap()
            .iter()
            .find(|c| c.type_ == condition::DRAINED)
            .unwrap();
        assert_eq!(
            (drained_cond.status.as_str(), drained_cond.reason.as_str()),
            ("False", "EvictionBlocked")
        );
        // Only terminating left: short requeue, lastError cleared.
        let rep = report(&["test-pod-2"], &[("test-pod-2", reason::TERMINATING)], &[]);
        let (s, _, rq) = pass(&s, LeaseObservation::Held, &rep, t(2));
        assert_eq!(rq, Requeue::Fixed(REQUEUE_TERMINATING));
        assert_eq!((s.drain_progress, s.last_error.as_ref()), (Some(50), None));
    }

    #[test]
    fn lease_ownership_comes_from_the_condition_not_the_progress() {
        // drainProgress > 0 without ever holding the lease (e.g. pods left on their own): not counted.
        let mut s = running_with_two();
        s.drain_progress = Some(50);
        let LeaseStep::Wait(step) = lease_result(&s, &already_held(), false, GEN, t(1)) else {
            panic!()
        };
        assert_eq!(step.status.error_on_lease_count.unwrap_or(0), 0);
        // Held with drainProgress 0 (nothing evicted yet), then lost: counted.
        let LeaseStep::Proceed(held) = lease_result(
            &running_with_two(),
            &LeaseObservation::Held,
            false,
            GEN,
            t(1),
        ) else {
            panic!()
        };
        assert!(held_lease_before(&held));
        let LeaseStep::Wait(step) = lease_result(&held, &already_held(), false, GEN, t(2)) else {
            panic!()
        };
        assert_eq!(step.status.error_on_lease_count, Some(1));
        assert!(held_lease_before(&step.status));
    }

    #[test]
    fn lease_wait_doubles_up_to_thirty_seconds() {
        assert_eq!(lease_wait(0), Duration::from_secs(2));
        assert_eq!(lease_wait(1), Duration::from_secs(4));
        assert_eq!(lease_wait(3), Duration::from_secs(16));
        assert_eq!(lease_wait(4), Duration::from_secs(30));
        assert_eq!(lease_wait(100), Duration::from_secs(30));
    }

    #[test]
    fn reapplied_maintenance_is_reported_with_what_was_undone() {
        let (s, ev) = entered(
            &running_with_two(),
            "node01",
            &["cordon", "medik8s.io/drain taint"],
            GEN,
            t(1),
        );
        assert_eq!(ev.len(), 1);
        assert!(ev[0].warning);
        assert_eq!(ev[0].reason, "MaintenanceReapplied");
        assert_eq!(
            ev[0].message,
            "Re-applied maintenance to node node01: cordon, medik8s.io/drain taint had been removed"
        );
        let (_, ev) = entered(&s, "node01", &[], GEN, t(2));
        assert!(ev.is_empty());
    }

    #[test]
    fn conditions_keep_their_transition_time_until_the_status_flips() {
        let mut s = NodeMaintenanceStatus::default();
        set_condition(&mut s, "Drained", false, "A", "m", GEN, t(0));
        set_condition(&mut s, "Drained", false, "B", "m2", GEN, t(10));
        let c = &s.conditions.as_ref().unwrap()[0];
        assert_eq!((c.last_transition_time.0, c.reason.as_str()), (t(0), "B"));
        set_condition(&mut s, "Drained", true, "C", "m3", GEN, t(20));
        assert_eq!(
            s.conditions.as_ref().unwrap()[0].last_transition_time.0,
            t(20)
        );
    }

    #[test]
    fn status_patch_nulls_every_cleared_field() {
        let s = NodeMaintenanceStatus {
            phase: Some(MaintenancePhase::Succeeded),
            drain_progress: Some(100),
            ..Default::default()
        };
        let p = status_patch(&s, Some("42"));
        assert_eq!(p["metadata"]["resourceVersion"], "42");
        assert_eq!(p["status"]["phase"], "Succeeded");
        assert_eq!(p["status"]["lastError"], serde_json::Value::Null);
        assert!(p["status"].as_object().unwrap().contains_key("pendingPods"));
        // Every field of the type is covered.
        let full = serde_json::to_value(NodeMaintenanceStatus {
            phase: Some(MaintenancePhase::Running),
            drain_progress: Some(1),
            last_update: Some(now_time(t(0))),
            last_error: Some("e".into()),
            pending_pods: Some(vec![]),
            pending_pods_refs: Some(vec![]),
            total_pods: Some(1),
            eviction_pods: Some(1),
            error_on_lease_count: Some(1),
            blockers: Some(vec![]),
            drain_start_time: Some(now_time(t(0))),
            observed_generation: Some(1),
            conditions: Some(vec![]),
        })
        .unwrap();
        for k in full.as_object().unwrap().keys() {
            assert!(
                STATUS_FIELDS.contains(&k.as_str()),
                "{k} missing from STATUS_FIELDS"
            );
        }
        assert_eq!(status_patch(&s, None).get("metadata"), None);
    }
}
