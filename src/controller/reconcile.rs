//! One reconcile of a NodeMaintenance in three steps (docs/design.md §1): `observe` reads what
//! the pass needs into one [`Observed`], the pure [`plan::plan`] decides the whole pass, and
//! `act` carries it out in order, stopping at the first failure.
//!
//! The plan orders every status change before the node change it covers (status initialised to
//! Running before the node is touched, lease ownership before entering, the lease error count
//! before leaving), so a failed reconcile never leaves a node changed without the status saying
//! so. Status writes are JSON merge patches on the status subresource carrying
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
    self, DeletionStep, Entry, EventTarget, MaintenanceStep, Observed, ObservedMaintenance,
    PassEnd, Plan, PlannedEvent, Requeue, Step, Work, World,
};
use super::{Context, Error, MAX_ERROR_BACKOFF};
use crate::api::{
    DRAIN_STARTED_ANNOTATION, ENTERED_NODE_ANNOTATION, FINALIZER, MaintenancePhase,
    NodeMaintenance, NodeMaintenanceStatus,
};
use crate::lease::LeaseError;
use crate::node::{self, Claimant, EnterOutcome, ExitOutcome, NodeError};

/// Reconciles one NodeMaintenance (kube-runtime reconciler). On error, the error text is written
/// to `status.lastError` (best effort) before returning, since `error_policy` cannot do I/O.
///
/// # Errors
/// [`Error`]: node, lease, drain, finalizer or status API failures.
pub(crate) async fn reconcile(
    nm: Arc<NodeMaintenance>,
    ctx: Arc<Context>,
) -> Result<Action, Error> {
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
pub(crate) fn error_policy(nm: Arc<NodeMaintenance>, err: &Error, ctx: Arc<Context>) -> Action {
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

/// One pass: observe, plan, act (docs/design.md §1).
async fn reconcile_inner(nm: &NodeMaintenance, ctx: &Context) -> Result<Action, Error> {
    let observed = observe(nm, ctx).await?;
    let plan = plan::plan(&observed, now());
    tracing::debug!(?plan, "planned");
    act(observed, plan, ctx).await
}

fn now() -> jiff::Timestamp {
    jiff::Timestamp::now()
}

fn status_of(nm: &NodeMaintenance) -> NodeMaintenanceStatus {
    nm.status.clone().unwrap_or_default()
}

/// Reads everything the pass needs (what it reads follows [`plan::entry_with_finalizer`]).
///
/// # Errors
/// Read failures the planner does not decide on: [`Error::InitStatus`] (pod survey),
/// [`Error::GetNode`], [`Error::Lease`] (the lease read). A missing node is an observation.
async fn observe(nm: &NodeMaintenance, ctx: &Context) -> Result<Observed, Error> {
    let world = match plan::entry_with_finalizer(nm).1 {
        Entry::Cleanup => World::Deletion(Box::new(observe_deletion(nm, ctx).await?)),
        Entry::Maintain => World::Maintenance(Box::new(observe_maintenance(nm, ctx).await?)),
        Entry::InvalidNodeName(_) => World::Maintenance(Box::default()),
        Entry::Ignore | Entry::Terminal | Entry::AddFinalizer => World::Nothing,
    };
    Ok(Observed {
        nm: nm.clone(),
        world,
    })
}

/// The maintenance pass's reads, in the order the pass needs them: the pods while the status is
/// not initialised, the node (directly, not from a cache), then the lease and whether the
/// node's recorded holder still exists. Nothing when the node entered is not the one named.
async fn observe_maintenance(
    nm: &NodeMaintenance,
    ctx: &Context,
) -> Result<ObservedMaintenance, Error> {
    let mut o = ObservedMaintenance {
        holder_live: true,
        ..ObservedMaintenance::default()
    };
    if plan::node_changed(nm) {
        return Ok(o);
    }
    let node_name = nm.spec.node_name.as_str();
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
    let record = node::observe(node);
    if let Some(holder) = record.holder.as_deref() {
        o.holder_live = holder_is_live(ctx, holder, record.holder_uid.as_deref());
    }
    o.lease = ctx.leases.get(node_name).await?;
    Ok(o)
}

/// Carries out `plan` in its order (the finalizer, then the work) and stops at the first
/// failure, which the next pass observes (its error is written to `status.lastError` by
/// [`reconcile`]).
async fn act(observed: Observed, plan: Plan, ctx: &Context) -> Result<Action, Error> {
    let mut current = observed.nm;
    if plan.add_finalizer {
        current = add_finalizer(&current, ctx).await?;
        let begin = PlannedEvent::normal(EventTarget::Maintenance, plan::event::BEGIN);
        publish(ctx, &current, None, &begin).await;
    }
    match (plan.work, observed.world) {
        (Work::Deletion(steps), World::Deletion(o)) => {
            act_deletion(&current, ctx, &o, steps).await?;
            ctx.metrics.forget_maintenance(&o.name);
            ctx.lease_waits
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&o.name);
            Ok(Action::await_change())
        }
        (Work::Maintenance { steps, end }, World::Maintenance(o)) => {
            act_maintenance(current, ctx, &o, steps, *end).await
        }
        // `plan` returns deletion or maintenance work only for the matching observation.
        _ => Ok(Action::await_change()),
    }
}

/// Carries out the maintenance steps in order, then the pass's end.
async fn act_maintenance(
    mut current: NodeMaintenance,
    ctx: &Context,
    o: &ObservedMaintenance,
    steps: Vec<MaintenanceStep>,
    end: PassEnd,
) -> Result<Action, Error> {
    let name = current.name_any();
    let uid = current.metadata.uid.clone();
    let me = Claimant {
        name: &name,
        uid: uid.as_deref(),
    };
    let node_name = current.spec.node_name.clone();
    let node = o.node.as_ref();
    for step in steps {
        match step {
            MaintenanceStep::LeaveEnteredNode(entered) => {
                tracing::warn!(entered = %entered, "spec.nodeName changed after the node was entered; restoring that node first");
                leave_node(ctx, &current, &entered, me).await?;
            }
            MaintenanceStep::RecordEnteredNode(record, started) => {
                current = record_entered_node(ctx, &current, record.as_deref(), started).await?;
            }
            MaintenanceStep::WriteStatus(s) => write_status(&mut current, ctx, &s).await?,
            MaintenanceStep::RequestLease => {
                let node_uid = node.and_then(|n| n.metadata.uid.as_deref());
                let read = Some(o.lease.clone());
                let outcome = ctx.leases.request_from(&node_name, node_uid, read).await?;
                tracing::debug!(?outcome, "lease obtained successfully");
                ctx.lease_waits
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(&name);
            }
            MaintenanceStep::ExitNodeAfterLeaseLoss => {
                tracing::warn!("lease could not be extended, failing maintenance");
                match node::exit(&ctx.nodes, &node_name, me).await {
                    Ok(_) | Err(NodeError::NotFound(_)) => ctx.metrics.lease_lost(),
                    Err(e) => return Err(Error::StopAfterLeaseLoss(e)),
                }
            }
            MaintenanceStep::InvalidateLease => invalidate_lease(ctx, &node_name).await?,
            MaintenanceStep::EnterNode => {
                if let Some(action) = enter_node(ctx, &current, node, me).await? {
                    return Ok(action);
                }
            }
        }
    }
    match end {
        PassEnd::Finish(step) => {
            if step.requeue == Requeue::LeaseWait {
                tracing::info!(error = %step.status.last_error.as_deref().unwrap_or_default(), "lease is held by another entity");
            }
            finish(&mut current, ctx, node, step, Vec::new()).await
        }
        PassEnd::Drain {
            status,
            events,
            drain_started,
        } => drain(current, ctx, node, status, events, drain_started).await,
    }
}

/// Cordons, taints and labels the node (one patch; re-applied when someone undid part of it).
/// `Some` ends the pass with an immediate requeue: the node was found held by another
/// NodeMaintenance or gone since it was observed, and nothing was written to it.
async fn enter_node(
    ctx: &Context,
    current: &NodeMaintenance,
    node: Option<&Node>,
    me: Claimant<'_>,
) -> Result<Option<Action>, Error> {
    let node_name = current.spec.node_name.as_str();
    let is_live = |holder: &str, uid: Option<&str>| holder_is_live(ctx, holder, uid);
    let reason = current.spec.reason.as_deref();
    let outcome = node::enter_from(&ctx.nodes, node_name, node.cloned(), me, reason, &is_live);
    match outcome.await {
        Ok(EnterOutcome::HeldBy(other)) => {
            tracing::info!(holder = %other, "the node was taken by another NodeMaintenance since it was read; starting over");
            return Ok(Some(Action::requeue(Duration::from_millis(100))));
        }
        Err(NodeError::NotFound(_)) => {
            tracing::info!("the node disappeared since it was read; starting over");
            return Ok(Some(Action::requeue(Duration::from_millis(100))));
        }
        Ok(EnterOutcome::Repaired(what)) => {
            tracing::warn!(repaired = ?what, "maintenance had been partly undone on the node, re-applied");
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
        }
        Ok(EnterOutcome::TookOver { from }) => {
            tracing::warn!(vanished_holder = %from, "node is held by a NodeMaintenance that no longer exists and still carries its maintenance, taking it over");
        }
        Ok(EnterOutcome::ReasonUpdated | EnterOutcome::Unchanged) => {}
        Err(e) => return Err(e.into()),
    }
    Ok(None)
}

/// One drain pass, then the status [`plan::drained`] makes of its report, with `enter_events`
/// (the node entry's) published after it, or alone when the pass fails: the next pass sees
/// nothing to repair, so this is the only chance to say what had been undone.
async fn drain(
    mut current: NodeMaintenance,
    ctx: &Context,
    node: Option<&Node>,
    status: NodeMaintenanceStatus,
    enter_events: Vec<PlannedEvent>,
    drain_started: Option<jiff::Timestamp>,
) -> Result<Action, Error> {
    let node_name = current.spec.node_name.clone();
    // An eviction cannot be taken back, so none on the word of a copy that may be stale: the
    // cache's copy must not be deleting (a reconcile started before a relist finished holds the
    // copy from before it), and while the watch is away a quorum read must confirm the object
    // (docs/design.md §7). Checked here, at the last moment before evicting, not observed with
    // the rest of the pass.
    if !may_evict(ctx, &current).await {
        for event in &enter_events {
            publish(ctx, &current, node, event).await;
        }
        tracing::debug!("NodeMaintenance may be deleting; drain pass deferred");
        return Ok(Action::requeue(Duration::from_secs(1)));
    }
    tracing::debug!("Evict all Pods from Node");
    let report = match ctx.drainer.pass(&node_name, drain_started, now()).await {
        Ok(report) => report,
        Err(e) => {
            for event in &enter_events {
                publish(ctx, &current, node, event).await;
            }
            return Err(e.into());
        }
    };
    for (result, n) in &report.evictions.by_result {
        for _ in 0..*n {
            ctx.metrics.eviction(result);
        }
    }
    let step = plan::drained(&status, &report, current.metadata.generation, now());
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
    finish(&mut current, ctx, node, step, enter_events).await
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

/// Records (`Some`) or clears (`None`) the entered node and the drain's start on the
/// NodeMaintenance: a merge patch of two annotations, preconditioned on the resourceVersion read
/// (409 on a concurrent change).
async fn record_entered_node(
    ctx: &Context,
    nm: &NodeMaintenance,
    node: Option<&str>,
    started: Option<jiff::Timestamp>,
) -> Result<NodeMaintenance, Error> {
    // Whole seconds, like the creation timestamps it is compared with.
    let started = started.and_then(|t| jiff::Timestamp::from_second(t.as_second()).ok());
    let patch = serde_json::json!({"metadata": {
        "resourceVersion": nm.resource_version(),
        "annotations": {
            ENTERED_NODE_ANNOTATION: node,
            DRAIN_STARTED_ANNOTATION: started.map(|t| t.to_string()),
        },
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
    // From the planned status, not the stored one: upstream's CRD prunes `blockers`.
    let running = step.status.phase == Some(MaintenancePhase::Running);
    ctx.metrics.set_blockers(
        &current.name_any(),
        &current.spec.node_name,
        step.status
            .blockers
            .iter()
            .flatten()
            .filter(|_| running)
            .map(|b| b.reason.as_str()),
    );
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
    // An API server's or a webhook's message can be any length (docs/drain-contract.md §5).
    let text =
        crate::drain::bounds::truncate(&err.to_string(), crate::drain::bounds::MAX_ERROR * 4);
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
        Err(kube::Error::Api(s)) if s.is_not_found() => Ok(()),
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

/// Reads what the deletion pass needs: the node actually entered (whatever `spec.nodeName`
/// says now, docs/design.md §1), read directly, and the successor from the cache.
///
/// # Errors
/// [`Error::GetNode`] when the node cannot be read (a missing node is an observation).
async fn observe_deletion(
    nm: &NodeMaintenance,
    ctx: &Context,
) -> Result<plan::ObservedDeletion, Error> {
    let node_name = plan::entered_node(nm).map_or_else(|| nm.spec.node_name.clone(), str::to_owned);
    let (node, successor) = if plan::validate_node_name(&node_name).is_ok() {
        let node = ctx
            .nodes
            .get_opt(&node_name)
            .await
            .map_err(Error::GetNode)?;
        let all = ctx.store.state();
        let successor = plan::successor(nm, &node_name, all.iter().map(|o| o.as_ref()))
            .map(|s| (s.name_any(), s.metadata.uid.clone()));
        (node, successor)
    } else {
        (None, None)
    };
    Ok(plan::ObservedDeletion {
        name: nm.name_any(),
        uid: nm.metadata.uid.clone(),
        node_name,
        node,
        successor,
        started: nm.status.as_ref().and_then(|s| s.phase).is_some(),
    })
}

/// Carries out the deletion steps in order, stopping at the first failure.
async fn act_deletion(
    nm: &NodeMaintenance,
    ctx: &Context,
    o: &plan::ObservedDeletion,
    steps: Vec<DeletionStep>,
) -> Result<(), Error> {
    let me = Claimant {
        name: &o.name,
        uid: o.uid.as_deref(),
    };
    let node_name = o.node_name.as_str();
    let uncordon = PlannedEvent::normal(EventTarget::Node, plan::event::UNCORDON);
    if steps
        .iter()
        .all(|s| matches!(s, DeletionStep::RemoveFinalizer | DeletionStep::Publish(_)))
        && plan::validate_node_name(node_name).is_ok()
    {
        let holder = o.node.as_ref().and_then(|n| node::observe(n).holder);
        tracing::info!(holder = ?holder, "node is held by another NodeMaintenance, leaving it alone");
    }
    for step in steps {
        match step {
            DeletionStep::ExitNode => {
                tracing::info!("Maintenance taints  will be removed from node {node_name}");
                match node::exit_from(&ctx.nodes, node_name, o.node.clone(), me).await {
                    Ok(ExitOutcome::Restored { uncordoned: true }) => {
                        publish_on(ctx, nm, node_name, o.node.as_ref(), &uncordon).await;
                    }
                    Ok(_) | Err(NodeError::NotFound(_)) => {}
                    Err(e) => return Err(e.into()),
                }
            }
            DeletionStep::TransferNode { to, to_uid } => {
                tracing::info!(successor = %to, "handing the node over to the next NodeMaintenance");
                let to = Claimant {
                    name: &to,
                    uid: to_uid.as_deref(),
                };
                match node::transfer(&ctx.nodes, node_name, &o.name, to).await {
                    Ok(_) | Err(NodeError::NotFound(_)) => {}
                    Err(e) => return Err(e.into()),
                }
            }
            DeletionStep::AdoptAndExit => {
                tracing::info!(
                    "adopting a node left in maintenance by upstream NMO, to restore it"
                );
                match node::enter(&ctx.nodes, node_name, me, None, &|_, _| true).await {
                    // Whatever `enter` recorded, what it entered must be exited.
                    Ok(EnterOutcome::Entered { .. }) => {
                        match node::exit(&ctx.nodes, node_name, me).await {
                            Ok(ExitOutcome::Restored { uncordoned: true }) => {
                                publish_on(ctx, nm, node_name, o.node.as_ref(), &uncordon).await;
                            }
                            Ok(_) | Err(NodeError::NotFound(_)) => {}
                            Err(e) => return Err(e.into()),
                        }
                    }
                    Ok(_) | Err(NodeError::NotFound(_)) => {}
                    Err(e) => return Err(e.into()),
                }
            }
            DeletionStep::InvalidateLease => {
                if o.node.is_none() {
                    tracing::info!("node not found, invalidating its lease by name");
                }
                invalidate_lease(ctx, node_name).await?;
            }
            DeletionStep::RemoveFinalizer => remove_finalizer(nm, ctx).await?,
            DeletionStep::Publish(e) => publish(ctx, nm, None, &e).await,
        }
    }
    Ok(())
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
    let regarding = reference.name.as_deref().unwrap_or_default();
    let now = jiff::Timestamp::now();
    let nanos = u64::try_from(now.as_nanosecond()).unwrap_or_default();
    let result = if format!("{regarding}.{nanos:x}").len() > MAX_EVENT_NAME {
        publish_shortened(ctx, &event, reference, now, nanos).await
    } else {
        ctx.recorder.publish(&event, &reference).await
    };
    if let Err(err) = result {
        tracing::warn!(reason = e.reason, error = %err, "failed to publish event");
    }
}

/// Longest name an Event may have (a DNS-1123 subdomain): 253.
const MAX_EVENT_NAME: usize = 253;

/// The name of an Event about `regarding`: `<regarding>.<nanoseconds in hex>`, client-go's and
/// kube's form, with `regarding` cut (and trailing `.`/`-` dropped) so the whole fits in 253
/// characters. Tools find events by `regarding`/`involvedObject`, never by the event's name, so
/// the cut loses nothing; without it an event about a node or NodeMaintenance whose name has
/// more than 236 characters is refused with 422 (`docs/drain-contract.md` §7).
pub(crate) fn event_name(regarding: &str, nanos: u64) -> String {
    let suffix = format!(".{nanos:x}");
    let mut keep = MAX_EVENT_NAME
        .saturating_sub(suffix.len())
        .min(regarding.len());
    while !regarding.is_char_boundary(keep) {
        keep -= 1;
    }
    let prefix = regarding[..keep].trim_end_matches(['.', '-']);
    format!("{prefix}{suffix}")
}

/// Publishes `event` as kube's [`Recorder`](kube::runtime::events::Recorder) would, under the
/// shortened [`event_name`]; used only when the recorder's name would be too long. Such events
/// are never repeated into a series (each of ours is published once per transition).
async fn publish_shortened(
    ctx: &Context,
    event: &Event,
    reference: ObjectReference,
    now: jiff::Timestamp,
    nanos: u64,
) -> Result<(), kube::Error> {
    use k8s_openapi::api::events::v1::Event as K8sEvent;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
    let namespace = reference
        .namespace
        .clone()
        .unwrap_or_else(|| "default".to_string());
    let k8s = K8sEvent {
        metadata: kube::api::ObjectMeta {
            name: Some(event_name(
                reference.name.as_deref().unwrap_or_default(),
                nanos,
            )),
            namespace: Some(namespace.clone()),
            ..Default::default()
        },
        action: Some(event.action.clone()),
        reason: Some(event.reason.clone()),
        note: event.note.clone(),
        event_time: Some(MicroTime(now)),
        regarding: Some(reference),
        reporting_controller: Some(super::REPORTER.to_string()),
        reporting_instance: Some(
            ctx.reporter_instance
                .clone()
                .unwrap_or_else(|| super::REPORTER.to_string()),
        ),
        type_: Some(
            match event.type_ {
                EventType::Normal => "Normal",
                EventType::Warning => "Warning",
            }
            .to_string(),
        ),
        ..Default::default()
    };
    kube::Api::<K8sEvent>::namespaced(ctx.nms.clone().into_client(), &namespace)
        .create(&Default::default(), &k8s)
        .await
        .map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_names_fit_the_api_limit_whatever_the_object_name() {
        let nanos = 0x1873_0f2a_9b4c_d5e6;
        assert_eq!(event_name("node-a", nanos), "node-a.18730f2a9b4cd5e6");
        for len in [236, 237, 240, 248, 253] {
            let regarding = format!("{}{}", "a".repeat(len - 2), "-b");
            let name = event_name(&regarding, nanos);
            assert!(name.len() <= MAX_EVENT_NAME, "{len}: {}", name.len());
            assert!(name.ends_with(".18730f2a9b4cd5e6"), "{name}");
            assert!(crate::api::validate_node_name(&name).is_ok(), "{name}");
        }
        // A cut that would leave a trailing '-' or '.' before the suffix drops it.
        let regarding = format!("{}-{}", "a".repeat(235), "b".repeat(10));
        let name = event_name(&regarding, nanos);
        assert_eq!(name, format!("{}.18730f2a9b4cd5e6", "a".repeat(235)));
    }
}
