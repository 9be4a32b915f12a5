//! The drain slot (`--max-parallel-drains`, [`PassStep::Queue`](super::maintenance::PassStep)) in
//! status; the pass ends while the maintenance waits for one, is paused or is held by a hook.

use super::condition::{self, Stamp, condition, set_condition};
use super::pass::{Flow, Pass};
use super::status::{PlannedEvent, event};
use crate::api::NodeMaintenanceStatus;
use crate::controller::queue::Place;

impl Pass<'_> {
    pub(super) fn queue(&mut self) -> Flow {
        let place = self.place.as_ref();
        let (status, events) = queued(
            &self.status,
            place,
            self.memory.queued,
            // The API server's clock: `timeline` reads the slot's moment back from this
            // condition and compares it with the drain's start on the node.
            Stamp {
                generation: self.generation(),
                now: self.server_now(),
            },
        );
        self.status = status;
        self.w.events(events, self.node);
        self.memory.queued = place.map(|p| matches!(p, Place::Queued { .. }));
        // Paused, held by a pre-drain hook or queued for a drain slot: an edit of the object
        // (unpausing, a hook removed) or a freed slot (`Context::wake_admitted`) starts the
        // next pass.
        self.hold_short_of_round(self.drain_policy.holds_evictions() || self.waits)
    }
}

/// The drain budget in status (`docs/drain-contract.md` §10): `DrainQueued=True` with the
/// position while `place` says the maintenance waits (a `DrainQueued` event when it starts to),
/// `False` once a slot is its after it waited (a `DrainStarted` event). `remembered` is whether
/// the last pass of this process found it queued, read when the condition is not there (a CRD
/// that prunes it). A maintenance that never waited keeps upstream's status.
pub(crate) fn queued(
    status: &NodeMaintenanceStatus,
    place: Option<&Place>,
    remembered: Option<bool>,
    at: Stamp,
) -> (NodeMaintenanceStatus, Vec<PlannedEvent>) {
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
                events.push(PlannedEvent::normal((event::QUEUED, &message)));
            }
            set_condition(
                &mut s,
                condition::DRAIN_QUEUED,
                true,
                "MaxParallelDrains",
                message,
                at,
            );
        }
        _ if was == Some(true) => {
            events.push(PlannedEvent::normal(event::DEQUEUED));
            set_condition(
                &mut s,
                condition::DRAIN_QUEUED,
                false,
                "SlotHeld",
                "a drain slot is held: evictions run",
                at,
            );
        }
        _ => {}
    }
    (s, events)
}
