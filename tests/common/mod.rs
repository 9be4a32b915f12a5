//! Shared end-to-end fixture: one real control plane per test binary ([`Cluster::shared`]), and
//! per-test isolation by namespace and by nodes of the test's own.
//!
//! Each test binary includes this module with `mod common;`; not every binary uses every helper.
#![allow(dead_code)]

use std::future::Future;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use kube::Client;
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;

pub use nmo_devcluster::Cluster;

/// A name unique within this test process: `<prefix>-<counter>-<pid>`, DNS-1123 safe.
pub fn unique(prefix: &str) -> String {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static N: AtomicUsize = AtomicUsize::new(0);
    format!(
        "{prefix}-{}-{}",
        N.fetch_add(1, Ordering::SeqCst),
        std::process::id() % 100_000
    )
}

/// Polls `check` every 200 ms until it returns `Ok`, or panics after `limit` with `what` and the
/// last thing `check` saw (its `Err`).
pub async fn wait_for<T, F, Fut>(what: &str, limit: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let deadline = Instant::now() + limit;
    loop {
        match check().await {
            Ok(v) => return v,
            Err(seen) if Instant::now() > deadline => {
                panic!("timed out after {limit:?} waiting for {what}; last seen: {seen}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

/// Creates a namespace with a unique name and returns it. Namespaces are never awaited on
/// deletion (the cluster goes away with the test binary).
pub async fn namespace(client: &Client, prefix: &str) -> String {
    let name = unique(prefix);
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
    name
}

/// Creates `n` Ready kwok worker nodes of this test's own, labelled `nmo-test=<group>` so the
/// test's workloads can be pinned to them with a nodeSelector. Returns their names.
pub async fn worker_nodes(
    cluster: &Cluster,
    client: &Client,
    group: &str,
    n: usize,
) -> Vec<String> {
    let names: Vec<String> = (0..n).map(|i| format!("{group}-n{i}")).collect();
    let nodes = Api::<Node>::all(client.clone());
    for name in &names {
        let node: Node = serde_json::from_value(json!({
            "metadata": {
                "name": name,
                "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
                "labels": {"kubernetes.io/hostname": name, "type": "kwok", "nmo-test": group}
            },
            "status": {
                "allocatable": {"cpu": "64", "memory": "256Gi", "pods": "1000"},
                "capacity": {"cpu": "64", "memory": "256Gi", "pods": "1000"}
            }
        }))
        .unwrap();
        nodes.create(&PostParams::default(), &node).await.unwrap();
    }
    for name in &names {
        wait_for(
            &format!("node {name} Ready and schedulable"),
            Duration::from_secs(60),
            || async {
                let node = nodes.get(name).await.map_err(|e| e.to_string())?;
                let ready = node
                    .status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
                let taints = node
                    .spec
                    .as_ref()
                    .and_then(|s| s.taints.clone())
                    .unwrap_or_default();
                // node-lifecycle removes `node.kubernetes.io/not-ready` once kwok reports Ready.
                if ready && taints.is_empty() {
                    Ok(())
                } else {
                    Err(format!("ready={ready} taints={taints:?}"))
                }
            },
        )
        .await;
    }
    let _ = cluster;
    names
}

/// A Deployment `name` of `replicas` pods pinned to the nodes labelled `nmo-test=<group>`, with
/// label `app=<name>` and the given termination grace period.
pub async fn deployment(
    client: &Client,
    ns: &str,
    name: &str,
    group: &str,
    replicas: i32,
    grace: i64,
) -> Deployment {
    let d: Deployment = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "nodeSelector": {"nmo-test": group},
                    "terminationGracePeriodSeconds": grace,
                    "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]
                }
            }
        }
    }))
    .unwrap();
    Api::<Deployment>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &d)
        .await
        .unwrap()
}

/// A DaemonSet `name` on the nodes labelled `nmo-test=<group>`.
pub async fn daemonset(client: &Client, ns: &str, name: &str, group: &str) -> DaemonSet {
    let d: DaemonSet = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "nodeSelector": {"nmo-test": group},
                    "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]
                }
            }
        }
    }))
    .unwrap();
    Api::<DaemonSet>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &d)
        .await
        .unwrap()
}

/// Pods in `ns` with label `app=<app>`.
pub async fn pods(client: &Client, ns: &str, app: &str) -> Vec<Pod> {
    Api::<Pod>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels(&format!("app={app}")))
        .await
        .unwrap()
        .items
}

/// Whether a pod is Running, Ready and not being deleted.
pub fn running(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_none()
        && pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
}

/// The node a pod is bound to, or "" when unscheduled.
pub fn node_of(pod: &Pod) -> &str {
    pod.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .unwrap_or("")
}

/// Waits until `app` has exactly `n` Running pods and returns them.
pub async fn wait_running(
    client: &Client,
    ns: &str,
    app: &str,
    n: usize,
    limit: Duration,
) -> Vec<Pod> {
    wait_for(
        &format!("{n} Running pods of {ns}/{app}"),
        limit,
        || async {
            let all = pods(client, ns, app).await;
            let live: Vec<Pod> = all.iter().filter(|p| running(p)).cloned().collect();
            if live.len() == n && all.len() == n {
                Ok(live)
            } else {
                Err(all
                    .iter()
                    .map(|p| {
                        format!(
                            "{}@{} phase={:?} deleting={}",
                            p.metadata.name.as_deref().unwrap_or(""),
                            node_of(p),
                            p.status.as_ref().and_then(|s| s.phase.clone()),
                            p.metadata.deletion_timestamp.is_some()
                        )
                    })
                    .collect::<Vec<_>>()
                    .join(", "))
            }
        },
    )
    .await
}

/// A client with kube's default retry of 429/503/504 switched off, as the operator's eviction
/// client is: a PodDisruptionBudget refusal must surface at once (rust-stack.md §9).
pub async fn no_retry_client(cluster: &Cluster) -> Client {
    let kc = kube::config::Kubeconfig::read_from(cluster.kubeconfig()).unwrap();
    let mut config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .unwrap();
    config.default_retry = false;
    Client::try_from(config).unwrap()
}
