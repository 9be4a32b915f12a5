//! `kubectl nm` (the `kubectl-nm` workspace member, run in-process through `kubectl_nm::run`,
//! the binary's whole body) against the real control plane and the operator: `start --wait`
//! times out with exit 2 and a blocker row naming the budget while a budget blocks the drain, and
//! exits 0 once nothing does, printing the webhook's warning about the budget as kubectl
//! would; `stop --wait` returns once the node is schedulable; `why` and
//! `list` describe the maintenance; a NodeMaintenance the webhook refuses exits 3.

mod common;

use std::time::Duration;

use common::*;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, DeleteParams};

const LIMIT: Duration = Duration::from_secs(60);

/// Runs `kubectl nm <args>` against the cluster: (exit status, stdout, stderr).
async fn kubectl_nm(cluster: &Cluster, args: &[&str]) -> (u8, String, String) {
    let kubeconfig = cluster.kubeconfig().display().to_string();
    let mut argv = vec!["kubectl-nm", "--kubeconfig", kubeconfig.as_str()];
    argv.extend(args);
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let code = kubectl_nm::run(argv, &mut out, &mut err).await;
    (
        code,
        String::from_utf8(out).unwrap(),
        String::from_utf8(err).unwrap(),
    )
}

async fn schedulable(client: &kube::Client, node: &str) -> bool {
    let node = Api::<Node>::all(client.clone()).get(node).await.unwrap();
    !node.spec.and_then(|s| s.unschedulable).unwrap_or(false)
}

#[tokio::test]
async fn start_wait_times_out_naming_the_budget_and_succeeds_without_it() {
    let env = operator_env();
    let cluster = env.cluster;
    let client = cluster.client().await;
    let group = unique("knm");
    let nodes = worker_nodes(cluster, &client, &group, 2).await;
    let ns = namespace(&client, "knm").await;
    // Both replicas on nodes[0], so the budget (nothing may be unavailable) blocks its drain.
    cluster.kubectl_run(&["cordon", &nodes[1]], None).unwrap();
    deployment(&client, &ns, "db", &group, 2, 0).await;
    wait_running(&client, &ns, "db", 2, LIMIT).await;
    cluster.kubectl_run(&["uncordon", &nodes[1]], None).unwrap();
    let pdbs = budget(&client, &ns, "db-guard", "db", 0, 2).await;
    let node = nodes[0].as_str();
    let name = format!("nm-{node}");
    // The webhook warns of the budget once its cache has it: a server-side dry run (which
    // creates nothing) says when.
    let warning = format!("PodDisruptionBudget {ns}/db-guard allows no disruption now");
    wait_for("the webhook's budget warning", LIMIT, || async {
        let manifest = format!(
            "apiVersion: nodemaintenance.medik8s.io/v1beta1\nkind: NodeMaintenance\n\
             metadata:\n  name: {name}\nspec:\n  nodeName: {node}\n"
        );
        let mut child = cluster
            .kubectl()
            .args(["create", "--dry-run=server", "-f", "-"])
            .stdin(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(manifest.as_bytes())
            .unwrap();
        let stderr = String::from_utf8(child.wait_with_output().unwrap().stderr).unwrap();
        stderr.contains(&warning).then_some(()).ok_or(stderr)
    })
    .await;

    let (code, out, err) = kubectl_nm(
        cluster,
        &[
            "start",
            node,
            "--reason",
            "e2e",
            "--wait",
            "--timeout",
            "60s",
        ],
    )
    .await;
    assert_eq!(code, 2, "exit status of a timed-out wait\n{out}\n{err}");
    assert!(err.contains("timed out"), "{err}");
    assert!(
        out.contains(&format!("nodemaintenance/{name} created")),
        "{out}"
    );
    assert!(
        out.contains(&format!("Warning: {warning}")),
        "start prints the webhook's warnings:\n{out}"
    );
    let row = out
        .lines()
        .find(|l| l.contains("db-guard"))
        .unwrap_or_else(|| panic!("no blocker row names the budget:\n{out}"));
    assert!(
        row.contains("PodDisruptionBudget") && row.contains(&format!("{ns}/db-")),
        "{row}"
    );

    let (code, out, err) = kubectl_nm(cluster, &["why", node]).await;
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("POD") && out.contains("db-guard"), "{out}");
    let (code, out, err) = kubectl_nm(cluster, &["list"]).await;
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.lines()
            .any(|l| l.starts_with(&name) && l.contains("Running")),
        "{out}"
    );

    let (code, out, err) = kubectl_nm(cluster, &["stop", node, "--wait", "--timeout", "60s"]).await;
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        schedulable(&client, node).await,
        "stop --wait returned early"
    );

    pdbs.delete("db-guard", &DeleteParams::default())
        .await
        .unwrap();
    let (code, out, err) = kubectl_nm(
        cluster,
        &[
            "start",
            node,
            "--reason",
            "e2e",
            "--wait",
            "--timeout",
            "60s",
        ],
    )
    .await;
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("Succeeded"), "{out}");
    assert!(!schedulable(&client, node).await);
    let (code, out, err) = kubectl_nm(cluster, &["why", &name]).await;
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("Succeeded") && out.contains("no blockers"),
        "{out}"
    );

    let (code, out, err) = kubectl_nm(cluster, &["stop", node, "--wait", "--timeout", "60s"]).await;
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains(&format!("node/{node} schedulable")), "{out}");
    assert!(
        schedulable(&client, node).await,
        "stop --wait returned early"
    );
}

#[tokio::test]
async fn a_maintenance_the_webhook_refuses_exits_3() {
    let env = operator_env();
    let (code, out, err) = kubectl_nm(
        env.cluster,
        &["start", "knm-no-such-node", "--reason", "e2e"],
    )
    .await;
    assert_eq!(code, 3, "{out}{err}");
    assert!(
        err.starts_with("Error from server")
            && err.contains("no node with name knm-no-such-node found"),
        "{err}"
    );
    let (code, _, err) = kubectl_nm(env.cluster, &["why", "knm-no-such-node"]).await;
    assert_eq!(code, 1);
    assert!(err.starts_with("error: no NodeMaintenance"), "{err}");
}
