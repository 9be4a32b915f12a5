//! Shared helpers of the nmo-webhook integration tests: certificates, a trivial validator, a
//! TLS + HTTP/1.1 client. Every test binary uses a subset.
#![allow(dead_code)]

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::StatusCode;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::core::admission::{AdmissionRequest, AdmissionResponse};
use nmo_webhook::{
    ServeTuning, TlsOptions, Validator, WebhookServer, admission_route, allow, deny,
};
use rustls::pki_types::{CertificateDer, ServerName, pem::PemObject};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

/// The path the test router serves.
pub(crate) const PATH: &str = "/validate";

pub(crate) fn install_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// A CA and its serving pairs for 127.0.0.1.
pub(crate) struct Certs {
    pub ca: nmo_certs::Ca,
}

impl Certs {
    pub(crate) fn new() -> Self {
        Self {
            ca: nmo_certs::Ca::new("nmo-webhook-test-ca").expect("CA"),
        }
    }

    pub(crate) fn leaf(&self) -> nmo_certs::Pair {
        self.ca
            .issue_server(&["localhost"], &[IpAddr::V4(Ipv4Addr::LOCALHOST)])
            .expect("leaf")
    }
}

/// DER of the first certificate of a PEM chain.
pub(crate) fn leaf_der(pem: &str) -> Vec<u8> {
    CertificateDer::pem_slice_iter(pem.as_bytes())
        .next()
        .expect("a certificate")
        .expect("valid PEM")
        .to_vec()
}

pub(crate) fn write_pair(dir: &Path, pair: &nmo_certs::Pair) {
    std::fs::write(dir.join("tls.crt"), &pair.cert_pem).unwrap();
    std::fs::write(dir.join("tls.key"), &pair.key_pem).unwrap();
}

pub(crate) fn options(dir: &Path, enable_http2: bool) -> TlsOptions {
    TlsOptions {
        cert_dir: dir.to_path_buf(),
        cert_name: "tls.crt".into(),
        key_name: "tls.key".into(),
        bind: "127.0.0.1:0".parse().unwrap(),
        enable_http2,
    }
}

/// Test validator over ConfigMaps: denies the name `deny-me`, panics on `panic`, sleeps
/// `slow-<ms>` milliseconds, allows everything else.
pub(crate) struct TestValidator;

impl Validator for TestValidator {
    type Object = ConfigMap;

    async fn validate(&self, req: AdmissionRequest<ConfigMap>) -> AdmissionResponse {
        let name = req
            .object
            .as_ref()
            .and_then(|o| o.metadata.name.clone())
            .unwrap_or_default();
        if name == "deny-me" {
            return deny(&req, "denied because the name is deny-me");
        }
        if name == "panic" {
            panic!("test validator asked to panic");
        }
        if let Some(ms) = name.strip_prefix("slow-") {
            VALIDATING.lock().unwrap().push(req.uid.clone());
            tokio::time::sleep(Duration::from_millis(ms.parse().unwrap())).await;
        }
        allow(&req)
    }
}

/// The uids of the `slow-<ms>` requests the validator has begun, in order.
static VALIDATING: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

/// Waits until the validator has begun the `slow-<ms>` request with `uid`, polling every 10 ms
/// for up to 30 s (a loaded machine), and panics with what it saw otherwise.
pub(crate) async fn wait_validating(uid: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let seen = VALIDATING.lock().unwrap().clone();
        if seen.iter().any(|u| u == uid) {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "request {uid} never reached the validator in 30 s; begun: {seen:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

pub(crate) fn router() -> axum::Router {
    admission_route(PATH, Arc::new(TestValidator))
        .route("/healthz", axum::routing::get(|| async { "ok" }))
}

/// Fast tuning for tests: quick reload poll so rotation tests do not depend on the poll alone.
pub(crate) fn tuning() -> ServeTuning {
    ServeTuning {
        shutdown_grace: Duration::from_secs(5),
        ..ServeTuning::default()
    }
}

pub(crate) async fn start(dir: &Path, enable_http2: bool) -> WebhookServer {
    start_with(dir, enable_http2, tuning(), std::future::pending()).await
}

pub(crate) async fn start_with(
    dir: &Path,
    enable_http2: bool,
    tuning: ServeTuning,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> WebhookServer {
    install_provider();
    WebhookServer::start_with(options(dir, enable_http2), tuning, router(), shutdown)
        .await
        .expect("server starts")
}

/// A ready-made valid AdmissionReview body for a ConfigMap named `name`.
pub(crate) fn review(uid: &str, name: &str) -> Vec<u8> {
    serde_json::to_vec(&review_value(uid, name)).unwrap()
}

pub(crate) fn review_value(uid: &str, name: &str) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "", "version": "v1", "kind": "ConfigMap"},
            "resource": {"group": "", "version": "v1", "resource": "configmaps"},
            "requestKind": {"group": "", "version": "v1", "kind": "ConfigMap"},
            "requestResource": {"group": "", "version": "v1", "resource": "configmaps"},
            "name": name,
            "namespace": "default",
            "operation": "CREATE",
            "userInfo": {"username": "tester", "groups": ["system:authenticated"]},
            "object": {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": name, "namespace": "default"},
                "data": {"k": "v"}
            },
            "oldObject": null,
            "dryRun": false,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"}
        }
    })
}

pub(crate) fn client_config(
    ca_pem: &str,
    alpn: &[&[u8]],
    versions: &[&'static rustls::SupportedProtocolVersion],
) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_protocol_versions(versions)
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Arc::new(config)
}

/// TLS-connects to `addr` as `127.0.0.1`.
pub(crate) async fn tls_connect(
    addr: SocketAddr,
    config: Arc<rustls::ClientConfig>,
) -> std::io::Result<TlsStream<TcpStream>> {
    let tcp = TcpStream::connect(addr).await?;
    tcp.set_nodelay(true)?;
    let name = ServerName::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST).into());
    TlsConnector::from(config).connect(name, tcp).await
}

/// An HTTP/1.1 client over an established TLS stream.
pub(crate) async fn http1(stream: TlsStream<TcpStream>) -> SendRequest<Full<Bytes>> {
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .expect("http1 handshake");
    tokio::spawn(conn);
    sender
}

/// Connects with ALPN `http/1.1` and returns an HTTP/1.1 client.
pub(crate) async fn connect_http1(addr: SocketAddr, ca_pem: &str) -> SendRequest<Full<Bytes>> {
    let config = client_config(
        ca_pem,
        &[b"http/1.1"],
        &[&rustls::version::TLS13, &rustls::version::TLS12],
    );
    http1(tls_connect(addr, config).await.expect("TLS connect")).await
}

/// POSTs `body` as JSON to `path`; returns status and body.
pub(crate) async fn post(
    sender: &mut SendRequest<Full<Bytes>>,
    path: &str,
    body: Vec<u8>,
) -> Result<(StatusCode, Bytes), hyper::Error> {
    sender.ready().await?;
    let req = http::Request::post(path)
        .header("host", "127.0.0.1")
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body)))
        .unwrap();
    let resp = sender.send_request(req).await?;
    let status = resp.status();
    let body = resp.into_body().collect().await?.to_bytes();
    Ok((status, body))
}

/// Parses an AdmissionReview response body and returns `(uid, allowed, code, message)`.
pub(crate) fn parse_response(body: &[u8]) -> (String, bool, u64, String) {
    let v: serde_json::Value = serde_json::from_slice(body).expect("JSON response");
    assert_eq!(v["kind"], "AdmissionReview", "{v}");
    assert_eq!(v["apiVersion"], "admission.k8s.io/v1", "{v}");
    let r = &v["response"];
    (
        r["uid"].as_str().unwrap_or_default().to_string(),
        r["allowed"].as_bool().expect("allowed"),
        r["status"]["code"].as_u64().unwrap_or(0),
        r["status"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
    )
}

/// The `message` of a 4xx Status body.
pub(crate) fn status_message(body: &[u8]) -> String {
    let v: serde_json::Value = serde_json::from_slice(body).unwrap_or_else(|e| {
        panic!(
            "status body is JSON ({e}): {}",
            String::from_utf8_lossy(body)
        )
    });
    v["message"].as_str().unwrap_or_default().to_string()
}
