//! `--metrics-secure` against the real API server: the operator runs as the ServiceAccount with
//! the RBAC of `manifests/overlays/metrics-secure` (so the test also proves that RBAC is enough
//! for its TokenReviews and SubjectAccessReviews), and scrapers present ServiceAccount tokens
//! issued by the TokenRequest API. A token bound to the metrics-reader ClusterRole gets 200 and
//! the controller-runtime families, an authenticated token without it 403, no or a forged token
//! 401.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::Duration;

use common::*;

/// One HTTPS GET of `/metrics` on 127.0.0.1:`port`, trusting only `ca_pem`; `(status, body)`.
fn https_get(port: u16, ca_pem: &str, token: Option<&str>) -> (u16, String) {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, ServerName};
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let name = ServerName::try_from("127.0.0.1").unwrap();
    let mut conn = rustls::ClientConnection::new(Arc::new(config), name).unwrap();
    let mut sock = TcpStream::connect(("127.0.0.1", port)).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut tls = rustls::Stream::new(&mut conn, &mut sock);
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    write!(
        tls,
        "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n{auth}Connection: close\r\n\r\n"
    )
    .unwrap();
    let mut raw = Vec::new();
    // The server closes after the response; rustls reports a close without close_notify as an
    // error, after the data has been read.
    let _ = tls.read_to_end(&mut raw);
    let raw = String::from_utf8_lossy(&raw).to_string();
    let status = raw
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no HTTP status in {raw:?}"));
    let body = raw
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (status, body)
}

#[tokio::test]
async fn secure_metrics_answer_200_to_a_reader_403_to_others_401_without_a_token() {
    let cluster = Cluster::shared();
    let Installed {
        account,
        kubeconfig,
        ..
    } = installed(cluster);
    // The overlay adds the operator's tokenreviews/subjectaccessreviews grant and the reader role.
    let overlay = manifests_dir().join("overlays/metrics-secure");
    let same = nmo_devcluster::operator::install_manifests(cluster, &overlay).unwrap();
    assert_eq!(
        (same.namespace.as_str(), same.name.as_str()),
        (account.namespace.as_str(), account.name.as_str())
    );

    // A serving pair from the cluster's CA, so the client verifies the server properly.
    let cert_dir = cluster.dir().join("metrics-certs");
    std::fs::create_dir_all(&cert_dir).unwrap();
    let pair = cluster
        .ca()
        .issue_server(&["localhost"], &["127.0.0.1".parse().unwrap()])
        .unwrap();
    std::fs::write(cert_dir.join("tls.crt"), &pair.cert_pem).unwrap();
    std::fs::write(cert_dir.join("tls.key"), &pair.key_pem).unwrap();
    let mut opts = operator_options("operator-secure-metrics", &account, &kubeconfig);
    opts.extra_args = vec![
        "--metrics-secure".into(),
        format!("--metrics-cert-path={}", cert_dir.display()),
    ];
    let operator = nmo_devcluster::operator::Operator::start(cluster, &opts)
        .unwrap_or_else(|e| panic!("operator did not start: {e}"));
    let port = operator.metrics_port;
    let ca = cluster.ca().cert_pem().to_string();

    let ns = namespace(&cluster.client().await, "scrapers").await;
    let kubectl = |args: &[&str]| {
        cluster
            .kubectl_run(args, None)
            .unwrap_or_else(|e| panic!("kubectl {args:?}: {e}"))
    };
    kubectl(&["create", "serviceaccount", "reader", "-n", &ns]);
    kubectl(&["create", "serviceaccount", "stranger", "-n", &ns]);
    kubectl(&[
        "create",
        "clusterrolebinding",
        &format!("{ns}-metrics-reader"),
        "--clusterrole=node-maintenance-operator-metrics-reader",
        &format!("--serviceaccount={ns}:reader"),
    ]);
    let reader = kubectl(&["create", "token", "reader", "-n", &ns])
        .trim()
        .to_string();
    let stranger = kubectl(&["create", "token", "stranger", "-n", &ns])
        .trim()
        .to_string();

    // The reader's grant may take a moment to reach the RBAC authorizer's informer, so wait for
    // the first 200; what it sees then is the full exposition.
    let body = wait_for(
        "a 200 for the metrics reader",
        Duration::from_secs(60),
        || {
            let (status, body) = https_get(port, &ca, Some(&reader));
            async move {
                if status == 200 {
                    Ok(body)
                } else {
                    Err(format!("{status}: {body}"))
                }
            }
        },
    )
    .await;
    for family in [
        "# TYPE controller_runtime_reconcile counter",
        "# TYPE controller_runtime_reconcile_time_seconds histogram",
        "# TYPE workqueue_depth gauge",
        "# TYPE nmo_reconciles counter",
    ] {
        assert!(body.contains(family), "{family} missing:\n{body}");
    }
    assert!(
        body.contains(
            "controller_runtime_max_concurrent_reconciles{controller=\"nodemaintenance\"} 32"
        ),
        "{body}"
    );

    let (status, body) = https_get(port, &ca, Some(&stranger));
    assert_eq!(status, 403, "{body}");
    assert!(
        body.contains(&format!("system:serviceaccount:{ns}:stranger")),
        "{body}"
    );
    assert!(!body.contains("controller_runtime"), "{body}");

    let (status, body) = https_get(port, &ca, None);
    assert_eq!((status, body.trim()), (401, "Unauthorized"));
    let (status, body) = https_get(port, &ca, Some("not-a-token"));
    assert_eq!(status, 401, "{body}");

    // Plain HTTP on the secure port gets no metrics.
    let plain = nmo_devcluster::http_get(("127.0.0.1", port), "/metrics").unwrap_or_default();
    assert!(!plain.contains("controller_runtime"), "{plain}");
}

/// The overlay as a cluster admin would apply it, judged by the real API server.
#[test]
fn the_metrics_secure_overlay_is_accepted_by_the_api_server() {
    let cluster = Cluster::shared();
    nmo_devcluster::operator::install_manifests(cluster, &manifests_dir()).unwrap();
    let out = cluster
        .kubectl_run(
            &[
                "apply",
                "-k",
                &manifests_dir()
                    .join("overlays/metrics-secure")
                    .display()
                    .to_string(),
                "--dry-run=server",
            ],
            None,
        )
        .unwrap();
    for object in [
        "deployment.apps/node-maintenance-operator-controller-manager",
        "clusterrole.rbac.authorization.k8s.io/node-maintenance-operator-metrics-reader",
        "clusterrolebinding.rbac.authorization.k8s.io/node-maintenance-operator-metrics-auth-rolebinding",
        "service/node-maintenance-operator-controller-manager-metrics-service",
    ] {
        assert!(out.contains(object), "{object} not applied:\n{out}");
    }
}

/// A missing metrics certificate stops the start with one line naming the file.
#[test]
fn a_missing_metrics_certificate_is_named_at_start() {
    let cluster = Cluster::shared();
    let Installed {
        account,
        kubeconfig,
        ..
    } = installed(cluster);
    let missing = cluster.dir().join("no-metrics-certs");
    let mut opts = operator_options("operator-no-metrics-cert", &account, &kubeconfig);
    opts.extra_args = vec![
        "--metrics-secure".into(),
        format!("--metrics-cert-path={}", missing.display()),
    ];
    let err = match nmo_devcluster::operator::Operator::start(cluster, &opts) {
        Ok(_) => panic!("the operator started without its metrics certificate"),
        Err(e) => e.to_string(),
    };
    let line = format!(
        "error: cannot read metrics certificate file {}",
        missing.join("tls.crt").display()
    );
    assert!(err.contains(&line), "{line:?} not in:\n{err}");
}

/// The secure metrics endpoint is served by the webhook's TLS server: a new pair written to
/// `--metrics-cert-path` is served without a restart, and on a cluster without OpenShift's
/// APIServer configuration the TLS settings are the defaults, quietly (no watch, no errors).
#[tokio::test]
async fn a_rotated_metrics_certificate_is_served_without_a_restart() {
    let cluster = Cluster::shared();
    let Installed {
        account,
        kubeconfig,
        ..
    } = installed(cluster);
    let overlay = manifests_dir().join("overlays/metrics-secure");
    nmo_devcluster::operator::install_manifests(cluster, &overlay).unwrap();
    let cert_dir = cluster.dir().join("rotated-metrics-certs");
    std::fs::create_dir_all(&cert_dir).unwrap();
    let issue = || {
        cluster
            .ca()
            .issue_server(&["localhost"], &["127.0.0.1".parse().unwrap()])
            .unwrap()
    };
    let first = issue();
    std::fs::write(cert_dir.join("tls.crt"), &first.cert_pem).unwrap();
    std::fs::write(cert_dir.join("tls.key"), &first.key_pem).unwrap();
    let mut opts = operator_options("operator-rotated-metrics", &account, &kubeconfig);
    opts.extra_args = vec![
        "--metrics-secure".into(),
        format!("--metrics-cert-path={}", cert_dir.display()),
    ];
    let operator = nmo_devcluster::operator::Operator::start(cluster, &opts)
        .unwrap_or_else(|e| panic!("operator did not start: {e}"));
    let port = operator.metrics_port;
    let ca = cluster.ca().cert_pem().to_string();
    let all = [&rustls::version::TLS13, &rustls::version::TLS12];

    let served = tls::handshake(port, &ca, &all).unwrap();
    assert_eq!(served.leaf, tls::leaf_der(&first.cert_pem));

    // Rotated in place, key first, as a tool that rewrites both files would.
    let second = issue();
    std::fs::write(cert_dir.join("tls.key"), &second.key_pem).unwrap();
    std::fs::write(cert_dir.join("tls.crt"), &second.cert_pem).unwrap();
    let want = tls::leaf_der(&second.cert_pem);
    wait_for(
        "the rotated metrics certificate to be served",
        Duration::from_secs(60),
        || {
            let seen = tls::handshake(port, &ca, &all);
            let want = want.clone();
            async move {
                match seen {
                    Ok(h) if h.leaf == want => Ok(()),
                    Ok(_) => Err("still the first certificate".to_string()),
                    Err(e) => Err(e.to_string()),
                }
            }
        },
    )
    .await;
    let log = operator.log();
    assert!(
        log.contains("reloaded the serving certificate") && log.contains("server=\"metrics\"")
            || log.contains("reloaded the serving certificate") && log.contains("server=metrics"),
        "no reload logged:\n{log}"
    );
    assert!(
        log.contains("no OpenShift APIServer configuration"),
        "the profile lookup is not logged:\n{log}"
    );
    assert!(
        !log.contains("TLS security profile failed")
            && !log.contains("cannot read the cluster's TLS"),
        "errors about the absent TLS profile:\n{log}"
    );
}
