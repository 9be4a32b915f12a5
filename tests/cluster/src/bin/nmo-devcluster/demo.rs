//! The main job: a local control plane, the operator (built in release mode, running as the
//! ServiceAccount from `manifests/`, its webhook registered), a workload on kwok nodes, and one
//! real NodeMaintenance lifecycle printed as it happens: cordon, taints, evictions, Succeeded;
//! then delete, uncordon. Everything it starts is stopped when it ends, also on Ctrl-C.

use std::time::Duration;

use crate::stack::{deploy_workload, operator_binary, start_cluster, start_operator, wait};

const NODE: &str = "kwok-worker-0";
const NM: &str = "demo-maintenance";

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
    let binary = operator_binary()?;

    step(
        "Starting a local control plane: etcd, kube-apiserver, controller-manager, scheduler, kwok",
    );
    let cluster = start_cluster()?;
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
    let operator = start_operator(&cluster, &binary)?;

    step(
        "A workload: Deployment web (4 replicas), DaemonSet agent, PodDisruptionBudget maxUnavailable 1",
    );
    deploy_workload(&cluster)?;
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

fn nm_manifest(name: &str, node: &str) -> String {
    format!(
        r#"{{"apiVersion":"nodemaintenance.medik8s.io/v1beta1","kind":"NodeMaintenance",
"metadata":{{"name":"{name}"}},"spec":{{"nodeName":"{node}","reason":"demo: kernel upgrade"}}}}"#
    )
}
