//! The operator's Kubernetes clients: kube's own client stack (the layers of
//! `kube::client::ClientBuilder::try_from`, built from kube's public parts), on a TCP connector
//! with `TCP_NODELAY` set.
//!
//! Why not kube's builder as it is: kube 5.0 connects without `TCP_NODELAY` and offers no way to
//! set it (kube-rs/kube#2056, open). On a new connection that resumes a TLS 1.3 session, the
//! client writes its `Finished` and then the request; Nagle's algorithm holds the request until
//! the `Finished` is acknowledged, and the API server (Go, which sets `TCP_NODELAY` on its own
//! sockets) delays that acknowledgement by up to 40 ms because it has nothing to send. Every
//! connection the pool opens beside a busy one paid it: one request of a start-up (a list, a
//! discovery call) took 45 to 50 ms instead of 1 to 3 in `cargo bench --bench scale`
//! (`docs/design.md §5`). Go's clients never pay it: `net` sets `TCP_NODELAY` by default.
//!
//! Its trace layer is kube's too, under kube's log target (`kube_client`): with
//! `RUST_LOG=kube_client=debug` every HTTP request logs a `requesting` event in a span `HTTP`
//! naming its method and URL, which `benches/maintenance.rs` counts.
//!
//! What kube's builder does that this one does not: an HTTP or SOCKS proxy from the kubeconfig
//! (with `proxy-url` set, [`builder`] hands over to kube's builder, Nagle and all), gzip (a
//! feature this crate does not enable), and the expiry of a client certificate handed out by an
//! exec credential plugin (kube keeps that to itself; such a client is rebuilt by nothing here
//! either way: the process's clients live as long as the process).

use http::{Request, Response};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use kube::client::{Body, ClientBuilder, ConfigExt, DynBody, retry::RetryPolicy};
use std::time::Duration;
use tower::util::BoxService;
use tower::{BoxError, ServiceBuilder, ServiceExt as _};
use tower_http::classify::ServerErrorsFailureClass;
use tower_http::trace::TraceLayer;
use tracing::Span;

/// kube's boxed client service ([`kube::client::ClientBuilder`]'s `GenericService`).
pub type Service = BoxService<Request<Body>, Response<Box<DynBody>>, BoxError>;

/// The HTTP versions a client offers the API server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Http {
    /// HTTP/1.1 only, as kube's own builder: a connection of its own per request in flight.
    One,
    /// HTTP/2 where the API server agrees by ALPN (`h2`; HTTP/1.1 where it does not): every
    /// request in flight shares one connection, as client-go's do. Only for requests whose
    /// number in flight stays within the API server's streams per connection (kube-apiserver:
    /// 100 unless `--http2-max-streams-per-connection` says otherwise; 250 before its fix of
    /// CVE-2023-44487): past it, hyper holds a request in its own queue until a stream is free,
    /// out of the caller's sight (`docs/design.md` §2).
    Two,
}

/// A client builder for `config` with kube's layers (base URI, kube's 429/503 retry when
/// `config.default_retry`, authentication, extra headers, kube's connect/read/write timeouts)
/// over a connector that sets `TCP_NODELAY` and offers the HTTP `versions` (a
/// `tls-server-name` in the kubeconfig gets HTTP/1.1: kube's connector handles that name). Add
/// layers with `with_layer`, then `build`.
///
/// # Errors
/// kube's: unreadable TLS material or credentials in `config` (`kube::Error`).
pub fn builder(
    config: kube::Config,
    versions: Http,
) -> Result<ClientBuilder<Service>, kube::Error> {
    if config.proxy_url.is_some() {
        return ClientBuilder::try_from(config);
    }
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    let https = match (versions, &config.tls_server_name) {
        (Http::Two, None) => hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(config.rustls_client_config()?)
            .https_or_http()
            .enable_all_versions()
            .wrap_connector(http),
        _ => config.rustls_https_connector_with_connector(http)?,
    };
    let mut connector = hyper_timeout::TimeoutConnector::new(https);
    connector.set_connect_timeout(config.connect_timeout);
    connector.set_read_timeout(config.read_timeout);
    connector.set_write_timeout(config.write_timeout);
    connector.set_reset_reader_on_write(config.reset_reader_on_write);
    let client: hyper_util::client::legacy::Client<_, Body> =
        hyper_util::client::legacy::Client::builder(TokioExecutor::new()).build(connector);
    let retry = config
        .default_retry
        .then(|| tower::retry::RetryLayer::new(RetryPolicy::server_retry()));
    let service = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(retry)
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        // kube's request tracing (`ClientBuilder::try_from`'s `TraceLayer`), under kube's target.
        .layer(
            TraceLayer::new_for_http()
                .make_span_with(|req: &Request<Body>| {
                    tracing::debug_span!(
                        target: "kube_client",
                        "HTTP",
                        http.method = %req.method(),
                        http.url = %req.uri(),
                        http.status_code = tracing::field::Empty,
                    )
                })
                .on_request(|_: &Request<Body>, _: &Span| {
                    tracing::debug!(target: "kube_client", "requesting");
                })
                .on_response(|res: &Response<_>, _: Duration, span: &Span| {
                    span.record("http.status_code", res.status().as_u16());
                })
                .on_body_chunk(())
                .on_eos(())
                .on_failure(
                    |class: ServerErrorsFailureClass, _: Duration, span: &Span| {
                        if let ServerErrorsFailureClass::StatusCode(status) = class {
                            span.record("http.status_code", status.as_u16());
                        }
                        tracing::error!(target: "kube_client", "failed: {class}");
                    },
                ),
        )
        .map_err(BoxError::from)
        .service(client)
        .map_response(|res| {
            res.map(|body| {
                Box::new(http_body_util::BodyExt::map_err(body, BoxError::from)) as Box<DynBody>
            })
        });
    Ok(ClientBuilder::new(
        BoxService::new(service),
        config.default_namespace,
    ))
}

/// [`builder`], built: the HTTP/1.1 client for `config` with nothing added.
///
/// # Errors
/// As [`builder`].
pub fn client(config: kube::Config) -> Result<kube::Client, kube::Error> {
    Ok(builder(config, Http::One)?.build())
}
