//! The maintenance pass (upstream's reconcile, docs/design.md §1) as an ordered list of named
//! steps ([`PassStep`]): the node entered before restored when `spec.nodeName` moved, the node
//! name checked, the status initialised before the node is touched, the node found, the lease
//! and its ownership recorded before entering, the node entered (its record, the drain's start
//! among it, in the same patch), the entered node recorded on the NodeMaintenance (best effort),
//! the policy and the deadline in status, the drain slot, then the drain round. A step either
//! hands over to the next or ends the pass with its plan; the steps a pass runs are its stage's
//! (`steps.rs`).

use std::ops::ControlFlow;
use std::time::Duration;

use super::pass::{Flow, Pass};
use super::status::REQUEUE_SUCCEEDED;
use super::steps::{PassStep, pass_steps};
use super::{Observed, ObservedMaintenance, Plan, Then};

/// The maintenance pass: runs the steps of its stage ([`steps`]) in order until one ends the
/// pass; a list that ends before
/// [`PassStep::Drain`] holds what it reached and comes back after [`REQUEUE_SUCCEEDED`] (the
/// lease renewed well within its 3600 s). `invalid` says why `spec.nodeName` cannot name a node.
pub(super) fn plan_maintenance(
    o: &Observed,
    m: &ObservedMaintenance,
    invalid: Option<&str>,
    now: jiff::Timestamp,
) -> Plan {
    let mut pass = Pass::new(o, m, invalid, now);
    for step in pass_steps(pass.drain_policy.stage, pass.waits, pass.aborted) {
        if let ControlFlow::Break(plan) = pass.run(*step) {
            return plan;
        }
    }
    // Back when the window opens (a second late: the API server's clock counts whole seconds).
    let opens = pass.window.and_then(|t| {
        let until = t.duration_since(pass.server_now()) + jiff::SignedDuration::from_secs(1);
        Duration::try_from(until).ok()
    });
    pass.hold(opens.map_or(REQUEUE_SUCCEEDED, |d| d.min(REQUEUE_SUCCEEDED)))
}

impl Pass<'_> {
    /// Runs `step` (each in the file named for it).
    fn run(&mut self, step: PassStep) -> Flow {
        match step {
            PassStep::Moved => self.moved(),
            PassStep::NodeName => self.node_name_valid(),
            PassStep::StatusInit => self.status_init(),
            PassStep::NodePresent => self.node_present(),
            PassStep::Stage => self.stage(),
            PassStep::Release => self.release(),
            PassStep::Lease => self.lease(),
            PassStep::Enter => self.enter(),
            PassStep::Record => self.record(),
            PassStep::NodeConditions => self.node_conditions(),
            PassStep::Policy => self.policy(),
            PassStep::Deadline => self.deadline(),
            PassStep::Queue => self.queue(),
            PassStep::Blockers => Flow::Break(self.round(Then::Preflight)),
            PassStep::Expire => self.expire(),
            PassStep::NodeShutdown => self.node_shutdown(),
            PassStep::Drain => self.drain(),
        }
    }
}
