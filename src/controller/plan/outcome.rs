//! What one pass does ([`Plan`]): its writes in order, then a requeue or a drain round
//! ([`Then`], [`DrainRound`]), and what the object's memory becomes. A leaf of the plan.

use super::status::{Requeue, Step};
use super::write::{Precondition, Write, Writes};
use crate::api::NodeMaintenanceStatus;
use crate::controller::memory::Remember;

/// Everything one pass does.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Plan {
    /// The writes, in order; the first that fails ends the pass.
    pub(crate) writes: Vec<Write>,
    /// After the writes.
    pub(crate) then: Then,
    /// What the object's memory becomes once the writes are done.
    pub(crate) remember: Remember,
    /// The status the pass ends with, for the metrics (`None`: the pass plans none).
    pub(crate) status: Option<NodeMaintenanceStatus>,
}

impl Plan {
    pub(super) fn wait(writes: Vec<Write>) -> Self {
        Plan {
            writes,
            then: Then::Requeue(Requeue::Never),
            remember: Remember::Same,
            status: None,
        }
    }

    /// The plan of a drain round's answers: `writes`, then back as `step` says.
    pub(super) fn after_round(writes: Writes, step: Step) -> Self {
        Plan {
            writes: writes.list,
            then: Then::Requeue(step.requeue),
            remember: Remember::Same,
            status: Some(step.status),
        }
    }

    /// Each write's kind and precondition, in order (the debug log).
    pub(crate) fn preconditions(&self) -> Vec<(&'static str, Precondition)> {
        self.writes
            .iter()
            .map(|w| (w.kind(), w.precondition()))
            .collect()
    }
}

/// How a pass goes on after its writes.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Then {
    /// Come back then ([`Requeue::LeaseWait`] never appears here: the plan resolves it).
    Requeue(Requeue),
    /// Run one drain round, then write what [`drained_plan`] makes of it.
    Drain(Box<DrainRound>),
    /// Ask the node's evictions with a dry run (the stage Preflight), then write what
    /// [`preflight_plan`] makes of the refusals.
    Preflight(Box<DrainRound>),
}

/// What the drain round needs from the pass that planned it.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct DrainRound {
    /// The node.
    pub(crate) node: String,
    /// The status before the drain (with the node entered).
    pub(crate) status: NodeMaintenanceStatus,
    /// The status the API server holds once the pass's writes are done.
    pub(crate) stored: NodeMaintenanceStatus,
    /// When the drain started, the time the drain compares pods' creation with
    /// (`timeline::arrival`): the start recorded on the node when the drain started (the API
    /// server's time of the node read of the pass that started it).
    pub(crate) started: Option<jiff::Timestamp>,
    /// The maintenance's drain policy, resolved by the pass ([`crate::policy::resolve`]).
    pub(crate) policy: crate::policy::DrainPolicy,
    /// `metadata.generation`.
    pub(crate) generation: Option<i64>,
    /// The status fields the API server prunes.
    pub(crate) pruned: Vec<String>,
}

impl DrainRound {
    /// The writes after the round, from the status the pass's writes left stored.
    pub(super) fn writes(&self) -> Writes {
        Writes {
            list: Vec::new(),
            stored: self.stored.clone(),
            pruned: self.pruned.clone(),
        }
    }
}
