//! The node found: `spec.nodeName` usable ([`PassStep::NodeName`](super::maintenance::PassStep)), the
//! node there and the machine entered under that name (`NodePresent`), with each failure's
//! status; the drain's deadline is read once the node is found.

use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;

use super::abort;
use super::condition::Stamp;
use super::maintenance::{PassStep, steps};
use super::pass::{Flow, Pass};
use super::record::provider_id;
use super::release::invalidate;
use super::status::{PlannedEvent, Requeue, Step, event, fail_with, is_terminal, not_cordoned};
use super::timeline::{self, Timeline};
use super::volume_detach;
use crate::api::{MaintenancePhase, NodeMaintenance, NodeMaintenanceStatus};
use crate::node;

/// Re-check while the node does not exist (the Node watch usually comes first).
pub(crate) const REQUEUE_NODE_MISSING: Duration = Duration::from_secs(30);

/// Re-check of a NodeMaintenance with an invalid nodeName (the webhook forbids editing it, so
/// this is only a safety net).
pub(crate) const REQUEUE_INVALID: Duration = Duration::from_secs(300);

impl Pass<'_> {
    pub(super) fn node_name_valid(&mut self) -> Flow {
        let Some(why) = self.invalid else {
            return Flow::Continue(());
        };
        let step = invalid_node_name(&self.status, self.node_name(), why, self.at());
        Flow::Break(self.end(step))
    }

    pub(super) fn node_present(&mut self) -> Flow {
        let (at, node_name) = (self.at(), self.node_name());
        let Some(node) = self.m.node.as_ref() else {
            let step = node_missing(&self.status, node_name, at);
            return Flow::Break(self.end(step));
        };
        self.node = Some(node);
        if let Some(replaced) = replaced(&self.o.nm, node) {
            // Another machine under the name entered: nothing on it is ours to touch, and no
            // lease is taken for it. Ours, still held for the machine that left, is given up
            // unless a maintenance entered the new one (its holder record), which may be
            // renewing it.
            let step = node_replaced(&self.status, node_name, &replaced, at);
            self.w.status(&step.status);
            if node::observe(node).holder.is_none() {
                invalidate(&mut self.w, self.m.lease.as_ref());
            }
            return Flow::Break(self.end(step));
        }
        // The deadline counts from the drain's start (`timeline::deadline_start`); a maintenance
        // it failed stays Failed while the policy says so (an edit of the policy resumes it).
        let server_now = self.server_now();
        self.timeline = Timeline::of(
            &self.o.nm,
            &self.status,
            Some(node),
            self.place.as_ref(),
            server_now,
        );
        let p = &mut self.drain_policy;
        if steps(p.stage).contains(&PassStep::Deadline) && !self.aborted {
            p.deadline_start = timeline::deadline_start(&self.timeline);
            self.overdue = p.overdue(p.deadline_start, server_now);
            // At the drain's deadline, or at the bound of the wait for volumes to detach.
            self.failing = volume_detach::failing(self.overdue, &self.status, p, server_now);
        }
        // Aborted at the deadline: recorded first; the next pass releases the node (`abort.rs`).
        let p = &self.drain_policy;
        let deadline = (p.deadline(p.deadline_start), p.drain_timeout);
        if let Some(step) = abort::at_deadline(&self.status, self.overdue, deadline, at) {
            return Flow::Break(self.end(step));
        }
        if !self.failing && !self.aborted {
            self.status = node_present(&self.status);
        }
        Flow::Continue(())
    }
}

/// The NodeMaintenance names an invalid node: phase Failed, a lastError that says so, Warning
/// `FailedMaintenance` on the transition; no node or lease is touched.
pub(crate) fn invalid_node_name(
    old: &NodeMaintenanceStatus,
    node: &str,
    why: &str,
    at: Stamp,
) -> Step {
    let error = invalid_node_name_error(node, why);
    let cordoned = ("InvalidNodeName", "spec.nodeName is invalid".to_owned());
    let requeue = REQUEUE_INVALID;
    failed(old, Vec::new(), error, cordoned, requeue, at)
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
pub(crate) fn node_missing(old: &NodeMaintenanceStatus, node: &str, at: Stamp) -> Step {
    let error = format!("nodes \"{node}\" not found");
    let cordoned = (
        "NodeNotFound",
        format!("node {node} does not exist; maintenance resumes when it appears"),
    );
    let requeue = REQUEUE_NODE_MISSING;
    failed(old, Vec::new(), error, cordoned, requeue, at)
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
    at: Stamp,
) -> Step {
    let mut events = Vec::new();
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
        events.push(PlannedEvent::warning(event::NODE_REPLACED, text.clone()));
    }
    let cordoned = ("NodeReplaced", text.clone());
    let requeue = REQUEUE_NODE_MISSING;
    failed(old, events, text, cordoned, requeue, at)
}

/// Phase Failed with `error` in `lastError` and `Cordoned=False` (`cordoned`: reason and
/// message), after `events`: a node this maintenance cannot maintain; back after `requeue`.
fn failed(
    old: &NodeMaintenanceStatus,
    mut events: Vec<PlannedEvent>,
    error: String,
    cordoned: (&str, String),
    requeue: Duration,
    at: Stamp,
) -> Step {
    let mut s = old.clone();
    fail_with(old, &mut s, &mut events, error);
    not_cordoned(s, events, cordoned, Requeue::After(requeue), at)
}

/// The node exists: a maintenance that failed because it was missing is Running again.
pub(crate) fn node_present(status: &NodeMaintenanceStatus) -> NodeMaintenanceStatus {
    let mut s = status.clone();
    if s.phase == Some(MaintenancePhase::Failed) && !is_terminal(&s) {
        s.phase = Some(MaintenancePhase::Running);
    }
    s
}

/// A Node under the name `nm` entered that is another machine: the providerID `nm` recorded
/// ([`crate::api::ENTERED_NODE_PROVIDER_ID_ANNOTATION`]) for that name, and the one `node` has
/// (empty when none).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Replaced {
    /// The providerID of the node entered.
    pub(crate) entered: String,
    /// The providerID of the node found under its name now.
    pub(crate) found: String,
}

/// Whether `node` is another machine than the one `nm` entered under its name: `nm` recorded a
/// non-empty providerID for that name and `node`'s differs (or is empty). No record, an empty
/// one (the node had none) or the same providerID is the same machine, which resumes
/// (docs/drain-contract.md §3). The uid is no test: the same machine registering again is a new
/// Node object. A node that registers before its cloud controller sets the providerID is taken
/// for another until it shows the recorded one; the check is made on every pass, so it then
/// resumes.
pub(crate) fn replaced(nm: &NodeMaintenance, node: &Node) -> Option<Replaced> {
    let annotations = nm.annotations();
    if annotations.get(crate::api::ENTERED_NODE_ANNOTATION) != node.metadata.name.as_ref() {
        return None;
    }
    let entered = annotations
        .get(crate::api::ENTERED_NODE_PROVIDER_ID_ANNOTATION)
        .filter(|p| !p.is_empty())?;
    let found = provider_id(node);
    (entered != found).then(|| Replaced {
        entered: entered.clone(),
        found: found.to_owned(),
    })
}
