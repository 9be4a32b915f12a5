//! The test control plane behaves like a cluster: the facts every other end-to-end test relies
//! on, and `kubectl drain` as the yardstick our drain is compared with.

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::*;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, EvictParams, PostParams};
use serde_json::json;

#[tokio::test]
async fn nodes_are_ready_and_one_is_control_plane() {
    let cluster = Cluster::shared();
    let client = cluster.client().await;
    let nodes = Api::<Node>::all(client)
        .list(&Default::default())
        .await
        .unwrap()
        .items;
    for name in cluster.nodes() {
        let node = nodes
            .iter()
            .find(|n| n.metadata.name.as_deref() == Some(name.as_str()))
            .expect("node exists");
        let ready = node.status.as_ref().unwrap().conditions.as_ref().unwrap();
        assert!(
            ready
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True"),
            "{name} not Ready: {ready:?}"
        );
    }
    let control_planes: Vec<_> = nodes
        .iter()
        .filter(|n| {
            n.metadata
                .labels
                .as_ref()
                .is_some_and(|l| l.contains_key(nmo_devcluster::CONTROL_PLANE_LABEL))
        })
        .collect();
    assert_eq!(
        control_planes.len(),
        1,
        "exactly one control-plane node at start"
    );
    let version = cluster
        .kubectl_run(&["version", "-o", "json"], None)
        .unwrap();
    let wanted = nmo_devcluster::versions::kube();
    assert!(
        version.contains(&format!("\"gitVersion\": \"{wanted}\"")),
        "stamped version {wanted} (tests/cluster/versions.sh): {version}"
    );
}

/// From Kubernetes 1.37 the control plane runs with the node-maintenance gates
/// (`tests/cluster/src/versions.rs`): the EvictionRequest API is served where the operator looks
/// for it (`lifecycle.k8s.io`, `src/drain/requester.rs`), and the Node lifecycle condition types
/// are accepted on a node's status.
#[tokio::test]
async fn kubernetes_1_37_serves_the_eviction_request_api_with_its_gate() {
    let cluster = Cluster::shared();
    let version = nmo_devcluster::versions::kube();
    if nmo_devcluster::versions::minor(&version).is_none_or(|m| m < 37) {
        eprintln!("{version}: no 1.37 gates to check");
        return;
    }
    let resources = cluster
        .kubectl_run(
            &[
                "api-resources",
                "--api-group=lifecycle.k8s.io",
                "-o",
                "name",
            ],
            None,
        )
        .unwrap();
    let names: BTreeSet<&str> = resources.lines().map(str::trim).collect();
    assert!(
        names.contains("evictionrequests.lifecycle.k8s.io")
            && names.contains("evictions.lifecycle.k8s.io"),
        "lifecycle.k8s.io resources on {version}: {names:?}"
    );
}

#[tokio::test]
async fn deployment_spreads_and_pdb_status_is_computed() {
    let cluster = Cluster::shared();
    let client = cluster.client().await;
    let group = unique("spread");
    let nodes = worker_nodes(cluster, &client, &group, 3).await;
    let ns = namespace(&client, "spread").await;
    // Required anti-affinity makes "spread over nodes" a scheduler fact, not luck.
    let d: k8s_openapi::api::apps::v1::Deployment = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {
                    "nodeSelector": {"nmo-test": group},
                    "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                        {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "kubernetes.io/hostname"}
                    ]}},
                    "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]
                }
            }
        }
    }))
    .unwrap();
    Api::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &d)
        .await
        .unwrap();
    let running = wait_running(&client, &ns, "web", 3, Duration::from_secs(60)).await;
    let placed: BTreeSet<&str> = running.iter().map(node_of).collect();
    assert_eq!(
        placed,
        nodes.iter().map(String::as_str).collect(),
        "one pod per node"
    );

    let pdbs = Api::<PodDisruptionBudget>::namespaced(client.clone(), &ns);
    let pdb: PodDisruptionBudget = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "web"}}}
    }))
    .unwrap();
    pdbs.create(&PostParams::default(), &pdb).await.unwrap();
    wait_for(
        "the disruption controller to compute the budget",
        Duration::from_secs(60),
        || async {
            let s = pdbs
                .get("web")
                .await
                .map_err(|e| e.to_string())?
                .status
                .unwrap_or_default();
            if s.disruptions_allowed == Some(1)
                && s.current_healthy == Some(3)
                && s.desired_healthy == Some(2)
            {
                Ok(())
            } else {
                Err(format!("{s:?}"))
            }
        },
    )
    .await;
}

#[tokio::test]
async fn eviction_blocked_by_pdb_is_429_naming_the_budget() {
    let cluster = Cluster::shared();
    let client = cluster.client().await;
    let group = unique("pdb429");
    worker_nodes(cluster, &client, &group, 1).await;
    let ns = namespace(&client, "pdb429").await;
    deployment(&client, &ns, "db", &group, 2, 0).await;
    let running = wait_running(&client, &ns, "db", 2, Duration::from_secs(60)).await;
    budget(&client, &ns, "db-guard", "db", 0, 2).await;

    let no_retry = no_retry_client(cluster).await;
    let pod = running[0].metadata.name.clone().unwrap();
    let err = Api::<Pod>::namespaced(no_retry, &ns)
        .evict(&pod, &EvictParams::default())
        .await
        .unwrap_err();
    let kube::Error::Api(status) = err else {
        panic!("expected an API error, got {err:?}")
    };
    assert_eq!(status.code, 429, "{status:?}");
    let causes = status
        .details
        .as_ref()
        .map(|d| d.causes.clone())
        .unwrap_or_default();
    assert!(
        causes.iter().any(|c| c.reason == "DisruptionBudget"
            && c.message.contains("db-guard")
            && c.message
                .contains("needs 2 healthy pods and has 2 currently")),
        "cause names the budget: {causes:?}"
    );
}

/// `kubectl drain` empties a node of all but DaemonSet pods; the Deployment's pods come back on
/// the other node. This is the behaviour the operator's drain is measured against.
#[tokio::test]
async fn kubectl_drain_is_the_yardstick() {
    let cluster = Cluster::shared();
    let client = cluster.client().await;
    let group = unique("kdrain");
    let nodes = worker_nodes(cluster, &client, &group, 2).await;
    let ns = namespace(&client, "kdrain").await;
    // Only the first node is schedulable while the workload lands, so it hosts every pod.
    cluster.kubectl_run(&["cordon", &nodes[1]], None).unwrap();
    deployment(&client, &ns, "web", &group, 4, 1).await;
    daemonset(&client, &ns, "agent", &group).await;
    let web = wait_running(&client, &ns, "web", 4, Duration::from_secs(60)).await;
    assert!(
        web.iter().all(|p| node_of(p) == nodes[0]),
        "all on {}",
        nodes[0]
    );
    wait_running(&client, &ns, "agent", 2, Duration::from_secs(60)).await;
    cluster.kubectl_run(&["uncordon", &nodes[1]], None).unwrap();

    let out = cluster
        .kubectl_run(
            &[
                "drain",
                &nodes[0],
                "--ignore-daemonsets",
                "--delete-emptydir-data",
                "--force",
                "--timeout=120s",
            ],
            None,
        )
        .unwrap();
    assert!(out.contains(&format!("node/{} drained", nodes[0])), "{out}");

    let on_drained: Vec<Pod> = Api::<Pod>::all(client.clone())
        .list(&kube::api::ListParams::default().fields(&format!("spec.nodeName={}", nodes[0])))
        .await
        .unwrap()
        .items;
    assert!(
        on_drained
            .iter()
            .all(|p| p.metadata.labels.as_ref().unwrap()["app"] == "agent"),
        "only DaemonSet pods stay: {:?}",
        on_drained
            .iter()
            .map(|p| p.metadata.name.clone())
            .collect::<Vec<_>>()
    );
    let web = wait_running(&client, &ns, "web", 4, Duration::from_secs(60)).await;
    assert!(
        web.iter().all(|p| node_of(p) == nodes[1]),
        "rescheduled on {}",
        nodes[1]
    );
}

/// The operator on a cluster without the CRD says so in one line and exits, rather than
/// retrying 404s forever (this binary never installs the CRD).
#[test]
fn operator_without_the_crd_exits_naming_it() {
    let cluster = Cluster::shared();
    let tmp = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_node-maintenance-operator"))
        .args([
            &format!("--kubeconfig={}", cluster.kubeconfig().display()),
            "--health-probe-bind-address=127.0.0.1:0",
            "--metrics-bind-address=0",
            "--webhook-bind-address=127.0.0.1:0",
        ])
        .env("TMPDIR", tmp.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let errors: Vec<&str> = stderr.lines().filter(|l| l.starts_with("error:")).collect();
    assert_eq!(errors.len(), 1, "{stderr}");
    assert!(
        errors[0].contains("CRD") && errors[0].contains("manifests/crd.yaml"),
        "{stderr}"
    );
}

/// The eviction client (`client::Http::Two`) speaks HTTP/2 with the API server, so a drain's
/// at most 100 evictions in flight share one connection instead of holding one each
/// (`docs/design.md` §2); the controller's client stays on HTTP/1.1, as kube's own.
#[tokio::test]
async fn the_eviction_client_negotiates_http2_and_the_controllers_stays_on_http1() {
    use node_maintenance_operator::client::{Http, builder};
    let cluster = Cluster::shared();
    let kc = kube::config::Kubeconfig::read_from(cluster.kubeconfig()).expect("kubeconfig reads");
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .expect("kubeconfig is valid");
    for (versions, expected) in [
        (Http::Two, http::Version::HTTP_2),
        (Http::One, http::Version::HTTP_11),
    ] {
        let client = builder(config.clone(), versions)
            .expect("client builds")
            .build();
        let request = http::Request::get("/version")
            .body(Vec::new())
            .expect("request builds");
        let response = client
            .send(request.map(Into::into))
            .await
            .expect("/version answers");
        assert_eq!(
            (response.status(), response.version()),
            (http::StatusCode::OK, expected),
            "{versions:?}: the API server's answer to GET /version"
        );
    }
}
