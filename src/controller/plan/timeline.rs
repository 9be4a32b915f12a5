//! A maintenance's timeline: the moments that matter, read from where each one is recorded, and
//! the four questions asked of them ([`deadline_start`], [`arrival`], [`expires`],
//! [`holds_slot`]), each answered here once (docs/drain-contract.md §11).
//!
//! | Moment | Recorded as | Clock |
//! |---|---|---|
//! | created | `metadata.creationTimestamp` | the API server's |
//! | entered | `Cordoned=True`, its `lastTransitionTime` | the operator's |
//! | drain started | the Node's `nodemaintenance.medik8s.io/drain-started` | the API server's (`Date` of the node read) |
//! | slot got | `DrainQueued=False`, its `lastTransitionTime` | the operator's |
//! | drain ended | `Drained=True` while `Succeeded`, its `lastTransitionTime` | the operator's |
//! | released | `Cordoned=False` reason `Released`, its `lastTransitionTime` | the operator's |
//!
//! The drain starts when stage Drain first applies to a node entered for this maintenance and
//! it holds a drain slot ([`start_record`]): not when a stage Cordon entered it, nor while it
//! waits in the queue. The start lives on the Node, so it survives a restart of the operator,
//! and goes with the node's record on exit: a Drain → Idle → Drain round trip starts a new
//! drain, while pause, and Drain → Cordon → Drain (the node never left maintenance), keep it.
//! Release also ends the drain's end ([`release`]): `Drained` turns False, so the next drain's
//! success is a new transition and expiry counts from it.

use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;

use super::condition::{self, Stamp, condition, set_condition};
use super::status::REQUEUE_SUCCEEDED;
use crate::api::{MaintenancePhase, NodeMaintenance, NodeMaintenanceStatus};
use crate::controller::queue::Place;

/// The moments of one maintenance, as one pass reads them (`None`: not (yet) recorded).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Timeline {
    /// The NodeMaintenance's creation.
    pub(crate) created: Option<jiff::Timestamp>,
    /// The node entered (cordoned) for it, while it is.
    pub(crate) entered: Option<jiff::Timestamp>,
    /// The drain started: the start recorded on the node (whole seconds).
    pub(crate) drain_started: Option<jiff::Timestamp>,
    /// It waits for a drain slot now (its place in the queue, as this pass observed it).
    pub(crate) queued: bool,
    /// Its last pass found it waiting for a drain slot (`DrainQueued=True`).
    pub(crate) waiting: bool,
    /// It got its drain slot after it waited for one (`None`: it never waited).
    pub(crate) slot_got: Option<jiff::Timestamp>,
    /// The drain ended: it Succeeded, and the node was not released since.
    pub(crate) drain_ended: Option<jiff::Timestamp>,
    /// A stage short of Cordon released the node (`None` while it is held, or never was).
    pub(crate) released: Option<jiff::Timestamp>,
}

impl Timeline {
    /// The timeline of `nm` with `status` (the pass's, which may be ahead of `nm`'s), the node as
    /// read (`None`: not read or missing) and its place in the drain budget (`None`: no budget).
    /// `now` stands for the slot's moment when the last pass found it waiting and it holds one
    /// now (the pass that records `DrainQueued=False`).
    pub(crate) fn of(
        nm: &NodeMaintenance,
        status: &NodeMaintenanceStatus,
        node: Option<&Node>,
        queue: Option<&Place>,
        now: jiff::Timestamp,
    ) -> Self {
        let at = |type_: &str, value: &str| {
            condition(status, type_)
                .filter(|c| c.status == value)
                .map(|c| c.last_transition_time.0)
        };
        let queued = is_queued(queue);
        let slot_got = condition(status, condition::DRAIN_QUEUED).map(|c| {
            if c.status == "True" {
                now
            } else {
                c.last_transition_time.0
            }
        });
        Timeline {
            created: nm.metadata.creation_timestamp.as_ref().map(|t| t.0),
            entered: at(condition::CORDONED, "True"),
            drain_started: node.and_then(crate::node::drain_started),
            queued,
            waiting: condition(status, condition::DRAIN_QUEUED).is_some_and(|c| c.status == "True"),
            slot_got: slot_got.filter(|_| !queued),
            drain_ended: at(condition::DRAINED, "True")
                .filter(|_| status.phase == Some(MaintenancePhase::Succeeded)),
            released: condition(status, condition::CORDONED)
                .filter(|c| c.status == "False" && c.reason == condition::RELEASED)
                .map(|c| c.last_transition_time.0),
        }
    }

    /// The timeline of `nm` as the NodeMaintenance alone records it, for the drain queue, which
    /// reads no node: its drain started once its first round wrote `Drained` (a round runs only
    /// with a slot), until release turns it False with reason [`condition::RELEASED`]
    /// ([`release`]); the moment stands in for the start (whole seconds, the operator's clock,
    /// the round's end). `None` on a CRD that prunes conditions.
    pub(crate) fn recorded(nm: &NodeMaintenance, now: jiff::Timestamp) -> Self {
        let status = nm.status.clone().unwrap_or_default();
        let mut t = Timeline::of(nm, &status, None, None, now);
        t.drain_started = condition(&status, condition::DRAINED)
            .filter(|c| c.reason != condition::RELEASED)
            .map(|c| c.last_transition_time.0);
        t
    }

    /// When this drain's evictions began: the later of the start recorded on the node and the
    /// moment a waiting maintenance got its slot (a node entered while it waited, by a version
    /// that recorded the start at entry, carries the earlier one).
    fn began(&self) -> Option<jiff::Timestamp> {
        let started = self.drain_started?;
        Some(self.slot_got.map_or(started, |s| s.max(started)))
    }
}

/// When the drain's deadline (`drainTimeout`) counts from: when this drain began
/// ([`Timeline::began`]); `None` while it waits for a slot or before its drain started (stage
/// Cordon, or the node not entered yet): no deadline then.
pub(crate) fn deadline_start(t: &Timeline) -> Option<jiff::Timestamp> {
    if t.queued {
        return None;
    }
    t.began()
}

/// What a pod's creation is compared with to tell a replacement that arrived after the drain
/// started (kept when it tolerates both maintenance taints, docs/drain-contract.md §2) from a pod
/// that was there before (evicted): when this drain began, so a pod scheduled onto the node while
/// it sat cordoned in stage Cordon or in the queue was there before. `None`: unknown (no pod
/// counts as arrived after it).
pub(crate) fn arrival(t: &Timeline) -> Option<jiff::Timestamp> {
    t.began()
}

/// When the pass of a maintenance that sends no eviction (paused, hooked, queued) comes back:
/// at its deadline (`policy`'s, by the API server's clock `now`), where the pass applies
/// onTimeout, or after [`REQUEUE_SUCCEEDED`] (the lease renewed) when that is sooner or there is
/// none (no start: a held drain has not started).
pub(crate) fn held_requeue(
    policy: &crate::policy::DrainPolicy,
    now: jiff::Timestamp,
) -> std::time::Duration {
    let until_deadline = policy
        .deadline(policy.deadline_start)
        .and_then(|d| std::time::Duration::try_from(d.duration_since(now)).ok())
        .filter(|d| !d.is_zero());
    until_deadline.map_or(REQUEUE_SUCCEEDED, |d| d.min(REQUEUE_SUCCEEDED))
}

/// When a Succeeded maintenance expires: this drain's end plus `after` (`expireAfter`); `None`
/// while it has not ended (or its end is not recorded: a CRD that prunes conditions), or out of
/// jiff's range.
pub(crate) fn expires(t: &Timeline, after: std::time::Duration) -> Option<jiff::Timestamp> {
    t.drain_ended?
        .checked_add(jiff::SignedDuration::try_from(after).ok()?)
        .ok()
}

/// Whether the maintenance holds a slot of the drain budget (`--max-parallel-drains`): from its
/// drain's start (recorded only with a slot) until its node is released, Succeeded or not. A
/// start recorded while its last pass found it waiting is an earlier version's entry of a
/// waiting maintenance, which holds none.
pub(crate) fn holds_slot(t: &Timeline) -> bool {
    t.drain_started.is_some() && !t.waiting && t.released.is_none()
}

/// The place in the drain budget a pass of `nm` acts on: the `observed` one, except that a
/// maintenance that holds its slot ([`holds_slot`], read with its `node`) drains whatever the
/// queue's order says (a node is not released mid-drain).
pub(crate) fn place(
    nm: &NodeMaintenance,
    status: &NodeMaintenanceStatus,
    node: Option<&Node>,
    observed: Option<&Place>,
) -> Option<Place> {
    let held = || {
        holds_slot(&Timeline::of(
            nm,
            status,
            node,
            None,
            jiff::Timestamp::UNIX_EPOCH,
        ))
    };
    match observed {
        Some(Place::Queued { .. }) if held() => Some(Place::Draining),
        p => p.cloned(),
    }
}

/// Whether `place` waits for a drain slot.
pub(crate) fn is_queued(place: Option<&Place>) -> bool {
    matches!(place, Some(Place::Queued { .. }))
}

/// [`holds_slot`] of what `nm` records ([`Timeline::recorded`]): the drain queue's reading.
pub(crate) fn holds(nm: &NodeMaintenance) -> bool {
    holds_slot(&Timeline::recorded(nm, jiff::Timestamp::UNIX_EPOCH))
}

/// What the enter step records on the node as the drain's start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StartRecord {
    /// Leave the annotation as it is.
    Keep,
    /// Record this start (whole seconds).
    Set(jiff::Timestamp),
    /// Remove it: the node is entered without draining (a vanished holder's start taken over).
    Clear,
}

/// What the enter step records: `drains` (stage Drain, a slot held, not Succeeded) records
/// `now` (the API server's time of the node read) when the node is entered afresh (`entering`:
/// a first entry or a takeover) or carries no start; a pass that does not drain records none
/// when it enters afresh; otherwise the start recorded stays.
pub(crate) fn start_record(
    drains: bool,
    entering: bool,
    recorded: Option<jiff::Timestamp>,
    now: jiff::Timestamp,
) -> StartRecord {
    match (drains, entering || recorded.is_none()) {
        (true, true) => StartRecord::Set(crate::node::whole_seconds(now)),
        (false, true) if entering => StartRecord::Clear,
        _ => StartRecord::Keep,
    }
}

/// `record` applied to the enter step's patch of `node` (`Some`), or as a patch of its own when
/// the node needed none (`None` in, a patch out when `record` changes something): the annotation
/// under the node's resourceVersion, read by the pass.
pub(crate) fn with_start(
    node: &Node,
    patch: Option<serde_json::Value>,
    record: StartRecord,
) -> Option<serde_json::Value> {
    let value = match record {
        StartRecord::Keep => return patch,
        StartRecord::Set(t) => serde_json::Value::from(t.to_string()),
        StartRecord::Clear if crate::node::drain_started(node).is_none() => return patch,
        StartRecord::Clear => serde_json::Value::Null,
    };
    let mut patch = patch.unwrap_or_else(
        || serde_json::json!({"metadata": {"resourceVersion": node.resource_version()}}),
    );
    patch["metadata"]["annotations"][crate::node::DRAIN_STARTED_ANNOTATION] = value;
    Some(patch)
}

/// The drain given up with the node (stage Idle or Preflight, or waiting in the queue): a
/// `Drained` condition turns False with reason [`condition::RELEASED`], so the next drain is a
/// new one: the success its expiry counts from is a new transition, and the drain queue no
/// longer counts it as holding a slot ([`Timeline::recorded`]).
pub(crate) fn release(status: &NodeMaintenanceStatus, at: Stamp) -> NodeMaintenanceStatus {
    let mut s = status.clone();
    // The start went with the node's record: the next drain has its own.
    s.drain_start_time = None;
    if condition(status, condition::DRAINED).is_some_and(|c| c.reason != condition::RELEASED) {
        set_condition(
            &mut s,
            condition::DRAINED,
            false,
            condition::RELEASED,
            "the node is not in maintenance (stage): the next drain starts afresh",
            at,
        );
    }
    s
}

#[cfg(test)]
mod tests;
