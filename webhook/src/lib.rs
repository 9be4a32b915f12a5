//! TLS serving for admission webhooks: HTTP/1.1 only (upstream's `--enable-http2=false`),
//! hot-reloaded certificates, and the AdmissionReview envelope around a generic [`Validator`].
//!
//! This crate knows TLS, HTTP and the AdmissionReview format, not any admission rule. The usual
//! wiring:
//!
//! ```no_run
//! # async fn f(router: axum::Router) -> Result<(), nmo_webhook::ServeError> {
//! let opts = nmo_webhook::TlsOptions {
//!     cert_dir: "/apiserver.local.config/certificates".into(),
//!     cert_name: "apiserver.crt".into(),
//!     key_name: "apiserver.key".into(),
//!     bind: "0.0.0.0:9443".parse().unwrap(),
//!     enable_http2: false,
//! };
//! let server = nmo_webhook::WebhookServer::start(opts, router, async { /* shutdown */ }).await?;
//! server.wait().await
//! # }
//! ```

mod envelope;
mod policy;
mod reload;
mod tls;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::Router;
use axum_server::tls_rustls::RustlsConfig;
use tokio::sync::watch;

pub use envelope::{
    ADMISSION_V1, ADMISSION_V1BETA1, DEFAULT_BODY_READ_TIMEOUT, DEFAULT_MAX_BODY_BYTES,
    EnvelopeError, EnvelopeLimits, Validator, admission_route, admission_route_with, allow,
    decode_review, deny,
};
pub use policy::{Mapping, PolicyError, TlsPolicy, TlsVersion, map_settings, parse_min_version};
pub use tls::{
    ALPN_H2, ALPN_HTTP1, CertPaths, DEFAULT_CERT_NAME, DEFAULT_KEY_NAME, PROTOCOL_VERSIONS,
    PemPair, alpn_protocols, build_server_config, build_server_config_with, default_cert_dir,
    resolve_cert_paths,
};

/// Errors of starting or running the webhook server.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// Neither the requested pair nor the controller-runtime default pair exists.
    #[error("no webhook serving certificate found: none of these files exist as complete pairs: {}", display_paths(.tried))]
    CertsNotFound {
        /// Every path that was looked at (requested cert, key, default cert, key).
        tried: Vec<PathBuf>,
    },
    /// A chosen certificate or key file exists but cannot be read.
    #[error("cannot read webhook certificate file {}: {source}", path.display())]
    CertRead {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The files were read but are not a usable certificate chain and matching private key.
    #[error("invalid webhook serving certificate: {reason}")]
    InvalidCert {
        /// What is wrong, from the PEM parser or rustls.
        reason: String,
    },
    /// The listen address cannot be bound (in use, no permission).
    #[error("cannot listen on {addr} for the webhook server: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The server stopped with an I/O error.
    #[error("webhook server failed: {0}")]
    Serve(std::io::Error),
    /// The server task panicked or was cancelled.
    #[error("webhook server task ended abnormally: {0}")]
    Task(String),
}

fn display_paths(paths: &[PathBuf]) -> String {
    paths
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Where and how to serve (the agreed interface; [`ServeTuning`] holds the timeouts).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsOptions {
    /// Directory of the requested pair (upstream: `/apiserver.local.config/certificates`).
    pub cert_dir: PathBuf,
    /// Certificate file name in `cert_dir` (upstream: `apiserver.crt`).
    pub cert_name: String,
    /// Key file name in `cert_dir` (upstream: `apiserver.key`).
    pub key_name: String,
    /// Listen address (upstream: port 9443 on all interfaces). Port 0 picks a free port.
    pub bind: SocketAddr,
    /// Offer `h2` in ALPN and serve HTTP/2 too (upstream `--enable-http2`, default false).
    pub enable_http2: bool,
}

/// Timeouts and reload timing of the server; [`Default`] is what production uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServeTuning {
    /// Time allowed for the TLS handshake (default 10 s).
    pub handshake_timeout: Duration,
    /// HTTP/1 time allowed for a request's headers; hyper also applies it to idle keep-alive
    /// connections waiting for their next request (default 30 s, hyper's own default, well under
    /// the API server's 90 s idle timeout so idle connections are closed by us only rarely).
    pub header_read_timeout: Duration,
    /// How long a graceful shutdown waits for in-flight requests (default 20 s, above the
    /// webhook's 15 s `timeoutSeconds`).
    pub shutdown_grace: Duration,
    /// Quiet time after a certificate file event before the pair is re-read (default 200 ms).
    pub reload_debounce: Duration,
    /// Interval of the safety re-read of the certificate files (default 10 s, as
    /// controller-runtime's certwatcher).
    pub reload_poll: Duration,
}

impl Default for ServeTuning {
    fn default() -> Self {
        Self {
            handshake_timeout: Duration::from_secs(10),
            header_read_timeout: Duration::from_secs(30),
            shutdown_grace: Duration::from_secs(20),
            reload_debounce: Duration::from_millis(200),
            reload_poll: Duration::from_secs(10),
        }
    }
}

struct ServerState {
    serving: AtomicBool,
    stats: Arc<reload::ReloadStats>,
    paths: Option<CertPaths>,
}

/// One TLS server to start with [`WebhookServer::serve`]: the webhook, or the secure metrics
/// endpoint. Both get the same certificate reload, TLS policy reload, timeouts and panic
/// handling.
pub struct ServerSpec {
    /// `webhook` or `metrics`: the `server` field of the log lines.
    pub name: &'static str,
    /// The bound listener (non-blocking, as [`std::net::TcpListener::set_nonblocking`] leaves it).
    pub listener: std::net::TcpListener,
    /// The pair served first.
    pub pair: PemPair,
    /// Where `pair` was read from, watched and re-read while serving; `None` for a pair that
    /// never changes (a self-signed one generated at start-up).
    pub cert_paths: Option<CertPaths>,
    /// Offer `h2` in ALPN and serve HTTP/2 too.
    pub enable_http2: bool,
    /// The TLS versions and suites, applied to new handshakes whenever the value changes
    /// (existing connections keep what they negotiated).
    pub tls: watch::Receiver<TlsPolicy>,
}

impl ServerSpec {
    /// The webhook server of `opts`: the pair chosen by [`resolve_cert_paths`], read, and the
    /// listener bound on `opts.bind`.
    ///
    /// # Errors
    /// [`ServeError::CertsNotFound`], [`ServeError::CertRead`] or [`ServeError::Bind`].
    pub fn webhook(opts: &TlsOptions, tls: watch::Receiver<TlsPolicy>) -> Result<Self, ServeError> {
        let paths = resolve_cert_paths(&opts.cert_dir, &opts.cert_name, &opts.key_name)?;
        let pair = PemPair::read(&paths)?;
        let bind_err = |source| ServeError::Bind {
            addr: opts.bind,
            source,
        };
        let listener = std::net::TcpListener::bind(opts.bind).map_err(bind_err)?;
        listener.set_nonblocking(true).map_err(bind_err)?;
        Ok(Self {
            name: "webhook",
            listener,
            pair,
            cert_paths: Some(paths),
            enable_http2: opts.enable_http2,
            tls,
        })
    }
}

/// A running webhook server: TLS on one listener, certificates hot-reloaded from disk.
pub struct WebhookServer {
    local_addr: SocketAddr,
    state: Arc<ServerState>,
    task: tokio::task::JoinHandle<Result<(), ServeError>>,
}

impl WebhookServer {
    /// Loads the certificates ([`resolve_cert_paths`]), binds `opts.bind` and serves `router` in a
    /// background task until `shutdown` completes; then stops accepting, lets in-flight requests
    /// finish (up to [`ServeTuning::shutdown_grace`]) and ends. Logs `HTTP/2 for webhooks
    /// disabled` (or `enabled`) as upstream does. A panic in a handler becomes a 500.
    ///
    /// Must be called within a tokio runtime.
    ///
    /// # Errors
    /// Fails fast, before serving anything, with [`ServeError::CertsNotFound`],
    /// [`ServeError::CertRead`], [`ServeError::InvalidCert`] or [`ServeError::Bind`].
    pub async fn start(
        opts: TlsOptions,
        router: Router,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<Self, ServeError> {
        Self::start_with(opts, ServeTuning::default(), router, shutdown).await
    }

    /// As [`WebhookServer::start`] with explicit timeouts.
    ///
    /// # Errors
    /// As [`WebhookServer::start`].
    pub async fn start_with(
        opts: TlsOptions,
        tuning: ServeTuning,
        router: Router,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<Self, ServeError> {
        let (_fixed, tls) = watch::channel(TlsPolicy::default());
        let spec = ServerSpec::webhook(&opts, tls)?;
        Self::serve(spec, tuning, router, shutdown).await
    }

    /// Serves `router` as `spec` says until `shutdown` completes; then stops accepting, lets
    /// in-flight requests finish (up to [`ServeTuning::shutdown_grace`]) and ends. A panic in a
    /// handler becomes a 500 `metav1.Status` (tower-http's catch-panic, the one such layer on
    /// the path).
    ///
    /// Must be called within a tokio runtime.
    ///
    /// # Errors
    /// [`ServeError::InvalidCert`] when the pair is unusable, [`ServeError::Bind`] when the
    /// listener cannot be served.
    pub async fn serve(
        spec: ServerSpec,
        tuning: ServeTuning,
        router: Router,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<Self, ServeError> {
        let ServerSpec {
            name,
            listener,
            pair,
            cert_paths,
            enable_http2,
            tls: mut policies,
        } = spec;
        let policy = policies.borrow_and_update().clone();
        let config = build_server_config_with(&pair, enable_http2, &policy)?;
        let local_addr = listener.local_addr().map_err(|source| ServeError::Bind {
            addr: SocketAddr::from(([0, 0, 0, 0], 0)),
            source,
        })?;
        let bind_err = |source| ServeError::Bind {
            addr: local_addr,
            source,
        };

        let rustls = RustlsConfig::from_config(Arc::new(config));
        let handle = axum_server::Handle::new();
        let mut server = axum_server::from_tcp_rustls(listener, rustls.clone())
            .map_err(bind_err)?
            // Every answer is one write; without TCP_NODELAY a reply that hyper happens to
            // split would wait for the client's delayed ACK.
            .map(|acceptor| {
                acceptor
                    .handshake_timeout(tuning.handshake_timeout)
                    .acceptor(axum_server::accept::NoDelayAcceptor::new())
            })
            .handle(handle.clone());
        if name == "webhook" {
            // Upstream's log line, kept for those who grep for it.
            if enable_http2 {
                tracing::info!("HTTP/2 for webhooks enabled");
            } else {
                tracing::info!("HTTP/2 for webhooks disabled");
            }
        }
        if !enable_http2 {
            // ALPN already offers only http/1.1; hyper must agree or prior-knowledge h2 would be
            // served anyway.
            server = server.http1_only();
        }
        server
            .http_builder()
            .http1()
            .header_read_timeout(Some(tuning.header_read_timeout));

        let stats = Arc::new(reload::ReloadStats::default());
        let state = Arc::new(ServerState {
            serving: AtomicBool::new(true),
            stats: stats.clone(),
            paths: cert_paths.clone(),
        });
        let (stop_tx, stop_rx) = watch::channel(false);
        tracing::info!(
            server = name,
            min_version = policy.min_version().go_name(),
            cipher_suites = ?policy.suite_names(),
            "TLS settings"
        );
        let reloader = reload::spawn(
            reload::ReloadInputs {
                name,
                paths: cert_paths.clone(),
                enable_http2,
                rustls,
                initial: pair,
                policy,
                policies: Some(policies),
                stats,
                timing: reload::ReloadTiming {
                    debounce: tuning.reload_debounce,
                    poll: tuning.reload_poll,
                },
            },
            stop_rx,
        );

        let shutdown_state = state.clone();
        let shutdown_handle = handle.clone();
        let grace = tuning.shutdown_grace;
        tokio::spawn(async move {
            shutdown.await;
            shutdown_state.serving.store(false, Ordering::SeqCst);
            tracing::info!(server = name, "shutting down the TLS server");
            shutdown_handle.graceful_shutdown(Some(grace));
        });

        let app = router.layer(envelope::catch_panic_layer());
        let task_state = state.clone();
        let task = tokio::spawn(async move {
            let result = server.serve(app.into_make_service()).await;
            task_state.serving.store(false, Ordering::SeqCst);
            let _ = stop_tx.send(true);
            let _ = reloader.await;
            result.map_err(ServeError::Serve)
        });
        match &cert_paths {
            Some(paths) => tracing::info!(
                server = name,
                addr = %local_addr,
                cert = %paths.cert().display(),
                key = %paths.key().display(),
                "serving over TLS"
            ),
            None => {
                tracing::info!(server = name, addr = %local_addr, "serving over TLS with a self-signed certificate")
            }
        }
        Ok(Self {
            local_addr,
            state,
            task,
        })
    }

    /// The bound address (useful with port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// True while the server accepts connections with a loaded certificate; false once shutdown
    /// began or the server stopped. Meant for `/readyz`.
    pub fn cert_loaded(&self) -> bool {
        self.state.serving.load(Ordering::SeqCst)
    }

    /// The certificate and key files in use (after the fallback rule); `None` for a pair that
    /// is not read from files.
    pub fn cert_paths(&self) -> Option<&CertPaths> {
        self.state.paths.as_ref()
    }

    /// Number of certificate reloads since start (the initial load not counted).
    pub fn reload_count(&self) -> u64 {
        self.state.stats.reloads.load(Ordering::Relaxed)
    }

    /// Number of rejected new certificate pairs since start (the previous pair kept serving).
    pub fn reload_failure_count(&self) -> u64 {
        self.state.stats.failures.load(Ordering::Relaxed)
    }

    /// A cheap handle for readiness checks that outlives moving the server into [`WebhookServer::wait`].
    pub fn readiness(&self) -> Readiness {
        Readiness(self.state.clone())
    }

    /// Waits until the server has stopped (after `shutdown` completed and in-flight requests
    /// finished).
    ///
    /// # Errors
    /// [`ServeError::Serve`] if serving failed, [`ServeError::Task`] if the task panicked.
    pub async fn wait(self) -> Result<(), ServeError> {
        match self.task.await {
            Ok(result) => result,
            Err(e) => Err(ServeError::Task(e.to_string())),
        }
    }
}

/// Readiness of a [`WebhookServer`], cloneable into a health endpoint.
#[derive(Clone)]
pub struct Readiness(Arc<ServerState>);

impl Readiness {
    /// Same as [`WebhookServer::cert_loaded`].
    pub fn cert_loaded(&self) -> bool {
        self.0.serving.load(Ordering::SeqCst)
    }
}
