//! What `demo` and `up --operator` both bring up: the operator binary, the control plane, the
//! CRD and RBAC from `manifests/`, the operator running as its ServiceAccount with its webhook
//! registered, and a small workload on the kwok nodes.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use nmo_devcluster::fixtures::{Installed, start_registered};
use nmo_devcluster::operator::Operator;
use nmo_devcluster::{Cluster, Options};

/// The repository's root (the operator's crate).
pub(crate) fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("repository root")
}

/// The operator to run: `NMO_OPERATOR_BIN` when set (a binary already built, e.g. a test's),
/// else this checkout's, built in release mode (about 6 minutes the first time).
///
/// # Errors
/// cargo could not be run or the build failed.
pub(crate) fn operator_binary() -> Result<PathBuf, String> {
    if let Some(path) = std::env::var_os("NMO_OPERATOR_BIN") {
        return Ok(path.into());
    }
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut build = Command::new(cargo);
    // `cargo run` exports this package's CARGO_* variables; build scripts such as ring's rerun
    // when they change, so the inner build would flip the release cache on every run.
    for (key, _) in std::env::vars() {
        if crate_variable(&key) {
            build.env_remove(key);
        }
    }
    let status = build
        .current_dir(repo())
        .args([
            "build",
            "--release",
            "-p",
            "node-maintenance-operator",
            "--bin",
            "node-maintenance-operator",
        ])
        .status()
        .map_err(|e| format!("running cargo: {e}"))?;
    if !status.success() {
        return Err("building the operator failed".into());
    }
    let target = std::env::var("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| repo().join("target"));
    Ok(target.join("release/node-maintenance-operator"))
}

/// The control plane with one control-plane node and three workers (`kwok-worker-0..2`).
///
/// # Errors
/// A component did not start; the error names it with its log tail.
pub(crate) fn start_cluster() -> Result<Cluster, String> {
    Cluster::start(Options {
        workers: 3,
        control_planes: 1,
        ..Options::default()
    })
    .map_err(|e| e.to_string())
}

/// Installs the CRD and RBAC from `manifests/`, starts `binary` as the manifests'
/// ServiceAccount, registers its webhook and waits until the API server calls it. Prints how
/// long the operator took to become ready, and where it serves.
///
/// # Errors
/// kubectl's, the operator's start-up or the webhook's first call.
pub(crate) fn start_operator(cluster: &Cluster, binary: &Path) -> Result<Operator, String> {
    let installed =
        Installed::new(cluster, &repo().join("manifests"), binary).map_err(|e| e.to_string())?;
    let started = Instant::now();
    let operator =
        start_registered(cluster, &installed.options("operator")).map_err(|e| e.to_string())?;
    println!(
        "operator ready and its webhook answering in {} ms (webhook https://127.0.0.1:{}, metrics http://127.0.0.1:{}/metrics)",
        started.elapsed().as_millis(),
        operator.webhook_port,
        operator.metrics_port
    );
    Ok(operator)
}

/// Deploys [`WORKLOAD`] and waits up to 90 s for its 4 web and 3 agent pods to run.
///
/// # Errors
/// kubectl's, or the pods not running in time.
pub(crate) fn deploy_workload(cluster: &Cluster) -> Result<(), String> {
    cluster
        .kubectl_run(&["apply", "-f", "-"], Some(WORKLOAD))
        .map_err(|e| e.to_string())?;
    wait(
        "4 web pods and 3 agent pods Running",
        Duration::from_secs(90),
        || {
            let out = cluster
                .kubectl_run(
                    &[
                        "get",
                        "pods",
                        "-n",
                        "demo",
                        "--field-selector=status.phase=Running",
                        "-o",
                        "name",
                    ],
                    None,
                )
                .map_err(|e| e.to_string())?;
            let web = out.lines().filter(|l| l.contains("web-")).count();
            let agent = out.lines().filter(|l| l.contains("agent-")).count();
            Ok((web == 4 && agent == 3).then_some(()))
        },
    )
}

/// Polls `check` every 250 ms until it yields `Some`, for at most `limit`.
///
/// # Errors
/// `check`'s error, or a timeout naming `what`.
pub(crate) fn wait(
    what: &str,
    limit: Duration,
    mut check: impl FnMut() -> Result<Option<()>, String>,
) -> Result<(), String> {
    let deadline = Instant::now() + limit;
    loop {
        if check()?.is_some() {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!("timed out after {limit:?} waiting for {what}"));
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// Namespace `demo`: Deployment web (4 replicas), DaemonSet agent, PodDisruptionBudget web
/// (maxUnavailable 1).
pub(crate) const WORKLOAD: &str = r#"
apiVersion: v1
kind: Namespace
metadata: {name: demo}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: demo}
spec:
  replicas: 4
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      terminationGracePeriodSeconds: 2
      containers: [{name: web, image: registry.k8s.io/pause:3.10}]
---
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: agent, namespace: demo}
spec:
  selector: {matchLabels: {app: agent}}
  template:
    metadata: {labels: {app: agent}}
    spec:
      containers: [{name: agent, image: registry.k8s.io/pause:3.10}]
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: web, namespace: demo}
spec:
  maxUnavailable: 1
  selector: {matchLabels: {app: web}}
"#;

/// A variable cargo sets for the crate it runs (`CARGO_PKG_*`, `CARGO_MANIFEST_*`, ...), not
/// one of the user's settings (`CARGO_HOME`, `CARGO_TARGET_DIR`, `CARGO_BUILD_*`, ...).
fn crate_variable(key: &str) -> bool {
    [
        "CARGO_PKG_",
        "CARGO_MANIFEST_",
        "CARGO_CRATE_",
        "CARGO_BIN_",
    ]
    .iter()
    .any(|p| key.starts_with(p))
        || [
            "CARGO_PRIMARY_PACKAGE",
            "CARGO_TARGET_TMPDIR",
            "CARGO_RUSTC_CURRENT_DIR",
        ]
        .contains(&key)
}
