//! One reconcile of a NodeMaintenance: the steps of upstream's reconcile (docs/design.md §1) in
//! their order, with the decisions taken by `plan` and the I/O done here.
//!
//! Every status change is recorded before acting on the node where it matters (status
//! initialised to Running before the node is touched, lease ownership before entering, the lease
//! error count before leaving), so a failed reconcile never leaves a node changed without the
//! status saying so. Status writes are JSON merge patches on the status subresource carrying
//! `metadata.resourceVersion` (a stale copy gets a 409 and is retried from the watch's newer
//! one) and explicit nulls for cleared fields; nothing is written when only `lastUpdate` would
//! change. Events are published after the write they belong to.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, ObjectReference};
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType};
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use tracing::Instrument;

use super::plan::{
    self, DeletionPlan, Entry, EventTarget, LeaseObservation, LeaseStep, NodeSeen, PlannedEvent,
    Requeue, Step,
};
use super::{Context, Error, MAX_ERROR_BACKOFF};
use crate::api::{
    ENTERED_NODE_ANNOTATION, FINALIZER, MaintenancePhase, NodeMaintenance, NodeMaintenanceStatus,
};
use crate::lease::LeaseError;
use crate::node::{self, Claimant, EnterOutcome, ExitOutcome, NodeError};

/// Reconciles one NodeMaintenance (kube-runtime reconciler). On error, the error text is written
/// to `status.lastError` (best effort) before returning, since `error_policy` cannot do I/O.
///
/// # Errors
/// [`Error`]: node, lease, drain, finalizer or status API failures.
pub async fn reconcile(nm: Arc<NodeMaintenance>, ctx: Arc<Context>) -> Result<Action, Error> {
    let _timer = ctx.metrics.reconcile();
    let name = nm.name_any();
    let span = tracing::info_span!("reconcile", nodemaintenance = %name, node = %nm.spec.node_name);
    let result = async {
        tracing::debug!("Reconciling NodeMaintenance");
        let result = tokio::time::timeout(super::RECONCILE_TIMEOUT, reconcile_inner(&nm, &ctx))
            .await
            .unwrap_or(Err(Error::Timeout(super::RECONCILE_TIMEOUT)));
        tracing::debug!("Reconcile completed");
        result
    }
    .instrument(span)
    .await;
    match &result {
        Ok(_) => {
            ctx.failures
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&name);
        }
        Err(err) => {
            ctx.metrics.reconcile_failure(err.metric_label());
            // Also while deleting: a cleanup that failed half-way (node restored, lease or
            // finalizer not) must say so, as upstream's error sink does (docs/compat.md §5).
            if !err.is_stale_object() {
                record_error(&nm, &ctx, err).await;
            }
        }
    }
    ctx.update_phase_gauges();
    result
}

/// Back-off after a failed reconcile: 1 s for a stale copy of the object (the watch brings the
/// new one), otherwise 1 s doubling per consecutive failure of this object up to 5 min.
pub fn error_policy(nm: Arc<NodeMaintenance>, err: &Error, ctx: Arc<Context>) -> Action {
    if err.is_stale_object() {
        tracing::debug!(nodemaintenance = %nm.name_any(), error = %err, "stale NodeMaintenance, retrying");
        return Action::requeue(Duration::from_secs(1));
    }
    let mut failures = ctx.failures.lock().unwrap_or_else(|e| e.into_inner());
    let n = failures.entry(nm.name_any()).or_default();
    *n = n.saturating_add(1);
    let delay = Duration::from_secs(1)
        .saturating_mul(2u32.saturating_pow((*n - 1).min(16)))
        .min(MAX_ERROR_BACKOFF);
    if let Some(fields) = err.invalid_fields() {
        // 422: the API server refused what we wrote. Retrying cannot fix it, so it backs off like
        // any error (never the quick retry of a stale copy) and says which field.
        tracing::error!(nodemaintenance = %nm.name_any(), fields = %fields.join(","), error = %err, retry_in = ?delay, "the API server refused a write as Invalid (a bug in what we write)");
    }
    tracing::warn!(nodemaintenance = %nm.name_any(), error = %err, retry_in = ?delay, "Reconciling with exponential duration");
    Action::requeue(delay)
}

async fn reconcile_inner(nm: &NodeMaintenance, ctx: &Context) -> Result<Action, Error> {
    let mut current = nm.clone();
    loop {
        match plan::entry(&current) {
            Entry::Ignore => return Ok(Action::await_change()),
            Entry::Cleanup => return cleanup(&current, ctx).await,
            Entry::AddFinalizer => {
                current = add_finalizer(&current, ctx).await?;
                publish(
                    ctx,
                    &current,
                    None,
                    &PlannedEvent::normal(EventTarget::Maintenance, plan::event::BEGIN),
                )
                .await;
                // Continue in the same pass, as upstream does.
            }
            Entry::Terminal => return Ok(Action::await_change()),
            Entry::InvalidNodeName(why) => {
                if let Some(action) = leave_if_node_changed(&mut current, ctx).await? {
                    return Ok(action);
                }
                tracing::warn!(why = %why, "invalid nodeName, not touching any node");
                let old = status_of(&current);
                let step = plan::invalid_node_name(
                    &old,
                    &current.spec.node_name,
                    &why,
                    current.metadata.generation,
                    now(),
                );
                return finish(&mut current, ctx, None, step, Vec::new()).await;
            }
            Entry::Maintain => return maintain(current, ctx).await,
        }
    }
}

fn now() -> jiff::Timestamp {
    jiff::Timestamp::now()
}

fn status_of(nm: &NodeMaintenance) -> NodeMaintenanceStatus {
    nm.status.clone().unwrap_or_default()
}

/// When `spec.nodeName` no longer names the node this NodeMaintenance entered (possible only
/// where neither the webhook nor the CRD's rule guards it, e.g. upstream's CRD with the webhook
/// removed): leaves the node entered first, clears the record and the status so that the next
/// pass starts over on the new node, and returns that pass's action. `None` when nothing changed.
async fn leave_if_node_changed(
    current: &mut NodeMaintenance,
    ctx: &Context,
) -> Result<Option<Action>, Error> {
    let Some(entered) = entered_node(current).filter(|n| *n != current.spec.node_name) else {
        return Ok(None);
    };
    tracing::warn!(entered = %entered, "spec.nodeName changed after the node was entered; restoring that node first");
    let (name, uid) = (current.name_any(), current.metadata.uid.clone());
    let me = Claimant {
        name: &name,
        uid: uid.as_deref(),
    };
    leave_node(ctx, current, &entered, me).await?;
    *current = record_entered_node(ctx, current, None).await?;
    write_status(current, ctx, &NodeMaintenanceStatus::default()).await?;
    Ok(Some(Action::requeue(Duration::from_millis(100))))
}

async fn maintain(mut current: NodeMaintenance, ctx: &Context) -> Result<Action, Error> {
    if let Some(action) = leave_if_node_changed(&mut current, ctx).await? {
        return Ok(action);
    }
    let name = current.name_any();
    let node_name = current.spec.node_name.clone();
    let generation = current.metadata.generation;

    // Status initialisation, recorded before the node is touched.
    let old = status_of(&current);
    if old.phase.is_none() {
        tracing::info!(
            reason = current.spec.reason.as_deref().unwrap_or_default(),
            "Applying maintenance mode"
        );
        let survey = ctx
            .drainer
            .survey(&node_name)
            .await
            .map_err(Error::InitStatus)?;
        if let Some(s) = plan::init_status(&old, &survey, generation, now()) {
            write_status(&mut current, ctx, &s).await?;
        }
    }

    // The node, read directly (not from a cache).
    let Some(node) = ctx
        .nodes
        .get_opt(&node_name)
        .await
        .map_err(Error::GetNode)?
    else {
        tracing::info!("Didn't find a node matching the NodeName field");
        let step = plan::node_missing(&status_of(&current), &node_name, generation, now());
        return finish(&mut current, ctx, None, step, Vec::new()).await;
    };
    let status = plan::node_present(&status_of(&current));
    let uid = current.metadata.uid.clone();
    let me = Claimant {
        name: &name,
        uid: uid.as_deref(),
    };

    // The medik8s lease.
    let observed = match ctx
        .leases
        .request(&node_name, node.metadata.uid.as_deref())
        .await
    {
        Ok(outcome) => {
            tracing::debug!(?outcome, "lease obtained successfully");
            ctx.lease_waits
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&name);
            LeaseObservation::Held
        }
        Err(err @ LeaseError::AlreadyHeld { .. }) => LeaseObservation::AlreadyHeld(err.to_string()),
        Err(err) => return Err(err.into()),
    };
    let record = node::observe(&node);
    let entered = record
        .holder
        .as_deref()
        .is_some_and(|h| me.owns(h, record.holder_uid.as_deref()));
    let status = match plan::lease_result(&status, &observed, entered, generation, now()) {
        LeaseStep::Proceed(s) => {
            // Record ownership (and a phase back from Failed) before touching the node.
            write_status(&mut current, ctx, &s).await?;
            s
        }
        LeaseStep::Wait(step) => {
            tracing::info!(error = %step.status.last_error.as_deref().unwrap_or_default(), "lease is held by another entity");
            return finish(&mut current, ctx, Some(&node), step, Vec::new()).await;
        }
        LeaseStep::Stop(step) => {
            tracing::warn!("lease could not be extended, failing maintenance");
            write_status(&mut current, ctx, &step.status).await?;
            let uncordoned = match node::exit(&ctx.nodes, &node_name, me).await {
                Ok(ExitOutcome::Restored { uncordoned }) => uncordoned,
                Ok(ExitOutcome::NotHeld(_)) | Err(NodeError::NotFound(_)) => false,
                Err(e) => return Err(Error::StopAfterLeaseLoss(e)),
            };
            invalidate_lease(ctx, &node_name).await?;
            let failed = plan::lease_failed(&step.status, uncordoned, generation, now());
            return finish(&mut current, ctx, Some(&node), failed, Vec::new()).await;
        }
    };

    // Cordon, taint, label (one patch; re-applied when someone undid part of it), after the
    // node to restore at the end is recorded on the NodeMaintenance.
    if entered_node(&current).as_deref() != Some(node_name.as_str()) {
        current = record_entered_node(ctx, &current, Some(&node_name)).await?;
    }
    let reason = current.spec.reason.clone();
    let is_live = |holder: &str, uid: Option<&str>| holder_is_live(ctx, holder, uid);
    let outcome = node::enter_from(
        &ctx.nodes,
        &node_name,
        Some(node.clone()),
        me,
        reason.as_deref(),
        &is_live,
    )
    .await;
    let repaired = match outcome {
        Ok(EnterOutcome::HeldBy(other)) => {
            let step = plan::held_by_other(&status, &node_name, &other, generation, now());
            return finish(&mut current, ctx, Some(&node), step, Vec::new()).await;
        }
        Ok(EnterOutcome::Repaired(what)) => {
            tracing::warn!(repaired = ?what, "maintenance had been partly undone on the node, re-applied");
            what
        }
        Ok(EnterOutcome::Entered {
            cordoned,
            adopted,
            discarded,
        }) => {
            if let Some(vanished) = discarded {
                tracing::warn!(vanished_holder = %vanished, "the node carried the record of a NodeMaintenance that no longer exists and not the marks it describes; prior state recorded afresh");
            }
            tracing::info!(
                cordoned,
                adopted,
                "Maintenance taints will be added to node {node_name}"
            );
            Vec::new()
        }
        Ok(EnterOutcome::TookOver { from }) => {
            tracing::warn!(vanished_holder = %from, "node is held by a NodeMaintenance that no longer exists and still carries its maintenance, taking it over");
            Vec::new()
        }
        Ok(EnterOutcome::ReasonUpdated | EnterOutcome::Unchanged) => Vec::new(),
        Err(NodeError::NotFound(_)) => {
            let step = plan::node_missing(&status, &node_name, generation, now());
            return finish(&mut current, ctx, None, step, Vec::new()).await;
        }
        Err(e) => return Err(e.into()),
    };
    let (status, enter_events) = plan::entered(&status, &node_name, &repaired, generation, now());

    // An eviction cannot be taken back, so none on the word of a copy that may be stale: the
    // cache's copy must not be deleting (a reconcile started before a relist finished holds the
    // copy from before it), and while the watch is away a quorum read must confirm the object
    // (docs/design.md §7).
    if !may_evict(ctx, &current).await {
        for event in &enter_events {
            publish(ctx, &current, Some(&node), event).await;
        }
        tracing::debug!("NodeMaintenance may be deleting; drain pass deferred");
        return Ok(Action::requeue(Duration::from_secs(1)));
    }
    // One drain pass.
    tracing::debug!("Evict all Pods from Node");
    let report = match ctx.drainer.pass(&node_name, now()).await {
        Ok(report) => report,
        Err(e) => {
            // The node was repaired even though the pass failed; the next pass sees nothing to
            // repair, so this is the only chance to say what had been undone.
            for event in &enter_events {
                publish(ctx, &current, Some(&node), event).await;
            }
            return Err(e.into());
        }
    };
    for (result, n) in &report.evictions.by_result {
        for _ in 0..*n {
            ctx.metrics.eviction(result);
        }
    }
    let step = plan::drained(&status, &report, generation, now());
    if step.status.phase == Some(MaintenancePhase::Succeeded)
        && status.phase != Some(MaintenancePhase::Succeeded)
    {
        if let Some(start) = &step.status.drain_start_time {
            ctx.metrics
                .drain_duration(now().duration_since(start.0).as_secs_f64().max(0.0));
        }
        tracing::info!("Maintenance was completed - all pods were evicted");
    } else if !report.done() {
        tracing::info!(pending = report.pending.len(), "Not all pods evicted");
    }
    finish(&mut current, ctx, Some(&node), step, enter_events).await
}

/// Whether a drain pass may evict for `nm`: the cache's copy exists with the same uid and is not
/// deleting, and, while the NodeMaintenance watch is away ([`Context::nms_synced`] false), a GET
/// from the API server says the same. A failed GET defers the pass.
async fn may_evict(ctx: &Context, nm: &NodeMaintenance) -> bool {
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

/// Whether the NodeMaintenance a node record names still exists: in the cache under that name,
/// with that uid when one is recorded. Until the cache has listed everything, every holder
/// counts as live (the record is kept); after that the cache is complete, and the holder
/// annotation is only ever written for objects in it.
fn holder_is_live(ctx: &Context, holder: &str, uid: Option<&str>) -> bool {
    if !*ctx.nms_synced.borrow() {
        return true;
    }
    ctx.store
        .get(&ObjectRef::new(holder))
        .is_some_and(|o| uid.is_none_or(|u| o.metadata.uid.as_deref() == Some(u)))
}

/// The node this NodeMaintenance entered ([`ENTERED_NODE_ANNOTATION`]), if recorded.
fn entered_node(nm: &NodeMaintenance) -> Option<String> {
    nm.annotations().get(ENTERED_NODE_ANNOTATION).cloned()
}

/// Records (`Some`) or clears (`None`) the entered node on the NodeMaintenance: a merge patch of
/// one annotation, preconditioned on the resourceVersion read (409 on a concurrent change).
async fn record_entered_node(
    ctx: &Context,
    nm: &NodeMaintenance,
    node: Option<&str>,
) -> Result<NodeMaintenance, Error> {
    let patch = serde_json::json!({"metadata": {
        "resourceVersion": nm.resource_version(),
        "annotations": {ENTERED_NODE_ANNOTATION: node},
    }});
    ctx.nms
        .patch(
            &nm.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
        .map_err(Error::RecordEnteredNode)
}

/// Takes `node` out of maintenance for `me` (when it still holds it) and invalidates its lease
/// (when we held the node: a node held by another NodeMaintenance keeps the lease that one
/// renews); `UncordonNode` when it was uncordoned. A missing node counts as left.
async fn leave_node(
    ctx: &Context,
    nm: &NodeMaintenance,
    node: &str,
    me: Claimant<'_>,
) -> Result<(), Error> {
    match node::exit(&ctx.nodes, node, me).await {
        Ok(ExitOutcome::Restored { uncordoned }) => {
            if uncordoned {
                let read = ctx.nodes.get_opt(node).await.ok().flatten();
                let e = PlannedEvent::normal(EventTarget::Node, plan::event::UNCORDON);
                publish_on(ctx, nm, node, read.as_ref(), &e).await;
            }
            invalidate_lease(ctx, node).await
        }
        Err(NodeError::NotFound(_)) => invalidate_lease(ctx, node).await,
        Ok(ExitOutcome::NotHeld(holder)) => {
            tracing::info!(node, holder = ?holder, "the node entered first is not held by this NodeMaintenance any more");
            Ok(())
        }
        Err(e) => Err(e.into()),
    }
}

/// Records `step`'s status (when it changed), publishes its events and turns its requeue into an
/// action.
async fn finish(
    current: &mut NodeMaintenance,
    ctx: &Context,
    node: Option<&Node>,
    step: Step,
    mut events: Vec<PlannedEvent>,
) -> Result<Action, Error> {
    write_status(current, ctx, &step.status).await?;
    events.extend(step.events);
    for e in &events {
        publish(ctx, current, node, e).await;
    }
    Ok(match step.requeue {
        Requeue::After(d) => Action::requeue(d),
        Requeue::Fixed(d) => {
            tracing::info!(duration = ?d, "Reconciling with fixed duration");
            Action::requeue(d)
        }
        Requeue::LeaseWait => {
            let mut waits = ctx.lease_waits.lock().unwrap_or_else(|e| e.into_inner());
            let n = waits.entry(current.name_any()).or_default();
            let d = plan::lease_wait(*n);
            *n = n.saturating_add(1);
            Action::requeue(d)
        }
        Requeue::Never => Action::await_change(),
    })
}

/// Writes `new` as the status when it differs from the stored one in more than `lastUpdate`, and
/// keeps `current` up to date (resourceVersion included) for the next write.
async fn write_status(
    current: &mut NodeMaintenance,
    ctx: &Context,
    new: &NodeMaintenanceStatus,
) -> Result<(), Error> {
    let schema = ctx
        .status_schema
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    if !plan::needs_write(&status_of(current), new, &schema.pruned()) {
        return Ok(());
    }
    let patch = plan::status_patch(new, current.resource_version().as_deref());
    if schema.has_unknown(new) {
        // A field whose fate is unknown yet (the first writes of a process): ask the API server,
        // without writing, what it would keep, so that a write is skipped when only pruned
        // fields differ (a restart over upstream's CRD).
        let dry_run = ctx
            .nms
            .patch_status(
                &current.name_any(),
                &PatchParams::default().dry_run(),
                &Patch::Merge(&patch),
            )
            .await
            .map_err(Error::Status)?;
        let pruned = learn_status_schema(ctx, new, dry_run.status.as_ref());
        if !plan::needs_write(&status_of(current), new, &pruned) {
            return Ok(());
        }
    }
    let updated = ctx
        .nms
        .patch_status(
            &current.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
        .map_err(Error::Status)?;
    learn_status_schema(ctx, new, updated.status.as_ref());
    *current = updated;
    Ok(())
}

/// Learns which fields of `sent` the API server kept in `stored`, logs newly pruned ones, and
/// returns every pruned field.
fn learn_status_schema(
    ctx: &Context,
    sent: &NodeMaintenanceStatus,
    stored: Option<&NodeMaintenanceStatus>,
) -> Vec<String> {
    let mut schema = ctx.status_schema.lock().unwrap_or_else(|e| e.into_inner());
    let fresh = schema.learn(sent, stored);
    if !fresh.is_empty() {
        tracing::info!(fields = %fresh.join(","), "the API server prunes these status fields (upstream's CRD schema); they are not compared");
    }
    schema.pruned()
}

/// Best effort: say in `status.lastError` what went wrong (the next successful pass replaces it).
async fn record_error(nm: &NodeMaintenance, ctx: &Context, err: &Error) {
    let text = err.to_string();
    if nm.status.as_ref().and_then(|s| s.last_error.as_deref()) == Some(text.as_str()) {
        return;
    }
    let patch =
        serde_json::json!({"status": {"lastError": text, "lastUpdate": plan::now_time(now())}});
    if let Err(e) = ctx
        .nms
        .patch_status(
            &nm.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
    {
        let fields = match &e {
            kube::Error::Api(s) => super::invalid_fields_of(s),
            _ => None,
        };
        match fields {
            Some(fields) => {
                tracing::error!(fields = %fields.join(","), error = %e, "the API server refused the lastError write as Invalid (a bug in what we write)")
            }
            None => {
                tracing::warn!(error = %e, "Failed to update NodeMaintenance with the last error")
            }
        }
    }
}

async fn add_finalizer(nm: &NodeMaintenance, ctx: &Context) -> Result<NodeMaintenance, Error> {
    // The `test` op makes the add optimistic: it fails (and is retried) if someone changed the
    // finalizers meanwhile, since the API server does not deduplicate them.
    let list = nm.finalizers();
    let patch = if list.is_empty() {
        serde_json::json!([
            {"op": "test", "path": "/metadata/finalizers", "value": null},
            {"op": "add", "path": "/metadata/finalizers", "value": [FINALIZER]},
        ])
    } else {
        serde_json::json!([
            {"op": "test", "path": "/metadata/finalizers", "value": list},
            {"op": "add", "path": "/metadata/finalizers/-", "value": FINALIZER},
        ])
    };
    json_patch(ctx, nm, patch)
        .await
        .map_err(Error::AddFinalizer)
}

async fn remove_finalizer(nm: &NodeMaintenance, ctx: &Context) -> Result<(), Error> {
    let Some(i) = nm.finalizers().iter().position(|f| f == FINALIZER) else {
        return Ok(());
    };
    let path = format!("/metadata/finalizers/{i}");
    let patch = serde_json::json!([
        {"op": "test", "path": path, "value": FINALIZER},
        {"op": "remove", "path": path},
    ]);
    match json_patch(ctx, nm, patch).await {
        Ok(_) => Ok(()),
        // Already gone (someone removed the finalizer and the object with it).
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(Error::RemoveFinalizer(e)),
    }
}

async fn json_patch(
    ctx: &Context,
    nm: &NodeMaintenance,
    ops: serde_json::Value,
) -> Result<NodeMaintenance, kube::Error> {
    let patch: json_patch::Patch = serde_json::from_value(ops).map_err(kube::Error::SerdeError)?;
    ctx.nms
        .patch(
            &nm.name_any(),
            &PatchParams::default(),
            &Patch::<()>::Json(patch),
        )
        .await
}

/// Invalidates the lease of `node`; a lease held by another holder (remediation) is left alone.
async fn invalidate_lease(ctx: &Context, node: &str) -> Result<(), Error> {
    match ctx.leases.invalidate(node).await {
        Ok(()) => Ok(()),
        Err(LeaseError::AlreadyHeld { .. }) => {
            tracing::info!(
                "lease is held by another entity, then skipping invalidation when stopping node maintenance"
            );
            Ok(())
        }
        Err(e) => Err(e.into()),
    }
}

/// The deletion path (docs/design.md §3: restore, or hand over to a successor): restore the node if we
/// hold it and nobody else wants it, invalidate the lease, then remove the finalizer.
async fn cleanup(nm: &NodeMaintenance, ctx: &Context) -> Result<Action, Error> {
    let name = nm.name_any();
    let uid = nm.metadata.uid.clone();
    let me = Claimant {
        name: &name,
        uid: uid.as_deref(),
    };
    // The node actually entered, whatever spec.nodeName says now (docs/design.md §1).
    let node_name = &entered_node(nm).unwrap_or_else(|| nm.spec.node_name.clone());
    if plan::validate_node_name(node_name).is_ok() {
        let node = ctx.nodes.get_opt(node_name).await.map_err(Error::GetNode)?;
        // A record of our name but another uid is an earlier object's: not ours to restore.
        let holder = node.as_ref().and_then(|n| {
            let state = node::observe(n);
            let h = state.holder?;
            Some(if me.owns(&h, state.holder_uid.as_deref()) || h != name {
                h
            } else {
                format!("{h} (uid {})", state.holder_uid.unwrap_or_default())
            })
        });
        let seen = match &node {
            None => NodeSeen::Missing,
            Some(_) => NodeSeen::Holder(holder.as_deref()),
        };
        let all = ctx.store.state();
        let successor = plan::successor(nm, node_name, all.iter().map(|o| o.as_ref()));
        match plan::deletion_plan(
            seen,
            &name,
            successor.as_ref().map(|s| s.name_any()).as_deref(),
        ) {
            DeletionPlan::Exit => {
                tracing::info!("Maintenance taints  will be removed from node {node_name}");
                match node::exit_from(&ctx.nodes, node_name, node.clone(), me).await {
                    Ok(ExitOutcome::Restored { uncordoned: true }) => {
                        let e = PlannedEvent::normal(EventTarget::Node, plan::event::UNCORDON);
                        publish_on(ctx, nm, node_name, node.as_ref(), &e).await;
                    }
                    Ok(_) | Err(NodeError::NotFound(_)) => {}
                    Err(e) => return Err(e.into()),
                }
                invalidate_lease(ctx, node_name).await?;
            }
            DeletionPlan::Transfer { to } => {
                tracing::info!(successor = %to, "handing the node over to the next NodeMaintenance");
                let to_uid = successor.as_ref().and_then(|s| s.metadata.uid.clone());
                let to = Claimant {
                    name: &to,
                    uid: to_uid.as_deref(),
                };
                match node::transfer(&ctx.nodes, node_name, &name, to).await {
                    Ok(_) | Err(NodeError::NotFound(_)) => {}
                    Err(e) => return Err(e.into()),
                }
            }
            DeletionPlan::InvalidateLease => {
                // A node left in maintenance by upstream NMO (its drain taint, none of our
                // annotations) whose NodeMaintenance is deleted before we ever entered it: hand it
                // back as upstream would have, by adopting it and exiting at once.
                if node.as_ref().is_some_and(|n| node::observe(n).drain_taint)
                    && nm.status.as_ref().and_then(|s| s.phase).is_some()
                {
                    tracing::info!(
                        "adopting a node left in maintenance by upstream NMO, to restore it"
                    );
                    match node::enter(&ctx.nodes, node_name, me, None, &|_, _| true).await {
                        // Whatever `enter` recorded, what it entered must be exited.
                        Ok(node::EnterOutcome::Entered { .. }) => {
                            match node::exit(&ctx.nodes, node_name, me).await {
                                Ok(ExitOutcome::Restored { uncordoned: true }) => {
                                    let e = PlannedEvent::normal(
                                        EventTarget::Node,
                                        plan::event::UNCORDON,
                                    );
                                    publish_on(ctx, nm, node_name, node.as_ref(), &e).await;
                                }
                                Ok(_) | Err(NodeError::NotFound(_)) => {}
                                Err(e) => return Err(e.into()),
                            }
                        }
                        Ok(_) | Err(NodeError::NotFound(_)) => {}
                        Err(e) => return Err(e.into()),
                    }
                }
                if node.is_none() {
                    tracing::info!("node not found, invalidating its lease by name");
                }
                match ctx.leases.invalidate(node_name).await {
                    Ok(()) => {}
                    Err(LeaseError::AlreadyHeld { .. }) => {
                        tracing::info!(
                            "lease is held by another entity, skipping invalidation during deletion cleanup"
                        );
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            DeletionPlan::Nothing => {
                tracing::info!(holder = ?holder, "node is held by another NodeMaintenance, leaving it alone");
            }
        }
    }
    remove_finalizer(nm, ctx).await?;
    publish(
        ctx,
        nm,
        None,
        &PlannedEvent::normal(EventTarget::Maintenance, plan::event::REMOVED),
    )
    .await;
    ctx.lease_waits
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .remove(&name);
    Ok(Action::await_change())
}

fn node_ref(name: &str, node: Option<&Node>) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Node".into()),
        name: Some(name.to_owned()),
        uid: node.and_then(|n| n.metadata.uid.clone()),
        ..ObjectReference::default()
    }
}

/// Publishes an event (a Node event about `spec.nodeName`); a failure is logged, never fails the
/// reconcile.
async fn publish(ctx: &Context, nm: &NodeMaintenance, node: Option<&Node>, e: &PlannedEvent) {
    let name = node
        .and_then(|n| n.metadata.name.clone())
        .unwrap_or_else(|| nm.spec.node_name.clone());
    publish_on(ctx, nm, &name, node, e).await;
}

/// As [`publish`], with a Node event about node `node_name`.
async fn publish_on(
    ctx: &Context,
    nm: &NodeMaintenance,
    node_name: &str,
    node: Option<&Node>,
    e: &PlannedEvent,
) {
    let reference = match e.target {
        EventTarget::Maintenance => nm.object_ref(&()),
        EventTarget::Node => node_ref(node_name, node),
    };
    let event = Event {
        type_: if e.warning {
            EventType::Warning
        } else {
            EventType::Normal
        },
        reason: e.reason.to_string(),
        note: Some(e.message.clone()),
        action: e.reason.to_string(),
        secondary: None,
    };
    if let Err(err) = ctx.recorder.publish(&event, &reference).await {
        tracing::warn!(reason = e.reason, error = %err, "failed to publish event");
    }
}
