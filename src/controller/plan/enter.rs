//! The node entered ([`PassStep::Enter`](super::maintenance::PassStep): cordon, taints, label, our
//! record and the drain's start in one patch) and recorded on the NodeMaintenance (`Record`),
//! with their status: entered, or held by another NodeMaintenance.

use std::time::Duration;

use super::condition::{self, Stamp, set_condition};
use super::pass::{Flow, Pass};
use super::record::entered_record;
use super::status::{PlannedEvent, Requeue, Step, event, not_cordoned};
use super::timeline::{self, StartRecord};
use super::write::{NodePurpose, Write};
use crate::api::{MaintenancePhase, NodeMaintenanceStatus, Stage};
use crate::node::{self, EnterPlan};

/// Re-check while another NodeMaintenance holds the node.
pub(crate) const REQUEUE_HELD_BY_OTHER: Duration = Duration::from_secs(30);

impl Pass<'_> {
    pub(super) fn enter(&mut self) -> Flow {
        let (at, node_name) = (self.at(), self.node_name());
        let Some(node) = self.node else {
            return Flow::Continue(());
        };
        let holder_live = self.m.holder_live;
        let live = |_: &str, _: Option<&str>| holder_live;
        let reason = self.o.nm.spec.reason.as_deref();
        let (plan, outcome) = node::plan_enter_for(node, self.me(), reason, &live);
        // The drain starts with the first pass that drains (stage Drain, a slot held), by the
        // API server's clock (the one that stamps the pods it is compared with); the
        // operator's only when the answer carried no `Date`.
        let drains = self.drain_policy.stage == Stage::Drain
            && !self.timeline.queued
            && self.status.phase != Some(MaintenancePhase::Succeeded);
        let drains = super::pre_drain_hooks::may_start(drains, &self.drain_policy.hooks);
        let recorded = node::drain_started(node);
        let entering = node::records_start(&outcome);
        let record = timeline::start_record(drains, entering, recorded, self.server_now());
        self.timeline.drain_started = match record {
            StartRecord::Set(t) => Some(t),
            StartRecord::Clear => None,
            StartRecord::Keep => recorded,
        };
        let (patch, repaired) = match plan {
            EnterPlan::HeldBy(other) => {
                let step = held_by_other(&self.status, node_name, &other, at);
                return Flow::Break(self.end_remembering(step));
            }
            EnterPlan::Unchanged => (None, Vec::new()),
            EnterPlan::Apply { patch, repaired } => (Some(patch), repaired),
        };
        if let Some(patch) = timeline::with_start(node, patch, record) {
            self.w.push(Write::Node {
                name: node_name.to_owned(),
                patch,
                purpose: NodePurpose::Enter(outcome),
            });
        }
        self.repaired = repaired;
        Flow::Continue(())
    }

    pub(super) fn record(&mut self) -> Flow {
        let Some(node) = self.node else {
            return Flow::Continue(());
        };
        if let Some(patch) = entered_record(&self.o.nm, node) {
            self.w.push(Write::Annotations {
                patch,
                required: false,
            });
        }
        let (status, events) = entered(&self.status, self.node_name(), &self.repaired, self.at());
        self.status = status;
        self.w.events(events, self.node);
        Flow::Continue(())
    }
}

/// Another NodeMaintenance holds the node: this one does not drain; its status names the holder.
pub(crate) fn held_by_other(
    old: &NodeMaintenanceStatus,
    node: &str,
    other: &str,
    at: Stamp,
) -> Step {
    let mut s = old.clone();
    let msg = format!(
        "node {node} is held by NodeMaintenance {other}; this one takes over when that one is deleted"
    );
    s.last_error = Some(msg.clone());
    let cordoned = ("HeldByOtherMaintenance", msg);
    not_cordoned(
        s,
        Vec::new(),
        cordoned,
        Requeue::After(REQUEUE_HELD_BY_OTHER),
        at,
    )
}

/// The node is in maintenance for us. `repaired` lists what someone had undone and we re-applied
/// (a Warning `MaintenanceReapplied` event names it).
pub(crate) fn entered(
    old: &NodeMaintenanceStatus,
    node: &str,
    repaired: &[&str],
    at: Stamp,
) -> (NodeMaintenanceStatus, Vec<PlannedEvent>) {
    let mut s = old.clone();
    set_condition(
        &mut s,
        condition::CORDONED,
        true,
        "NodeCordoned",
        "the node is cordoned, tainted medik8s.io/drain:NoSchedule and \
         node.kubernetes.io/unschedulable:NoSchedule, and excluded from remediation",
        at,
    );
    let mut events = Vec::new();
    if !repaired.is_empty() {
        events.push(PlannedEvent::warning(
            event::REAPPLIED,
            format!(
                "Re-applied maintenance to node {node}: {} had been removed",
                repaired.join(", ")
            ),
        ));
    }
    (s, events)
}
