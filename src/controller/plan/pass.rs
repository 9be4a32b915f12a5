//! One maintenance pass being planned ([`Pass`]): what it observed, what its steps decided so far,
//! and how it ends (holding what it reached, or handing over to a drain round). Each step's flow
//! is a method of it in the file named for that step; `maintenance.rs` runs them in order.

use std::ops::ControlFlow;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;

use super::abort;
use super::condition::Stamp;
use super::observed::{Observed, ObservedMaintenance};
use super::outcome::{DrainRound, Plan, Then};
use super::status::{Requeue, Step, lease_wait};
use super::timeline::{self, Timeline};
use super::write::Writes;
use crate::api::{MaintenancePhase, NodeMaintenanceStatus, OnTimeout, Stage};
use crate::controller::memory::{Memory, Remember};
use crate::controller::queue::Place;
use crate::node::Claimant;
use crate::policy::{DrainPolicy, InvalidKnob};

/// One maintenance pass being planned: what it observed, and what its steps decided so far.
pub(super) struct Pass<'a> {
    pub(super) o: &'a Observed,
    pub(super) m: &'a ObservedMaintenance,
    pub(super) invalid: Option<&'a str>,
    pub(super) now: jiff::Timestamp,
    pub(super) name: String,
    /// The status as the steps so far leave it.
    pub(super) status: NodeMaintenanceStatus,
    pub(super) w: Writes,
    pub(super) memory: Memory,
    /// Found by [`PassStep::NodePresent`].
    pub(super) node: Option<&'a Node>,
    pub(super) drain_policy: DrainPolicy,
    pub(super) refused: Vec<InvalidKnob>,
    /// The deadline passed, and what applies then.
    pub(super) overdue: Option<OnTimeout>,
    /// Failed at the deadline (`onTimeout: Fail`): the node is still enforced, no round.
    pub(super) failing: bool,
    /// Aborted at the deadline (`onTimeout: Abort`, recorded in status): the node is released.
    pub(super) aborted: bool,
    /// The maintenance's moments as this pass reads them; the enter step records the drain's
    /// start.
    pub(super) timeline: Timeline,
    /// What had drifted on the node and was re-applied.
    pub(super) repaired: Vec<&'static str>,
    /// The maintenance waits Idle for its window, which opens then (`startAt`, by the API
    /// server's clock).
    pub(super) window: Option<jiff::Timestamp>,
    /// The pass comes back no later than this (a Succeeded maintenance's expiry).
    pub(super) due: Option<Duration>,
    /// Its place in the drain budget ([`timeline::place`]), and whether it waits for a slot.
    pub(super) place: Option<Place>,
    pub(super) waits: bool,
}

/// Whether a step hands over to the next step, or ends the pass with its plan.
pub(super) type Flow = ControlFlow<Plan>;

impl<'a> Pass<'a> {
    pub(super) fn new(
        o: &'a Observed,
        m: &'a ObservedMaintenance,
        invalid: Option<&'a str>,
        now: jiff::Timestamp,
    ) -> Self {
        let old = o.nm.status.clone().unwrap_or_default();
        let (mut drain_policy, refused) = o.policy.clone();
        // A stage that would touch the node waits Idle until its window opens.
        let window = drain_policy
            .start_at
            .filter(|t| *t > m.server_time.unwrap_or(now))
            .filter(|_| matches!(drain_policy.stage, Stage::Cordon | Stage::Drain));
        if window.is_some() {
            drain_policy.stage = Stage::Idle;
        }
        let place = timeline::place(&o.nm, &old, m.node.as_ref(), m.queue.as_ref());
        let at = Stamp {
            generation: o.nm.metadata.generation,
            now,
        };
        let (status, aborted) = abort::standing(&old, drain_policy.stage, at);
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

    pub(super) fn me(&self) -> Claimant<'_> {
        Claimant {
            name: &self.name,
            uid: self.o.nm.metadata.uid.as_deref(),
        }
    }

    pub(super) fn node_name(&self) -> &'a str {
        self.o.nm.spec.node_name.as_str()
    }

    pub(super) fn generation(&self) -> Option<i64> {
        self.o.nm.metadata.generation
    }

    /// When this pass writes a status: the NodeMaintenance's generation, and the operator's
    /// time of the pass.
    pub(super) fn at(&self) -> Stamp {
        Stamp {
            generation: self.generation(),
            now: self.now,
        }
    }

    /// The API server's time of the node read, else the operator's.
    pub(super) fn server_now(&self) -> jiff::Timestamp {
        self.m.server_time.unwrap_or(self.now)
    }

    /// Ends the pass with `step`, the memory as the pass found it.
    pub(super) fn end(&mut self, step: Step) -> Plan {
        let w = std::mem::replace(&mut self.w, Writes::new(Default::default(), &self.o.schema));
        finish(w, step, self.node, self.o.memory)
    }

    /// Ends the pass with `step`, remembering what the steps so far learnt.
    pub(super) fn end_remembering(&mut self, step: Step) -> Plan {
        let plan = self.end(step);
        with_memory(plan, self.memory, self.o.memory)
    }

    /// Ends the pass holding the status reached, back after `requeue` (or when due sooner).
    pub(super) fn hold(&mut self, requeue: Duration) -> Plan {
        let step = Step::quiet(
            self.status.clone(),
            Requeue::After(self.due.map_or(requeue, |d| d.min(requeue))),
        );
        self.end_remembering(step)
    }

    /// Ends the pass with its writes, then a round over the node's pods (`then`).
    pub(super) fn round(&mut self, then: fn(Box<DrainRound>) -> Then) -> Plan {
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

    /// `halt`: no round, so no new eviction (node, lease, label enforced above) unless Succeeded;
    /// the lease is renewed on time, a deadline still passes (that pass applies onTimeout Fail).
    pub(super) fn hold_short_of_round(&mut self, halt: bool) -> Flow {
        if !halt || self.status.phase == Some(MaintenancePhase::Succeeded) {
            return Flow::Continue(());
        }
        let requeue = timeline::held_requeue(&self.drain_policy, self.server_now());
        Flow::Break(self.hold(requeue))
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

/// Records `step`: its status, then its events.
fn finish(mut w: Writes, step: Step, node: Option<&Node>, memory: Memory) -> Plan {
    w.status(&step.status);
    w.events(step.events, node);
    let (requeue, remember) = match step.requeue {
        Requeue::LeaseWait => (
            Requeue::After(lease_wait(memory.lease_waits)),
            Remember::Set(Memory {
                lease_waits: memory.lease_waits.saturating_add(1),
                ..memory
            }),
        ),
        r => (r, Remember::Same),
    };
    Plan {
        writes: w.list,
        then: Then::Requeue(requeue),
        remember,
        status: Some(step.status),
    }
}
