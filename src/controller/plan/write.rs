//! The writes a plan is made of. Each is complete: its target, its body, its precondition, and
//! what its absence means, so the executor (`controller/act.rs`) sends it as it is and decides
//! nothing. A precondition that fails (409) ends the pass; the next pass observes again. The
//! exceptions are marked in the write: events, and a record the plan marks as not required, are
//! best effort (logged, the pass goes on).

use k8s_openapi::api::coordination::v1::Lease;
use serde_json::Value;

use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;

use super::encode::{needs_write, status_patch};
use super::status::{EventTarget, PlannedEvent};
use crate::api::NodeMaintenanceStatus;
use crate::controller::memory::StatusSchema;
use crate::node::EnterOutcome;

/// One write of a pass, in the order the plan lists them.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Write {
    /// A JSON patch of the NodeMaintenance's `metadata.finalizers`. Precondition: its own `test`
    /// op on the list (the API server does not deduplicate finalizers).
    Finalizers {
        /// The patch (`test`, then `add` or `remove`).
        patch: json_patch::Patch,
        /// Adds (true) or removes our finalizer; a removal answered 404 is done.
        add: bool,
    },
    /// A JSON merge patch of the NodeMaintenance's annotations (the record of the node entered).
    /// Precondition: the NodeMaintenance's resourceVersion, chained.
    Annotations {
        /// The patch.
        patch: Value,
        /// A failure ends the pass (true), or is logged and the pass goes on (false: a record the
        /// pass does not depend on, written again by the next pass until it lands).
        required: bool,
    },
    /// A JSON merge patch of the status subresource. Precondition: the resourceVersion, chained.
    Status {
        /// The patch, every status field present (`null` when unset).
        patch: Value,
        /// The status it stores, to learn what the API server kept of it.
        sent: Box<NodeMaintenanceStatus>,
        /// Whether its watch event starts the next pass: it changes what a pass's steps read
        /// (the phase or a condition), not only the drain's progress ([`wakes`]).
        wakes: bool,
    },
    /// A JSON merge patch of a Node. Precondition: the resourceVersion read, inside the patch.
    Node {
        /// The node.
        name: String,
        /// The patch.
        patch: Value,
        /// Why: how the executor logs it, counts it and names its failure.
        purpose: NodePurpose,
    },
    /// A strategic-merge patch of a Node's `status.conditions` (the lifecycle conditions,
    /// `crate::node::conditions`), merged by type under their own field manager. No
    /// precondition: only our types are in it. A missing node is done.
    NodeConditions {
        /// The node.
        name: String,
        /// The patch.
        patch: Value,
    },
    /// Delete the NodeMaintenance itself (`expireAfter`). Precondition: its uid, so a new object
    /// of the same name stays; a 404 is done. Its finalizer keeps it until the deletion pass
    /// restored the node.
    DeleteMaintenance {
        /// Its `metadata.uid`.
        uid: Option<String>,
    },
    /// Create the lease namespace (an existing one is done).
    LeaseNamespace,
    /// Create the node's medik8s lease. Precondition: it does not exist (409 AlreadyExists).
    CreateLease(Box<Lease>),
    /// Replace the node's medik8s lease. Precondition: the resourceVersion in its metadata.
    ReplaceLease(Box<Lease>),
    /// Delete the node's medik8s lease. Preconditions: the uid and resourceVersion read, so a
    /// lease taken over in between stays; a 404 is done.
    DeleteLease {
        /// The lease's name.
        name: String,
        /// Its `metadata.uid` as read.
        uid: Option<String>,
        /// Its `metadata.resourceVersion` as read.
        resource_version: Option<String>,
    },
    /// Cancel the evacuation of a VMI off the node just restored (KubeVirt's `evacuate/cancel`,
    /// `crate::drain::cancel`), then publish `done`; a failure publishes `failed` with the
    /// error appended and never ends the pass (the node is restored already; the migration goes
    /// on, as without the subresource).
    CancelEvacuation {
        /// The VMI.
        vmi: crate::drain::cancel::VmiRef,
        /// The event once cancelled.
        done: PlannedEvent,
        /// The event when the cancel failed.
        failed: PlannedEvent,
    },
    /// Publish an event; a failure is logged and never ends the pass.
    Event {
        /// The event.
        event: PlannedEvent,
        /// The Node it is about when its target is a Node: name and uid.
        node: Option<(String, Option<String>)>,
    },
}

/// Why a Node is written. A Node that no longer exists ends the pass when entering it and counts
/// as restored when leaving it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum NodePurpose {
    /// Cordon, taint, label and record it (or repair what was undone): what the patch stands for.
    Enter(EnterOutcome),
    /// Restore it from its record at the end of the maintenance.
    Exit,
    /// Restore it after the lease was lost for good (upstream's failure text if it fails).
    ExitAfterLeaseLoss,
    /// Hand it to the next NodeMaintenance for it.
    Transfer {
        /// The successor's name.
        to: String,
    },
    /// Adopt a node upstream left in maintenance and restore it at once (one patch).
    AdoptAndExit,
}

/// What a write's precondition is, for tests and logs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Precondition {
    /// The resourceVersion the NodeMaintenance has after the pass's previous write to it (the
    /// observed one for the first).
    ChainedResourceVersion,
    /// A resourceVersion read by the pass (in the body).
    ResourceVersion(Option<String>),
    /// The uid and resourceVersion read by the pass.
    UidAndResourceVersion,
    /// A `test` op inside the patch.
    Test,
    /// The object must not exist.
    Absent,
    /// None (events, the lease namespace).
    None,
}

impl Write {
    /// The write's precondition.
    pub(crate) fn precondition(&self) -> Precondition {
        match self {
            Write::Finalizers { .. } => Precondition::Test,
            Write::Annotations { .. } | Write::Status { .. } => {
                Precondition::ChainedResourceVersion
            }
            Write::Node { patch, .. } => Precondition::ResourceVersion(
                patch["metadata"]["resourceVersion"]
                    .as_str()
                    .map(str::to_owned),
            ),
            Write::ReplaceLease(l) => {
                Precondition::ResourceVersion(l.metadata.resource_version.clone())
            }
            Write::DeleteLease { .. } => Precondition::UidAndResourceVersion,
            Write::DeleteMaintenance { .. } => Precondition::UidAndResourceVersion,
            Write::CreateLease(_) => Precondition::Absent,
            Write::LeaseNamespace
            | Write::Event { .. }
            | Write::NodeConditions { .. }
            | Write::CancelEvacuation { .. } => Precondition::None,
        }
    }

    /// A short name of the write's kind, for plans printed in tests and logs.
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Write::Finalizers { add: true, .. } => "add finalizer",
            Write::Finalizers { add: false, .. } => "remove finalizer",
            Write::Annotations { required: true, .. } => "annotate",
            Write::Annotations {
                required: false, ..
            } => "record entered node",
            Write::Status { .. } => "status",
            Write::Node { purpose, .. } => match purpose {
                NodePurpose::Enter(_) => "enter node",
                NodePurpose::Exit => "exit node",
                NodePurpose::ExitAfterLeaseLoss => "exit node after lease loss",
                NodePurpose::Transfer { .. } => "transfer node",
                NodePurpose::AdoptAndExit => "adopt and exit node",
            },
            Write::NodeConditions { .. } => "node conditions",
            Write::DeleteMaintenance { .. } => "delete maintenance",
            Write::LeaseNamespace => "create lease namespace",
            Write::CreateLease(_) => "create lease",
            Write::ReplaceLease(_) => "replace lease",
            Write::DeleteLease { .. } => "delete lease",
            Write::CancelEvacuation { .. } => "cancel evacuation",
            Write::Event { event, .. } => event.reason,
        }
    }
}

/// Whether a status write from `stored` to `wanted` must start the next pass through its own
/// watch event, which arrives once the controller's store holds the write: it changes the phase
/// or a condition's status or reason, which the next pass's steps read (the node's `Drained`
/// condition and `expireAfter` from `Succeeded`, escalation from `Drained`'s reason). A write of
/// progress only (`drainProgress`, `pendingPods`, `blockers`, `lastError`, messages) starts
/// none: the pass that wrote it set its requeue, and a drain waiting for thousands of pods to
/// terminate would otherwise list them after each of its own writes
/// (`memory::OwnWrites`).
pub(crate) fn wakes(stored: &NodeMaintenanceStatus, wanted: &NodeMaintenanceStatus) -> bool {
    let keys = |s: &NodeMaintenanceStatus| {
        let mut k: Vec<(String, String, String)> = s
            .conditions
            .iter()
            .flatten()
            .map(|c| (c.type_.clone(), c.status.clone(), c.reason.clone()))
            .collect();
        k.sort();
        k
    };
    stored.phase != wanted.phase || keys(stored) != keys(wanted)
}

/// The writes of a pass being planned, with the status the API server will hold after them
/// (so a status equal to it is not written again).
pub(crate) struct Writes {
    /// The writes so far, in order.
    pub(super) list: Vec<Write>,
    /// The status the API server holds once they are done.
    pub(super) stored: NodeMaintenanceStatus,
    /// The status fields the API server prunes.
    pub(super) pruned: Vec<String>,
}

impl Writes {
    pub(super) fn new(stored: NodeMaintenanceStatus, schema: &StatusSchema) -> Self {
        Writes {
            list: Vec::new(),
            stored,
            pruned: schema.pruned(),
        }
    }

    pub(super) fn push(&mut self, w: Write) {
        self.list.push(w);
    }

    /// Writes `status` when it differs from the stored one in more than `lastUpdate`.
    pub(super) fn status(&mut self, status: &NodeMaintenanceStatus) {
        if needs_write(&self.stored, status, &self.pruned) {
            self.list.push(Write::Status {
                patch: status_patch(status),
                sent: Box::new(status.clone()),
                wakes: wakes(&self.stored, status),
            });
            self.stored = status.clone();
        }
    }

    /// Publishes `events` (a Node event about `node`: name and uid).
    pub(super) fn events(&mut self, events: Vec<PlannedEvent>, node: Option<&Node>) {
        for event in events {
            let node = match event.target {
                EventTarget::Node => node.map(|n| (n.name_any(), n.metadata.uid.clone())),
                EventTarget::Maintenance => None,
            };
            self.list.push(Write::Event { event, node });
        }
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

    use super::*;
    use crate::api::MaintenancePhase;

    fn drained(status: &str, reason: &str, message: &str) -> Condition {
        Condition {
            type_: "Drained".into(),
            status: status.into(),
            reason: reason.into(),
            message: message.into(),
            last_transition_time: Time(jiff::Timestamp::UNIX_EPOCH),
            observed_generation: None,
        }
    }

    #[test]
    fn only_a_new_phase_or_condition_wakes_the_next_pass() {
        let running = NodeMaintenanceStatus {
            phase: Some(MaintenancePhase::Running),
            drain_progress: Some(10),
            conditions: Some(vec![drained("False", "PodsTerminating", "2,990 pods")]),
            ..Default::default()
        };
        let progress = NodeMaintenanceStatus {
            drain_progress: Some(60),
            last_error: Some("a refusal".into()),
            conditions: Some(vec![drained("False", "PodsTerminating", "1,200 pods")]),
            ..running.clone()
        };
        assert!(!wakes(&running, &progress), "progress only");
        let blocked = NodeMaintenanceStatus {
            conditions: Some(vec![drained("False", "EvictionBlocked", "held")]),
            ..progress.clone()
        };
        assert!(wakes(&progress, &blocked), "a condition's reason");
        let succeeded = NodeMaintenanceStatus {
            phase: Some(MaintenancePhase::Succeeded),
            ..progress.clone()
        };
        assert!(wakes(&progress, &succeeded), "the phase");
    }
}
