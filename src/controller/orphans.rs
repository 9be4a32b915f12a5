//! Records on nodes whose NodeMaintenance vanished without us (its finalizer removed by hand,
//! the object force-deleted while the operator was down, the operator uninstalled mid-maintenance):
//! nobody would ever reconcile them, so the node would stay tainted, excluded from remediation
//! and its lease held for nothing (docs/design.md §3, `docs/drain-contract.md` §6).
//!
//! The Node watch and NodeMaintenance deletions name candidate nodes; once the NodeMaintenance
//! cache is complete, a node whose holder record names no live NodeMaintenance (by name and uid)
//! and that no NodeMaintenance targets is settled by [`orphan_plan`]: while anything only the
//! operator puts on a node is still there (the `medik8s.io/drain` taint the record says we added,
//! or our lease), the maintenance is still in place, so its prior state is still true: every mark
//! the record says we added and the node still carries is removed, one by one (cordon, both
//! taints, the label), the lease invalidated and the record removed, even when someone already
//! took some marks off by hand. When none is left, someone else ended that maintenance (a
//! rollback to upstream NMO, which removes the taints and deletes the lease): the cordon or label
//! the node carries now is that someone's, and only the record is dropped.
use std::sync::Arc;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use serde_json::{Map, Value};

use super::context::Context;
use super::plan::{NodePurpose, Write};
use crate::api::NodeMaintenance;
use crate::node::{self, Claimant};

/// What to do with a node's record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum OrphanPlan {
    /// No record, a live holder, or a NodeMaintenance targets the node: leave it.
    Keep,
    /// The vanished holder's maintenance is still (at least partly) in place: invalidate our
    /// lease, then exit by its record (every mark it says we added that is still there).
    Restore {
        /// The vanished holder's name.
        holder: String,
    },
    /// The record describes a maintenance someone else already ended: drop the record only.
    DropRecord,
}

/// Decides the fate of `node`'s record. `is_live(name, uid)` tells whether a NodeMaintenance of
/// that name (and uid, when recorded) exists; `targeted` whether any NodeMaintenance names the
/// node in `spec.nodeName` or entered it (that one's reconcile settles the record instead);
/// `our_lease` whether the node's medik8s lease exists with our holder identity.
pub(crate) fn orphan_plan(
    node: &Node,
    is_live: node::HolderLive<'_>,
    targeted: bool,
    our_lease: bool,
) -> OrphanPlan {
    let state = node::observe(node);
    let Some(holder) = state.holder.clone() else {
        return OrphanPlan::Keep;
    };
    if targeted || is_live(&holder, state.holder_uid.as_deref()) {
        return OrphanPlan::Keep;
    }
    // Only the operator puts the drain taint (when the record says it was not there before)
    // and our lease on a node: either one left means nobody ended this maintenance.
    if node::record_in_place(node) || our_lease {
        OrphanPlan::Restore { holder }
    } else {
        OrphanPlan::DropRecord
    }
}

/// Settles the records of the nodes named on `candidates` until the channel closes (when the
/// controller's watches end). Errors are logged; the next event about the node retries.
pub(crate) async fn run(
    ctx: Arc<Context>,
    mut candidates: tokio::sync::mpsc::UnboundedReceiver<String>,
) {
    let mut synced = ctx.nms_synced.clone();
    if synced.wait_for(|v| *v).await.is_err() {
        return;
    }
    while let Some(name) = candidates.recv().await {
        if let Err(error) = settle(&ctx, &name).await {
            tracing::warn!(node = %name, %error, "could not settle the record of a vanished NodeMaintenance; retrying");
            tokio::spawn(retry(ctx.clone(), name));
        }
    }
}

/// Retries settling `name` after a failure, 2 s doubling to 32 s, since nothing else may name
/// the node again (a node event comes only when it changes).
async fn retry(ctx: Arc<Context>, name: String) {
    let mut wait = std::time::Duration::from_secs(2);
    for _ in 0..5 {
        tokio::time::sleep(wait).await;
        match settle(&ctx, &name).await {
            Ok(()) => return,
            Err(error) => {
                tracing::warn!(node = %name, %error, "could not settle the record of a vanished NodeMaintenance")
            }
        }
        wait *= 2;
    }
}

/// Whether `nm` names `node` (`spec.nodeName`) or entered it (its record of the node entered).
pub(super) fn targets(nm: &NodeMaintenance, node: &str) -> bool {
    nm.spec.node_name == node || super::plan::entered_node(nm) == Some(node)
}

/// Why a node could not be settled; the sweep retries it.
#[derive(Debug, thiserror::Error)]
enum SettleError {
    #[error("{0}")]
    Node(#[from] kube::Error),
    #[error("{0}")]
    Lease(#[from] crate::lease::LeaseError),
    #[error("{0}")]
    Write(#[from] super::context::Error),
    #[error("the node or its lease changed while it was settled")]
    Stopped,
}

/// The writes that settle `node`'s record (pure): for [`OrphanPlan::Restore`], our lease given up
/// first, then the exit by the vanished holder's record (the record on the node is what brings
/// the node back here when a step fails, so it goes last); for [`OrphanPlan::DropRecord`], the
/// record's annotations removed.
pub(crate) fn orphan_writes(plan: &OrphanPlan, node: &Node, lease: Option<&Lease>) -> Vec<Write> {
    let name = node.name_any();
    let mut writes = Vec::new();
    match plan {
        OrphanPlan::Keep => {}
        OrphanPlan::Restore { holder } => {
            if let crate::lease::Invalidation::Delete {
                name,
                uid,
                resource_version,
            } = crate::lease::invalidation(lease)
            {
                writes.push(Write::DeleteLease {
                    name,
                    uid,
                    resource_version,
                });
            }
            let state = node::observe(node);
            let vanished = Claimant {
                name: holder,
                uid: state.holder_uid.as_deref(),
            };
            if let node::ExitPlan::Apply { patch, .. } = node::plan_exit_for(node, vanished) {
                writes.push(Write::Node {
                    name,
                    patch,
                    purpose: NodePurpose::Exit,
                });
            }
        }
        OrphanPlan::DropRecord => {
            let mut annotations = Map::new();
            for key in node::RECORD_ANNOTATIONS {
                annotations.insert(key.into(), Value::Null);
            }
            let patch = serde_json::json!({"metadata": {
                "resourceVersion": node.resource_version(),
                "annotations": annotations,
            }});
            writes.push(Write::Node {
                name,
                patch,
                purpose: NodePurpose::Exit,
            });
        }
    }
    writes
}

/// The Node lifecycle conditions on `node` that name a NodeMaintenance that no longer exists
/// (by name: the conditions carry no uid) and that no NodeMaintenance targets, ended (all False,
/// `MaintenanceEnded`); `None` when there are none to end.
pub(crate) fn orphan_conditions(
    node: &Node,
    is_live: node::HolderLive<'_>,
    targeted: bool,
    now: jiff::Timestamp,
) -> Option<Write> {
    let named = node::conditions::named(node)?;
    if targeted || is_live(named, None) || !node::conditions::any_true(node) {
        return None;
    }
    let patch = node::conditions::patch(node, named, None, now)?;
    Some(Write::NodeConditions {
        name: node.name_any(),
        patch,
    })
}

async fn settle(ctx: &Context, name: &str) -> Result<(), SettleError> {
    let Some(node) = ctx.nodes.get_opt(name).await? else {
        return Ok(());
    };
    let targeted = ctx.store.state().iter().any(|nm| targets(nm, name));
    let is_live = |holder: &str, uid: Option<&str>| super::observe::in_cache(ctx, holder, uid);
    if let Some(ended) = orphan_conditions(&node, &is_live, targeted, jiff::Timestamp::now()) {
        tracing::info!(node = %name, "ending the lifecycle conditions of a vanished NodeMaintenance");
        if let super::act::Executed::Stopped = super::act::execute_unowned(ctx, vec![ended]).await?
        {
            return Err(SettleError::Stopped);
        }
    }
    if orphan_plan(&node, &is_live, targeted, true) == OrphanPlan::Keep {
        return Ok(());
    }
    // The lease is read only for a record nobody owns (rare), and before any write.
    let lease = ctx.leases.get(name).await?;
    let our_lease = crate::lease::held_by_us(lease.as_ref());
    let plan = orphan_plan(&node, &is_live, targeted, our_lease);
    match &plan {
        OrphanPlan::Keep => return Ok(()),
        OrphanPlan::Restore { holder } => {
            tracing::warn!(node = %name, vanished_holder = %holder, "restoring a node whose NodeMaintenance vanished without its cleanup");
        }
        OrphanPlan::DropRecord => {
            tracing::info!(node = %name, "dropping the record of a vanished NodeMaintenance whose maintenance was already ended");
        }
    }
    let writes = orphan_writes(&plan, &node, lease.as_ref());
    match super::act::execute_unowned(ctx, writes).await? {
        super::act::Executed::Done => Ok(()),
        super::act::Executed::Stopped => Err(SettleError::Stopped),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::{
        HOLDER_ANNOTATION, HOLDER_UID_ANNOTATION, PRIOR_STATE_ANNOTATION, REASON_ANNOTATION,
    };
    use serde_json::json;

    fn node(annotations: Value, marked: bool) -> Node {
        let (unschedulable, taints, labels) = if marked {
            (
                true,
                json!([
                    {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"},
                    {"key": "medik8s.io/drain", "effect": "NoSchedule"},
                ]),
                json!({"remediation.medik8s.io/exclude-from-remediation": "true"}),
            )
        } else {
            (false, json!([]), json!({}))
        };
        serde_json::from_value(json!({
            "metadata": {"name": "n", "resourceVersion": "7", "annotations": annotations, "labels": labels},
            "spec": {"unschedulable": unschedulable, "taints": taints},
        }))
        .unwrap()
    }

    #[test]
    fn only_an_untargeted_record_of_a_vanished_holder_is_settled() {
        let record = json!({HOLDER_ANNOTATION: "b", HOLDER_UID_ANNOTATION: "u1"});
        let gone: node::HolderLive<'_> = &|_, _| false;
        let alive: node::HolderLive<'_> = &|n, u| n == "b" && u == Some("u1");
        let recreated: node::HolderLive<'_> = &|n, u| n == "b" && u == Some("u2");
        let restore = OrphanPlan::Restore { holder: "b".into() };
        assert_eq!(
            orphan_plan(&node(record.clone(), true), gone, false, true),
            restore
        );
        assert_eq!(
            orphan_plan(&node(record.clone(), true), recreated, false, true),
            restore,
            "same name, another object"
        );
        assert_eq!(
            orphan_plan(&node(record.clone(), false), gone, false, false),
            OrphanPlan::DropRecord
        );
        assert_eq!(
            orphan_plan(&node(record.clone(), true), alive, false, true),
            OrphanPlan::Keep
        );
        assert_eq!(
            orphan_plan(&node(record.clone(), true), gone, true, true),
            OrphanPlan::Keep,
            "a NodeMaintenance for the node settles it"
        );
        assert_eq!(
            orphan_plan(&node(json!({}), true), gone, false, true),
            OrphanPlan::Keep,
            "no record: upstream's maintenance is not ours to end"
        );
    }

    /// `docs/drain-contract.md` §6: the operator uninstalled mid-maintenance, the finalizer removed by hand,
    /// the node uncordoned by hand (the node lifecycle controller then drops the unschedulable
    /// taint). The drain taint, the label and our lease are left: the maintenance is still in
    /// place, so everything the record says we added is removed; an admin's own taint and
    /// label value that predated it stay.
    #[test]
    fn a_partly_undone_maintenance_is_restored_mark_by_mark() {
        let gone: node::HolderLive<'_> = &|_, _| false;
        let prior = json!({"unschedulable": false, "taints": [{"key": "admin", "effect": "NoSchedule"}], "excludeLabel": false, "excludeLabelValue": "no"});
        let uncordoned: Node = serde_json::from_value(json!({
            "metadata": {
                "name": "n",
                "resourceVersion": "7",
                "annotations": {HOLDER_ANNOTATION: "b", HOLDER_UID_ANNOTATION: "u1", PRIOR_STATE_ANNOTATION: prior.to_string(), REASON_ANNOTATION: "r"},
                "labels": {"remediation.medik8s.io/exclude-from-remediation": "true", "team": "x"},
            },
            "spec": {"taints": [
                {"key": "medik8s.io/drain", "effect": "NoSchedule"},
                {"key": "admin", "effect": "NoSchedule"},
            ]},
        }))
        .unwrap();
        let restore = OrphanPlan::Restore { holder: "b".into() };
        assert_eq!(orphan_plan(&uncordoned, gone, false, false), restore);
        let node::ExitPlan::Apply { patch, uncordon } = node::plan_exit_for(
            &uncordoned,
            Claimant {
                name: "b",
                uid: Some("u1"),
            },
        ) else {
            panic!("a record of the vanished holder is exited by it");
        };
        assert!(!uncordon, "already uncordoned by hand");
        assert_eq!(
            patch,
            json!({
                "metadata": {
                    "resourceVersion": "7",
                    "labels": {"remediation.medik8s.io/exclude-from-remediation": "no"},
                    "annotations": {HOLDER_ANNOTATION: null, HOLDER_UID_ANNOTATION: null, PRIOR_STATE_ANNOTATION: null, REASON_ANNOTATION: null},
                },
                "spec": {"taints": [{"key": "admin", "effect": "NoSchedule"}]},
            })
        );

        // The drain taint gone too, but our lease left: still ours to end.
        let mut no_taint = uncordoned.clone();
        no_taint.spec.as_mut().unwrap().taints = None;
        assert_eq!(orphan_plan(&no_taint, gone, false, true), restore);
        // Neither left: someone ended it; the label now on the node is theirs.
        assert_eq!(
            orphan_plan(&no_taint, gone, false, false),
            OrphanPlan::DropRecord
        );
        // A drain taint that predated the maintenance is no evidence of ours.
        let mut prior_taint = uncordoned.clone();
        prior_taint.metadata.annotations.as_mut().unwrap().insert(
            PRIOR_STATE_ANNOTATION.into(),
            json!({"taints": [{"key": "medik8s.io/drain", "effect": "NoSchedule"}]}).to_string(),
        );
        assert_eq!(
            orphan_plan(&prior_taint, gone, false, false),
            OrphanPlan::DropRecord
        );
    }

    #[test]
    fn conditions_of_a_vanished_maintenance_are_ended_and_a_live_ones_kept() {
        let now = jiff::Timestamp::from_second(1_800_000_000).unwrap();
        let mut n = node(json!({}), false);
        let planned =
            crate::node::conditions::Lifecycle::of(crate::api::Stage::Idle, false, false, false);
        let patch = crate::node::conditions::patch(&n, "gone", Some(planned), now).unwrap();
        n.status = Some(serde_json::from_value(patch["status"].clone()).unwrap());
        let vanished = |_: &str, _: Option<&str>| false;
        let live = |_: &str, _: Option<&str>| true;
        assert!(orphan_conditions(&n, &live, false, now).is_none());
        assert!(orphan_conditions(&n, &vanished, true, now).is_none());
        let Some(Write::NodeConditions { patch, .. }) =
            orphan_conditions(&n, &vanished, false, now)
        else {
            panic!("the conditions of a vanished maintenance are ended");
        };
        assert!(
            patch["status"]["conditions"]
                .as_array()
                .unwrap()
                .iter()
                .all(|c| c["status"] == "False" && c["reason"] == "MaintenanceEnded")
        );
    }
}
