//! Giving the node back: one [`exit`] restores a node from our record (uncordon, taints, label,
//! record) and one [`invalidate`] gives up the lease, for every way out of a maintenance: a stage
//! short of Cordon, a maintenance queued for a slot or aborted at its deadline
//! ([`PassStep::Release`](super::maintenance::PassStep)), a `spec.nodeName` that moved (`Moved`), the
//! lease lost for good (`lease.rs`), and the deletion pass (`deletion.rs`), which an expiry
//! reaches too. The status of a release ([`released`]) is here as well.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;

use super::condition::{self, Stamp, condition, set_condition};
use super::pass::{Flow, Pass};
use super::record::clear_record;
use super::status::{PlannedEvent, Requeue, Step, event, touch};
use super::timeline;
use super::write::{NodePurpose, Write, Writes};
use crate::api::NodeMaintenanceStatus;
use crate::lease;
use crate::node::{self, Claimant, ExitPlan};

/// After restoring a node that `spec.nodeName` no longer names, the next pass starts on the new
/// one at once.
const REQUEUE_NODE_CHANGED: Duration = Duration::from_millis(100);

impl Pass<'_> {
    pub(super) fn moved(&mut self) -> Flow {
        let Some((entered, node, lease)) = &self.m.entered else {
            return Flow::Continue(());
        };
        // Restore the node entered first when it is still ours, then give up its lease (a node
        // held by another NodeMaintenance keeps the lease that one renews); a missing node counts
        // as left. The next pass starts over on the new one.
        let me = Claimant {
            name: &self.name,
            uid: self.o.nm.metadata.uid.as_deref(),
        };
        let mut exit_now = |n| exit(&mut self.w, entered, n, me, NodePurpose::Exit, true);
        if node.as_ref().is_none_or(|n| exit_now(n).is_some()) {
            invalidate(&mut self.w, lease.as_ref());
        }
        self.w.push(clear_record());
        Flow::Break(self.end(Step::quiet(
            NodeMaintenanceStatus::default(),
            Requeue::After(REQUEUE_NODE_CHANGED),
        )))
    }

    pub(super) fn release(&mut self) -> Flow {
        let Some(node) = self.node else {
            return Flow::Continue(());
        };
        let held_lease =
            condition(&self.status, condition::LEASE_HELD).is_some_and(|c| c.status == "True");
        let me = Claimant {
            name: &self.name,
            uid: self.o.nm.metadata.uid.as_deref(),
        };
        let name = self.node_name();
        let exited = exit(&mut self.w, name, node, me, NodePurpose::Exit, true).is_some();
        // Held, the node not entered yet: a pass that ended between the two.
        if exited || held_lease {
            invalidate(&mut self.w, self.m.lease.as_ref());
        }
        let at = self.at();
        self.status = released(&timeline::release(&self.status, at), at);
        Flow::Continue(())
    }
}

/// Restores `node` (named `name`) from `me`'s record in one Node write of `purpose`, with
/// `UncordonNode` on the Node when it uncordons it and `announce` (a lease lost for good
/// announces it after its status instead). `None` when the record is not `me`'s (nothing to
/// restore), else whether it uncordons.
pub(super) fn exit(
    w: &mut Writes,
    name: &str,
    node: &Node,
    me: Claimant<'_>,
    purpose: NodePurpose,
    announce: bool,
) -> Option<bool> {
    let ExitPlan::Apply { patch, uncordon } = node::plan_exit_for(node, me) else {
        return None;
    };
    w.push(Write::Node {
        name: name.to_owned(),
        patch,
        purpose,
    });
    if announce && uncordon {
        let e = PlannedEvent::normal(event::UNCORDON).on_node();
        w.events(vec![e], Some(node));
    }
    Some(uncordon)
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

/// The node and the lease given up by a stage short of Cordon: `Cordoned` and `LeaseHeld`
/// False with reason [`condition::RELEASED`] where they were written (so a later Cordon counts
/// the lease as never held: another holder's lease is waited for, not a strike), no drain
/// deadline.
pub(crate) fn released(status: &NodeMaintenanceStatus, at: Stamp) -> NodeMaintenanceStatus {
    let mut s = status.clone();
    let released = [
        (
            condition::CORDONED,
            "the node is not in maintenance (stage)",
        ),
        (
            condition::LEASE_HELD,
            "the medik8s lease of the node is not held (stage)",
        ),
    ];
    for (type_, message) in released {
        if condition(status, type_).is_some() {
            set_condition(&mut s, type_, false, condition::RELEASED, message, at);
        }
    }
    s.drain_deadline = None;
    s.on_timeout = None;
    if *status != s {
        touch(&mut s, at);
    }
    s
}
