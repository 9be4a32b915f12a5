//! The reads of a pass, into one [`Observed`]: what [`plan::reads`] says the pass needs, plus
//! what earlier passes remember (`memory.rs`); and the reads made later in a pass, right before
//! an eviction: [`may_evict`] before the round, and [`standing`] before each request the round
//! sends (it also wakes the maintenance's next pass when an answer arrives). Nothing here
//! decides or writes to the API server; a dry run that learns the status schema is the one
//! request that looks like a write, and it changes nothing.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use kube::api::{Patch, PatchParams};
use kube::runtime::reflector::ObjectRef;

use super::context::{Context, Error};
use super::memory::StatusSchema;
use super::plan::{self, Observed, ObservedDeletion, ObservedMaintenance, Reads, World};
use crate::api::NodeMaintenance;
use crate::drain::gate::Standing;

/// Reads everything the pass of `nm` needs.
///
/// # Errors
/// Read failures the planner does not decide on: [`Error::InitStatus`] (pod survey),
/// [`Error::GetNode`], [`Error::Lease`] (the lease or its namespace). A missing node or lease is
/// an observation.
pub(crate) async fn observe(nm: &NodeMaintenance, ctx: &Context) -> Result<Observed, Error> {
    let name = nm.name_any();
    let policy = crate::policy::resolve(nm, &ctx.policy);
    let world = match plan::reads(nm) {
        Reads::Deletion {
            node,
            name: node_name,
        } => World::Deletion(Box::new(deletion(nm, ctx, node, node_name).await?)),
        Reads::Maintenance { node, survey } => {
            // The schema's dry run (a process's first passes only) needs none of the other reads.
            let (_, observed) = tokio::join!(
                learn_status_schema(&name, ctx),
                maintenance(ctx, node, survey, nm, &policy.0)
            );
            World::Maintenance(Box::new(observed?))
        }
        Reads::EnteredNode(entered) => {
            learn_status_schema(&name, ctx).await;
            let node = ctx.nodes.get_opt(&entered).await.map_err(Error::GetNode)?;
            let lease = ctx.leases.get(&entered).await?;
            World::Maintenance(Box::new(ObservedMaintenance {
                entered: Some((entered, node, lease)),
                ..ObservedMaintenance::default()
            }))
        }
        Reads::Nothing => World::Nothing,
    };
    Ok(Observed {
        nm: nm.clone(),
        world,
        memory: ctx.memory.of(&name),
        schema: ctx.memory.schema(),
        policy,
    })
}

/// Until the process knows which status fields the installed CRD keeps, asks the API server once,
/// with a dry run of a status that sets every field (upstream's CRD prunes our additions, and a
/// status that differs only in pruned fields must not be written on every pass). Best effort: a
/// failed dry run leaves the schema unknown, which costs at most an extra write.
async fn learn_status_schema(name: &str, ctx: &Context) {
    let probe = StatusSchema::probe(jiff::Timestamp::now());
    if !ctx.memory.schema().has_unknown(&probe) {
        return;
    }
    let patch = serde_json::json!({ "status": probe });
    let params = PatchParams::default().dry_run();
    match ctx
        .nms
        .patch_status(name, &params, &Patch::Merge(&patch))
        .await
    {
        Ok(stored) => ctx.memory.learn(&probe, stored.status.as_ref()),
        Err(e) => tracing::debug!(error = %e, "could not learn the status schema yet"),
    }
}

/// The maintenance pass's reads of `node` (`None`: an invalid name, nothing is read), in the
/// order the pass needs them: the pods when `survey` (the status is not initialised), the node
/// (directly, not from a cache) with the API server's time of that answer ([`read_node`]) and,
/// at the same time, the lease; whether the node's recorded holder still exists; the lease's
/// namespace when there is no lease.
async fn maintenance(
    ctx: &Context,
    node: Option<String>,
    survey: bool,
    nm: &NodeMaintenance,
    policy: &crate::policy::DrainPolicy,
) -> Result<ObservedMaintenance, Error> {
    let mut o = ObservedMaintenance {
        holder_live: true,
        queue: ctx.drain_budget.as_ref().and_then(|budget| {
            let all = ctx.store.state();
            super::queue::place(
                all.iter()
                    .map(AsRef::as_ref)
                    .filter(|nm| crate::policy::drains(nm, &ctx.policy, jiff::Timestamp::now())),
                &nm.name_any(),
                &budget.slots(),
                |n| budget.budgets_of(n),
                &super::plan::timeline::holds,
            )
        }),
        ..ObservedMaintenance::default()
    };
    let Some(node_name) = node else {
        return Ok(o);
    };
    let survey = async {
        if !survey {
            return Ok(None);
        }
        let reason = nm.spec.reason.as_deref().unwrap_or_default();
        tracing::info!(
            reason = %crate::bounds::truncate(reason, crate::bounds::MAX_REASON_ANNOTATION),
            "Applying maintenance mode"
        );
        ctx.drainer
            .survey(&node_name, policy)
            .await
            .map(Some)
            .map_err(Error::InitStatus)
    };
    // Independent reads at once: a pass waits for the slowest, not for each in a row.
    let lease = async {
        let lease = ctx.leases.get(&node_name).await?;
        let namespace_missing = lease.is_none() && !ctx.leases.namespace_exists().await?;
        Ok::<_, Error>((lease, namespace_missing))
    };
    let (survey, node, lease) = tokio::join!(survey, read_node(&ctx.nodes, &node_name), lease);
    o.survey = survey?;
    let (node, server_time) = node.map_err(Error::GetNode)?;
    o.node = node;
    o.server_time = server_time;
    let Some(node) = &o.node else {
        tracing::info!("Didn't find a node matching the NodeName field");
        return Ok(o);
    };
    let record = crate::node::observe(node);
    if let Some(holder) = record.holder.as_deref() {
        o.holder_live = holder_is_live(ctx, holder, record.holder_uid.as_deref());
    }
    (o.lease, o.lease_namespace_missing) = lease?;
    Ok(o)
}

/// Reads Node `name` as `Api::get_opt` does (`None`: 404), with the time the API server answered:
/// the response's `Date` header (an HTTP-date, RFC 9110 section 5.6.7: whole seconds, GMT; every
/// response of kube-apiserver carries it, from Go's `net/http`). That is the clock that stamps
/// pods' `creationTimestamp`, so a drain started at it compares pods by one clock
/// (docs/drain-contract.md §2). `None` when the header is missing or unreadable (a proxy that
/// strips it): the planner then falls back to the operator's clock.
///
/// # Errors
/// The request's: [`kube::Error::Api`] for any answer but 2xx and 404 (the body's `Status`, or
/// one made of its text), transport and decoding errors as kube returns them.
pub(crate) async fn read_node(
    nodes: &kube::Api<Node>,
    name: &str,
) -> Result<(Option<Node>, Option<jiff::Timestamp>), kube::Error> {
    let request = kube::core::Request::new("/api/v1/nodes")
        .get(name, &kube::api::GetParams::default())
        .map_err(kube::Error::BuildRequest)?;
    let client = nodes.clone().into_client();
    match crate::server_time::request_dated::<Node>(&client, request).await {
        Ok((node, date)) => Ok((Some(node), date)),
        Err(kube::Error::Api(status)) if status.is_not_found() => Ok((None, None)),
        Err(e) => Err(e),
    }
}

/// Reads what the deletion pass needs: the node actually entered (whatever `spec.nodeName`
/// says now, docs/design.md §1) and its lease, read directly, and the successor from the cache.
/// `node` is `None` when `node_name` is no valid node name: nothing is read.
async fn deletion(
    nm: &NodeMaintenance,
    ctx: &Context,
    node: Option<String>,
    node_name: String,
) -> Result<ObservedDeletion, Error> {
    let name = nm.name_any();
    let mut o = ObservedDeletion {
        name: name.clone(),
        uid: nm.metadata.uid.clone(),
        node_name,
        started: nm.status.as_ref().and_then(|s| s.phase).is_some(),
        finalizers: nm.finalizers().to_vec(),
        ..ObservedDeletion::default()
    };
    if let Some(node) = node {
        o.node = ctx.nodes.get_opt(&node).await.map_err(Error::GetNode)?;
        o.replaced = o
            .node
            .as_ref()
            .is_some_and(|n| plan::replaced(nm, n).is_some());
        let all = ctx.store.state();
        o.successor = plan::successor(&name, &node, all.iter().map(|o| o.as_ref()))
            .map(|s| (s.name_any(), s.metadata.uid.clone()));
        o.lease = ctx.leases.get(&node).await?;
        o.evacuations = ctx.drainer.evacuations(&node).await.unwrap_or_else(|e| {
            crate::drain::cancel::Evacuations {
                unread: Some(e.to_string()),
                ..Default::default()
            }
        });
    }
    Ok(o)
}

/// Whether the NodeMaintenance a node record names still exists: in the cache under that name,
/// with that uid when one is recorded. Until the cache has listed everything, every holder
/// counts as live (the record is kept); after that the cache is complete, and the holder
/// annotation is only ever written for objects in it.
pub(crate) fn holder_is_live(ctx: &Context, holder: &str, uid: Option<&str>) -> bool {
    !*ctx.nms_synced.borrow() || in_cache(ctx, holder, uid)
}

/// Whether the controller's cache holds NodeMaintenance `name` (with `uid`, when given).
pub(crate) fn in_cache(ctx: &Context, name: &str, uid: Option<&str>) -> bool {
    ctx.store
        .get(&ObjectRef::new(name))
        .is_some_and(|o| uid.is_none_or(|u| o.metadata.uid.as_deref() == Some(u)))
}

/// The precondition of a drain round's evictions, checked as the executor checks every write's:
/// whether it may evict for `nm`. The cache's copy exists with the same uid and is not
/// deleting, and, while the NodeMaintenance watch is away ([`Context::nms_synced`] false), a GET
/// from the API server says the same. A failed GET defers the round.
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

/// What the drain's evictions, each sent on its own, need of `nm`: whether it may still send
/// (`drain::gate::may_send` on the controller's cache: same UID, not being deleted, not paused,
/// in stage Drain; the cache sees a write within moments, so no eviction is sent once a
/// deletion, a pause or a move back is known; its node, as the Node watch holds it, not going
/// down) and how to wake its next pass.
pub(crate) fn standing(ctx: &Context, nm: &NodeMaintenance) -> Standing {
    let store = ctx.store.clone();
    let key = ObjectRef::from_obj(nm);
    let uid = nm.metadata.uid.clone();
    let defaults = ctx.policy.clone();
    let (node_cache, node) = (ctx.node_cache.clone(), nm.spec.node_name.clone());
    let wake = ctx.wake.clone();
    let woken = key.clone();
    Standing {
        uid: nm.metadata.uid.clone(),
        may_send: Arc::new(move || {
            let current = store.get(&key);
            let down = node_cache.get(&node).is_some_and(|e| e.shutting_down);
            crate::drain::gate::may_send(uid.as_deref(), current.as_deref(), &defaults, down)
        }),
        wake: Arc::new(move || {
            let _ = wake.unbounded_send(woken.clone());
        }),
    }
}
