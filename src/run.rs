//! Process wiring (rust-stack.md §21): clients, the webhook server, the probe and metrics
//! servers, leader election, the controller, and graceful shutdown.
//!
//! Order of start-up, chosen so that every replica admits requests before anything else waits:
//!
//! 1. load the Kubernetes client configuration (no API call yet);
//! 2. bind the probe and metrics listeners, then start the webhook server (loads its
//!    certificate, binds `--webhook-bind-address`) — on every replica, leader or not;
//! 3. with `--leader-elect`, campaign for the Lease and wait until it is held;
//! 4. run the controller until shutdown or loss of leadership.
//!
//! Shutdown (SIGTERM or SIGINT, fanned out through one `tokio::sync::watch`): the webhook stops
//! accepting and finishes in-flight admission requests, the controller finishes in-flight
//! reconciles and stops, then the leader Lease is released (only after the controller stopped,
//! so no two replicas ever reconcile at once), then the process exits 0.
//!
//! Loss of leadership stops the controller at once and makes [`run`] return
//! [`RunError::LeadershipLost`]; `main` exits 1 and Kubernetes restarts the container as a
//! standby (the controller-runtime behaviour).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use kube::Client;
use kube::config::{KubeConfigOptions, Kubeconfig};
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::config::Config;
use crate::leader;
use crate::metrics::{Metrics, OPENMETRICS_CONTENT_TYPE};

/// How long `run` waits for the controller to finish in-flight reconciles on shutdown before
/// giving up on it (the Lease is then left to expire rather than released under a running
/// reconcile).
pub const CONTROLLER_STOP_TIMEOUT: Duration = Duration::from_secs(20);

/// Errors that end the process. Each displays as one line naming what failed and why.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// No usable Kubernetes client configuration.
    #[error("{0}")]
    KubeConfig(String),
    /// The client could not be built from the configuration (bad TLS material, bad URL).
    #[error("cannot create Kubernetes client: {0}")]
    Client(#[source] kube::Error),
    /// A plain-HTTP listener could not be bound.
    #[error("cannot listen on {addr} for the {what} server: {source}")]
    Bind {
        /// `metrics` or `health probe`.
        what: &'static str,
        /// The address.
        addr: SocketAddr,
        /// The I/O error (address in use, permission denied).
        #[source]
        source: std::io::Error,
    },
    /// The webhook server failed to start or stopped with an error.
    #[error(transparent)]
    Webhook(#[from] nmo_webhook::ServeError),
    /// Leader election could not be set up.
    #[error(transparent)]
    Leader(#[from] leader::LeaderError),
    /// This replica was the leader and lost the Lease; the controller has been stopped.
    #[error(
        "leader election lost: {0}; exiting so that Kubernetes restarts this replica as a standby"
    )]
    LeadershipLost(String),
    /// The admission handler could not be set up (API discovery failed).
    #[error("cannot set up admission: {0}")]
    Admission(#[source] crate::admission::AdmissionError),
    /// The API server does not serve NodeMaintenance (controller-rs's CRD-present check at
    /// start-up, rather than watches retrying 404s forever).
    #[error(
        "the NodeMaintenance CRD (nodemaintenances.nodemaintenance.medik8s.io) is not installed; apply manifests/crd.yaml"
    )]
    CrdMissing,
    /// An essential task ended on its own.
    #[error("{0} stopped unexpectedly")]
    TaskEnded(&'static str),
    /// A signal handler could not be installed.
    #[error("cannot install the {0} signal handler: {1}")]
    Signal(&'static str, #[source] std::io::Error),
}

/// Where the client configuration comes from, in the order tried (controller-runtime's order):
/// `--kubeconfig`, then `$KUBECONFIG`, then the in-cluster service account, then
/// `~/.kube/config`.
///
/// # Errors
/// [`RunError::KubeConfig`] naming the file or source and the reason.
pub async fn kube_config(flag: Option<&Path>) -> Result<kube::Config, RunError> {
    let opts = KubeConfigOptions::default();
    if let Some(path) = flag {
        let kc = Kubeconfig::read_from(path).map_err(|e| {
            RunError::KubeConfig(format!("cannot use --kubeconfig {}: {e}", path.display()))
        })?;
        return kube::Config::from_custom_kubeconfig(kc, &opts)
            .await
            .map_err(|e| {
                RunError::KubeConfig(format!("cannot use --kubeconfig {}: {e}", path.display()))
            });
    }
    if let Some(env) = std::env::var_os("KUBECONFIG").filter(|v| !v.is_empty()) {
        return kube::Config::from_kubeconfig(&opts).await.map_err(|e| {
            RunError::KubeConfig(format!(
                "cannot use KUBECONFIG={}: {e}",
                PathBuf::from(env).display()
            ))
        });
    }
    match kube::Config::incluster() {
        Ok(c) => Ok(c),
        Err(in_cluster) => kube::Config::from_kubeconfig(&opts).await.map_err(|e| {
            RunError::KubeConfig(format!(
                "no Kubernetes configuration: not running in a cluster ({in_cluster}) and no usable ~/.kube/config ({e}); pass --kubeconfig or set KUBECONFIG"
            ))
        }),
    }
}

/// Inputs of the `/readyz` decision.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadinessInputs {
    /// The webhook server is serving with a loaded certificate.
    pub cert_loaded: bool,
    /// `--leader-elect` is on.
    pub leader_election: bool,
    /// This replica holds the leader Lease.
    pub is_leader: bool,
    /// The controller's NodeMaintenance and Node watches have synced.
    pub synced: bool,
    /// The admission caches have synced (every replica serves the webhook).
    pub admission_synced: bool,
}

/// The `/readyz` rule: ready when the webhook serves with a loaded certificate and its admission
/// caches have synced (the webhook never decides from an empty cache) AND, on the
/// replica that runs the controller (the leader, or every replica without leader election), the
/// controller's watches have synced. A standby runs no controller, so only its webhook counts:
/// it can still answer admission reviews. (Upstream's `/readyz` is a plain ping,
/// nmo-compat.md §16 row 13.)
///
/// # Errors
/// The reason for not being ready, one line, for the 503 body.
pub fn readiness(i: ReadinessInputs) -> Result<(), &'static str> {
    if !i.cert_loaded {
        return Err("webhook server has no certificate loaded (or is shutting down)");
    }
    if !i.admission_synced {
        return Err("admission caches have not synced yet");
    }
    let runs_controller = !i.leader_election || i.is_leader;
    if runs_controller && !i.synced {
        return Err("controller watches have not synced yet");
    }
    Ok(())
}

#[derive(Clone)]
struct ProbeState {
    webhook: nmo_webhook::Readiness,
    leader_election: bool,
    is_leader: watch::Receiver<bool>,
    synced: watch::Receiver<bool>,
    admission_synced: watch::Receiver<bool>,
}

async fn healthz() -> &'static str {
    "ok"
}

async fn readyz(State(s): State<ProbeState>) -> impl IntoResponse {
    let inputs = ReadinessInputs {
        cert_loaded: s.webhook.cert_loaded(),
        leader_election: s.leader_election,
        is_leader: *s.is_leader.borrow(),
        synced: *s.synced.borrow(),
        admission_synced: *s.admission_synced.borrow(),
    };
    match readiness(inputs) {
        Ok(()) => (StatusCode::OK, "ok".to_string()),
        Err(why) => (StatusCode::SERVICE_UNAVAILABLE, format!("not ready: {why}")),
    }
}

fn probe_router(state: ProbeState) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(state)
}

/// `GET /metrics`: the registry as OpenMetrics text.
pub fn metrics_router(metrics: Arc<Metrics>) -> Router {
    Router::new()
        .route(
            "/metrics",
            get(|State(m): State<Arc<Metrics>>| async move {
                (
                    [(header::CONTENT_TYPE, OPENMETRICS_CONTENT_TYPE)],
                    m.encode(),
                )
            }),
        )
        .with_state(metrics)
}

async fn bind(
    what: &'static str,
    addr: Option<SocketAddr>,
) -> Result<Option<TcpListener>, RunError> {
    let Some(addr) = addr else {
        tracing::info!("{what} server disabled");
        return Ok(None);
    };
    TcpListener::bind(addr)
        .await
        .map(Some)
        .map_err(|source| RunError::Bind { what, addr, source })
}

fn serve_plain(
    what: &'static str,
    listener: Option<TcpListener>,
    router: Router,
    stop: watch::Receiver<bool>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let Some(listener) = listener else { return };
        if let Ok(addr) = listener.local_addr() {
            tracing::info!(%addr, "serving {what}");
        }
        let result = axum::serve(listener, router)
            .with_graceful_shutdown(stopped(stop))
            .await;
        if let Err(e) = result {
            tracing::error!(error = %e, "{what} server failed");
        }
    })
}

/// A future that completes once `rx` reads `true` (or its sender is gone). `Send + Sync +
/// 'static`, as kube-runtime's `graceful_shutdown_on` requires.
// The explicit return type states the Send + Sync contract instead of leaving it inferred.
#[allow(clippy::manual_async_fn)]
pub fn stopped(mut rx: watch::Receiver<bool>) -> impl Future<Output = ()> + Send + Sync + 'static {
    async move {
        let _ = rx.wait_for(|v| *v).await;
    }
}

/// Completes on the first SIGTERM or SIGINT.
async fn signal_received(
    mut term: tokio::signal::unix::Signal,
    mut int: tokio::signal::unix::Signal,
) -> &'static str {
    tokio::select! {
        _ = term.recv() => "SIGTERM",
        _ = int.recv() => "SIGINT",
    }
}

/// Runs the operator until SIGTERM/SIGINT (`Ok`) or a fatal condition (`Err`): see the module
/// documentation for the order of start-up and shutdown.
///
/// # Errors
/// Start-up failures ([`RunError::KubeConfig`], [`RunError::Client`], [`RunError::Bind`],
/// [`RunError::Webhook`], [`RunError::Leader`]), [`RunError::LeadershipLost`], or
/// [`RunError::TaskEnded`] when the webhook or controller stops on its own.
pub async fn run(config: Config) -> Result<(), RunError> {
    use tokio::signal::unix::{SignalKind, signal};
    // Install the handlers first: a SIGTERM during start-up must still shut down gracefully.
    let term = signal(SignalKind::terminate()).map_err(|e| RunError::Signal("SIGTERM", e))?;
    let int = signal(SignalKind::interrupt()).map_err(|e| RunError::Signal("SIGINT", e))?;
    let (stop_tx, stop_rx) = watch::channel(false);
    let signal_tx = stop_tx.clone();
    let signals = tokio::spawn(async move {
        let which = signal_received(term, int).await;
        tracing::info!(signal = which, "shutting down");
        signal_tx.send_replace(true);
    });

    let metrics = Arc::new(Metrics::new());
    let kube_cfg = kube_config(config.kubeconfig.as_deref()).await?;
    tracing::info!(api = %kube_cfg.cluster_url, "Kubernetes API");
    let client = Client::try_from(kube_cfg.clone()).map_err(RunError::Client)?;
    // The default client retries 429 for minutes; a PodDisruptionBudget-blocked eviction must
    // surface at once (rust-stack.md §9).
    let eviction_client = {
        let mut c = kube_cfg.clone();
        c.default_retry = false;
        Client::try_from(c).map_err(RunError::Client)?
    };

    let probe_listener = bind("health probe", config.health_probe_bind_address.socket()).await?;
    let metrics_listener = bind("metrics", config.metrics_bind_address.socket()).await?;

    let (admission_router, admission_synced) =
        wiring::admission_router(client.clone(), metrics.clone()).await?;
    let webhook = nmo_webhook::WebhookServer::start(
        nmo_webhook::TlsOptions {
            cert_dir: config.webhook_cert_path.clone(),
            cert_name: config.webhook_cert_name.clone(),
            key_name: config.webhook_cert_key.clone(),
            bind: config.webhook_bind_address,
            enable_http2: config.enable_http2,
        },
        admission_router,
        stopped(stop_rx.clone()),
    )
    .await?;

    // Leadership: a constant `true` without --leader-elect.
    let (leader_stop_tx, leader_stop_rx) = watch::channel(false);
    let mut election = None;
    // Without election the leadership channel is a constant `true`; its sender is kept alive for
    // the whole run, since a closed channel would read as "leadership lost".
    let mut _always_leader = None;
    let is_leader = if config.leader_elect {
        let namespace = config.operator_namespace();
        let identity = leader::identity();
        tracing::info!(%namespace, lease = leader::LEADER_ELECTION_ID, %identity, "starting leader election");
        let lease_client = leader::lease_client(kube_cfg.clone()).map_err(RunError::Client)?;
        let e = leader::start(lease_client, &namespace, identity, stopped(leader_stop_rx)).await?;
        let rx = e.is_leader();
        election = Some(e);
        rx
    } else {
        let (tx, rx) = watch::channel(true);
        _always_leader = Some(tx);
        rx
    };

    let (synced_tx, synced_rx) = watch::channel(false);
    let probes = serve_plain(
        "health probes",
        probe_listener,
        probe_router(ProbeState {
            webhook: webhook.readiness(),
            leader_election: config.leader_elect,
            is_leader: is_leader.clone(),
            synced: synced_rx,
            admission_synced,
        }),
        stop_rx.clone(),
    );
    let metrics_server = serve_plain(
        "metrics",
        metrics_listener,
        metrics_router(metrics.clone()),
        stop_rx.clone(),
    );
    let mut webhook_task = tokio::spawn(webhook.wait());
    // A JoinHandle must not be polled again once it completed inside a `select!`.
    let mut webhook_done = false;

    // Wait for leadership (or shutdown) before touching any NodeMaintenance.
    let mut leader_wait = is_leader.clone();
    let mut stop_wait = stop_rx.clone();
    let outcome: Result<(), RunError> = tokio::select! {
        biased;
        _ = stop_wait.wait_for(|v| *v) => Ok(()),
        r = leader_wait.wait_for(|v| *v) => match r {
            Ok(_) => Ok(()),
            Err(_) => Err(RunError::TaskEnded("leader election")),
        },
        r = &mut webhook_task => {
            webhook_done = true;
            Err(webhook_end(r))
        }
    };

    let mut result = outcome;
    let mut controller = None;
    if result.is_ok() && !*stop_rx.borrow() {
        if config.leader_elect {
            tracing::info!("acquired leadership; starting the controller");
        }
        // The controller stops on shutdown or on loss of leadership, whichever comes first.
        let (ctrl_stop_tx, ctrl_stop_rx) = watch::channel(false);
        let mut leader_loss = is_leader.clone();
        let mut stop_for_ctrl = stop_rx.clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = stop_for_ctrl.wait_for(|v| *v) => {}
                _ = leader_loss.wait_for(|v| !*v) => {}
            }
            ctrl_stop_tx.send_replace(true);
        });
        controller = Some(tokio::spawn(wiring::run_controller(
            client.clone(),
            eviction_client,
            config.lease_namespace.clone(),
            usize::from(config.max_concurrent_reconciles),
            metrics.clone(),
            synced_tx,
            stopped(ctrl_stop_rx),
        )));

        let mut leader_loss = is_leader.clone();
        let mut stop_wait = stop_rx.clone();
        let ctrl = controller.as_mut().expect("just set");
        result = tokio::select! {
            biased;
            _ = stop_wait.wait_for(|v| *v) => Ok(()),
            _ = leader_loss.wait_for(|v| !*v) => Err(RunError::LeadershipLost(
                "this replica no longer holds the Lease".to_string(),
            )),
            r = &mut webhook_task => {
            webhook_done = true;
            Err(webhook_end(r))
        }
            _ = ctrl => {
                controller = None;
                Err(RunError::TaskEnded("the controller"))
            }
        };
    }

    // A task that ended because shutdown was already under way (it reacts to the same signal)
    // did not fail.
    if matches!(result, Err(RunError::TaskEnded(_))) && *stop_rx.borrow() {
        result = Ok(());
    }

    // Shutdown, in order: the webhook and the plain servers stop accepting and drain (the same
    // stop applies after a fatal error); the controller finishes in-flight reconciles; then the
    // Lease is released.
    signals.abort();
    stop_tx.send_replace(true);
    if let Some(ctrl) = controller {
        match tokio::time::timeout(CONTROLLER_STOP_TIMEOUT, ctrl).await {
            Ok(_) => tracing::info!("controller stopped"),
            Err(_) => tracing::warn!("controller did not stop within {CONTROLLER_STOP_TIMEOUT:?}"),
        }
    }
    if let Some(e) = election {
        leader_stop_tx.send_replace(true);
        if let Err(err) = e.wait().await
            && result.is_ok()
        {
            result = Err(RunError::LeadershipLost(err.to_string()));
        }
    }
    if !webhook_done {
        match webhook_task.await {
            Ok(Err(e)) if result.is_ok() => result = Err(RunError::Webhook(e)),
            _ => {}
        }
    }
    let _ = probes.await;
    let _ = metrics_server.await;
    result
}

fn webhook_end(r: Result<Result<(), nmo_webhook::ServeError>, tokio::task::JoinError>) -> RunError {
    match r {
        Ok(Err(e)) => RunError::Webhook(e),
        Ok(Ok(())) => RunError::TaskEnded("the webhook server"),
        Err(e) => RunError::Webhook(nmo_webhook::ServeError::Task(e.to_string())),
    }
}

/// The seams to the controller and the admission handler.
mod wiring {
    use super::*;
    use crate::admission::{self, Admission};
    use crate::controller::{self, ControllerConfig};

    /// The admission routes served by the webhook server, and a flag that turns true once the
    /// admission caches have synced. Detects OpenShift once (one discovery call, as upstream
    /// does at start-up) and starts the caches (`docs/design.md §4`).
    pub(super) async fn admission_router(
        client: Client,
        metrics: Arc<Metrics>,
    ) -> Result<(Router, watch::Receiver<bool>), RunError> {
        let nms: kube::Api<crate::api::NodeMaintenance> = kube::Api::all(client.clone());
        if let Err(kube::Error::Api(status)) = nms
            .list_metadata(&kube::api::ListParams::default().limit(1))
            .await
            && status.code == 404
        {
            return Err(RunError::CrdMissing);
        }
        let admission = Admission::start(client, metrics)
            .await
            .map_err(RunError::Admission)?;
        let synced = admission.synced();
        Ok((admission::router(Arc::new(admission)), synced))
    }

    /// Runs the controller until `shutdown` completes; `synced` turns true once its watches
    /// have synced.
    pub(super) async fn run_controller(
        client: Client,
        eviction_client: Client,
        lease_namespace: String,
        concurrency: usize,
        metrics: Arc<Metrics>,
        synced: watch::Sender<bool>,
        shutdown: impl Future<Output = ()> + Send + Sync + 'static,
    ) {
        let config = ControllerConfig {
            lease_namespace,
            concurrency,
            ..ControllerConfig::default()
        };
        controller::run(client, eviction_client, config, metrics, synced, shutdown).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inputs(cert: bool, le: bool, leader: bool, synced: bool) -> ReadinessInputs {
        ReadinessInputs {
            cert_loaded: cert,
            leader_election: le,
            is_leader: leader,
            synced,
            admission_synced: true,
        }
    }

    #[test]
    fn every_replica_needs_synced_admission_caches() {
        for (le, leader) in [(false, true), (true, true), (true, false)] {
            let i = ReadinessInputs {
                admission_synced: false,
                ..inputs(true, le, leader, true)
            };
            assert_eq!(readiness(i), Err("admission caches have not synced yet"));
        }
    }

    #[test]
    fn ready_needs_a_certificate_everywhere() {
        for (le, leader, synced) in [
            (false, true, true),
            (true, true, true),
            (true, false, false),
        ] {
            assert!(readiness(inputs(false, le, leader, synced)).is_err());
        }
    }

    #[test]
    fn controller_replica_needs_synced_watches() {
        assert!(readiness(inputs(true, false, true, false)).is_err());
        assert!(readiness(inputs(true, true, true, false)).is_err());
        assert_eq!(readiness(inputs(true, false, true, true)), Ok(()));
        assert_eq!(readiness(inputs(true, true, true, true)), Ok(()));
    }

    #[test]
    fn standby_is_ready_with_a_certificate_alone() {
        assert_eq!(readiness(inputs(true, true, false, false)), Ok(()));
    }
}
