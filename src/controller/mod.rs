//! The NodeMaintenance controller: a kube-runtime `Controller` over NodeMaintenances that also
//! watches Nodes, so drift on a node in maintenance (an uncordon, a removed taint or label, the
//! node re-appearing) is corrected at once rather than at the next resync (upstream has no Node
//! watch, docs/compat.md §2).
//!
//! Many NodeMaintenances progress at once ([`ControllerConfig::concurrency`]); the drain never
//! holds a worker: one pass evicts what it can and the reconcile returns a requeue (upstream
//! blocks its single worker for up to 30 s per pass, docs/compat.md §7).
//!
//! - `reconcile.rs`: one pass: observe, plan, act (and the drain round in the same shape);
//! - `observe.rs`: the pass's reads, into one `Observed`;
//! - `plan/`: the pure decision (ordered writes, requeue, memory), unit-tested;
//! - `act.rs`: the executor of a plan's writes;
//! - `memory.rs`: what a restart forgets;
//! - `context.rs`: what every pass shares, and a pass's error;
//! - `triggers.rs`: what starts a reconcile (the NodeMaintenance watch, the Node watch's
//!   changes);
//! - `orphans.rs`: the sweep of records left by NodeMaintenances that vanished without us.

mod act;
mod context;
pub(crate) mod memory;
mod observe;
pub(crate) mod orphans;
pub(crate) mod plan;
pub(crate) mod queue;
mod reconcile;
mod triggers;

use std::future::Future;
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::runtime::controller::{self, Controller};
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::{self, Store};
use kube::{Api, Client, ResourceExt};
use tokio::sync::{mpsc, watch};

use crate::api::NodeMaintenance;
use crate::drain::{DrainOptions, Drainer};
use crate::lease::NodeLeases;
use crate::metrics::Metrics;
use crate::watch::nodes::NodeCache;

pub(crate) use context::{Context, DrainBudget, Error, REPORTER};
pub(crate) use reconcile::{error_policy, reconcile};

/// Settings of the controller, taken from the parsed command line ([`crate::config::Config`]).
#[derive(Clone, Debug)]
pub(crate) struct ControllerConfig {
    /// Namespace of the medik8s per-node leases (`--lease-namespace`/`LEASE_NAMESPACE`, default
    /// `medik8s-leases`).
    pub lease_namespace: String,
    /// NodeMaintenances reconciled at once; 0 means unbounded. One object is never reconciled
    /// concurrently with itself.
    pub concurrency: usize,
    /// Drain settings (the operator's own pod, evicted last).
    pub drain: DrainOptions,
    /// `reportingInstance` of events; the pod name (`--pod-name`/`POD_NAME`) when known.
    pub reporter_instance: Option<String>,
    /// The defaults of the drain knobs (`--drain-paused`).
    pub policy: crate::policy::Defaults,
    /// The cluster-wide drain budget (`--max-parallel-drains`; `None`: unlimited).
    pub max_parallel_drains: Option<crate::policy::DrainLimit>,
    /// The node drain budgets (`--max-parallel-drains-for`).
    pub max_parallel_drains_for: Vec<crate::policy::NodeBudget>,
}

impl From<&crate::config::Config> for ControllerConfig {
    fn from(config: &crate::config::Config) -> Self {
        Self {
            lease_namespace: config.lease_namespace.clone(),
            concurrency: usize::from(config.max_concurrent_reconciles),
            drain: DrainOptions {
                own_pod: config.own_pod(),
                honor_opt_out: config.honor_opt_out_annotations,
                // Each maintenance's own, resolved with the flag as its default, replaces it
                // (`DrainOptions::with_daemon_sets`).
                daemon_sets: crate::api::DaemonSets::default(),
            },
            reporter_instance: config.pod_name().map(str::to_owned),
            policy: crate::policy::defaults(&config.knobs),
            max_parallel_drains: config.max_parallel_drains,
            max_parallel_drains_for: config.max_parallel_drains_for.clone(),
        }
    }
}

/// Runs the controller until `shutdown` completes; in-flight reconciles finish first.
///
/// `client` serves reads, watches and writes; `send` the drain's evictions and forced deletions
/// ([`crate::drain::SendClients`]).
/// `nodes` is the process's Node watch, whose changes trigger reconciles; with a drain budget,
/// the controller first waits for its first list.
/// Returns when shut down; watch errors are logged and retried with back-off.
pub(crate) async fn run(
    client: Client,
    send: crate::drain::SendClients,
    config: ControllerConfig,
    nodes: NodeCache,
    metrics: Arc<Metrics>,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) {
    if config.max_parallel_drains.is_some() || !config.max_parallel_drains_for.is_empty() {
        // The drain budgets count nodes and read which budgets select each: a reconcile before
        // the Node watch has listed them would see none, and let every maintenance drain.
        let _ = nodes.synced().wait_for(|v| *v).await;
    }
    let nms: Api<NodeMaintenance> = Api::all(client.clone());
    let (store, writer) = reflector::store::<NodeMaintenance>();
    let (nms_synced_tx, nms_synced) = watch::channel(false);
    // Nodes that may carry the record of a NodeMaintenance that vanished without us.
    let (orphan_tx, orphan_rx) = mpsc::unbounded_channel::<String>();
    let own_writes = memory::OwnWrites::default();
    let nm_triggers = triggers::maintenances(
        nms.clone(),
        writer,
        nms_synced_tx,
        orphan_tx.clone(),
        own_writes.clone(),
        metrics.clone(),
    );
    // Aborted with the controller: the budgets are read only by its drain rounds.
    let (budgets, watch_budgets, relaxed) = crate::drain::BudgetWatch::start(client.clone());
    let budget_watch = tokio::spawn(watch_budgets);
    let (migrations, watch_migrations) =
        crate::drain::migration::MigrationWatch::start(client.clone()).await;
    let migration_watch = watch_migrations.map(tokio::spawn);
    let served = crate::drain::requester::discover(&client).await;
    match &served {
        Some(gv) => {
            tracing::info!(group_version = %gv, "the API server serves EvictionRequest (KEP-4563); the drain asks the Eviction API until the evictionrequest controller ships (docs/design.md §2b)")
        }
        None => tracing::debug!(
            "no EvictionRequest API (KEP-4563) on this cluster; the drain asks the Eviction API"
        ),
    }
    // Started after discovery: only where the EvictionRequest API is served.
    let (responders, watch_responders) =
        crate::drain::responders::ResponderWatch::start(client.clone(), served.as_deref()).await;
    let responder_watch = watch_responders.map(tokio::spawn);
    let (ctx, woken) = context(
        client,
        send,
        &config,
        nms,
        metrics,
        (store.clone(), nms_synced.clone(), own_writes),
        (budgets, migrations, responders, nodes.clone()),
    );
    let controller = Controller::for_stream(nm_triggers, store.clone())
        .reconcile_on(woken)
        .reconcile_on(triggers::budgets(
            relaxed,
            ctx.memory.drain(),
            store.clone(),
        ))
        .watches_stream(
            triggers::nodes(&nodes, orphan_tx),
            triggers::node_mapper(store, ctx.metrics.clone()),
        )
        .with_config(
            controller::Config::default()
                .concurrency(u16::try_from(config.concurrency).unwrap_or(u16::MAX)),
        )
        .graceful_shutdown_on(shutdown);
    tokio::spawn(triggers::report_synced(nms_synced));
    // Dropped with this future at the end of a leadership term: no eviction is sent after it.
    let _evictions = ctx.drainer.stop_on_drop();
    // Aborted with the controller, so it never writes after the controller stopped.
    let sweeper = tokio::spawn(orphans::run(ctx.clone(), orphan_rx));
    tracing::info!(concurrency = config.concurrency, lease_namespace = %config.lease_namespace, "starting NodeMaintenance controller");
    ctx.metrics
        .runtime()
        .set_max_concurrent_reconciles(config.concurrency);
    controller
        .run(observed_reconcile, observed_error_policy, ctx.clone())
        .for_each(log_outcome)
        .await;
    sweeper.abort();
    budget_watch.abort();
    for w in [migration_watch, responder_watch].into_iter().flatten() {
        w.abort();
    }
    // No eviction is sent once the controller stopped, and those sent are answered first.
    ctx.drainer.stop().await;
    tracing::info!("NodeMaintenance controller stopped");
}

/// The shared state of all reconciles, built from the clients and settings, and the stream of
/// maintenances woken by their evictions' answers (which arrive outside any pass).
fn context(
    client: Client,
    send: crate::drain::SendClients,
    config: &ControllerConfig,
    nms: Api<NodeMaintenance>,
    metrics: Arc<Metrics>,
    (store, nms_synced, own_writes): (
        Store<NodeMaintenance>,
        watch::Receiver<bool>,
        memory::OwnWrites,
    ),
    (budgets, migrations, responders, nodes_cache): (
        crate::drain::BudgetWatch,
        crate::drain::migration::MigrationWatch,
        crate::drain::responders::ResponderWatch,
        NodeCache,
    ),
) -> (
    Arc<Context>,
    futures::channel::mpsc::UnboundedReceiver<reflector::ObjectRef<NodeMaintenance>>,
) {
    let nodes: Api<Node> = Api::all(client.clone());
    let (wake, woken) = futures::channel::mpsc::unbounded();
    let memory = memory::Memories::with_own_writes(own_writes);
    let ctx = Arc::new(Context {
        nms,
        nodes,
        drainer: Drainer::new(
            client.clone(),
            send,
            config.drain.clone(),
            metrics.clone(),
            memory.drain(),
            (budgets, migrations, responders),
        ),
        leases: NodeLeases::new(client.clone(), config.lease_namespace.clone()),
        recorder: Recorder::new(
            client,
            Reporter {
                controller: REPORTER.to_string(),
                instance: config.reporter_instance.clone(),
            },
        ),
        reporter_instance: config.reporter_instance.clone(),
        metrics,
        store,
        nms_synced,
        memory,
        policy: config.policy.clone(),
        drain_budget: (config.max_parallel_drains.is_some()
            || !config.max_parallel_drains_for.is_empty())
        .then(|| DrainBudget {
            limit: config.max_parallel_drains,
            per: config.max_parallel_drains_for.clone(),
            nodes: nodes_cache.clone(),
        }),
        node_cache: nodes_cache,
        wake,
    });
    (ctx, woken)
}

// controller-runtime's families (docs/compat.md §10) are recorded around each reconcile and
// each error-policy requeue; watch triggers are recorded where the streams are built
// (`triggers`).

/// [`reconcile`], timed and counted.
async fn observed_reconcile(
    nm: Arc<NodeMaintenance>,
    ctx: Arc<Context>,
) -> Result<controller::Action, Error> {
    let metrics = ctx.metrics.clone();
    let key = nm.name_any();
    crate::metrics::runtime::observe_reconcile(metrics.runtime(), key, reconcile(nm, ctx)).await
}

/// [`error_policy`], its requeue counted as a retry.
fn observed_error_policy(
    nm: Arc<NodeMaintenance>,
    err: &Error,
    ctx: Arc<Context>,
) -> controller::Action {
    let action = error_policy(nm.clone(), err, ctx.clone());
    if let Some(after) = crate::metrics::runtime::action_requeue_after(&action) {
        ctx.metrics.runtime().retried(&nm.name_any(), after);
    }
    action
}

/// Logs what a reconcile came to: failures at debug (`status.lastError` and the metrics carry
/// them), controller errors as warnings.
async fn log_outcome<T, E: std::fmt::Display, Q: std::fmt::Display>(
    res: Result<T, controller::Error<E, Q>>,
) {
    match res {
        Ok(_) => {}
        Err(controller::Error::ObjectNotFound(obj)) => {
            tracing::debug!(object = %obj, "NodeMaintenance not found");
        }
        Err(controller::Error::ReconcilerFailed(err, obj)) => {
            tracing::debug!(object = %obj, error = %err, "reconcile failed");
        }
        Err(err) => tracing::warn!(error = %err, "controller error"),
    }
}
