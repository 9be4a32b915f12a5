//! A load driver for a webhook over TLS with keep-alive connections, as the API server calls
//! it: `connections` HTTP/1.1 connections, each posting one AdmissionReview after the other,
//! latency measured per request from send to the last byte of the answer.
//!
//! The driver runs every connection on one thread of its own (a current-thread runtime): on a
//! machine whose cores the measured server shares, a multi-threaded client spends its CPU on
//! waking its own workers (futex and eventfd per request) and adds runnable threads that
//! preempt the server, which is the harness's noise, not the server's latency.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use rustls::pki_types::{CertificateDer, ServerName, pem::PemObject};

/// What to drive.
#[derive(Clone, Debug)]
pub struct LoadOptions {
    /// The webhook's address (its certificate must be valid for 127.0.0.1).
    pub addr: SocketAddr,
    /// PEM of the CA that issued the webhook's certificate.
    pub ca_pem: String,
    /// The request path.
    pub path: String,
    /// Concurrent keep-alive connections.
    pub connections: usize,
    /// Time before measuring starts (connections are set up and warm).
    pub warmup: Duration,
    /// Measured time.
    pub measure: Duration,
}

/// What one run measured.
#[derive(Clone, Debug, Default)]
pub struct LoadReport {
    /// Requests answered 200 with the expected `allowed` value, in the measured time.
    pub ok: u64,
    /// Requests that failed, were not answered 200, or answered another `allowed` value.
    pub failed: u64,
    /// `ok` per second of measured time.
    pub requests_per_second: f64,
    /// Latency percentiles of the `ok` requests, in milliseconds.
    pub p50_ms: f64,
    /// 99th percentile, ms.
    pub p99_ms: f64,
    /// Slowest, ms.
    pub max_ms: f64,
    /// The first unexpected answer, for the report.
    pub first_failure: Option<String>,
    /// Answers received over the whole run, warm-up included (for CPU per request).
    pub total: u64,
    /// CPU time of the driver's thread per answered request, microseconds.
    pub client_cpu_us_per_request: f64,
}

/// Posts `body` (an AdmissionReview) over `opts.connections` connections for
/// `opts.warmup + opts.measure`, expecting each answer's `response.allowed` to be `allowed`
/// (`None`: either answer counts).
///
/// # Errors
/// A connection could not be set up (TCP, TLS or HTTP handshake), the CA is not PEM, or the
/// driver's thread could not be started.
pub async fn drive(
    opts: &LoadOptions,
    body: Bytes,
    allowed: Option<bool>,
) -> Result<LoadReport, String> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let opts = opts.clone();
    std::thread::Builder::new()
        .name("load-driver".into())
        .spawn(move || {
            let result = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| format!("load driver runtime: {e}"))
                .and_then(|rt| rt.block_on(drive_here(opts, body, allowed)));
            let _ = tx.send(result);
        })
        .map_err(|e| format!("load driver thread: {e}"))?;
    rx.await
        .map_err(|_| "the load driver thread ended without a report".to_string())?
}

/// CPU time of the calling thread.
fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the clock id is a constant the kernel knows.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

async fn drive_here(
    opts: LoadOptions,
    body: Bytes,
    allowed: Option<bool>,
) -> Result<LoadReport, String> {
    let cpu_before = thread_cpu();
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(opts.ca_pem.as_bytes()) {
        roots
            .add(c.map_err(|e| format!("CA PEM: {e}"))?)
            .map_err(|e| format!("CA: {e}"))?;
    }
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| e.to_string())?
    .with_root_certificates(roots)
    .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let expect: &'static [u8] = match allowed {
        Some(true) => b"\"allowed\":true",
        Some(false) => b"\"allowed\":false",
        None => b"\"allowed\":",
    };

    let mut senders = Vec::new();
    for _ in 0..opts.connections {
        let tcp = tokio::net::TcpStream::connect(opts.addr)
            .await
            .map_err(|e| format!("connect {}: {e}", opts.addr))?;
        tcp.set_nodelay(true).map_err(|e| e.to_string())?;
        let name = ServerName::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST).into());
        let tls = connector
            .connect(name, tcp)
            .await
            .map_err(|e| format!("TLS handshake: {e}"))?;
        let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
            .await
            .map_err(|e| format!("HTTP handshake: {e}"))?;
        tokio::spawn(conn);
        senders.push(sender);
    }

    let measure_from = Instant::now() + opts.warmup;
    let end = measure_from + opts.measure;
    let mut tasks = Vec::new();
    for mut sender in senders {
        let body = body.clone();
        let path = opts.path.clone();
        tasks.push(tokio::spawn(async move {
            let mut latencies: Vec<u32> = Vec::with_capacity(200_000);
            let mut failed = 0u64;
            let mut answered = 0u64;
            let mut first_failure = None;
            while Instant::now() < end {
                let req = http::Request::post(path.as_str())
                    .header("host", "127.0.0.1")
                    .header("content-type", "application/json")
                    .body(Full::new(body.clone()))
                    .expect("a valid request");
                let t0 = Instant::now();
                let answer: Result<(), String> = async {
                    sender.ready().await.map_err(|e| e.to_string())?;
                    let resp = sender.send_request(req).await.map_err(|e| e.to_string())?;
                    let status = resp.status();
                    let bytes = resp
                        .into_body()
                        .collect()
                        .await
                        .map_err(|e| e.to_string())?
                        .to_bytes();
                    if status != 200 || !bytes.windows(expect.len()).any(|w| w == expect) {
                        return Err(format!("{status}: {}", String::from_utf8_lossy(&bytes)));
                    }
                    Ok(())
                }
                .await;
                let took = t0.elapsed();
                answered += 1;
                if t0 < measure_from {
                    continue;
                }
                match answer {
                    Ok(()) => latencies.push(u32::try_from(took.as_micros()).unwrap_or(u32::MAX)),
                    Err(e) => {
                        failed += 1;
                        first_failure.get_or_insert(e);
                    }
                }
            }
            (latencies, failed, first_failure, answered)
        }));
    }
    let mut all = Vec::new();
    let mut report = LoadReport::default();
    for t in tasks {
        let (l, f, first, answered) = t.await.map_err(|e| e.to_string())?;
        report.total += answered;
        all.extend(l);
        report.failed += f;
        if report.first_failure.is_none() {
            report.first_failure = first;
        }
    }
    all.sort_unstable();
    let pct = |p: f64| -> f64 {
        if all.is_empty() {
            return f64::NAN;
        }
        let idx = ((all.len() as f64 * p).ceil() as usize).clamp(1, all.len()) - 1;
        f64::from(all[idx]) / 1000.0
    };
    report.ok = all.len() as u64;
    report.requests_per_second = all.len() as f64 / opts.measure.as_secs_f64();
    report.p50_ms = pct(0.50);
    report.p99_ms = pct(0.99);
    report.max_ms = pct(1.0);
    report.client_cpu_us_per_request =
        (thread_cpu() - cpu_before).as_secs_f64() * 1e6 / report.total.max(1) as f64;
    Ok(report)
}
