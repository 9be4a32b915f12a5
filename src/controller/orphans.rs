//! Records on nodes whose NodeMaintenance vanished without us (its finalizer removed by hand,
//! the object force-deleted while the operator was down): nobody would ever reconcile them, so
//! the node would stay cordoned and its lease held for nothing (docs/design.md §3).
//!
//! The Node watch and NodeMaintenance deletions name candidate nodes; once the NodeMaintenance
//! cache is complete, a node whose holder record names no live NodeMaintenance (by name and uid)
//! and that no NodeMaintenance targets is settled by [`orphan_plan`]: restored by the record while
//! it still carries every maintenance mark (the vanished holder's maintenance is still in place,
//! so its prior state is still true), otherwise only the record is dropped (someone already ended
//! that maintenance). Its lease is invalidated when ours.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use kube::api::{Patch, PatchParams};
use kube::runtime::reflector::ObjectRef;
use serde_json::{Map, Value};

use super::Context;
use crate::api::{ENTERED_NODE_ANNOTATION, NodeMaintenance};
use crate::node::{
    self, Claimant, ExitOutcome, HOLDER_ANNOTATION, HOLDER_UID_ANNOTATION, PRIOR_STATE_ANNOTATION,
    REASON_ANNOTATION,
};

/// What to do with a node's record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum OrphanPlan {
    /// No record, a live holder, or a NodeMaintenance targets the node: leave it.
    Keep,
    /// The vanished holder's maintenance is still in place: exit by its record.
    Restore {
        /// The vanished holder's name.
        holder: String,
    },
    /// The record describes a maintenance someone else already ended: drop the record only.
    DropRecord,
}

/// Decides the fate of `node`'s record. `is_live(name, uid)` tells whether a NodeMaintenance of
/// that name (and uid, when recorded) exists; `targeted` whether any NodeMaintenance names the
/// node in `spec.nodeName` or entered it (that one's reconcile settles the record instead).
pub(crate) fn orphan_plan(
    node: &Node,
    is_live: node::HolderLive<'_>,
    targeted: bool,
) -> OrphanPlan {
    let state = node::observe(node);
    let Some(holder) = state.holder.clone() else {
        return OrphanPlan::Keep;
    };
    if targeted || is_live(&holder, state.holder_uid.as_deref()) {
        return OrphanPlan::Keep;
    }
    if state.carries_marks() {
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
            tracing::warn!(node = %name, %error, "could not settle the record of a vanished NodeMaintenance");
        }
    }
}

fn targets(nm: &NodeMaintenance, node: &str) -> bool {
    nm.spec.node_name == node
        || nm
            .annotations()
            .get(ENTERED_NODE_ANNOTATION)
            .is_some_and(|n| n == node)
}

async fn settle(ctx: &Context, name: &str) -> Result<(), kube::Error> {
    let Some(node) = ctx.nodes.get_opt(name).await? else {
        return Ok(());
    };
    let targeted = ctx.store.state().iter().any(|nm| targets(nm, name));
    let is_live = |holder: &str, uid: Option<&str>| {
        ctx.store
            .get(&ObjectRef::new(holder))
            .is_some_and(|o| uid.is_none_or(|u| o.metadata.uid.as_deref() == Some(u)))
    };
    match orphan_plan(&node, &is_live, targeted) {
        OrphanPlan::Keep => Ok(()),
        OrphanPlan::Restore { holder } => {
            let state = node::observe(&node);
            let vanished = Claimant {
                name: &holder,
                uid: state.holder_uid.as_deref(),
            };
            tracing::warn!(node = %name, vanished_holder = %holder, "restoring a node whose NodeMaintenance vanished without its cleanup");
            match node::exit_from(&ctx.nodes, name, Some(node.clone()), vanished).await {
                Ok(ExitOutcome::Restored { .. } | ExitOutcome::NotHeld(_))
                | Err(node::NodeError::NotFound(_)) => {}
                Err(node::NodeError::Get(e) | node::NodeError::Patch(e)) => return Err(e),
            }
            match ctx.leases.invalidate(name).await {
                Ok(()) | Err(crate::lease::LeaseError::AlreadyHeld { .. }) => Ok(()),
                Err(e) => {
                    tracing::warn!(node = %name, error = %e, "could not invalidate the lease of a vanished NodeMaintenance");
                    Ok(())
                }
            }
        }
        OrphanPlan::DropRecord => {
            tracing::info!(node = %name, "dropping the record of a vanished NodeMaintenance whose maintenance was already ended");
            let mut annotations = Map::new();
            for key in [
                HOLDER_ANNOTATION,
                HOLDER_UID_ANNOTATION,
                PRIOR_STATE_ANNOTATION,
                REASON_ANNOTATION,
            ] {
                annotations.insert(key.into(), Value::Null);
            }
            let patch = serde_json::json!({"metadata": {
                "resourceVersion": node.resource_version(),
                "annotations": annotations,
            }});
            ctx.nodes
                .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map(|_| ())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(annotations: Value, marked: bool) -> Node {
        let (unschedulable, taints, labels) = if marked {
            (
                true,
                serde_json::json!([
                    {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"},
                    {"key": "medik8s.io/drain", "effect": "NoSchedule"},
                ]),
                serde_json::json!({"remediation.medik8s.io/exclude-from-remediation": "true"}),
            )
        } else {
            (false, serde_json::json!([]), serde_json::json!({}))
        };
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "n", "annotations": annotations, "labels": labels},
            "spec": {"unschedulable": unschedulable, "taints": taints},
        }))
        .unwrap()
    }

    #[test]
    fn only_an_untargeted_record_of_a_vanished_holder_is_settled() {
        let record = serde_json::json!({HOLDER_ANNOTATION: "b", HOLDER_UID_ANNOTATION: "u1"});
        let gone: node::HolderLive<'_> = &|_, _| false;
        let alive: node::HolderLive<'_> = &|n, u| n == "b" && u == Some("u1");
        let recreated: node::HolderLive<'_> = &|n, u| n == "b" && u == Some("u2");
        assert_eq!(
            orphan_plan(&node(record.clone(), true), gone, false),
            OrphanPlan::Restore { holder: "b".into() }
        );
        assert_eq!(
            orphan_plan(&node(record.clone(), true), recreated, false),
            OrphanPlan::Restore { holder: "b".into() },
            "same name, another object"
        );
        assert_eq!(
            orphan_plan(&node(record.clone(), false), gone, false),
            OrphanPlan::DropRecord
        );
        assert_eq!(
            orphan_plan(&node(record.clone(), true), alive, false),
            OrphanPlan::Keep
        );
        assert_eq!(
            orphan_plan(&node(record, true), gone, true),
            OrphanPlan::Keep,
            "a NodeMaintenance for the node settles it"
        );
        assert_eq!(
            orphan_plan(&node(serde_json::json!({}), true), gone, false),
            OrphanPlan::Keep,
            "no record: upstream's maintenance is not ours to end"
        );
    }
}
