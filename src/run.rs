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
//!    the Node watch's first list ([`probes::readiness`]);
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

mod admission;
mod cluster;
mod election;
mod error;
mod fatal;
mod probes;
mod servers;

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use self::cluster::{Clients, kube_config};
use self::election::Election;
pub use self::error::RunError;
use self::fatal::{Fatal, essential};
use self::probes::{ProbeState, probe_router};
use self::servers::{bind, serve_metrics, serve_plain};
use crate::config::Config;
use crate::leader;
pub use crate::leader::LeaderError;
use crate::metrics::Metrics;
use crate::watch::nodes::{NodeCache, NodeWatchTask};

/// How long `run` waits for the controller to finish in-flight reconciles on shutdown before
/// giving up on it (the Lease is then left to expire rather than released under a running
/// reconcile).
pub(crate) const CONTROLLER_STOP_TIMEOUT: Duration = Duration::from_secs(20);

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
            cluster::require_crd(&api),
            crate::admission::detect_platform(&api),
        );
        crd?;
        let platform = platform.map_err(RunError::Admission)?;
        let (admission_router, admission_synced) = admission::admission_router(
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
        let (webhook, webhook_done) = admission::serve_webhook_on_own_thread(
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
            self.clients.send.clone(),
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
