//! Process wiring (`docs/design.md §5`): clients, the webhook server, the probe and metrics
//! servers, leader election, the controller, and graceful shutdown, owned by one [`Operator`].
//!
//! Order of start-up, chosen so that every replica admits requests before anything else waits:
//!
//! 1. load the Kubernetes client configuration (no API call yet), and start the process's one
//!    Node watch (`crate::watch::nodes`), whose first list is the one step that grows with the
//!    cluster, so that it overlaps everything after it;
//! 2. bind the probe and metrics listeners;
//! 3. at once: the check that the NodeMaintenance CRD is served, and the platform's one group
//!    discovery; then the admission caches start beside the Node watch, and the TLS settings are
//!    settled (the flags, else on OpenShift the cluster's TLS profile, read, then watched:
//!    `crate::tls_profile`, else the defaults, with no request); then the webhook server (loads its certificate, binds
//!    `--webhook-bind-address`) — on every replica, leader or not; `/readyz` does not wait for
//!    the Node watch's first list ([`readiness`]);
//! 4. with `--leader-elect`, campaign for the Lease and wait until it is held;
//! 5. run the controller, which subscribes to the same Node watch, until shutdown or loss of
//!    leadership.
//!
//! One cancellation tree: SIGTERM/SIGINT, or any fatal error, cancels the root token. The webhook
//! then stops accepting and finishes in-flight admission requests, the controller (through a
//! child token) finishes in-flight reconciles and stops, then the leader Lease is released (only
//! after the controller stopped, so no two replicas ever reconcile at once), then the process
//! exits 0.
//!
//! Loss of leadership ends the term: the controller is dropped at once, cancelling in-flight
//! reconciles, and its clients refuse any further write ([`leader::WriteFence`]); [`run`] returns
//! [`RunError::LeadershipLost`]; `main` exits 1 and Kubernetes restarts the container as a
//! standby (the controller-runtime behaviour).

use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
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
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::leader;
pub use crate::leader::LeaderError;
use crate::metrics::{Metrics, OPENMETRICS_CONTENT_TYPE};
use crate::watch::nodes::{NodeCache, NodeWatchTask};

/// How long `run` waits for the controller to finish in-flight reconciles on shutdown before
/// giving up on it (the Lease is then left to expire rather than released under a running
/// reconcile).
pub(crate) const CONTROLLER_STOP_TIMEOUT: Duration = Duration::from_secs(20);

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
    /// `--metrics-secure` has no usable serving certificate.
    #[error("{0}")]
    MetricsTls(String),
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
    /// The webhook's thread or runtime could not be started.
    #[error("cannot start the admission thread: {0}")]
    AdmissionThread(#[source] std::io::Error),
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
pub(crate) async fn kube_config(flag: Option<&Path>) -> Result<kube::Config, RunError> {
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
    // kube reads `$KUBECONFIG` itself (a path list, merged as kubectl does); asking it first
    // keeps controller-runtime's order, in which the variable wins over the in-cluster account.
    let from_env = Kubeconfig::from_env()
        .map_err(|e| RunError::KubeConfig(format!("cannot use KUBECONFIG: {e}")))?;
    if let Some(kc) = from_env {
        return kube::Config::from_custom_kubeconfig(kc, &opts)
            .await
            .map_err(|e| RunError::KubeConfig(format!("cannot use KUBECONFIG: {e}")));
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
pub(crate) struct ReadinessInputs {
    /// The webhook server is serving with a loaded certificate.
    pub cert_loaded: bool,
    /// The admission caches have synced (every replica serves the webhook): NodeMaintenances
    /// and the quorum inputs; not the Node cache (see [`readiness`]).
    pub admission_synced: bool,
}

/// The `/readyz` rule, the same on every replica, leader, standby or without election: ready
/// when the webhook serves with a loaded certificate and its admission caches have synced, so
/// that it never decides from an empty cache. (Upstream's `/readyz` is a plain ping,
/// docs/compat.md §8.)
///
/// Two waits are left out on purpose (`docs/design.md §4`, "Readiness"). The process's Node
/// watch: its first list is the one start-up step that grows with the cluster (5,000 Nodes are
/// tens of MB for the API server to encode); until it has listed, a CREATE reads the nodes it
/// decides on (the target, and on the quorum path the etcd members' nodes) from the API server,
/// one GET each, never from the partial cache. The controller's NodeMaintenance watch: nothing
/// routes to the controller, it reconciles only what its own watch listed, and that watch only
/// starts once the webhook serves, so waiting for its consistent list added its round trips (4
/// to 12 ms in `cargo bench --bench scale`) to every start; with leader election, as shipped, a
/// new replica is a standby whose readiness never included it.
///
/// # Errors
/// The reason for not being ready, one line, for the 503 body.
pub(crate) fn readiness(i: ReadinessInputs) -> Result<(), &'static str> {
    if !i.cert_loaded {
        return Err("webhook server has no certificate loaded (or is shutting down)");
    }
    if !i.admission_synced {
        return Err("admission caches have not synced yet");
    }
    Ok(())
}

#[derive(Clone)]
struct ProbeState {
    webhook: nmo_webhook::Readiness,
    admission_synced: watch::Receiver<bool>,
}

async fn healthz() -> &'static str {
    "ok"
}

async fn readyz(State(s): State<ProbeState>) -> impl IntoResponse {
    let inputs = ReadinessInputs {
        cert_loaded: s.webhook.cert_loaded(),
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
pub(crate) fn metrics_router(metrics: Arc<Metrics>) -> Router {
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

/// The metrics server: plain HTTP, or with `--metrics-secure` HTTPS behind TokenReview and
/// SubjectAccessReview (`crate::metrics::secure`), served by the same TLS server as the webhook
/// (certificate reload, `tls` settings).
///
/// # Errors
/// [`RunError::MetricsTls`] when the secure server has no usable certificate.
async fn serve_metrics(
    config: &Config,
    listener: Option<TcpListener>,
    metrics: Arc<Metrics>,
    client: Client,
    tls: watch::Receiver<nmo_webhook::TlsPolicy>,
    stop: CancellationToken,
) -> Result<tokio::task::JoinHandle<()>, RunError> {
    use crate::metrics::secure;
    let router = metrics_router(metrics);
    let listener = match listener {
        Some(listener) if config.metrics_secure => listener,
        listener => return Ok(serve_plain("metrics", listener, router, stop)),
    };
    let tls_err = |e: nmo_webhook::ServeError| {
        RunError::MetricsTls(match e {
            nmo_webhook::ServeError::InvalidCert { reason } => {
                format!("invalid metrics serving certificate: {reason}")
            }
            other => format!("secure metrics server: {other}"),
        })
    };
    let (pair, cert_paths) =
        secure::serving_pair(config.metrics_cert_path.as_deref(), config.pod_name())
            .map_err(RunError::MetricsTls)?;
    let spec = nmo_webhook::ServerSpec {
        name: "metrics",
        listener: listener
            .into_std()
            .map_err(|e| RunError::MetricsTls(format!("secure metrics listener: {e}")))?,
        pair,
        cert_paths,
        enable_http2: config.enable_http2,
        tls,
    };
    let tuning = nmo_webhook::ServeTuning {
        // A scrape is short; the webhook's 20 s grace is for admission's 15 s timeout.
        shutdown_grace: Duration::from_secs(5),
        ..nmo_webhook::ServeTuning::default()
    };
    let router = secure::authenticated(router, client);
    let server = nmo_webhook::WebhookServer::serve(spec, tuning, router, stop.cancelled_owned())
        .await
        .map_err(tls_err)?;
    Ok(tokio::spawn(async move {
        if let Err(e) = server.wait().await {
            tracing::error!(error = %e, "secure metrics server failed");
        }
    }))
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
    stop: CancellationToken,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let Some(listener) = listener else { return };
        if let Ok(addr) = listener.local_addr() {
            tracing::info!(%addr, "serving {what}");
        }
        let result = axum::serve(listener, router)
            .with_graceful_shutdown(stop.cancelled_owned())
            .await;
        if let Err(e) = result {
            tracing::error!(error = %e, "{what} server failed");
        }
    })
}

/// Cancels `root` on the first SIGTERM or SIGINT. The handlers are installed before this returns,
/// so a signal during start-up still shuts down gracefully.
///
/// # Errors
/// [`RunError::Signal`] when a handler cannot be installed.
pub(crate) fn cancel_on_signal(
    root: CancellationToken,
) -> Result<tokio::task::JoinHandle<()>, RunError> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).map_err(|e| RunError::Signal("SIGTERM", e))?;
    let mut int = signal(SignalKind::interrupt()).map_err(|e| RunError::Signal("SIGINT", e))?;
    Ok(tokio::spawn(async move {
        let which = tokio::select! {
            _ = term.recv() => "SIGTERM",
            _ = int.recv() => "SIGINT",
            () = root.cancelled() => return,
        };
        tracing::info!(signal = which, "shutting down");
        root.cancel();
    }))
}

/// Runs the operator until SIGTERM/SIGINT (`Ok`) or a fatal condition (`Err`): see the module
/// documentation for the order of start-up and shutdown.
///
/// # Errors
/// Start-up failures ([`RunError::KubeConfig`], [`RunError::Client`], [`RunError::Bind`],
/// [`RunError::Webhook`], [`RunError::Leader`]), [`RunError::LeadershipLost`], or
/// [`RunError::TaskEnded`] when the webhook or controller stops on its own.
pub async fn run(config: Config) -> Result<(), RunError> {
    let root = CancellationToken::new();
    let signals = cancel_on_signal(root.clone())?;
    let result = match Operator::start(config, root.clone()).await {
        Ok(operator) => operator.run().await,
        Err(e) => Err(e),
    };
    signals.abort();
    result
}

/// The first fatal error of the process; recording one cancels the root token.
#[derive(Clone, Default)]
struct Fatal(Arc<Mutex<Option<RunError>>>);

impl Fatal {
    fn raise(&self, root: &CancellationToken, e: RunError) {
        let mut first = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if first.is_none() {
            *first = Some(e);
        }
        root.cancel();
    }

    fn take(&self) -> Result<(), RunError> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
            .map_or(Ok(()), Err)
    }
}

/// The controller's Kubernetes clients (admission has its own, unfenced: every replica serves
/// the webhook).
struct Clients {
    /// The controller's reads and writes; with leader election its writes are fenced to the term
    /// ([`leader::WriteFence`]).
    controller: Client,
    /// Evictions: no 429 retry layer, so a PodDisruptionBudget refusal surfaces at once (fenced
    /// like `controller`).
    eviction: Client,
}

impl Clients {
    fn new(cfg: &kube::Config, fence: Option<&leader::WriteFence>) -> Result<Self, RunError> {
        let build = |cfg: kube::Config| -> Result<Client, RunError> {
            let builder = crate::client::builder(cfg)
                .map_err(RunError::Client)?
                .with_layer(&tower::util::MapRequestLayer::new(user_agent));
            Ok(match fence {
                Some(f) => builder.with_layer(f).build(),
                None => builder.build(),
            })
        };
        let mut no_retry = cfg.clone();
        no_retry.default_retry = false;
        Ok(Clients {
            controller: build(cfg.clone())?,
            eviction: build(no_retry)?,
        })
    }
}

/// Names the controller's requests `node-maintenance-operator/<version>`: the API server derives
/// the managedFields manager of a write from the User-Agent when no fieldManager is given, so the
/// operator's changes to Nodes and NodeMaintenances are attributed to `node-maintenance-operator`.
fn user_agent<B>(mut req: http::Request<B>) -> http::Request<B> {
    req.headers_mut().insert(
        http::header::USER_AGENT,
        http::HeaderValue::from_static(concat!(
            "node-maintenance-operator/",
            env!("CARGO_PKG_VERSION")
        )),
    );
    req
}

/// Leadership as the controller sees it: elected through the Lease, or always (no election).
enum Election {
    /// `--leader-elect=false`: this replica always leads; the term never ends.
    Off(CancellationToken),
    /// `--leader-elect`.
    On(leader::LeaderElection),
}

impl Election {
    /// Cancelled when leadership is lost; never without election.
    fn term(&self) -> CancellationToken {
        match self {
            Election::Off(t) => t.clone(),
            Election::On(e) => e.leadership().term(),
        }
    }

    async fn acquired(&mut self) -> bool {
        match self {
            Election::Off(..) => true,
            Election::On(e) => e.acquired().await,
        }
    }

    async fn release(self) -> Result<(), leader::LeaderError> {
        match self {
            Election::Off(..) => Ok(()),
            Election::On(e) => e.release().await,
        }
    }
}

/// The process: owns the webhook, probe and metrics servers, the leader election and the
/// controller, all stopped through one cancellation tree rooted at the signal handler's token
/// (`docs/design.md §5`).
pub(crate) struct Operator {
    config: Config,
    root: CancellationToken,
    fatal: Fatal,
    clients: Clients,
    metrics: Arc<Metrics>,
    election: Election,
    servers: Vec<tokio::task::JoinHandle<()>>,
    /// The process's one Node watch: admission's caches read it, the controller subscribes to
    /// it; it runs until the operator is dropped.
    nodes: NodeCache,
    _node_watch: NodeWatchTask,
}

impl Operator {
    /// Starts everything that runs on every replica, in order: client configuration, the probe
    /// and metrics listeners, the webhook server, then leader election (campaigning in the
    /// background). The servers stop when `root` is cancelled.
    ///
    /// # Errors
    /// Start-up failures: [`RunError::KubeConfig`], [`RunError::Client`], [`RunError::Bind`],
    /// [`RunError::Webhook`], [`RunError::CrdMissing`], [`RunError::Admission`],
    /// [`RunError::Leader`].
    pub(crate) async fn start(config: Config, root: CancellationToken) -> Result<Self, RunError> {
        let metrics = Arc::new(Metrics::new());
        let kube_cfg = kube_config(config.kubeconfig.as_deref()).await?;
        tracing::info!(api = %kube_cfg.cluster_url, "Kubernetes API");
        let api = crate::client::client(kube_cfg.clone()).map_err(RunError::Client)?;
        let metrics_client = api.clone();
        // Filled by the Node watch, started once the admission caches have synced.
        let nodes = NodeCache::new(config.max_parallel_drains_for.clone().into());
        let probe_listener =
            bind("health probe", config.health_probe_bind_address.socket()).await?;
        let metrics_listener = bind("metrics", config.metrics_bind_address.socket()).await?;

        // Two independent reads at once: the CRD check and the one group discovery that both
        // the quorum rule and the TLS profile decide on (on plain Kubernetes no request for
        // `config.openshift.io` is ever sent: its 404 took up to 45 ms of a start).
        let (crd, platform) = tokio::join!(
            wiring::require_crd(&api),
            crate::admission::detect_platform(&api),
        );
        crd?;
        let platform = platform.map_err(RunError::Admission)?;
        let (admission_router, admission_synced) = wiring::admission_router(
            api.clone(),
            metrics.clone(),
            nodes.clone(),
            platform,
            &config,
        );
        let node_watch = crate::watch::nodes::watch(&api, &nodes, admission_synced.clone());
        let tls = crate::tls_profile::start(
            api.clone(),
            config.tls_settings().map(|m| {
                crate::tls_profile::log_mapping("--tls-min-version/--tls-cipher-suites", &m);
                m.policy
            }),
            platform == crate::admission::Platform::OpenShift,
            root.clone(),
        )
        .await;
        let webhook_spec = nmo_webhook::ServerSpec::webhook(
            &nmo_webhook::TlsOptions {
                cert_dir: config.webhook_cert_path.clone(),
                cert_name: config.webhook_cert_name.clone(),
                key_name: config.webhook_cert_key.clone(),
                bind: config.webhook_bind_address,
                enable_http2: config.enable_http2,
            },
            tls.clone(),
        )?;
        let (webhook, webhook_done) = serve_webhook_on_own_thread(
            webhook_spec,
            admission_router,
            root.clone().cancelled_owned(),
        )
        .await?;

        let election = if config.leader_elect {
            let namespace = config.operator_namespace();
            let identity = leader::identity();
            tracing::info!(%namespace, lease = leader::LEADER_ELECTION_ID, %identity, "starting leader election");
            let lease_client = leader::lease_client(kube_cfg.clone()).map_err(RunError::Client)?;
            Election::On(leader::start(lease_client, &namespace, identity).await?)
        } else {
            Election::Off(CancellationToken::new())
        };
        let fence = match &election {
            Election::On(e) => Some(e.fence()),
            Election::Off(..) => None,
        };
        let clients = Clients::new(&kube_cfg, fence.as_ref())?;

        let fatal = Fatal::default();
        let probe_state = ProbeState {
            webhook,
            admission_synced,
        };
        let servers = vec![
            serve_plain(
                "health probes",
                probe_listener,
                probe_router(probe_state),
                root.clone(),
            ),
            serve_metrics(
                &config,
                metrics_listener,
                metrics.clone(),
                metrics_client,
                tls,
                root.clone(),
            )
            .await?,
            essential(&root, &fatal, async move {
                match webhook_done.await {
                    Ok(()) => RunError::TaskEnded("the webhook server"),
                    Err(e) => RunError::Webhook(e),
                }
            }),
        ];
        Ok(Operator {
            config,
            root,
            fatal,
            clients,
            metrics,
            election,
            servers,
            nodes,
            _node_watch: node_watch,
        })
    }

    /// Waits for leadership, runs the controller for as long as it lasts, then shuts down in
    /// order: servers drain, the controller stops (gracefully on a signal: in-flight reconciles
    /// finish; at once on loss of leadership), the Lease is released, the servers are awaited.
    ///
    /// # Errors
    /// The first fatal condition: [`RunError::LeadershipLost`], [`RunError::TaskEnded`],
    /// [`RunError::Webhook`].
    pub(crate) async fn run(mut self) -> Result<(), RunError> {
        let acquired = tokio::select! {
            biased;
            () = self.root.cancelled() => None,
            ok = self.election.acquired() => Some(ok),
        };
        let controller = match acquired {
            Some(true) if !self.root.is_cancelled() => Some(self.spawn_controller()),
            Some(false) => {
                self.fatal
                    .raise(&self.root, RunError::TaskEnded("leader election"));
                None
            }
            // Shutdown before (or just as) leadership came: nothing to stop but the servers.
            _ => None,
        };
        let term = self.election.term();
        tokio::select! {
            biased;
            () = self.root.cancelled() => {}
            () = term.cancelled() => self.fatal.raise(
                &self.root,
                RunError::LeadershipLost("this replica no longer holds the Lease".to_string()),
            ),
        }
        self.shutdown(controller).await
    }

    /// The controller task. It stops gracefully when the root is cancelled (its graceful-shutdown
    /// child token), and is dropped (in-flight reconciles cancelled at their next await) the
    /// moment the leadership term ends.
    fn spawn_controller(&self) -> tokio::task::JoinHandle<()> {
        if self.config.leader_elect {
            tracing::info!("acquired leadership; starting the controller");
        }
        let graceful = self.root.child_token();
        let term = self.election.term();
        let run = crate::controller::run(
            self.clients.controller.clone(),
            self.clients.eviction.clone(),
            crate::controller::ControllerConfig::from(&self.config),
            self.nodes.clone(),
            self.metrics.clone(),
            graceful.cancelled_owned(),
        );
        let (root, fatal) = (self.root.clone(), self.fatal.clone());
        tokio::spawn(async move {
            tokio::select! {
                biased;
                () = term.cancelled() => {
                    tracing::warn!("leadership ended: controller stopped, in-flight reconciles cancelled");
                }
                () = run => if !root.is_cancelled() {
                    fatal.raise(&root, RunError::TaskEnded("the controller"));
                },
            }
        })
    }

    async fn shutdown(
        self,
        controller: Option<tokio::task::JoinHandle<()>>,
    ) -> Result<(), RunError> {
        self.root.cancel();
        if let Some(ctrl) = controller {
            match tokio::time::timeout(CONTROLLER_STOP_TIMEOUT, ctrl).await {
                Ok(_) => tracing::info!("controller stopped"),
                Err(_) => {
                    tracing::warn!("controller did not stop within {CONTROLLER_STOP_TIMEOUT:?}")
                }
            }
        }
        if let Err(e) = self.election.release().await {
            self.fatal
                .raise(&self.root, RunError::LeadershipLost(e.to_string()));
        }
        for server in self.servers {
            let _ = server.await;
        }
        self.fatal.take()
    }
}

/// Spawns a task that must not end while the process runs: when it ends before shutdown, its
/// error is raised and the root cancelled.
fn essential(
    root: &CancellationToken,
    fatal: &Fatal,
    task: impl Future<Output = RunError> + Send + 'static,
) -> tokio::task::JoinHandle<()> {
    let (root, fatal) = (root.clone(), fatal.clone());
    tokio::spawn(async move {
        let e = task.await;
        match e {
            // Ending cleanly after the shutdown began is the expected way to end.
            RunError::TaskEnded(_) if root.is_cancelled() => {}
            e => fatal.raise(&root, e),
        }
    })
}

/// Name of the webhook server's thread.
pub(crate) const ADMISSION_THREAD: &str = "nmo-admission";

/// Serves the webhook of `spec` with `router` (production timeouts) on a thread of its own, a
/// single-threaded runtime that ends when the server does (after `shutdown`). Returns the
/// server's readiness and a future of its end.
///
/// Every admission request then runs on that one thread, from TLS to the answer. On the
/// process's runtime, whose workers are as many as the cores, the connections' tasks were
/// handed between workers: a futex wake and a context switch per hand-over, a good part of the
/// operator's CPU per request and a second runnable thread beside the API server's (the
/// README's admission table, `cargo bench --bench admission`, has the figures before and
/// after). A controller pass that holds a worker of the process's runtime no longer delays an
/// answer either. One thread answers tens of thousands of requests a second; the API server
/// sends a few.
///
/// # Errors
/// [`RunError::AdmissionThread`] when the thread or its runtime cannot be started;
/// [`RunError::Webhook`] when the server cannot start ([`nmo_webhook::WebhookServer::serve`]).
async fn serve_webhook_on_own_thread(
    spec: nmo_webhook::ServerSpec,
    router: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<
    (
        nmo_webhook::Readiness,
        impl Future<Output = Result<(), nmo_webhook::ServeError>> + Send + 'static,
    ),
    RunError,
> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(RunError::AdmissionThread)?;
    let (started_tx, started) = tokio::sync::oneshot::channel();
    let (done_tx, done) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name(ADMISSION_THREAD.into())
        .spawn(move || {
            runtime.block_on(async move {
                let tuning = nmo_webhook::ServeTuning::default();
                match nmo_webhook::WebhookServer::serve(spec, tuning, router, shutdown).await {
                    Ok(server) => {
                        let _ = started_tx.send(Ok(server.readiness()));
                        let _ = done_tx.send(server.wait().await);
                    }
                    Err(e) => {
                        let _ = started_tx.send(Err(e));
                    }
                }
            });
        })
        .map_err(RunError::AdmissionThread)?;
    let ended = || nmo_webhook::ServeError::Task("the admission thread ended".into());
    let readiness = started.await.map_err(|_| RunError::Webhook(ended()))??;
    Ok((readiness, async move {
        done.await.unwrap_or_else(|_| Err(ended()))
    }))
}

/// The seam to the admission handler.
mod wiring {
    use super::*;
    use crate::admission::{self, Admission};

    /// Checks that the API server serves NodeMaintenance: one read of the discovery document of
    /// `nodemaintenance.medik8s.io/v1beta1`, which the API server answers from memory. (A list
    /// of the resource, even of one object, is a consistent read: kube sends no
    /// `resourceVersion=0` with a `limit`, and the API server then waits for its watch cache to
    /// catch up with etcd, up to 13 ms of a start at 5,000 nodes.)
    ///
    /// # Errors
    /// [`RunError::CrdMissing`] when the group version is not served (404) or is served without
    /// `nodemaintenances`; any other answer is left to the watches to retry.
    pub(super) async fn require_crd(client: &Client) -> Result<(), RunError> {
        use kube::Resource as _;
        let group_version = crate::api::NodeMaintenance::api_version(&());
        let plural = crate::api::NodeMaintenance::plural(&());
        match client.list_api_group_resources(&group_version).await {
            Ok(list) if !list.resources.iter().any(|r| r.name == plural) => {
                Err(RunError::CrdMissing)
            }
            // The code, not kube's `Status::is_not_found`: for a group it does not serve, the
            // API server answers a plain-text `404 page not found`, which kube turns into a
            // Status without the `NotFound` reason that `is_not_found` reads.
            Err(kube::Error::Api(status)) if status.code == 404 => Err(RunError::CrdMissing),
            _ => Ok(()),
        }
    }

    /// The admission routes served by the webhook server, and a flag that turns true once the
    /// admission caches have synced (not the Node watch: `docs/design.md §4`, "Readiness").
    /// Starts the caches for the `platform` detected at start-up (one discovery call, as
    /// upstream does).
    pub(super) fn admission_router(
        client: Client,
        metrics: Arc<Metrics>,
        nodes: NodeCache,
        platform: admission::Platform,
        config: &Config,
    ) -> (Router, watch::Receiver<bool>) {
        let controller = crate::controller::ControllerConfig::from(config);
        let settings = admission::WarningSettings {
            policy: controller.policy,
            drain: controller.drain,
            share_threshold: config.maintenance_share_warning,
            pod_cache: config.pod_warnings,
        };
        let admission = Admission::with_platform(client, metrics, platform, nodes, settings);
        let synced = admission.synced();
        (admission::router(Arc::new(admission)), synced)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_needs_a_certificate_and_synced_admission_caches() {
        let i = |cert_loaded, admission_synced| ReadinessInputs {
            cert_loaded,
            admission_synced,
        };
        assert_eq!(readiness(i(true, true)), Ok(()));
        assert_eq!(
            readiness(i(true, false)),
            Err("admission caches have not synced yet")
        );
        assert!(readiness(i(false, true)).is_err());
        assert!(readiness(i(false, false)).is_err());
    }
}
