//! The metrics server, and the plain-HTTP listeners the probes and metrics are served on.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::header;
use axum::routing::get;
use kube::Client;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::error::RunError;
use crate::config::Config;
use crate::metrics::{Metrics, OPENMETRICS_CONTENT_TYPE};

/// `GET /metrics`: the registry as OpenMetrics text.
fn metrics_router(metrics: Arc<Metrics>) -> Router {
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
pub(super) async fn serve_metrics(
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

pub(super) async fn bind(
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

pub(super) fn serve_plain(
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
