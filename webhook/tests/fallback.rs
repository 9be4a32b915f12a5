//! The certificate fallback rule (docs/compat.md §8): the requested pair when both files exist,
//! else `<temp dir>/k8s-webhook-server/serving-certs/tls.{crt,key}`. Its own test binary because
//! it points `TMPDIR` at a scratch directory for the whole process.

mod support;

use nmo_webhook::resolve_cert_paths;
use support::*;

#[tokio::test]
async fn requested_pair_wins_else_the_temp_dir_default_is_served() {
    let tmp = tempfile::tempdir().unwrap();
    // SAFETY: the only test in this binary; set before any other thread reads the environment.
    unsafe { std::env::set_var("TMPDIR", tmp.path()) };
    assert_eq!(std::env::temp_dir(), tmp.path());

    let certs = Certs::new();
    let default_dir = tmp.path().join("k8s-webhook-server/serving-certs");
    std::fs::create_dir_all(&default_dir).unwrap();
    let default_pair = certs.leaf();
    write_pair(&default_dir, &default_pair);

    // Only the certificate of the requested pair exists: both are needed, so the default wins.
    let olm = tmp.path().join("olm");
    std::fs::create_dir(&olm).unwrap();
    let olm_pair = certs.leaf();
    std::fs::write(olm.join("apiserver.crt"), &olm_pair.cert_pem).unwrap();
    let paths = resolve_cert_paths(&olm, "apiserver.crt", "apiserver.key").unwrap();
    assert_eq!(paths.dir, default_dir);
    assert_eq!(paths.cert(), default_dir.join("tls.crt"));

    // Served end to end: the default pair is what clients see.
    install_provider();
    let opts = nmo_webhook::TlsOptions {
        cert_dir: olm.clone(),
        cert_name: "apiserver.crt".into(),
        key_name: "apiserver.key".into(),
        bind: "127.0.0.1:0".parse().unwrap(),
        enable_http2: false,
    };
    let server = nmo_webhook::WebhookServer::start(opts.clone(), router(), std::future::pending())
        .await
        .unwrap();
    assert_eq!(server.cert_paths().unwrap().dir, default_dir);
    let config = client_config(
        certs.ca.cert_pem(),
        &[b"http/1.1"],
        &[&rustls::version::TLS13],
    );
    let stream = tls_connect(server.local_addr(), config).await.unwrap();
    let served = stream.get_ref().1.peer_certificates().unwrap()[0].to_vec();
    assert_eq!(served, leaf_der(&default_pair.cert_pem));

    // With both files present, the requested pair is used.
    std::fs::write(olm.join("apiserver.key"), &olm_pair.key_pem).unwrap();
    let paths = resolve_cert_paths(&olm, "apiserver.crt", "apiserver.key").unwrap();
    assert_eq!(paths.dir, olm);
    assert_eq!(paths.key(), olm.join("apiserver.key"));

    // An unreadable chosen file is reported as such.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(
        olm.join("apiserver.key"),
        std::fs::Permissions::from_mode(0o000),
    )
    .unwrap();
    if std::fs::read(olm.join("apiserver.key")).is_err() {
        let err = resolve_cert_paths(&olm, "apiserver.crt", "apiserver.key").unwrap_err();
        assert!(
            err.to_string()
                .starts_with("cannot read webhook certificate file")
                && err.to_string().contains("apiserver.key"),
            "{err}"
        );
    } else {
        println!("SKIPPED unreadable-file check: running as root, permissions are not enforced");
    }

    // Neither pair: a clear error.
    std::fs::remove_dir_all(&default_dir).unwrap();
    std::fs::remove_file(olm.join("apiserver.key")).unwrap();
    let err = resolve_cert_paths(&olm, "apiserver.crt", "apiserver.key").unwrap_err();
    assert!(
        err.to_string()
            .starts_with("no webhook serving certificate found"),
        "{err}"
    );
}
