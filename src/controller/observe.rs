//! The reads of a pass, into one [`Observed`]: what [`plan::reads`] says the pass needs, plus
//! what earlier passes remember (`memory.rs`). Nothing here decides or writes; a dry run that
//! learns the status schema is the one request that looks like a write, and it changes nothing.

use kube::ResourceExt;
use kube::api::{Patch, PatchParams};
use kube::runtime::reflector::ObjectRef;

use super::memory::StatusSchema;
use super::plan::{self, Observed, ObservedDeletion, ObservedMaintenance, Reads, World};
use super::{Context, Error};
use crate::api::NodeMaintenance;

/// Reads everything the pass of `nm` needs.
///
/// # Errors
/// Read failures the planner does not decide on: [`Error::InitStatus`] (pod survey),
/// [`Error::GetNode`], [`Error::Lease`] (the lease or its namespace). A missing node or lease is
/// an observation.
pub(crate) async fn observe(nm: &NodeMaintenance, ctx: &Context) -> Result<Observed, Error> {
    let reads = plan::reads(nm);
    let world = match reads {
        Reads::Deletion => World::Deletion(Box::new(deletion(nm, ctx).await?)),
        Reads::Maintenance | Reads::EnteredNode => {
            learn_status_schema(nm, ctx).await;
            World::Maintenance(Box::new(maintenance(nm, ctx, reads).await?))
        }
        Reads::Nothing => World::Nothing,
    };
    Ok(Observed {
        nm: nm.clone(),
        world,
        memory: ctx.memory.of(&nm.name_any()),
        schema: ctx.memory.schema(),
    })
}

/// Until the process knows which status fields the installed CRD keeps, asks the API server once,
/// with a dry run of a status that sets every field (upstream's CRD prunes our additions, and a
/// status that differs only in pruned fields must not be written on every pass). Best effort: a
/// failed dry run leaves the schema unknown, which costs at most an extra write.
async fn learn_status_schema(nm: &NodeMaintenance, ctx: &Context) {
    let probe = StatusSchema::probe(jiff::Timestamp::now());
    if !ctx.memory.schema().has_unknown(&probe) {
        return;
    }
    let patch = serde_json::json!({ "status": probe });
    let params = PatchParams::default().dry_run();
    match ctx
        .nms
        .patch_status(&nm.name_any(), &params, &Patch::Merge(&patch))
        .await
    {
        Ok(stored) => {
            let pruned = ctx.memory.learn(&probe, stored.status.as_ref());
            if !pruned.is_empty() {
                tracing::info!(fields = %pruned.join(","), "the API server prunes these status fields (upstream's CRD schema); they are not compared");
            }
        }
        Err(e) => tracing::debug!(error = %e, "could not learn the status schema yet"),
    }
}

/// The maintenance pass's reads, in the order the pass needs them: the pods while the status is
/// not initialised, the node (directly, not from a cache), whether the node's recorded holder
/// still exists, then the lease (and its namespace when there is none). For
/// [`Reads::EnteredNode`], the node entered first and its lease instead.
async fn maintenance(
    nm: &NodeMaintenance,
    ctx: &Context,
    reads: Reads,
) -> Result<ObservedMaintenance, Error> {
    let mut o = ObservedMaintenance {
        holder_live: true,
        ..ObservedMaintenance::default()
    };
    if reads == Reads::EnteredNode {
        let entered = plan::entered_node(nm).unwrap_or_default().to_owned();
        let node = ctx.nodes.get_opt(&entered).await.map_err(Error::GetNode)?;
        let lease = ctx.leases.get(&entered).await?;
        o.entered = Some((entered, node, lease));
        return Ok(o);
    }
    let node_name = nm.spec.node_name.as_str();
    if plan::validate_node_name(node_name).is_err() {
        return Ok(o);
    }
    if nm.status.as_ref().and_then(|s| s.phase).is_none() {
        let reason = nm.spec.reason.as_deref().unwrap_or_default();
        tracing::info!(
            reason = %crate::drain::bounds::truncate(reason, crate::drain::bounds::MAX_REASON_ANNOTATION),
            "Applying maintenance mode"
        );
        let survey = ctx
            .drainer
            .survey(node_name)
            .await
            .map_err(Error::InitStatus)?;
        o.survey = Some(survey);
    }
    o.node = ctx.nodes.get_opt(node_name).await.map_err(Error::GetNode)?;
    let Some(node) = &o.node else {
        tracing::info!("Didn't find a node matching the NodeName field");
        return Ok(o);
    };
    let record = crate::node::observe(node);
    if let Some(holder) = record.holder.as_deref() {
        o.holder_live = holder_is_live(ctx, holder, record.holder_uid.as_deref());
    }
    o.lease = ctx.leases.get(node_name).await?;
    if o.lease.is_none() {
        o.lease_namespace_missing = !ctx.leases.namespace_exists().await?;
    }
    Ok(o)
}

/// Reads what the deletion pass needs: the node actually entered (whatever `spec.nodeName`
/// says now, docs/design.md §1) and its lease, read directly, and the successor from the cache.
async fn deletion(nm: &NodeMaintenance, ctx: &Context) -> Result<ObservedDeletion, Error> {
    let node_name = plan::entered_node(nm).map_or_else(|| nm.spec.node_name.clone(), str::to_owned);
    let (mut node, mut successor, mut lease) = (None, None, None);
    if plan::validate_node_name(&node_name).is_ok() {
        node = ctx
            .nodes
            .get_opt(&node_name)
            .await
            .map_err(Error::GetNode)?;
        let all = ctx.store.state();
        successor = plan::successor(nm, &node_name, all.iter().map(|o| o.as_ref()))
            .map(|s| (s.name_any(), s.metadata.uid.clone()));
        lease = ctx.leases.get(&node_name).await?;
    }
    Ok(ObservedDeletion {
        name: nm.name_any(),
        uid: nm.metadata.uid.clone(),
        node_name,
        node,
        successor,
        started: nm.status.as_ref().and_then(|s| s.phase).is_some(),
        lease,
        finalizers: nm.finalizers().to_vec(),
    })
}

/// Whether the NodeMaintenance a node record names still exists: in the cache under that name,
/// with that uid when one is recorded. Until the cache has listed everything, every holder
/// counts as live (the record is kept); after that the cache is complete, and the holder
/// annotation is only ever written for objects in it.
pub(crate) fn holder_is_live(ctx: &Context, holder: &str, uid: Option<&str>) -> bool {
    if !*ctx.nms_synced.borrow() {
        return true;
    }
    ctx.store
        .get(&ObjectRef::new(holder))
        .is_some_and(|o| uid.is_none_or(|u| o.metadata.uid.as_deref() == Some(u)))
}

/// Whether a drain round may evict for `nm`: the cache's copy exists with the same uid and is
/// not deleting, and, while the NodeMaintenance watch is away ([`Context::nms_synced`] false), a
/// GET from the API server says the same. A failed GET defers the round.
///
/// An eviction cannot be taken back, so none on the word of a copy that may be stale (a
/// reconcile started before a relist finished holds the copy from before it; docs/design.md
/// §7). Read at the last moment before evicting, not with the rest of the pass.
pub(crate) async fn may_evict(ctx: &Context, nm: &NodeMaintenance) -> bool {
    let current = |o: &NodeMaintenance| {
        o.metadata.deletion_timestamp.is_none() && o.metadata.uid == nm.metadata.uid
    };
    if !ctx
        .store
        .get(&ObjectRef::from_obj(nm))
        .is_some_and(|o| current(&o))
    {
        return false;
    }
    if *ctx.nms_synced.borrow() {
        return true;
    }
    matches!(ctx.nms.get_opt(&nm.name_any()).await, Ok(Some(o)) if current(&o))
}
