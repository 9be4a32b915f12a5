//! The admission side of the process: the webhook's routes and caches, served on a thread of
//! their own.

use std::sync::Arc;

use axum::Router;
use kube::Client;
use tokio::sync::watch;

use super::error::RunError;
use crate::admission::{self, Admission};
use crate::config::Config;
use crate::metrics::Metrics;
use crate::watch::nodes::NodeCache;

/// Name of the webhook server's thread.
const ADMISSION_THREAD: &str = "nmo-admission";

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
pub(super) async fn serve_webhook_on_own_thread(
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
