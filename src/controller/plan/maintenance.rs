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

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;

use super::*;
use crate::api::{MaintenancePhase, OnTimeout, Stage};
use crate::controller::queue::Place;
use crate::lease::{self, LeaseRequest};
use crate::node::{self, Claimant, EnterPlan, ExitPlan};
use crate::policy::{DrainPolicy, InvalidKnob};

use super::abort;
use super::record::{clear_record, entered_record};
use super::steps::{PassStep, pass_steps, steps};
use super::timeline::{self, StartRecord, Timeline};

/// After restoring a node that `spec.nodeName` no longer names, the next pass starts on the new
/// one at once.
const REQUEUE_NODE_CHANGED: Duration = Duration::from_millis(100);

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

/// One maintenance pass being planned: what it observed, and what its steps decided so far.
struct Pass<'a> {
    o: &'a Observed,
    m: &'a ObservedMaintenance,
    invalid: Option<&'a str>,
    now: jiff::Timestamp,
    name: String,
    /// The status as the steps so far leave it.
    status: NodeMaintenanceStatus,
    w: Writes,
    memory: Memory,
    /// Found by [`PassStep::NodePresent`].
    node: Option<&'a Node>,
    drain_policy: DrainPolicy,
    refused: Vec<InvalidKnob>,
    /// The deadline passed, and what applies then.
    overdue: Option<OnTimeout>,
    /// Failed at the deadline (`onTimeout: Fail`): the node is still enforced, no round.
    failing: bool,
    /// Aborted at the deadline (`onTimeout: Abort`, recorded in status): the node is released.
    aborted: bool,
    /// The maintenance's moments as this pass reads them; the enter step records the drain's
    /// start.
    timeline: Timeline,
    /// What had drifted on the node and was re-applied.
    repaired: Vec<&'static str>,
    /// The maintenance waits Idle for its window, which opens then (`startAt`, by the API
    /// server's clock).
    window: Option<jiff::Timestamp>,
    /// The pass comes back no later than this (a Succeeded maintenance's expiry).
    due: Option<Duration>,
    /// Its place in the drain budget ([`timeline::place`]), and whether it waits for a slot.
    place: Option<Place>,
    waits: bool,
}

type Flow = ControlFlow<Plan>;

impl<'a> Pass<'a> {
    fn new(
        o: &'a Observed,
        m: &'a ObservedMaintenance,
        invalid: Option<&'a str>,
        now: jiff::Timestamp,
    ) -> Self {
        let old = o.nm.status.clone().unwrap_or_default();
        let (mut drain_policy, refused) = crate::policy::resolve(&o.nm, &o.policy);
        // A stage that would touch the node waits Idle until its window opens.
        let window = drain_policy
            .start_at
            .filter(|t| *t > m.server_time.unwrap_or(now))
            .filter(|_| matches!(drain_policy.stage, Stage::Cordon | Stage::Drain));
        if window.is_some() {
            drain_policy.stage = Stage::Idle;
        }
        let place = timeline::place(&o.nm, &old, m.node.as_ref(), m.queue.as_ref());
        let (status, aborted) =
            abort::standing(&old, drain_policy.stage, o.nm.metadata.generation, now);
        let waits =
            drain_policy.stage == Stage::Drain && timeline::is_queued(place.as_ref()) && !aborted;
        Pass {
            o,
            m,
            invalid,
            now,
            name: o.nm.name_any(),
            w: Writes::new(old, &o.schema),
            status,
            memory: o.memory,
            node: None,
            drain_policy,
            refused,
            overdue: None,
            failing: false,
            aborted,
            timeline: Timeline::default(),
            repaired: Vec::new(),
            window,
            due: None,
            place,
            waits,
        }
    }

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

    fn me(&self) -> Claimant<'_> {
        Claimant {
            name: &self.name,
            uid: self.o.nm.metadata.uid.as_deref(),
        }
    }

    fn node_name(&self) -> &'a str {
        self.o.nm.spec.node_name.as_str()
    }

    fn generation(&self) -> Option<i64> {
        self.o.nm.metadata.generation
    }

    /// The API server's time of the node read, else the operator's.
    fn server_now(&self) -> jiff::Timestamp {
        self.m.server_time.unwrap_or(self.now)
    }

    /// Ends the pass with `step`, the memory as the pass found it.
    fn end(&mut self, step: Step) -> Plan {
        let w = std::mem::replace(&mut self.w, Writes::new(Default::default(), &self.o.schema));
        w.finish(step, self.node, self.o.memory)
    }

    /// Ends the pass with `step`, remembering what the steps so far learnt.
    fn end_remembering(&mut self, step: Step) -> Plan {
        let plan = self.end(step);
        with_memory(plan, self.memory, self.o.memory)
    }

    /// Ends the pass holding the status reached, back after `requeue` (or when due sooner).
    fn hold(&mut self, requeue: Duration) -> Plan {
        let step = Step {
            status: self.status.clone(),
            events: Vec::new(),
            requeue: Requeue::After(self.due.map_or(requeue, |d| d.min(requeue))),
        };
        self.end_remembering(step)
    }

    fn moved(&mut self) -> Flow {
        let Some((entered, node, lease)) = &self.m.entered else {
            return Flow::Continue(());
        };
        // Restore the node entered first; the next pass starts over on the new one.
        let me = Claimant {
            name: &self.name,
            uid: self.o.nm.metadata.uid.as_deref(),
        };
        leave(&mut self.w, entered, node.as_ref(), lease.as_ref(), me);
        self.w.push(clear_record());
        Flow::Break(self.end(Step {
            status: NodeMaintenanceStatus::default(),
            events: Vec::new(),
            requeue: Requeue::After(REQUEUE_NODE_CHANGED),
        }))
    }

    fn node_name_valid(&mut self) -> Flow {
        let Some(why) = self.invalid else {
            return Flow::Continue(());
        };
        let step = invalid_node_name(
            &self.status,
            self.node_name(),
            why,
            self.generation(),
            self.now,
        );
        Flow::Break(self.end(step))
    }

    fn status_init(&mut self) -> Flow {
        if let Some(s) = self
            .m
            .survey
            .as_ref()
            .and_then(|survey| init_status(&self.status, survey, self.generation(), self.now))
        {
            self.w.status(&s);
            self.status = s;
        }
        Flow::Continue(())
    }

    fn node_present(&mut self) -> Flow {
        let (generation, now, node_name) = (self.generation(), self.now, self.node_name());
        let Some(node) = self.m.node.as_ref() else {
            let step = node_missing(&self.status, node_name, generation, now);
            return Flow::Break(self.end(step));
        };
        self.node = Some(node);
        if let Some(replaced) = replaced(&self.o.nm, node) {
            // Another machine under the name entered: nothing on it is ours to touch, and no
            // lease is taken for it. Ours, still held for the machine that left, is given up
            // unless a maintenance entered the new one (its holder record), which may be
            // renewing it.
            let step = node_replaced(&self.status, node_name, &replaced, generation, now);
            self.w.status(&step.status);
            if node::observe(node).holder.is_none() {
                invalidate(&mut self.w, self.m.lease.as_ref());
            }
            return Flow::Break(self.end(step));
        }
        // The deadline counts from the drain's start (`timeline::deadline_start`); a maintenance
        // it failed stays Failed while the policy says so (an edit of the policy resumes it).
        let at = self.server_now();
        self.timeline = Timeline::of(
            &self.o.nm,
            &self.status,
            Some(node),
            self.place.as_ref(),
            at,
        );
        let p = &mut self.drain_policy;
        if steps(p.stage).contains(&PassStep::Deadline) && !self.aborted {
            p.deadline_start = timeline::deadline_start(&self.timeline);
            self.overdue = p.overdue(p.deadline_start, at);
            // At the drain's deadline, or at the bound of the wait for volumes to detach.
            self.failing = volume_detach::failing(self.overdue, &self.status, p, at);
        }
        // Aborted at the deadline: recorded first; the next pass releases the node (`abort.rs`).
        let (p, generation) = (&self.drain_policy, self.generation());
        let deadline = (p.deadline(p.deadline_start), p.drain_timeout);
        if let Some(step) =
            abort::at_deadline(&self.status, self.overdue, deadline, generation, now)
        {
            return Flow::Break(self.end(step));
        }
        if !self.failing && !self.aborted {
            self.status = super::node_present(&self.status);
        }
        Flow::Continue(())
    }

    fn stage(&mut self) -> Flow {
        let stage = self.drain_policy.stage;
        self.status = staged(
            &self.status,
            stage,
            self.window,
            self.generation(),
            self.now,
        );
        Flow::Continue(())
    }

    fn release(&mut self) -> Flow {
        let Some(node) = self.node else {
            return Flow::Continue(());
        };
        let held_lease =
            condition(&self.status, condition::LEASE_HELD).is_some_and(|c| c.status == "True");
        let exit = node::plan_exit_for(node, self.me());
        if let ExitPlan::Apply { patch, uncordon } = exit {
            self.w.push(Write::Node {
                name: self.node_name().to_owned(),
                patch,
                purpose: NodePurpose::Exit,
            });
            if uncordon {
                let e = PlannedEvent::normal(EventTarget::Node, event::UNCORDON);
                self.w.events(vec![e], Some(node));
            }
            invalidate(&mut self.w, self.m.lease.as_ref());
        } else if held_lease {
            // Held, the node not entered yet (a pass that ended between the two).
            invalidate(&mut self.w, self.m.lease.as_ref());
        }
        let (generation, now) = (self.generation(), self.now);
        self.status = released(
            &timeline::release(&self.status, generation, now),
            generation,
            now,
        );
        Flow::Continue(())
    }

    fn lease(&mut self) -> Flow {
        let (generation, now, node_name) = (self.generation(), self.now, self.node_name());
        let Some(node) = self.node else {
            return Flow::Continue(());
        };
        let request = lease::request(
            node_name,
            node.metadata.uid.as_deref(),
            self.m.lease.as_ref(),
            now,
        );
        let observation = match &request {
            LeaseRequest::AlreadyHeld { holder } => LeaseObservation::AlreadyHeld(
                lease::LeaseError::AlreadyHeld {
                    holder: holder.clone(),
                }
                .to_string(),
            ),
            _ => LeaseObservation::Held,
        };
        let record = node::observe(node);
        let holds_node = record
            .holder
            .as_deref()
            .is_some_and(|h| self.me().owns(h, record.holder_uid.as_deref()));
        match lease_result(&self.status, &observation, holds_node, generation, now) {
            LeaseStep::Proceed(s) => {
                // Ownership (and a phase back from Failed) is recorded before touching the node.
                lease_writes(&mut self.w, request, self.m.lease_namespace_missing);
                self.memory.lease_waits = 0;
                self.w.status(&s);
                self.status = s;
                Flow::Continue(())
            }
            LeaseStep::Wait(step) => Flow::Break(self.end(step)),
            LeaseStep::Stop(step) => {
                let exit = node::plan_exit_for(node, self.me());
                let uncordon = matches!(exit, ExitPlan::Apply { uncordon: true, .. });
                let failed = lease_failed(&step.status, uncordon, generation, now);
                self.w.status(&step.status);
                if let ExitPlan::Apply { patch, .. } = exit {
                    self.w.push(Write::Node {
                        name: node_name.to_owned(),
                        patch,
                        purpose: NodePurpose::ExitAfterLeaseLoss,
                    });
                }
                invalidate(&mut self.w, self.m.lease.as_ref());
                Flow::Break(self.end(failed))
            }
        }
    }

    fn enter(&mut self) -> Flow {
        let (generation, now, node_name) = (self.generation(), self.now, self.node_name());
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
                let step = held_by_other(&self.status, node_name, &other, generation, now);
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

    fn record(&mut self) -> Flow {
        let Some(node) = self.node else {
            return Flow::Continue(());
        };
        if let Some(patch) = entered_record(&self.o.nm, node) {
            self.w.push(Write::Annotations {
                patch,
                required: false,
            });
        }
        let (status, events) = entered(
            &self.status,
            self.node_name(),
            &self.repaired,
            self.generation(),
            self.now,
        );
        self.status = status;
        self.w.events(events, self.node);
        Flow::Continue(())
    }

    fn node_conditions(&mut self) -> Flow {
        use crate::node::conditions::{Lifecycle, pass_patch};
        let p = &self.drain_policy;
        let wanted = p.node_conditions.then(|| {
            let held = !self.waits && !self.aborted && steps(p.stage).contains(&PassStep::Enter);
            let succeeded = self.status.phase == Some(MaintenancePhase::Succeeded);
            let l = Lifecycle::of(p.stage, held, succeeded, self.window.is_some());
            super::pre_drain_hooks::lifecycle(l, &p.hooks)
        });
        if let Some(patch) = self
            .node
            .and_then(|n| pass_patch(n, &self.name, wanted, self.now))
        {
            let name = self.node_name().to_owned();
            self.w.push(Write::NodeConditions { name, patch });
        }
        Flow::Continue(())
    }

    fn policy(&mut self) -> Flow {
        let (status, events) = policy(
            &self.status,
            (&self.drain_policy, self.memory.paused),
            &self.refused,
            self.generation(),
            self.now,
        );
        let hooks = &self.drain_policy.hooks;
        self.status = super::pre_drain_hooks::status(&status, hooks, self.generation(), self.now);
        self.w.events(events, self.node);
        self.memory.paused = Some(self.drain_policy.paused);
        Flow::Continue(())
    }

    fn deadline(&mut self) -> Flow {
        let p = &self.drain_policy;
        let (status, events) = deadline(
            &self.status,
            (p, self.overdue),
            p.deadline(p.deadline_start),
            self.memory.deadline_announced,
            self.generation(),
            self.now,
        );
        self.status = status;
        self.w.events(events, self.node);
        self.memory.deadline_announced = Some(self.overdue.is_some());
        if self.failing {
            // Failed at the deadline: the node, lease and label are still enforced above; no
            // round.
            return Flow::Break(self.hold(REQUEUE_SUCCEEDED));
        }
        Flow::Continue(())
    }

    fn queue(&mut self) -> Flow {
        let place = self.place.as_ref();
        let (status, events) = queued(
            &self.status,
            place,
            self.memory.queued,
            self.generation(),
            self.now,
        );
        self.status = status;
        self.w.events(events, self.node);
        self.memory.queued = place.map(|p| matches!(p, Place::Queued { .. }));
        // Paused, held by a pre-drain hook or queued for a drain slot: an edit of the object
        // (unpausing, a hook removed) or a freed slot (`Context::wake_admitted`) starts the
        // next pass.
        self.hold_short_of_round(self.drain_policy.holds_evictions() || self.waits)
    }

    /// `halt`: no round, so no new eviction (node, lease, label enforced above) unless Succeeded;
    /// the lease is renewed on time, a deadline still passes (that pass applies onTimeout Fail).
    fn hold_short_of_round(&mut self, halt: bool) -> Flow {
        if !halt || self.status.phase == Some(MaintenancePhase::Succeeded) {
            return Flow::Continue(());
        }
        let requeue = timeline::held_requeue(&self.drain_policy, self.server_now());
        Flow::Break(self.hold(requeue))
    }

    /// The node going down: no round; the Node watch's change of it starts the pass that resumes.
    fn node_shutdown(&mut self) -> Flow {
        use crate::drain::gate::node_shutdown;
        let g = self.generation();
        let (status, halt) = node_shutdown::status(&self.status, self.node, g, self.now);
        self.status = status;
        self.hold_short_of_round(halt)
    }

    fn expire(&mut self) -> Flow {
        let Some(after) = self.drain_policy.expire_after else {
            return Flow::Continue(());
        };
        // This drain's end plus `expireAfter` (`timeline::expires`).
        let at = self.server_now();
        let t = Timeline::of(&self.o.nm, &self.status, self.node, self.place.as_ref(), at);
        let Some(expires) = timeline::expires(&t, after) else {
            return Flow::Continue(());
        };
        let left = expires.duration_since(self.server_now());
        if left.is_positive() {
            // Back a second after it expires: the API server's clock counts whole seconds.
            let until = left + jiff::SignedDuration::from_secs(1);
            self.due = Duration::try_from(until).ok();
            return Flow::Continue(());
        }
        let message = format!(
            "Succeeded at {}, expired after {} (expireAfter): deleting the NodeMaintenance; the \
             node is restored",
            t.drain_ended.unwrap_or(expires),
            jiff::SignedDuration::try_from(after).unwrap_or_default()
        );
        let e = PlannedEvent::normal(EventTarget::Maintenance, (event::EXPIRED, &message));
        let status = self.status.clone();
        self.w.status(&status);
        self.w.events(vec![e], self.node);
        self.w.push(Write::DeleteMaintenance {
            uid: self.o.nm.metadata.uid.clone(),
        });
        Flow::Break(self.end_remembering(Step {
            status,
            events: Vec::new(),
            requeue: Requeue::Never,
        }))
    }

    fn drain(&mut self) -> Flow {
        if self.status.phase == Some(MaintenancePhase::Succeeded) {
            // Drained once is drained: a pod that arrives later (an admin's maintenance job)
            // stays. The node, lease and label are still enforced above. Upstream drains on
            // every reconcile, it just rarely reconciles a Succeeded one
            // (docs/drain-contract.md §3).
            return Flow::Break(self.hold(REQUEUE_SUCCEEDED));
        }
        Flow::Break(self.round(Then::Drain))
    }

    /// Ends the pass with its writes, then a round over the node's pods (`then`).
    fn round(&mut self, then: fn(Box<DrainRound>) -> Then) -> Plan {
        let w = &self.w;
        Plan {
            then: then(Box::new(DrainRound {
                node: self.node_name().to_owned(),
                status: self.status.clone(),
                stored: w.stored.clone(),
                started: timeline::arrival(&self.timeline),
                policy: self.drain_policy.clone(),
                generation: self.generation(),
                pruned: w.pruned.clone(),
            })),
            writes: std::mem::take(&mut self.w.list),
            remember: remember(self.memory, self.o.memory),
            status: Some(self.status.clone()),
        }
    }
}

fn remember(new: Memory, old: Memory) -> Remember {
    if new == old {
        Remember::Same
    } else {
        Remember::Set(new)
    }
}

fn with_memory(mut plan: Plan, new: Memory, old: Memory) -> Plan {
    if plan.remember == Remember::Same {
        plan.remember = remember(new, old);
    }
    plan
}

/// The lease writes of a request that found the lease ours (or free): the namespace when it is
/// missing, then the create or the replace; nothing while ours is current.
fn lease_writes(w: &mut Writes, request: LeaseRequest, namespace_missing: bool) {
    match request {
        LeaseRequest::Create(lease) => {
            if namespace_missing {
                w.push(Write::LeaseNamespace);
            }
            w.push(Write::CreateLease(lease));
        }
        LeaseRequest::Replace(lease) => w.push(Write::ReplaceLease(lease)),
        LeaseRequest::Current | LeaseRequest::AlreadyHeld { .. } => {}
    }
}

/// Gives up the lease read (upstream's `InvalidateLease`): deleted when it is ours; another
/// holder's (a remediation's) is left alone, as upstream does on stop.
pub(super) fn invalidate(w: &mut Writes, lease: Option<&Lease>) {
    if let lease::Invalidation::Delete {
        name,
        uid,
        resource_version,
    } = lease::invalidation(lease)
    {
        w.push(Write::DeleteLease {
            name,
            uid,
            resource_version,
        });
    }
}

/// Takes the node entered first out of maintenance when it is still ours, then gives up its
/// lease (a node held by another NodeMaintenance keeps the lease that one renews). A missing
/// node counts as left.
fn leave(w: &mut Writes, name: &str, node: Option<&Node>, lease: Option<&Lease>, me: Claimant<'_>) {
    let Some(node) = node else {
        invalidate(w, lease);
        return;
    };
    if let ExitPlan::Apply { patch, uncordon } = node::plan_exit_for(node, me) {
        w.push(Write::Node {
            name: name.to_owned(),
            patch,
            purpose: NodePurpose::Exit,
        });
        if uncordon {
            let e = PlannedEvent::normal(EventTarget::Node, event::UNCORDON);
            w.events(vec![e], Some(node));
        }
        invalidate(w, lease);
    }
}
