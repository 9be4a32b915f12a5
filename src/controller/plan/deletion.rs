//! The deletion pass: restore the node (or hand it to the next NodeMaintenance for it), give up
//! the lease, remove the finalizer.

use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;

use super::observed::ObservedDeletion;
use super::outcome::{Plan, Then};
use super::release::{exit, invalidate};
use super::status::{PlannedEvent, Requeue, event};
use super::validate_node_name;
use super::write::{NodePurpose, Write, Writes};
use crate::api::{FINALIZER, NodeMaintenance, NodeMaintenanceStatus};
use crate::controller::memory::{Remember, StatusSchema};

/// How the node looked when its NodeMaintenance is being deleted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum NodeSeen<'a> {
    /// The node does not exist.
    Missing,
    /// The node exists; its holder annotation.
    Holder(Option<&'a str>),
}

/// What deleting a NodeMaintenance does to its node and lease.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum DeletionPlan {
    /// Take the node out of maintenance and invalidate the lease (emit `UncordonNode` when it was
    /// uncordoned).
    Exit,
    /// Another live NodeMaintenance for the node takes it over; node and lease stay.
    Transfer {
        /// The successor.
        to: String,
    },
    /// Nobody holds the node (it is missing, or we never got to enter it): invalidate the lease
    /// by name, which we may have taken.
    InvalidateLease,
    /// Someone else holds the node (or will): leave node and lease alone.
    Nothing,
}

/// Decides the cleanup of NodeMaintenance `me` (upstream's stop-on-deletion, docs/compat.md §2,
/// plus the handover of docs/design.md §1): only the holder restores the node, and not while
/// another live NodeMaintenance for the same node (`successor`) still wants it.
pub(super) fn deletion_plan(node: NodeSeen<'_>, me: &str, successor: Option<&str>) -> DeletionPlan {
    match (node, successor) {
        (NodeSeen::Holder(Some(h)), Some(to)) if h == me => {
            DeletionPlan::Transfer { to: to.to_string() }
        }
        (NodeSeen::Holder(Some(h)), None) if h == me => DeletionPlan::Exit,
        (NodeSeen::Holder(Some(_)), _) => DeletionPlan::Nothing,
        (NodeSeen::Missing | NodeSeen::Holder(None), None) => DeletionPlan::InvalidateLease,
        (NodeSeen::Missing | NodeSeen::Holder(None), Some(_)) => DeletionPlan::Nothing,
    }
}

/// The live NodeMaintenance (not being deleted, for `node`, another name) that should hold
/// `node`, the node `me` entered, after `me` goes: the oldest, then by name.
pub(crate) fn successor<'a>(
    me_name: &str,
    node: &str,
    all: impl IntoIterator<Item = &'a NodeMaintenance>,
) -> Option<&'a NodeMaintenance> {
    all.into_iter()
        .filter(|o| {
            o.spec.node_name == node
                && o.metadata.deletion_timestamp.is_none()
                && o.name_any() != me_name
        })
        .min_by(|a, b| {
            let key = |o: &NodeMaintenance| {
                (
                    o.metadata.creation_timestamp.as_ref().map(|t| t.0),
                    o.name_any(),
                )
            };
            key(a).cmp(&key(b))
        })
}

/// Plans the deletion pass (docs/design.md §3: restore, or hand over to a successor): the node,
/// the lease, then the finalizer (its `RemovedMaintenance` event follows, `preflight_events`); the
/// object's memory is forgotten. An invalid node name touches
/// no node and no lease.
pub(super) fn plan_deletion(o: &ObservedDeletion, now: jiff::Timestamp) -> Plan {
    let mut w = Writes::new(NodeMaintenanceStatus::default(), &StatusSchema::default());
    let me = crate::node::Claimant {
        name: &o.name,
        uid: o.uid.as_deref(),
    };
    if validate_node_name(&o.node_name).is_ok() {
        let node = o.node.as_ref();
        let record = node.map(crate::node::observe);
        // A record of our name but another uid is an earlier object's: not ours to restore.
        let holder = record.as_ref().and_then(|r| {
            let h = r.holder.as_deref()?;
            Some(if me.owns(h, r.holder_uid.as_deref()) || h != o.name {
                h.to_string()
            } else {
                format!("{h} (uid {})", r.holder_uid.as_deref().unwrap_or_default())
            })
        });
        let seen = match &record {
            None => NodeSeen::Missing,
            Some(_) => NodeSeen::Holder(holder.as_deref()),
        };
        let successor = o.successor.as_ref().map(|(n, _)| n.as_str());
        match (deletion_plan(seen, &o.name, successor), node) {
            (DeletionPlan::Exit, Some(node)) => {
                exit(&mut w, &o.node_name, node, me, NodePurpose::Exit, true);
                invalidate(&mut w, o.lease.as_ref());
                cancel_evacuations(&mut w, &o.evacuations);
            }
            (DeletionPlan::Transfer { to }, Some(node)) => {
                let to_uid = o.successor.as_ref().and_then(|(_, u)| u.as_deref());
                let claimant = crate::node::Claimant {
                    name: &to,
                    uid: to_uid,
                };
                if let Some(patch) = crate::node::plan_transfer_to(node, &o.name, claimant) {
                    w.push(Write::Node {
                        name: o.node_name.clone(),
                        patch,
                        purpose: NodePurpose::Transfer { to },
                    });
                }
            }
            (DeletionPlan::InvalidateLease, node) => {
                // Another machine under the name entered is not ours to adopt (its drain taint
                // is another maintenance's).
                if let Some(node) = node.filter(|_| o.started && !o.replaced)
                    && record.is_some_and(|r| r.drain_taint)
                {
                    adopt_and_exit(&mut w, &o.node_name, node, me);
                }
                invalidate(&mut w, o.lease.as_ref());
            }
            _ => {}
        }
    }
    // The lifecycle conditions it wrote end False (`MaintenanceEnded`) before the object goes;
    // a successor's next pass writes its own.
    if let Some(node) = o.node.as_ref()
        && crate::node::conditions::named(node) == Some(o.name.as_str())
        && let Some(patch) = crate::node::conditions::patch(node, &o.name, None, now)
    {
        w.push(Write::NodeConditions {
            name: o.node_name.clone(),
            patch,
        });
    }
    if let Some(i) = o.finalizers.iter().position(|f| f == FINALIZER) {
        let path = format!("/metadata/finalizers/{i}");
        let ops = serde_json::json!([
            {"op": "test", "path": path, "value": FINALIZER},
            {"op": "remove", "path": path},
        ]);
        w.push(Write::Finalizers {
            patch: serde_json::from_value(ops).unwrap_or_default(),
            add: false,
        });
    }
    Plan {
        writes: w.list,
        then: Then::Requeue(Requeue::Never),
        remember: Remember::Forget,
        status: None,
    }
}

/// A node left in maintenance by upstream NMO (its drain taint, none of our records): adopted
/// and restored at once, as upstream would have restored it. One patch: the exit planned on the
/// node as adopting it would leave it (adoption records "nothing was there before").
fn adopt_and_exit(w: &mut Writes, name: &str, node: &Node, me: crate::node::Claimant<'_>) {
    let Some(adopted) = crate::node::adopted(node, me) else {
        return;
    };
    exit(w, name, &adopted, me, NodePurpose::AdoptAndExit, true);
}

/// After the node is restored, what becomes of the migrations still evacuating VMIs off it
/// (issue 30, docs/design.md §2c): each is cancelled, one event per VMI, where the server offers
/// `evacuate/cancel`; else one event per VMI saying its migration continues.
fn cancel_evacuations(w: &mut Writes, e: &crate::drain::cancel::Evacuations) {
    if let Some(error) = &e.unread {
        let note = format!(
            "Could not list VirtualMachineInstances to cancel their evacuations off the node; their migrations continue: {error}"
        );
        let warning = PlannedEvent::warning(event::EVACUATION_NOT_CANCELLED, note);
        w.events(vec![warning], None);
    }
    for vmi in &e.vmis {
        let named = format!("{}/{}", vmi.namespace, vmi.name);
        if e.cancel_served {
            let about = |mut e: PlannedEvent| {
                e.vmi = Some(vmi.clone());
                e
            };
            w.push(Write::CancelEvacuation {
                vmi: vmi.clone(),
                done: about(PlannedEvent::normal((
                    event::EVACUATION_CANCELLED,
                    &format!("Cancelled the evacuation of VMI {named}"),
                ))),
                failed: about(PlannedEvent::warning(
                    event::EVACUATION_NOT_CANCELLED,
                    format!(
                        "Could not cancel the evacuation of VMI {named}; its migration continues"
                    ),
                )),
            });
        } else {
            let note = format!(
                "The migration of VMI {named} continues: the API server does not offer {} {}",
                crate::drain::cancel::SUBRESOURCES_GROUP_VERSION,
                crate::drain::cancel::CANCEL_RESOURCE
            );
            let mut e = PlannedEvent::normal((event::EVACUATION_CONTINUES, &note));
            e.vmi = Some(vmi.clone());
            w.events(vec![e], None);
        }
    }
}
