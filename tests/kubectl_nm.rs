//! `kubectl nm` (the `kubectl-nm` workspace member, run in-process through `kubectl_nm::run`,
//! the binary's whole body) against the real control plane and the operator: `start --wait`
//! times out with exit 2 and a blocker row naming the budget while a budget blocks the drain, and
//! exits 0 once nothing does, printing the webhook's warning about the budget as kubectl
//! would; `stop --wait` returns once the node is schedulable; `why` and
//! `list` describe the maintenance; a NodeMaintenance the webhook refuses exits 3; `preflight`
//! exits 2 with a row naming the blocking budget and its pod, 0 without the budget, and leaves
//! neither a NodeMaintenance nor a write on the Node; `start --stage Cordon` cordons without
//! draining and `stage` moves it back to Idle (node restored) and on to Drain.

mod common;

use std::time::Duration;

use common::*;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, DeleteParams};
use node_maintenance_operator::api::NodeMaintenance;

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
            .any(|l| l.starts_with(&name) && l.contains(" Drain ") && l.contains("Running")),
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

/// The NodeMaintenances naming `node`.
async fn maintenances_of(client: &kube::Client, node: &str) -> Vec<String> {
    Api::<NodeMaintenance>::all(client.clone())
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|nm| nm.spec.node_name == node)
        .map(|nm| nm.metadata.name.unwrap_or_default())
        .collect()
}

#[tokio::test]
async fn preflight_exits_2_naming_the_budget_and_0_without_it_leaving_nothing_behind() {
    let env = operator_env();
    let cluster = env.cluster;
    let client = cluster.client().await;
    let group = unique("knmpf");
    let node = worker_nodes(cluster, &client, &group, 1).await.remove(0);
    let ns = namespace(&client, "knmpf").await;
    bare_pod(&client, &ns, "guarded", &node, serde_json::json!({})).await;
    wait_running(&client, &ns, "guarded", 1, LIMIT).await;
    let pdbs = budget(&client, &ns, "guard", "guarded", 0, 1).await;
    let nodes = Api::<Node>::all(client.clone());
    let before = nodes.get(&node).await.unwrap().metadata.resource_version;

    let (code, out, err) = kubectl_nm(cluster, &["preflight", &node, "--timeout", "90s"]).await;
    assert_eq!(code, 2, "exit status of a blocked preflight\n{out}\n{err}");
    // The webhook's warnings (printed first) name the pod as well.
    let row = out
        .lines()
        .find(|l| !l.starts_with("Warning:") && l.contains(&format!("{ns}/guarded")))
        .unwrap_or_else(|| panic!("no blocker row names the pod:\n{out}\n{err}"));
    assert!(
        row.contains("PodDisruptionBudget") && row.contains("guard"),
        "{row}"
    );
    assert!(err.contains("would stay"), "{err}");
    assert_eq!(maintenances_of(&client, &node).await, Vec::<String>::new());
    assert_eq!(
        nodes.get(&node).await.unwrap().metadata.resource_version,
        before,
        "the preflight wrote the Node"
    );

    pdbs.delete("guard", &DeleteParams::default())
        .await
        .unwrap();
    let (code, out, err) = kubectl_nm(cluster, &["preflight", &node, "--timeout", "90s"]).await;
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("no blockers"), "{out}");
    assert_eq!(maintenances_of(&client, &node).await, Vec::<String>::new());
    assert_eq!(
        nodes.get(&node).await.unwrap().metadata.resource_version,
        before,
        "the preflight wrote the Node"
    );
}

#[tokio::test]
async fn start_with_a_stage_cordons_only_and_stage_moves_it_back_and_on() {
    let env = operator_env();
    let cluster = env.cluster;
    let client = cluster.client().await;
    let group = unique("knmst");
    let node = worker_nodes(cluster, &client, &group, 1).await.remove(0);
    let name = format!("nm-{node}");
    let (code, out, err) = kubectl_nm(
        cluster,
        &["start", &node, "--reason", "e2e", "--stage", "Cordon"],
    )
    .await;
    assert_eq!(code, 0, "{out}{err}");
    let nms = Api::<NodeMaintenance>::all(client.clone());
    let stage_reason = |nm: &NodeMaintenance| {
        nm.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|cs| cs.iter().find(|c| c.type_ == "Stage"))
            .map(|c| c.reason.clone())
    };
    wait_for("the node cordoned in stage Cordon", LIMIT, || async {
        let nm = nms.get(&name).await.map_err(|e| e.to_string())?;
        let cordoned = !schedulable(&client, &node).await;
        (cordoned && stage_reason(&nm).as_deref() == Some("Cordon"))
            .then_some(())
            .ok_or(format!("cordoned {cordoned}, {:?}", nm.status))
    })
    .await;

    let (code, out, err) = kubectl_nm(cluster, &["stage", &node, "Idle"]).await;
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains(&format!("nodemaintenance/{name} stage Idle")),
        "{out}"
    );
    wait_for("the node restored in stage Idle", LIMIT, || async {
        let nm = nms.get(&name).await.map_err(|e| e.to_string())?;
        let free = schedulable(&client, &node).await;
        (free && stage_reason(&nm).as_deref() == Some("Idle"))
            .then_some(())
            .ok_or(format!("schedulable {free}, {:?}", nm.status))
    })
    .await;

    let (code, out, err) = kubectl_nm(cluster, &["stage", &name, "Drain"]).await;
    assert_eq!(code, 0, "{out}{err}");
    wait_for(
        "the maintenance Succeeded in stage Drain",
        LIMIT,
        || async {
            let nm = nms.get(&name).await.map_err(|e| e.to_string())?;
            let phase = nm.status.as_ref().and_then(|s| s.phase);
            (phase == Some(node_maintenance_operator::api::MaintenancePhase::Succeeded)
                && !schedulable(&client, &node).await)
                .then_some(())
                .ok_or(format!("{:?}", nm.status))
        },
    )
    .await;
    let (code, out, err) =
        kubectl_nm(cluster, &["stop", &node, "--wait", "--timeout", "60s"]).await;
    assert_eq!(code, 0, "{out}{err}");
}
