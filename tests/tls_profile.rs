//! OpenShift's cluster TLS security profile, applied to the webhook and the secure metrics
//! server (`docs/design.md §8`). This binary's control plane stands in for an OpenShift one:
//! it gets the `config.openshift.io/v1` APIServer CRD (`tests/fixtures/`) and the object
//! `cluster`, so no other test binary sees an "OpenShift" cluster. The operator runs as its
//! ServiceAccount with the RBAC of `manifests/` (the `apiservers` grant is proven here).

mod common;

use std::time::Duration;

use common::*;

const TLS12: &[&rustls::SupportedProtocolVersion] = &[&rustls::version::TLS12];
const TLS13: &[&rustls::SupportedProtocolVersion] = &[&rustls::version::TLS13];

fn kubectl(cluster: &Cluster, args: &[&str], stdin: Option<&str>) -> String {
    cluster
        .kubectl_run(args, stdin)
        .unwrap_or_else(|e| panic!("kubectl {args:?}: {e}"))
}

fn set_profile(cluster: &Cluster, profile: &str) {
    let key = profile.to_lowercase();
    let object = format!(
        "apiVersion: config.openshift.io/v1\nkind: APIServer\nmetadata:\n  name: cluster\nspec:\n  tlsSecurityProfile:\n    type: {profile}\n    {key}: {{}}\n"
    );
    kubectl(cluster, &["apply", "-f", "-"], Some(&object));
}

/// Waits until a handshake offering only `versions` to `port` succeeds (`want_ok`) or is
/// refused for its version (the server's `protocol_version` alert: any other failure, a
/// certificate, a reset, a timeout, is not a refusal of the version).
async fn wait_handshake(
    what: &str,
    port: u16,
    ca: &str,
    versions: &'static [&'static rustls::SupportedProtocolVersion],
    want_ok: bool,
) {
    wait_for(what, Duration::from_secs(60), || {
        let seen = tls::handshake(port, ca, versions);
        async move {
            match (seen, want_ok) {
                (Ok(_), true) => Ok(()),
                (Err(e), false) if e.is_protocol_version_refusal() => Ok(()),
                (Ok(h), false) => Err(format!("handshake succeeded with {:?}", h.version)),
                (Err(e), false) => Err(format!("failed, but not for its version: {e}")),
                (Err(e), true) => Err(e.to_string()),
            }
        }
    })
    .await;
}

/// Asserts that a TLS 1.3 handshake with `port` succeeds and negotiates TLS 1.3.
fn assert_tls13(name: &str, port: u16, ca: &str, when: &str) {
    let h = tls::handshake(port, ca, TLS13)
        .unwrap_or_else(|e| panic!("{name}: TLS 1.3 refused {when}: {e}"));
    assert_eq!(h.version, rustls::ProtocolVersion::TLSv1_3, "{name} {when}");
}

#[tokio::test]
async fn the_cluster_profile_sets_the_tls_versions_of_both_servers_without_a_restart() {
    let cluster = Cluster::shared();
    let crd = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/openshift-apiserver-crd.yaml");
    kubectl(cluster, &["apply", "-f", &crd.display().to_string()], None);
    kubectl(
        cluster,
        &[
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            "crd/apiservers.config.openshift.io",
        ],
        None,
    );
    set_profile(cluster, "Modern");

    let Installed {
        account,
        kubeconfig,
        ..
    } = installed(cluster);
    let overlay = manifests_dir().join("overlays/metrics-secure");
    nmo_devcluster::operator::install_manifests(cluster, &overlay).unwrap();
    let cert_dir = cluster.dir().join("profile-metrics-certs");
    std::fs::create_dir_all(&cert_dir).unwrap();
    let pair = cluster
        .ca()
        .issue_server(&["localhost"], &["127.0.0.1".parse().unwrap()])
        .unwrap();
    std::fs::write(cert_dir.join("tls.crt"), &pair.cert_pem).unwrap();
    std::fs::write(cert_dir.join("tls.key"), &pair.key_pem).unwrap();
    let mut opts = operator_options("operator-tls-profile", &account, &kubeconfig);
    opts.extra_args = vec![
        "--metrics-secure".into(),
        format!("--metrics-cert-path={}", cert_dir.display()),
    ];
    let mut operator = nmo_devcluster::operator::Operator::start(cluster, &opts)
        .unwrap_or_else(|e| panic!("operator did not start: {e}"));
    let ca = cluster.ca().cert_pem().to_string();
    let servers = [
        ("webhook", operator.webhook_port),
        ("metrics", operator.metrics_port),
    ];

    // Modern from the first handshake on: the profile is read before the servers start.
    for (name, port) in servers {
        let refused = tls::handshake(port, &ca, TLS12).map(|h| h.version);
        assert!(
            refused
                .as_ref()
                .is_err_and(tls::HandshakeError::is_protocol_version_refusal),
            "{name}: TLS 1.2 not refused for its version under Modern: {refused:?}\n{}",
            operator.log()
        );
        assert_tls13(name, port, &ca, "under Modern");
    }

    // Intermediate: TLS 1.2 comes back on both, same process.
    let pid = operator.process().pid();
    set_profile(cluster, "Intermediate");
    for (name, port) in servers {
        wait_handshake(
            &format!("{name} to accept TLS 1.2 under Intermediate"),
            port,
            &ca,
            TLS12,
            true,
        )
        .await;
        assert_tls13(name, port, &ca, "under Intermediate");
    }

    // And Modern again refuses it, so the watch keeps following.
    set_profile(cluster, "Modern");
    for (name, port) in servers {
        wait_handshake(
            &format!("{name} to refuse TLS 1.2 under Modern again"),
            port,
            &ca,
            TLS12,
            false,
        )
        .await;
        // Refusing 1.2 is not refusing everything: 1.3 still completes after the last switch.
        assert_tls13(name, port, &ca, "under Modern again");
    }
    // One process throughout: the same pid, still running.
    assert_eq!(operator.process().pid(), pid);
    assert_eq!(operator.process().exited(), None, "the operator exited");
    let log = operator.log();
    assert!(
        !log.contains("TLS security profile failed"),
        "watch errors:\n{log}"
    );
}
