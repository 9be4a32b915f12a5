//! `/readyz` does not wait for the Node watch's first list, and the webhook decides right while
//! that list is incomplete: it then reads the nodes a CREATE needs from the API server
//! (`docs/design.md §4`, "Readiness"; `src/run.rs`, `readiness`).
//!
//! The Node watch is kept from listing by the operator's own RBAC: its ClusterRole is changed
//! to allow `get` and `patch` of nodes but not `list` or `watch`, so the watch fails with 403 and
//! retries for as long as the test wants, on the real control plane. This binary changes a
//! cluster-wide role, so it has a control plane of its own and one test.

mod common;

use std::time::Duration;

use common::*;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::rbac::v1::ClusterRole;
use kube::api::{Api, PostParams};
use serde_json::json;

const LIMIT: Duration = Duration::from_secs(60);
/// The operator's ClusterRole in `manifests/` (kustomize's `namePrefix` included).
const ROLE: &str = "node-maintenance-operator-manager-role";
const QUORUM: &str =
    "can not put master/control-plane node into maintenance at this moment, disrupting node";

/// Sets the verbs of the operator's ClusterRole rule on nodes.
async fn node_verbs(client: &kube::Client, verbs: &[&str]) {
    let roles = Api::<ClusterRole>::all(client.clone());
    let mut role = roles.get(ROLE).await.unwrap();
    let rule = role
        .rules
        .iter_mut()
        .flatten()
        .find(|r| r.resources.iter().flatten().any(|r| r == "nodes"))
        .expect("a rule on nodes");
    rule.verbs = verbs.iter().map(|v| v.to_string()).collect();
    roles
        .replace(ROLE, &PostParams::default(), &role)
        .await
        .unwrap();
}

/// A kwok-run etcd static pod on `node` (as `tests/admission.rs` makes them); waits until it is
/// Ready.
async fn etcd_member(client: &kube::Client, node: &str) {
    let pods = Api::<Pod>::namespaced(client.clone(), "kube-system");
    let name = format!("etcd-{node}");
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {
            "name": name,
            "labels": {"component": "etcd", "tier": "control-plane"},
            "annotations": {"kubernetes.io/config.mirror": "e2e", "kubernetes.io/config.source": "file"},
        },
        "spec": {
            "nodeName": node,
            "tolerations": [{"operator": "Exists"}],
            "containers": [{"name": "etcd", "image": "registry.k8s.io/etcd:3.6.0-0"}],
        }
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    wait_for(&format!("etcd pod on {node} Ready"), LIMIT, || async {
        let p = pods.get(&name).await.map_err(|e| e.to_string())?;
        let ready = p
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
        if ready {
            Ok(())
        } else {
            Err(format!("{:?}", p.status))
        }
    })
    .await;
}

/// kubectl's stderr (warnings) when admitted, the error when refused.
fn create(cluster: &Cluster, name: &str, node: &str, dry_run: bool) -> Result<String, String> {
    let manifest = json!({
        "apiVersion": "nodemaintenance.medik8s.io/v1beta1",
        "kind": "NodeMaintenance",
        "metadata": {"name": name},
        "spec": {"nodeName": node, "reason": "e2e"}
    })
    .to_string();
    let mut args = vec!["create", "-f", "-"];
    if dry_run {
        args.push("--dry-run=server");
    }
    cluster
        .kubectl_run(&args, Some(&manifest))
        .map_err(|e| e.to_string())
}

/// The decisions the Node cache would feed, made while it cannot list: a missing node, a worker,
/// a duplicate, and the etcd member majority over three Ready control-plane nodes (each member's
/// node read from the API server; read from the unsynced cache they would all look not Ready,
/// and the first control-plane maintenance would be refused). `phase` names the state in the
/// messages.
async fn decisions(cluster: &Cluster, client: &kube::Client, worker: &str, phase: &str) {
    let err = create(cluster, &unique("nm-missing"), "no-such-node", true).unwrap_err();
    assert!(
        err.contains("invalid nodeName, no node with name no-such-node found"),
        "{phase}: {err}"
    );
    let warned = create(cluster, &unique("nm-w"), worker, true)
        .unwrap_or_else(|e| panic!("{phase}: a worker refused: {e}"));
    assert!(!warned.contains("etcd quorum"), "{phase}: {warned}");

    let cp0 = unique("nm-cp0");
    let warned = create(cluster, &cp0, "kwok-control-plane-0", false)
        .unwrap_or_else(|e| panic!("{phase}: one of three Ready etcd members refused: {e}"));
    // Its etcd mirror pod draws the warning about pods that stay on the node; no quorum one.
    assert!(!warned.contains("etcd quorum"), "{phase}: {warned}");
    let err = create(cluster, &unique("nm-cp1"), "kwok-control-plane-1", true).unwrap_err();
    assert!(
        err.contains(&format!(
            "{QUORUM} kwok-control-plane-1 will violate etcd quorum"
        )),
        "{phase}: {err}"
    );
    let err = create(
        cluster,
        &unique("nm-cp0-again"),
        "kwok-control-plane-0",
        true,
    )
    .unwrap_err();
    assert!(
        err.contains(
            "invalid nodeName, a NodeMaintenance for node kwok-control-plane-0 already exists"
        ),
        "{phase}: {err}"
    );
    nm::delete(client, &cp0).await;
    nm::wait_gone(client, &cp0, LIMIT).await;
}

#[tokio::test]
async fn ready_and_deciding_right_before_the_node_watch_has_listed() {
    let cluster = Cluster::shared();
    let installed = installed(cluster);
    let client = cluster.client().await;
    for i in 1..3 {
        cluster
            .create_node(&format!("kwok-control-plane-{i}"), true)
            .unwrap();
    }
    wait_for("three Ready control-plane nodes", LIMIT, || async {
        let ready = (0..3)
            .filter(|i| cluster.node_ready(&format!("kwok-control-plane-{i}")))
            .count();
        if ready == 3 {
            Ok(())
        } else {
            Err(format!("{ready} ready"))
        }
    })
    .await;
    for i in 0..3 {
        etcd_member(&client, &format!("kwok-control-plane-{i}")).await;
    }
    let group = unique("rd");
    let worker = worker_nodes(cluster, &client, &group, 1).await.remove(0);

    // The Node watch cannot list; every other grant stays.
    node_verbs(&client, &["get", "patch"]).await;
    let op = fixtures::start_registered(cluster, &installed.options("operator"))
        .unwrap_or_else(|e| panic!("not ready while the Node watch cannot list: {e}"));
    // Readiness does not wait for the Node list, so its failure may be logged just after.
    wait_for("the Node watch to be refused", LIMIT, || async {
        let log = op.log();
        if log.contains("Node watch failed") {
            Ok(())
        } else {
            Err(log)
        }
    })
    .await;
    decisions(cluster, &client, &worker, "Node watch not listed").await;
    let log = op.log();
    assert!(
        !log.contains("Node watch listed all nodes"),
        "the Node watch listed, so the decisions above proved nothing:\n{log}"
    );

    // Once it may list, the watch lists and the same decisions come from the cache.
    node_verbs(&client, &["get", "list", "watch", "patch"]).await;
    wait_for("the Node watch to list", LIMIT, || async {
        let log = op.log();
        if log.contains("Node watch listed all nodes") {
            Ok(())
        } else {
            Err(log.lines().last().unwrap_or_default().to_string())
        }
    })
    .await;
    decisions(cluster, &client, &worker, "Node watch listed").await;
}
