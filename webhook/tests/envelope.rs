//! The HTTP/AdmissionReview envelope over real TLS connections: every kind of bad input gets its
//! status and a message saying what is wrong, while other requests keep being served.

mod support;

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use nmo_webhook::{EnvelopeLimits, ServeTuning, WebhookServer, admission_route_with};
use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Body-read timeout of the stalled-body test: long enough for 20 other requests to be served
/// first on a loaded 2-core machine.
const STALL_TIMEOUT: Duration = Duration::from_secs(5);

async fn server() -> (Certs, tempfile::TempDir, WebhookServer) {
    let certs = Certs::new();
    let dir = tempfile::tempdir().unwrap();
    write_pair(dir.path(), &certs.leaf());
    let server = start(dir.path(), false).await;
    (certs, dir, server)
}

async fn expect_status(
    certs: &Certs,
    server: &WebhookServer,
    body: Vec<u8>,
    want_status: u16,
    want_message: &str,
) {
    let mut sender = connect_http1(server.local_addr(), certs.ca.cert_pem()).await;
    let (status, resp) = post(&mut sender, PATH, body).await.unwrap();
    let msg = status_message(&resp);
    assert_eq!(status.as_u16(), want_status, "message: {msg}");
    assert!(
        msg.contains(want_message),
        "expected message containing {want_message:?}, got {msg:?}"
    );
    // The same connection still serves valid reviews afterwards (after a 413 hyper closes it,
    // since the unread body cannot be skipped, so a new one is used).
    if want_status == 413 {
        sender = connect_http1(server.local_addr(), certs.ca.cert_pem()).await;
    }
    let (status, resp) = post(&mut sender, PATH, review("after", "ok"))
        .await
        .unwrap();
    assert_eq!(status, 200);
    assert_eq!(parse_response(&resp).0, "after");
}

#[tokio::test]
async fn malformed_and_wrong_reviews_get_400_with_the_reason() {
    let (certs, _dir, server) = server().await;
    expect_status(
        &certs,
        &server,
        b"{not json".to_vec(),
        400,
        "malformed AdmissionReview JSON",
    )
    .await;
    expect_status(
        &certs,
        &server,
        b"[1,2]".to_vec(),
        400,
        "the body is not a JSON object",
    )
    .await;

    let mut v = review_value("u", "ok");
    v["kind"] = "Pod".into();
    expect_status(
        &certs,
        &server,
        v.to_string().into_bytes(),
        400,
        "expected kind AdmissionReview with apiVersion admission.k8s.io/v1, got apiVersion \"admission.k8s.io/v1\" kind \"Pod\"",
    )
    .await;

    let mut v = review_value("u", "ok");
    v["apiVersion"] = "admission.k8s.io/v2".into();
    expect_status(
        &certs,
        &server,
        v.to_string().into_bytes(),
        400,
        "got apiVersion \"admission.k8s.io/v2\"",
    )
    .await;

    let mut v = review_value("u", "ok");
    v.as_object_mut().unwrap().remove("request");
    expect_status(
        &certs,
        &server,
        v.to_string().into_bytes(),
        400,
        "AdmissionReview has no request",
    )
    .await;

    expect_status(
        &certs,
        &server,
        review("", "ok"),
        400,
        "request.uid is missing or empty",
    )
    .await;

    let mut v = review_value("u", "ok");
    v["request"]["object"]["kind"] = "Secret".into();
    expect_status(
        &certs,
        &server,
        v.to_string().into_bytes(),
        400,
        "expected a ConfigMap but got a v1/Secret in request.object",
    )
    .await;

    let mut v = review_value("u", "ok");
    v["request"]["operation"] = "EXPLODE".into();
    expect_status(
        &certs,
        &server,
        v.to_string().into_bytes(),
        400,
        "invalid admission request: unknown variant `EXPLODE`",
    )
    .await;
}

#[tokio::test]
async fn valid_reviews_get_200_with_the_uid_and_denials_carry_403_forbidden() {
    let (certs, _dir, server) = server().await;
    let mut sender = connect_http1(server.local_addr(), certs.ca.cert_pem()).await;
    let (status, body) = post(&mut sender, PATH, review("abc-123", "deny-me"))
        .await
        .unwrap();
    assert_eq!(status, 200);
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["response"]["uid"], "abc-123");
    assert_eq!(v["response"]["allowed"], false);
    assert_eq!(v["response"]["status"]["code"], 403);
    assert_eq!(v["response"]["status"]["reason"], "Forbidden");
    assert_eq!(
        v["response"]["status"]["message"],
        "denied because the name is deny-me"
    );

    // v1beta1 reviews are echoed with their version.
    let mut v = review_value("beta", "ok");
    v["apiVersion"] = "admission.k8s.io/v1beta1".into();
    let (status, body) = post(&mut sender, PATH, v.to_string().into_bytes())
        .await
        .unwrap();
    assert_eq!(status, 200);
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["apiVersion"], "admission.k8s.io/v1beta1");
    assert_eq!(v["response"]["uid"], "beta");
}

#[tokio::test]
async fn wrong_method_and_content_type_are_refused() {
    let (certs, _dir, server) = server().await;
    let mut sender = connect_http1(server.local_addr(), certs.ca.cert_pem()).await;
    let req = http::Request::get(PATH)
        .header("host", "127.0.0.1")
        .body(http_body_util::Full::new(Bytes::new()))
        .unwrap();
    let resp = sender.send_request(req).await.unwrap();
    assert_eq!(resp.status(), 405);

    sender.ready().await.unwrap();
    let req = http::Request::post(PATH)
        .header("host", "127.0.0.1")
        .header("content-type", "text/plain")
        .body(http_body_util::Full::new(Bytes::from(review("u", "ok"))))
        .unwrap();
    let resp = sender.send_request(req).await.unwrap();
    assert_eq!(resp.status(), 400);
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(
        status_message(&body),
        "contentType=text/plain, expected application/json"
    );
}

#[tokio::test]
async fn oversized_body_gets_413_declared_or_streamed() {
    let (certs, _dir, server) = server().await;
    let limit = nmo_webhook::DEFAULT_MAX_BODY_BYTES;
    // Declared: Content-Length over the limit.
    let big = vec![b' '; limit + 1];
    expect_status(
        &certs,
        &server,
        big,
        413,
        &format!("request body exceeds the limit of {limit} bytes"),
    )
    .await;

    // Streamed (chunked, no Content-Length): the limit trips while reading.
    let mut sender = connect_http1(server.local_addr(), certs.ca.cert_pem()).await;
    let chunk = Bytes::from(vec![b' '; 256 * 1024]);
    let frames = futures::stream::iter(
        (0..16).map(move |_| Ok::<_, std::convert::Infallible>(Frame::data(chunk.clone()))),
    );
    let (mut sender2, conn) = {
        let config = client_config(
            certs.ca.cert_pem(),
            &[b"http/1.1"],
            &[&rustls::version::TLS13],
        );
        let stream = tls_connect(server.local_addr(), config).await.unwrap();
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .unwrap()
    };
    tokio::spawn(conn);
    let req = http::Request::post(PATH)
        .header("host", "127.0.0.1")
        .header("content-type", "application/json")
        .body(StreamBody::new(frames))
        .unwrap();
    let resp = sender2.send_request(req).await.unwrap();
    assert_eq!(resp.status(), 413);
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    assert!(status_message(&body).contains("exceeds the limit"));

    // The server keeps serving others.
    let (status, _) = post(&mut sender, PATH, review("still", "ok"))
        .await
        .unwrap();
    assert_eq!(status, 200);
}

#[tokio::test]
async fn stalled_body_gets_408_while_others_are_served() {
    install_provider();
    let certs = Certs::new();
    let dir = tempfile::tempdir().unwrap();
    write_pair(dir.path(), &certs.leaf());
    // Long enough that the 20 requests below finish first even on a loaded machine.
    let limits = EnvelopeLimits {
        body_read_timeout: STALL_TIMEOUT,
        ..EnvelopeLimits::default()
    };
    let router = admission_route_with(PATH, std::sync::Arc::new(TestValidator), limits);
    let server = WebhookServer::start_with(
        options(dir.path(), false),
        tuning(),
        router,
        std::future::pending(),
    )
    .await
    .unwrap();

    // Headers promise 1000 bytes; only 10 arrive.
    let config = client_config(
        certs.ca.cert_pem(),
        &[b"http/1.1"],
        &[&rustls::version::TLS13],
    );
    let mut stalled = tls_connect(server.local_addr(), config).await.unwrap();
    stalled
        .write_all(
            b"POST /validate HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 1000\r\n\r\n{\"apiVersi",
        )
        .await
        .unwrap();
    stalled.flush().await.unwrap();
    let started = std::time::Instant::now();

    // Meanwhile another client is served: all 20 answers come while the stalled request is
    // still unanswered (a server that waited for the stalled body first would answer them only
    // after its 408).
    let mut sender = connect_http1(server.local_addr(), certs.ca.cert_pem()).await;
    for i in 0..20 {
        let (status, body) = post(&mut sender, PATH, review(&format!("m{i}"), "ok"))
            .await
            .unwrap();
        assert_eq!(status, 200);
        assert_eq!(parse_response(&body).0, format!("m{i}"));
    }
    let served = started.elapsed();
    let mut buf = vec![0u8; 4096];
    assert!(
        tokio::time::timeout(Duration::ZERO, stalled.read(&mut buf))
            .await
            .is_err(),
        "the stalled request was answered before the other 20 were ({served:?} after it stalled)"
    );

    let n = tokio::time::timeout(STALL_TIMEOUT * 6, stalled.read(&mut buf))
        .await
        .unwrap_or_else(|_| {
            panic!(
                "no response to the stalled request within {:?}",
                STALL_TIMEOUT * 6
            )
        })
        .unwrap();
    let text = String::from_utf8_lossy(&buf[..n]);
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    assert!(
        text.contains("request body not received within 5 s"),
        "{text}"
    );
    // A timeout cannot fire early; it may fire late on a loaded machine.
    assert!(started.elapsed() >= STALL_TIMEOUT - Duration::from_millis(50));
}

#[tokio::test]
async fn stalled_headers_close_the_connection() {
    install_provider();
    let certs = Certs::new();
    let dir = tempfile::tempdir().unwrap();
    write_pair(dir.path(), &certs.leaf());
    let tuning = ServeTuning {
        header_read_timeout: Duration::from_millis(300),
        ..tuning()
    };
    let server = start_with(dir.path(), false, tuning, std::future::pending()).await;
    let config = client_config(
        certs.ca.cert_pem(),
        &[b"http/1.1"],
        &[&rustls::version::TLS13],
    );
    let mut stalled = tls_connect(server.local_addr(), config).await.unwrap();
    stalled
        .write_all(b"POST /validate HTTP/1.1\r\nhost")
        .await
        .unwrap();
    stalled.flush().await.unwrap();
    let mut buf = vec![0u8; 4096];
    let read = tokio::time::timeout(Duration::from_secs(5), stalled.read(&mut buf))
        .await
        .expect("the server reacts to stalled headers within 5 s");
    // hyper closes the connection (EOF, possibly after a 408) or resets it.
    match read {
        Ok(0) | Err(_) => {}
        Ok(n) => {
            let text = String::from_utf8_lossy(&buf[..n]);
            assert!(text.starts_with("HTTP/1.1 408"), "{text}");
        }
    }
}

#[tokio::test]
async fn a_panicking_validator_gives_500_and_the_server_survives() {
    let (certs, _dir, server) = server().await;
    let mut sender = connect_http1(server.local_addr(), certs.ca.cert_pem()).await;
    let (status, body) = post(&mut sender, PATH, review("p", "panic")).await.unwrap();
    assert_eq!(status, 500);
    assert_eq!(
        status_message(&body),
        "internal error while handling the request"
    );
    let mut sender = connect_http1(server.local_addr(), certs.ca.cert_pem()).await;
    let (status, _) = post(&mut sender, PATH, review("q", "ok")).await.unwrap();
    assert_eq!(status, 200);
}
