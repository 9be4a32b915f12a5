//! Admission round-trip benchmark over loopback TLS with keep-alive connections.
//!
//! Run with `cargo bench -p nmo-webhook --bench admission`. Environment knobs:
//! `BENCH_CONNECTIONS` (concurrent client connections, default 8), `BENCH_SECONDS` (measured
//! time, default 5; a 1 s warm-up is not measured), `BENCH_THREADS` (tokio worker threads shared
//! by server and client, default 2).
//!
//! It serves a trivial allow-all validator with the production envelope and TLS config (HTTP/1.1,
//! TLS 1.3), and prints p50, p99 and max latency per request, requests per second, and the
//! process RSS (VmRSS), which includes the client side of the benchmark too. Target on 2 cores:
//! p99 <= 1 ms and >= 5,000 requests/s.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::core::admission::{AdmissionRequest, AdmissionResponse};
use rustls::pki_types::{CertificateDer, ServerName, pem::PemObject};

struct AllowAll;

impl nmo_webhook::Validator for AllowAll {
    type Object = ConfigMap;
    async fn validate(&self, req: AdmissionRequest<ConfigMap>) -> AdmissionResponse {
        nmo_webhook::allow(&req)
    }
}

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
}

fn review(uid: &str) -> Bytes {
    Bytes::from(
        serde_json::json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": uid,
                "kind": {"group": "", "version": "v1", "kind": "ConfigMap"},
                "resource": {"group": "", "version": "v1", "resource": "configmaps"},
                "name": "bench",
                "namespace": "default",
                "operation": "CREATE",
                "userInfo": {"username": "bench"},
                "object": {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {"name": "bench", "namespace": "default"},
                    "data": {"k": "v"}
                },
                "dryRun": false
            }
        })
        .to_string(),
    )
}

fn main() {
    let connections = env("BENCH_CONNECTIONS", 8) as usize;
    let seconds = env("BENCH_SECONDS", 5);
    let threads = env("BENCH_THREADS", 2) as usize;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(run(connections, Duration::from_secs(seconds), threads));
}

async fn run(connections: usize, measure: Duration, threads: usize) {
    let ca = nmo_certs::Ca::new("bench-ca").unwrap();
    let leaf = ca
        .issue_server(&["localhost"], &[IpAddr::V4(Ipv4Addr::LOCALHOST)])
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("tls.crt"), &leaf.cert_pem).unwrap();
    std::fs::write(dir.path().join("tls.key"), &leaf.key_pem).unwrap();
    let opts = nmo_webhook::TlsOptions {
        cert_dir: dir.path().to_path_buf(),
        cert_name: "tls.crt".into(),
        key_name: "tls.key".into(),
        bind: "127.0.0.1:0".parse().unwrap(),
        enable_http2: false,
    };
    let router = nmo_webhook::admission_route("/validate", Arc::new(AllowAll));
    let server = nmo_webhook::WebhookServer::start(opts, router, std::future::pending())
        .await
        .unwrap();
    let addr = server.local_addr();

    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(ca.cert_pem().as_bytes()) {
        roots.add(c.unwrap()).unwrap();
    }
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));

    let warmup = Duration::from_secs(1);
    let start = Instant::now();
    let measure_from = start + warmup;
    let end = measure_from + measure;
    let mut tasks = Vec::new();
    for c in 0..connections {
        let connector = connector.clone();
        tasks.push(tokio::spawn(async move {
            let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
            tcp.set_nodelay(true).unwrap();
            let name = ServerName::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST).into());
            let tls = connector.connect(name, tcp).await.unwrap();
            let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
                .await
                .unwrap();
            tokio::spawn(conn);
            let mut latencies = Vec::with_capacity(100_000);
            let mut errors = 0u64;
            let mut i = 0u64;
            loop {
                let now = Instant::now();
                if now >= end {
                    break;
                }
                let body = review(&format!("c{c}-{i}"));
                i += 1;
                let req = http::Request::post("/validate")
                    .header("host", "127.0.0.1")
                    .header("content-type", "application/json")
                    .body(Full::new(body))
                    .unwrap();
                let t0 = Instant::now();
                let ok = async {
                    sender.ready().await.ok()?;
                    let resp = sender.send_request(req).await.ok()?;
                    let status = resp.status();
                    resp.into_body().collect().await.ok()?;
                    (status == 200).then_some(())
                }
                .await
                .is_some();
                let took = t0.elapsed();
                if t0 >= measure_from {
                    if ok {
                        latencies.push(took.as_micros() as u32);
                    } else {
                        errors += 1;
                    }
                }
            }
            (latencies, errors)
        }));
    }
    let mut all = Vec::new();
    let mut errors = 0;
    for t in tasks {
        let (l, e) = t.await.unwrap();
        all.extend(l);
        errors += e;
    }
    all.sort_unstable();
    let pct = |p: f64| -> f64 {
        if all.is_empty() {
            return f64::NAN;
        }
        let idx = ((all.len() as f64 * p).ceil() as usize).clamp(1, all.len()) - 1;
        all[idx] as f64 / 1000.0
    };
    let rps = all.len() as f64 / measure.as_secs_f64();
    println!(
        "admission over TLS keep-alive: {connections} connections, {threads} runtime threads, {} s measured",
        measure.as_secs()
    );
    println!(
        "  requests: {} ok, {errors} failed; {rps:.0} req/s",
        all.len()
    );
    println!(
        "  latency: p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms",
        pct(0.50),
        pct(0.99),
        pct(1.0)
    );
    match rss_kib() {
        Some(kib) => println!(
            "  process RSS (VmRSS, server and benchmark client together): {:.1} MiB",
            kib as f64 / 1024.0
        ),
        None => println!("  process RSS: unavailable (/proc/self/status not readable)"),
    }
    println!(
        "  targets (2 cores): p99 <= 1 ms: {}; >= 5000 req/s: {}",
        if pct(0.99) <= 1.0 { "met" } else { "NOT met" },
        if rps >= 5000.0 { "met" } else { "NOT met" }
    );
}
