//! One reconcile of a NodeMaintenance (docs/design.md §1): [`observe`](super::observe) reads
//! what the pass needs into one [`Observed`](plan::Observed), the pure [`plan::plan`] decides the
//! whole pass, and [`act::execute`] sends its writes in order, stopping at the first failure.
//! When the plan ends in a drain round, the round has the same shape: the drain observes the
//! pods, plans the evictions and sends them (`crate::drain`), the pure [`plan::drained_plan`]
//! turns the answers into the status and events, and the executor writes them.
//!
//! The plan orders every status change before the node change it covers (status initialised to
//! Running before the node is touched, lease ownership before entering, the lease error count
//! before leaving), so a failed reconcile never leaves a node changed without the status saying
//! so. A write whose precondition fails ends the pass with a short requeue.

use std::sync::Arc;
use std::time::Duration;

use kube::ResourceExt;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::Action;
use tracing::Instrument;

use super::act;
use super::context::{Context, Error, MAX_ERROR_BACKOFF, RECONCILE_TIMEOUT, invalid_fields_of};
use super::memory::error_backoff;
use super::observe::observe;
use super::plan::{self, Then};
use crate::api::NodeMaintenance;

/// Next pass after a write found its object changed or gone: at once, but not in a loop.
const REQUEUE_STOPPED: Duration = Duration::from_millis(250);

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
        let result = tokio::time::timeout(RECONCILE_TIMEOUT, pass(&nm, &ctx))
            .await
            .unwrap_or(Err(Error::Timeout(RECONCILE_TIMEOUT)));
        tracing::debug!("Reconcile completed");
        result
    }
    .instrument(span)
    .await;
    match &result {
        Ok(_) => ctx.memory.succeeded(&name),
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
    ctx.wake_admitted();
    result
}

/// Back-off after a failed reconcile: 1 s for a stale copy of the object (the watch brings the
/// new one), otherwise [`error_backoff`] of this object's failures in a row, up to 5 min.
pub(crate) fn error_policy(nm: Arc<NodeMaintenance>, err: &Error, ctx: Arc<Context>) -> Action {
    if err.is_stale_object() {
        tracing::debug!(nodemaintenance = %nm.name_any(), error = %err, "stale NodeMaintenance, retrying");
        return Action::requeue(Duration::from_secs(1));
    }
    let delay = error_backoff(ctx.memory.failed(&nm.name_any()), MAX_ERROR_BACKOFF);
    if let Some(fields) = err.invalid_fields() {
        // 422: the API server refused what we wrote. Retrying cannot fix it, so it backs off like
        // any error (never the quick retry of a stale copy) and says which field.
        tracing::error!(nodemaintenance = %nm.name_any(), fields = %fields.join(","), error = %err, retry_in = ?delay, "the API server refused a write as Invalid (a bug in what we write)");
    }
    tracing::warn!(nodemaintenance = %nm.name_any(), error = %err, retry_in = ?delay, "Reconciling with exponential duration");
    Action::requeue(delay)
}

/// One pass: observe, plan, act; then the drain round when the plan ends in one.
async fn pass(nm: &NodeMaintenance, ctx: &Context) -> Result<Action, Error> {
    let observed = observe(nm, ctx).await?;
    let plan = plan::plan(&observed, jiff::Timestamp::now());
    tracing::debug!(writes = ?plan.preconditions(), then = ?plan.then, "planned");
    let mut current = observed.nm;
    let Some(then) = act::carry_out(ctx, &mut current, plan).await? else {
        return Ok(Action::requeue(REQUEUE_STOPPED));
    };
    let round = match then {
        Then::Requeue(requeue) => return Ok(act::action(requeue)),
        Then::Drain(round) => round,
        Then::Preflight(round) => {
            let blockers = ctx.drainer.preflight(&round.node, &round.policy).await?;
            let plan = plan::preflight_plan(&round, &blockers, jiff::Timestamp::now());
            return Ok(match act::carry_out(ctx, &mut current, plan).await? {
                Some(Then::Requeue(requeue)) => act::action(requeue),
                _ => Action::requeue(REQUEUE_STOPPED),
            });
        }
    };
    if !super::observe::may_evict(ctx, &current).await {
        tracing::debug!("NodeMaintenance may be deleting; drain round deferred");
        return Ok(Action::requeue(Duration::from_secs(1)));
    }
    tracing::debug!("Evict all Pods from Node");
    let report = ctx
        .drainer
        .pass(
            &round.node,
            round.started,
            &round.policy,
            &super::observe::standing(ctx, &current),
        )
        .await?;
    if !report.done() {
        tracing::info!(pending = report.pending.len(), "Not all pods evicted");
    }
    // `waitForVolumeDetach`: once no pod is left, the node's VolumeAttachments.
    let volumes = match round.policy.wait_for_volume_detach {
        Some(_) if report.done() => {
            let client = ctx.nodes.clone().into_client();
            Some(crate::drain::volume_detach::read_attachments(&client, &round.node).await)
        }
        _ => None,
    };
    let plan = plan::drained_plan(&round, &report, volumes.as_ref(), jiff::Timestamp::now());
    Ok(match act::carry_out(ctx, &mut current, plan).await? {
        Some(Then::Requeue(requeue)) => act::action(requeue),
        _ => Action::requeue(REQUEUE_STOPPED),
    })
}

/// Best effort: say in `status.lastError` what went wrong (the next successful pass replaces it).
async fn record_error(nm: &NodeMaintenance, ctx: &Context, err: &Error) {
    let Some(patch) = plan::last_error_patch(nm, &err.to_string(), jiff::Timestamp::now()) else {
        return;
    };
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
            kube::Error::Api(s) => invalid_fields_of(s),
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
