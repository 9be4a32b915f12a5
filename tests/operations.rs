//! Running it like an operator: metrics, probes, kubectl's view, the manifests against the real
//! API server, graceful shutdown, and one clear line for each bad start.

mod common;

use std::process::Command;
use std::time::Duration;

use common::*;
use node_maintenance_operator::api::MaintenancePhase;

const LIMIT: Duration = Duration::from_secs(60);
const BIN: &str = env!("CARGO_BIN_EXE_node-maintenance-operator");

/// The value of the first sample line starting with `prefix` (e.g. `nmo_evictions_total{result="evicted"}`).
fn sample(metrics: &str, prefix: &str) -> f64 {
    metrics
        .lines()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

#[tokio::test]
async fn metrics_families_move_during_a_maintenance_and_kubectl_shows_it() {
    let env = operator_env();
    let client = env.cluster.client().await;
    let before = env
        .operator
        .lock()
        .unwrap()
        .metrics()
        .expect("metrics answer");
    for family in [
        "nmo_reconciles counter",
        "nmo_reconcile_failures counter",
        "nmo_reconcile_duration_seconds histogram",
        "nmo_maintenances gauge",
        "nmo_evictions counter",
        "nmo_drain_duration_seconds histogram",
        "nmo_admission_requests counter",
        "nmo_admission_duration_seconds histogram",
        "controller_runtime_reconcile counter",
        "controller_runtime_reconcile_errors counter",
        "controller_runtime_reconcile_time_seconds histogram",
        "controller_runtime_max_concurrent_reconciles gauge",
        "controller_runtime_active_workers gauge",
        "workqueue_depth gauge",
        "workqueue_adds counter",
        "workqueue_queue_duration_seconds histogram",
    ] {
        assert!(
            before.contains(&format!("# TYPE {family}")),
            "family {family} missing from:\n{before}"
        );
    }

    let group = unique("ops");
    let nodes = worker_nodes(env.cluster, &client, &group, 2).await;
    let ns = namespace(&client, "ops").await;
    env.cluster
        .kubectl_run(&["cordon", &nodes[1]], None)
        .unwrap();
    deployment(&client, &ns, "web", &group, 3, 0).await;
    wait_running(&client, &ns, "web", 3, LIMIT).await;
    env.cluster
        .kubectl_run(&["uncordon", &nodes[1]], None)
        .unwrap();
    let name = unique("nm-ops");
    env.cluster
        .kubectl_run(
            &["create", "-f", "-"],
            Some(&serde_json::to_string(&nm::new(&name, &nodes[0], "kernel upgrade")).unwrap()),
        )
        .unwrap();
    nm::wait_phase(&client, &name, MaintenancePhase::Succeeded, LIMIT).await;

    // The phase gauge is recounted from the watch cache after each reconcile, so it settles a
    // moment after the status write that the API already shows.
    let after = wait_for("the metrics to show the maintenance", LIMIT, || {
        let after = env.operator.lock().unwrap().metrics().unwrap_or_default();
        let before = before.clone();
        async move {
            let moved = [
                "nmo_reconciles_total",
                "controller_runtime_reconcile_time_seconds_count{controller=\"nodemaintenance\"}",
                "controller_runtime_reconcile_total{controller=\"nodemaintenance\",result=\"requeue_after\"}",
                "workqueue_adds_total{name=\"nodemaintenance\",controller=\"nodemaintenance\"}",
                "workqueue_queue_duration_seconds_count{name=\"nodemaintenance\",controller=\"nodemaintenance\"}",
                "nmo_drain_duration_seconds_count",
                "nmo_admission_requests_total{operation=\"CREATE\",result=\"allowed\"}",
            ]
            .iter()
            .all(|m| sample(&after, m) > sample(&before, m));
            let evicted = sample(&after, "nmo_evictions_total{result=\"evicted\"}")
                - sample(&before, "nmo_evictions_total{result=\"evicted\"}");
            let succeeded = sample(&after, "nmo_maintenances{phase=\"Succeeded\"}");
            if moved && evicted >= 3.0 && succeeded >= 1.0 {
                Ok(after)
            } else {
                Err(format!(
                    "evicted +{evicted}, succeeded {succeeded}:\n{after}"
                ))
            }
        }
    })
    .await;
    assert!(after.contains("nmo_reconcile_duration_seconds_count"));

    let table = env
        .cluster
        .kubectl_run(&["get", "nm", &name], None)
        .unwrap();
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        ["NAME", "NODE", "PHASE", "PROGRESS", "AGE"],
        "{table}"
    );
    let row: Vec<&str> = table.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(
        &row[..4],
        [name.as_str(), nodes[0].as_str(), "Succeeded", "100"],
        "{table}"
    );
    let wide = env
        .cluster
        .kubectl_run(&["get", "nm", &name, "-o", "wide"], None)
        .unwrap();
    assert!(
        wide.lines().next().unwrap().contains("REASON") && wide.contains("kernel upgrade"),
        "{wide}"
    );
    let described = env
        .cluster
        .kubectl_run(&["describe", "nm", &name], None)
        .unwrap();
    for event in [
        "BeginMaintenance",
        "SucceedMaintenance",
        "Node maintenance was succeeded",
    ] {
        assert!(
            described.contains(event),
            "describe lacks {event}:\n{described}"
        );
    }
    let explained = env
        .cluster
        .kubectl_run(&["explain", "nm.spec"], None)
        .unwrap();
    assert!(
        explained.contains("Node name to apply maintanance on/off"),
        "{explained}"
    );

    nm::delete(&client, &name).await;
    nm::wait_gone(&client, &name, LIMIT).await;
}

/// The series the shipped alerts read move in a real blocked drain:
/// `nmo_maintenance_blocked_pods` appears with the budget's reason while a PodDisruptionBudget
/// refuses the evictions (NodeMaintenanceDrainStuck's input) and vanishes once the drain goes
/// through; `nmo_lease_losses_total` exists at zero.
#[tokio::test]
async fn alert_series_follow_a_blocked_drain() {
    use kube::api::{Patch, PatchParams};
    let env = operator_env();
    let client = env.cluster.client().await;
    let group = unique("alerts");
    let nodes = worker_nodes(env.cluster, &client, &group, 2).await;
    let ns = namespace(&client, "alerts").await;
    env.cluster
        .kubectl_run(&["cordon", &nodes[1]], None)
        .unwrap();
    deployment(&client, &ns, "guarded", &group, 2, 0).await;
    wait_running(&client, &ns, "guarded", 2, LIMIT).await;
    env.cluster
        .kubectl_run(&["uncordon", &nodes[1]], None)
        .unwrap();
    let pdbs = budget(&client, &ns, "guard", "guarded", 0, 2).await;
    let name = unique("nm-alerts");
    nm::create(&client, &name, &nodes[0]).await;
    let series = format!(
        "nmo_maintenance_blocked_pods{{nodemaintenance=\"{name}\",node=\"{}\",reason=\"PodDisruptionBudget\"}}",
        nodes[0]
    );
    let metrics = || env.operator.lock().unwrap().metrics().unwrap_or_default();
    wait_for("the blocked series to appear", LIMIT, || {
        let m = metrics();
        let series = series.clone();
        async move {
            if m.lines().any(|l| l == format!("{series} 2")) {
                Ok(())
            } else {
                Err(m
                    .lines()
                    .filter(|l| l.contains("blocked"))
                    .collect::<Vec<_>>()
                    .join("\n"))
            }
        }
    })
    .await;
    let m = metrics();
    assert_eq!(sample(&m, "nmo_lease_losses_total"), 0.0, "{m}");
    assert!(m.contains("# TYPE nmo_lease_losses counter"), "{m}");

    pdbs.patch(
        "guard",
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"spec": {"maxUnavailable": 2}})),
    )
    .await
    .unwrap();
    nm::wait_phase(&client, &name, MaintenancePhase::Succeeded, LIMIT).await;
    wait_for("the blocked series to vanish", LIMIT, || {
        let m = metrics();
        let name = name.clone();
        async move {
            if m.lines()
                .any(|l| l.contains(&format!("nodemaintenance=\"{name}\"")))
            {
                Err(m)
            } else {
                Ok(())
            }
        }
    })
    .await;
    nm::delete(&client, &name).await;
    nm::wait_gone(&client, &name, LIMIT).await;
}

#[tokio::test]
async fn probes_answer() {
    let env = operator_env();
    let op = env.operator.lock().unwrap();
    for path in ["/healthz", "/readyz"] {
        let answer = op.probe(path).unwrap();
        assert!(
            answer.lines().next().unwrap().contains(" 200 "),
            "{path}: {answer}"
        );
    }
}

/// The manifests as a cluster admin would apply them, judged by the real API server: the
/// default install and the NetworkPolicy overlay.
#[tokio::test]
async fn manifests_are_accepted_by_the_api_server() {
    let env = operator_env();
    let dry_run = |dir: &std::path::Path| {
        env.cluster
            .kubectl_run(
                &[
                    "apply",
                    "-k",
                    &dir.display().to_string(),
                    "--dry-run=server",
                ],
                None,
            )
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
    };
    let out = dry_run(&manifests_dir());
    for kind in [
        "deployment.apps/",
        "validatingwebhookconfiguration.admissionregistration.k8s.io/",
        "clusterrole.rbac.authorization.k8s.io/",
        "service/",
    ] {
        assert!(out.contains(kind), "{kind} not applied:\n{out}");
    }
    let out = dry_run(&manifests_dir().join("overlays/network-policy"));
    assert!(
        out.contains(
            "networkpolicy.networking.k8s.io/node-maintenance-operator-allow-apiserver-and-scrapers"
        ) && out.contains("deployment.apps/"),
        "{out}"
    );
}

/// Runs the binary with `args`, no `KUBECONFIG`, and an empty temporary directory (so the
/// webhook's fallback certificate directory cannot exist); its exit code and stderr.
fn run_bad(args: &[&str]) -> (i32, String) {
    let (code, stderr) = run_bad_raw(args);
    // Start-up log lines share stderr; the failure itself is one line starting with `error:`.
    let errors: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("error:") || l.starts_with("error "))
        .collect();
    assert_eq!(errors.len(), 1, "one error line in:\n{stderr}");
    (code, errors[0].to_string())
}

fn run_bad_raw(args: &[&str]) -> (i32, String) {
    let tmp = tempfile::tempdir().unwrap();
    let out = Command::new(BIN)
        .args(args)
        .env_remove("KUBECONFIG")
        .env("TMPDIR", tmp.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).trim().to_string();
    (out.status.code().unwrap_or(-1), stderr)
}

#[test]
fn bad_starts_exit_non_zero_with_one_clear_line() {
    let dir = tempfile::tempdir().unwrap();
    let (code, err) = run_bad(&["--no-such-flag"]);
    assert_ne!(code, 0);
    assert!(err.contains("--no-such-flag"), "{err}");

    let missing = dir.path().join("missing.kubeconfig");
    let (code, err) = run_bad(&["--kubeconfig", missing.to_str().unwrap()]);
    assert_ne!(code, 0);
    assert!(err.contains("missing.kubeconfig"), "{err}");

    let garbage = dir.path().join("garbage.kubeconfig");
    std::fs::write(&garbage, "this: [is not a kubeconfig").unwrap();
    let (code, err) = run_bad(&["--kubeconfig", garbage.to_str().unwrap()]);
    assert_ne!(code, 0);
    assert!(err.contains("garbage.kubeconfig"), "{err}");

    // A port in use and an unreadable certificate directory, with a kubeconfig that parses.
    // With the CRD installed, so that what fails is the certificate directory.
    let cluster = operator_env().cluster;
    let kc = cluster.kubeconfig().to_str().unwrap().to_string();
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = busy.local_addr().unwrap().port();
    let (code, err) = run_bad(&[
        "--kubeconfig",
        &kc,
        &format!("--health-probe-bind-address=127.0.0.1:{port}"),
    ]);
    assert_ne!(code, 0);
    assert!(
        err.contains(&port.to_string()) && err.to_lowercase().contains("in use"),
        "{err}"
    );

    let empty = dir.path().join("no-certs-here");
    std::fs::create_dir(&empty).unwrap();
    let (code, err) = run_bad(&[
        "--kubeconfig",
        &kc,
        "--health-probe-bind-address=127.0.0.1:0",
        "--metrics-bind-address=0",
        "--webhook-bind-address=127.0.0.1:0",
        &format!("--webhook-cert-path={}", empty.display()),
    ]);
    assert_ne!(code, 0);
    assert!(
        err.contains("no-certs-here") || err.contains("serving-certs"),
        "{err}"
    );
}
