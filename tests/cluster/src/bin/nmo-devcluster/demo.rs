//! The main job: a local control plane, the operator (built in release mode, running as the
//! ServiceAccount from `manifests/`, its webhook registered), a workload on kwok nodes, and one
//! real NodeMaintenance lifecycle printed as it happens: cordon, taints, evictions, Succeeded;
//! then delete, uncordon. Everything it starts is stopped when it ends, also on Ctrl-C.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use nmo_devcluster::operator::{
    Operator, OperatorOptions, install_manifests, register_webhook, service_account_kubeconfig,
};
use nmo_devcluster::{Cluster, Options};

const NODE: &str = "kwok-worker-0";
const NM: &str = "demo-maintenance";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("repository root")
}

fn step(text: &str) {
    println!("\n\x1b[1m==> {text}\x1b[0m");
}

/// Runs the demo; the process exit code.
pub(crate) fn run() -> i32 {
    match demo() {
        Ok(()) => {
            step("Done: the node went into maintenance, was drained, and was restored.");
            0
        }
        Err(e) => {
            eprintln!("demo failed: {e}");
            1
        }
    }
}

fn demo() -> Result<(), String> {
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    super::stop_on_signal(stop.clone())
        .map_err(|e| format!("cannot install the signal handlers: {e}"))?;
    let interrupted = || {
        if stop.load(std::sync::atomic::Ordering::SeqCst) {
            Err("interrupted".to_string())
        } else {
            Ok(())
        }
    };

    step("Building the operator (release)");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut build = Command::new(cargo);
    // `cargo run` exports this package's CARGO_* variables; build scripts such as ring's rerun
    // when they change, so the inner build would flip the release cache on every run.
    for (key, _) in std::env::vars() {
        if key.starts_with("CARGO_") && key != "CARGO_HOME" && key != "CARGO_TARGET_DIR" {
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
    let binary = target.join("release/node-maintenance-operator");

    step(
        "Starting a local control plane: etcd, kube-apiserver, controller-manager, scheduler, kwok",
    );
    let cluster = Cluster::start(Options {
        workers: 3,
        control_planes: 1,
        ..Options::default()
    })
    .map_err(|e| e.to_string())?;
    let k = |args: &[&str]| cluster.kubectl_run(args, None).map_err(|e| e.to_string());
    let ks = |args: &[&str], stdin: &str| {
        cluster
            .kubectl_run(args, Some(stdin))
            .map_err(|e| e.to_string())
    };
    println!("{}", k(&["get", "nodes"])?);

    step(
        "Installing the CRD and RBAC from manifests/, starting the operator as its ServiceAccount",
    );
    let account =
        install_manifests(&cluster, &repo().join("manifests")).map_err(|e| e.to_string())?;
    let kubeconfig = service_account_kubeconfig(&cluster, &account).map_err(|e| e.to_string())?;
    let mut opts = OperatorOptions::new(&binary);
    opts.kubeconfig = Some(kubeconfig);
    opts.env
        .push(("POD_NAMESPACE".into(), account.namespace.clone()));
    let started = Instant::now();
    let operator = Operator::start(&cluster, &opts).map_err(|e| e.to_string())?;
    println!(
        "operator ready in {} ms (webhook https://127.0.0.1:{}, metrics http://127.0.0.1:{}/metrics)",
        started.elapsed().as_millis(),
        operator.webhook_port,
        operator.metrics_port
    );
    register_webhook(&cluster, operator.webhook_port).map_err(|e| e.to_string())?;

    step(
        "A workload: Deployment web (4 replicas), DaemonSet agent, PodDisruptionBudget maxUnavailable 1",
    );
    ks(&["apply", "-f", "-"], WORKLOAD)?;
    wait(
        "4 web pods and 3 agent pods Running",
        Duration::from_secs(90),
        || {
            let out = k(&[
                "get",
                "pods",
                "-n",
                "demo",
                "--field-selector=status.phase=Running",
                "-o",
                "name",
            ])?;
            let web = out.lines().filter(|l| l.contains("web-")).count();
            let agent = out.lines().filter(|l| l.contains("agent-")).count();
            Ok((web == 4 && agent == 3).then_some(()))
        },
    )?;
    println!("{}", k(&["get", "pods", "-n", "demo", "-o", "wide"])?);

    step("The webhook refuses a NodeMaintenance for a node that does not exist");
    match ks(
        &["create", "-f", "-"],
        &nm_manifest("demo-typo", "kwok-wroker-0"),
    ) {
        Err(e) => println!("{e}"),
        Ok(out) => return Err(format!("the webhook admitted a missing node: {out}")),
    }

    step(&format!("kubectl create NodeMaintenance {NM} for {NODE}"));
    println!(
        "{}",
        ks(&["create", "-f", "-"], &nm_manifest(NM, NODE))?.trim()
    );
    let mut last = String::new();
    wait("phase Succeeded", Duration::from_secs(120), || {
        interrupted()?;
        let line = k(&[
            "get",
            "nm",
            NM,
            "-o",
            "jsonpath=phase={.status.phase} progress={.status.drainProgress}% pending={.status.pendingPods} blockers={.status.blockers[*].reason}",
        ])?;
        if line != last {
            println!("  {line}");
            last = line.clone();
        }
        Ok(line.contains("phase=Succeeded").then_some(()))
    })?;
    println!(
        "{}",
        k(&[
            "get",
            "node",
            NODE,
            "-o",
            "custom-columns=NODE:.metadata.name,UNSCHEDULABLE:.spec.unschedulable,TAINTS:.spec.taints[*].key,EXCLUDED:.metadata.labels.remediation\\.medik8s\\.io/exclude-from-remediation"
        ])?
    );
    println!("{}", k(&["get", "pods", "-n", "demo", "-o", "wide"])?);
    println!(
        "{}",
        k(&[
            "get",
            "lease",
            "-n",
            "medik8s-leases",
            &format!("node-{NODE}")
        ])?
    );
    println!("{}", k(&["get", "nm", "-o", "wide"])?);
    println!(
        "{}",
        k(&[
            "get",
            "events",
            "-n",
            "default",
            "--field-selector",
            &format!("involvedObject.name={NM}")
        ])?
    );

    step(&format!(
        "kubectl delete nm {NM}: the node is uncordoned and restored"
    ));
    println!(
        "{}",
        k(&["delete", "nm", NM, "--wait=true", "--timeout=60s"])?.trim()
    );
    wait(
        "the node to be schedulable again",
        Duration::from_secs(60),
        || {
            let out = k(&["get", "node", NODE, "-o", "jsonpath={.spec.unschedulable}"])?;
            Ok((out.trim() != "true").then_some(()))
        },
    )?;
    println!(
        "{}",
        k(&[
            "get",
            "node",
            NODE,
            "-o",
            "custom-columns=NODE:.metadata.name,UNSCHEDULABLE:.spec.unschedulable,TAINTS:.spec.taints[*].key"
        ])?
    );
    println!(
        "{}",
        k(&[
            "get",
            "events",
            "-n",
            "default",
            "--field-selector",
            &format!("involvedObject.name={NODE}")
        ])?
    );
    if let Some(metrics) = operator.metrics() {
        step("A few of the operator's metrics");
        for line in metrics.lines().filter(|l| {
            l.starts_with("nmo_evictions")
                || l.starts_with("nmo_maintenances")
                || l.starts_with("nmo_admission_requests")
        }) {
            println!("  {line}");
        }
    }
    drop(operator);
    cluster.stop();
    Ok(())
}

fn wait(
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

fn nm_manifest(name: &str, node: &str) -> String {
    format!(
        r#"{{"apiVersion":"nodemaintenance.medik8s.io/v1beta1","kind":"NodeMaintenance",
"metadata":{{"name":"{name}"}},"spec":{{"nodeName":"{node}","reason":"demo: kernel upgrade"}}}}"#
    )
}

const WORKLOAD: &str = r#"
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
