//! The maintenance pass (upstream's reconcile, docs/design.md §1) as an ordered list of named
//! steps ([`PassStep`]): the node entered before restored when `spec.nodeName` moved, the node
//! name checked, the status initialised before the node is touched, the node found, the lease
//! and its ownership recorded before entering, the node entered (its record, the drain's start
//! among it, in the same patch), the entered node recorded on the NodeMaintenance (best effort),
//! the policy and the deadline in status, the drain slot, then the drain round. A step either
//! hands over to the next or ends the pass with its plan. Every stage's list is a subsequence
//! of the order of [`PassStep`] (the `stage` knob, `crate::policy`; docs/design.md §1, "The
//! maintenance pass as steps"): Drain is today's (and upstream's) pass, Cordon stops before the
//! drain, Idle and Preflight release what an earlier stage held instead of taking it. Each
//! step's flow and status live in the file named for it.

use std::ops::ControlFlow;
use std::time::Duration;

use super::observed::{Observed, ObservedMaintenance};
use super::outcome::{Plan, Then};
use super::pass::{Flow, Pass};
use super::status::REQUEUE_SUCCEEDED;
use crate::api::Stage;

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

/// The steps of a maintenance pass, in the order they run. Each one either hands over to the
/// next or ends the pass with its plan.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PassStep {
    /// The node entered first, when `spec.nodeName` no longer names it, is restored and its
    /// record cleared; the pass ends (the next one starts over on the new node).
    Moved,
    /// An unusable `spec.nodeName` fails the maintenance; nothing is read or touched.
    NodeName,
    /// The status is initialised (phase Running, the pods counted) before the node is touched.
    StatusInit,
    /// The node exists and is the machine entered; the drain's deadline is read from it.
    NodePresent,
    /// The stage in status (the `stage` knob; phase Running short of Drain).
    Stage,
    /// A stage short of Cordon: the node restored as a delete would (uncordon, taints, label)
    /// and the lease given up, when they are ours.
    Release,
    /// The lease is requested and its ownership recorded in the status before entering.
    Lease,
    /// The node is entered: cordon, both taints, the label and our record in one patch.
    Enter,
    /// The entered node is recorded on the NodeMaintenance; re-applied marks are announced.
    Record,
    /// The Node lifecycle conditions (the `nodeConditions` knob), written on transitions.
    NodeConditions,
    /// The drain policy's conditions (paused, refused knob values).
    Policy,
    /// The drain's deadline; once passed with `onTimeout: Fail` the pass ends Failed.
    Deadline,
    /// The drain slot (`--max-parallel-drains`); the pass ends while it waits or is paused.
    Queue,
    /// The stage Preflight: the pass ends asking the node's evictions with a dry run.
    Blockers,
    /// `expireAfter` after Succeeded, the NodeMaintenance deletes itself (its deletion pass
    /// restores the node); until then the pass comes back when it is due.
    Expire,
    /// The node going down (`GracefulNodeShutdownInProgress=True`): no round, the status says
    /// why (`crate::drain::gate::node_shutdown`).
    NodeShutdown,
    /// One drain round; none once Succeeded.
    Drain,
}

/// The steps of stage Drain: today's (and upstream's) maintenance.
pub(crate) const DRAIN_STEPS: &[PassStep] = &[
    PassStep::Moved,
    PassStep::NodeName,
    PassStep::StatusInit,
    PassStep::NodePresent,
    PassStep::Stage,
    PassStep::Lease,
    PassStep::Enter,
    PassStep::Record,
    PassStep::NodeConditions,
    PassStep::Policy,
    PassStep::Deadline,
    PassStep::Queue,
    PassStep::Expire,
    PassStep::NodeShutdown,
    PassStep::Drain,
];

/// The steps of stage Cordon: Drain's up to the node entered and recorded, without an eviction.
pub(crate) const CORDON_STEPS: &[PassStep] = &[
    PassStep::Moved,
    PassStep::NodeName,
    PassStep::StatusInit,
    PassStep::NodePresent,
    PassStep::Stage,
    PassStep::Lease,
    PassStep::Enter,
    PassStep::Record,
    PassStep::NodeConditions,
    PassStep::Policy,
];

/// The steps of stage Idle: the node found, and released when a stage before held it.
pub(crate) const IDLE_STEPS: &[PassStep] = &[
    PassStep::Moved,
    PassStep::NodeName,
    PassStep::StatusInit,
    PassStep::NodePresent,
    PassStep::Stage,
    PassStep::Release,
    PassStep::NodeConditions,
    PassStep::Policy,
];

/// The steps of stage Preflight: Idle's, then what would block the drain.
pub(crate) const PREFLIGHT_STEPS: &[PassStep] = &[
    PassStep::Moved,
    PassStep::NodeName,
    PassStep::StatusInit,
    PassStep::NodePresent,
    PassStep::Stage,
    PassStep::Release,
    PassStep::NodeConditions,
    PassStep::Policy,
    PassStep::Blockers,
];

/// The steps of stage Drain while the maintenance waits for a drain slot
/// (`--max-parallel-drains`): Idle's, the node left in service (released when an earlier pass
/// held it), then the place in the queue, which ends the pass.
pub(crate) const QUEUED_STEPS: &[PassStep] = &[
    PassStep::Moved,
    PassStep::NodeName,
    PassStep::StatusInit,
    PassStep::NodePresent,
    PassStep::Stage,
    PassStep::Release,
    PassStep::NodeConditions,
    PassStep::Policy,
    PassStep::Queue,
];

/// The steps of a maintenance whose drain was aborted at its deadline (`onTimeout: Abort`,
/// `abort.rs`) while its stage is Cordon or Drain: Idle's without the stage's status (the phase
/// stays Failed): the node restored and the lease given up when they are still ours, nothing
/// taken.
pub(crate) const ABORTED_STEPS: &[PassStep] = &[
    PassStep::Moved,
    PassStep::NodeName,
    PassStep::StatusInit,
    PassStep::NodePresent,
    PassStep::Release,
    PassStep::NodeConditions,
    PassStep::Policy,
];

/// The steps a pass of `stage` runs, each list in the one order of [`PassStep`].
pub(crate) fn steps(stage: Stage) -> &'static [PassStep] {
    match stage {
        Stage::Drain => DRAIN_STEPS,
        Stage::Cordon => CORDON_STEPS,
        Stage::Idle => IDLE_STEPS,
        Stage::Preflight => PREFLIGHT_STEPS,
    }
}

/// The steps a pass of `stage` runs: [`ABORTED_STEPS`] while an abort is in force (`aborted`),
/// else [`QUEUED_STEPS`] while it `waits` for a drain slot.
pub(crate) fn pass_steps(stage: Stage, waits: bool, aborted: bool) -> &'static [PassStep] {
    match (aborted, waits) {
        (true, _) => ABORTED_STEPS,
        (false, true) => QUEUED_STEPS,
        (false, false) => steps(stage),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::ValueEnum;

    /// Every step, in the one order.
    const ORDER: &[PassStep] = &[
        PassStep::Moved,
        PassStep::NodeName,
        PassStep::StatusInit,
        PassStep::NodePresent,
        PassStep::Stage,
        PassStep::Release,
        PassStep::Lease,
        PassStep::Enter,
        PassStep::Record,
        PassStep::NodeConditions,
        PassStep::Policy,
        PassStep::Deadline,
        PassStep::Queue,
        PassStep::Blockers,
        PassStep::Expire,
        PassStep::NodeShutdown,
        PassStep::Drain,
    ];

    #[test]
    fn every_stage_runs_its_steps_in_the_one_order() {
        let lists = Stage::value_variants()
            .iter()
            .map(|s| (s.to_string(), steps(*s)));
        let others = [
            ("queued".to_string(), QUEUED_STEPS),
            ("aborted".to_string(), ABORTED_STEPS),
        ];
        for (stage, list) in lists.chain(others) {
            let mut rest = ORDER.iter();
            for step in list {
                assert!(
                    rest.any(|s| s == step),
                    "{stage}: {step:?} out of order in {list:?}"
                );
            }
        }
        // What each stage holds: only Cordon and Drain take the lease and enter the node,
        // only Idle and Preflight release them, only Drain evicts.
        let has = |stage, step| steps(stage).contains(&step);
        for stage in Stage::value_variants() {
            let holds = matches!(stage, Stage::Cordon | Stage::Drain);
            assert_eq!(has(*stage, PassStep::Lease), holds, "{stage}");
            assert_eq!(has(*stage, PassStep::Enter), holds, "{stage}");
            assert_eq!(has(*stage, PassStep::Release), !holds, "{stage}");
            assert_eq!(has(*stage, PassStep::Drain), *stage == Stage::Drain);
            assert_eq!(has(*stage, PassStep::Blockers), *stage == Stage::Preflight);
        }
        // Waiting for a slot holds nothing: the node is released, not entered.
        assert!(QUEUED_STEPS.contains(&PassStep::Release));
        assert!(
            !QUEUED_STEPS.contains(&PassStep::Enter) && !QUEUED_STEPS.contains(&PassStep::Lease)
        );
        // Aborted holds nothing either, whatever the stage, and keeps its phase (no Stage step).
        for stage in [Stage::Cordon, Stage::Drain] {
            let list = pass_steps(stage, false, true);
            assert!(list.contains(&PassStep::Release), "{stage}");
            for step in [
                PassStep::Lease,
                PassStep::Enter,
                PassStep::Stage,
                PassStep::Drain,
            ] {
                assert!(!list.contains(&step), "{stage}: {step:?}");
            }
        }
    }
}
