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

pub(crate) use nmo_devcluster::Cluster;
pub(crate) use nmo_devcluster::fixtures::{self, Installed};

/// TLS handshakes from outside (`common::tls::handshake`).
pub(crate) mod tls;

/// A name unique within this test process: `<prefix>-<counter>-<pid>`, DNS-1123 safe.
pub(crate) fn unique(prefix: &str) -> String {
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
pub(crate) async fn wait_for<T, F, Fut>(what: &str, limit: Duration, mut check: F) -> T
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
pub(crate) async fn namespace(client: &Client, prefix: &str) -> String {
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
pub(crate) async fn worker_nodes(
    cluster: &Cluster,
    client: &Client,
    group: &str,
    n: usize,
) -> Vec<String> {
    let names: Vec<String> = (0..n).map(|i| format!("{group}-n{i}")).collect();
    for name in &names {
        create_worker_node(client, name, group).await;
    }
    let nodes = Api::<Node>::all(client.clone());
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

/// Creates one kwok worker node `name` labelled `nmo-test=<group>`, without waiting for it.
pub(crate) async fn create_worker_node(client: &Client, name: &str, group: &str) {
    fixtures::create_kwok_nodes(client, &[name.to_string()], &[("nmo-test", group)])
        .await
        .unwrap();
}

/// A Deployment `name` of `replicas` pods pinned to the nodes labelled `nmo-test=<group>`, with
/// label `app=<name>` and the given termination grace period.
pub(crate) async fn deployment(
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
pub(crate) async fn daemonset(client: &Client, ns: &str, name: &str, group: &str) -> DaemonSet {
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
pub(crate) async fn pods(client: &Client, ns: &str, app: &str) -> Vec<Pod> {
    Api::<Pod>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels(&format!("app={app}")))
        .await
        .unwrap()
        .items
}

/// Whether a pod is Running, Ready and not being deleted.
pub(crate) fn running(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_none()
        && pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
}

/// The node a pod is bound to, or "" when unscheduled.
pub(crate) fn node_of(pod: &Pod) -> &str {
    pod.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .unwrap_or("")
}

/// Waits until `app` has exactly `n` Running pods and returns them.
pub(crate) async fn wait_running(
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

/// Creates pod `name` in `ns`, bound to `node`, merged with `extra` (metadata and spec fields).
pub(crate) async fn bare_pod(
    client: &kube::Client,
    ns: &str,
    name: &str,
    node: &str,
    extra: serde_json::Value,
) -> Pod {
    let mut pod = json!({
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]
        }
    });
    merge(&mut pod, extra);
    Api::<Pod>::namespaced(client.clone(), ns)
        .create(
            &PostParams::default(),
            &serde_json::from_value(pod).unwrap(),
        )
        .await
        .unwrap_or_else(|e| panic!("creating pod {ns}/{name}: {e}"))
}

/// The system-critical bare pod [`hold_the_drain_open`] binds to a node.
pub(crate) const HELD_OPEN: &str = "held-open";

/// The finalizer that keeps [`HELD_OPEN`] terminating until [`let_the_drain_end`].
const HELD_OPEN_FINALIZER: &str = "e2e.medik8s.io/held-open";

/// Binds [`HELD_OPEN`] (`system-node-critical`, behind a finalizer) to `node` in `ns` and waits
/// until it runs. Critical pods go last (docs/drain-contract.md §1, §14) and this one stays
/// terminating once evicted, so the drain cannot Succeed before the test calls
/// [`let_the_drain_end`]: a test that asserts a replacement landing on the node is named as kept
/// waits for the replacement first. Without it the drain may Succeed in the moment between an
/// original leaving and its controller's replacement landing, and no round runs once Succeeded.
pub(crate) async fn hold_the_drain_open(client: &Client, ns: &str, node: &str) {
    bare_pod(
        client,
        ns,
        HELD_OPEN,
        node,
        json!({"metadata": {"finalizers": [HELD_OPEN_FINALIZER]},
               "spec": {"priorityClassName": "system-node-critical"}}),
    )
    .await;
    wait_running(client, ns, HELD_OPEN, 1, Duration::from_secs(120)).await;
}

/// Lets [`HELD_OPEN`] go (removes its finalizer), so the drain can end.
pub(crate) async fn let_the_drain_end(client: &Client, ns: &str) {
    Api::<Pod>::namespaced(client.clone(), ns)
        .patch(
            HELD_OPEN,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await
        .unwrap_or_else(|e| panic!("letting {ns}/{HELD_OPEN} go: {e}"));
}

/// Merges JSON object `from` into `into`.
pub(crate) fn merge(into: &mut serde_json::Value, from: serde_json::Value) {
    match (into, from) {
        (serde_json::Value::Object(a), serde_json::Value::Object(b)) => {
            for (k, v) in b {
                merge(a.entry(k).or_insert(serde_json::Value::Null), v);
            }
        }
        (a, b) => *a = b,
    }
}

/// A custom resource standing for KubeVirt's `VirtualMachineInstance` (`kubevirt.io/v1`), so a
/// pod can be controlled by one as a virt-launcher pod is. Returns an instance's UID.
pub(crate) async fn virtual_machine_instance(
    client: &kube::Client,
    ns: &str,
    name: &str,
) -> String {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use kube::api::DynamicObject;
    use kube::core::{ApiResource, GroupVersionKind};
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "metadata": {"name": "virtualmachineinstances.kubevirt.io"},
        "spec": {
            "group": "kubevirt.io",
            "scope": "Namespaced",
            "names": {"plural": "virtualmachineinstances", "singular": "virtualmachineinstance",
                      "kind": "VirtualMachineInstance"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]
        }
    }))
    .unwrap();
    let crds = Api::<CustomResourceDefinition>::all(client.clone());
    match crds.create(&PostParams::default(), &crd).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => panic!("creating the VirtualMachineInstance CRD: {e}"),
    }
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk(
        "kubevirt.io",
        "v1",
        "VirtualMachineInstance",
    ));
    let api = Api::<DynamicObject>::namespaced_with(client.clone(), ns, &ar);
    let vmi = wait_for(
        "VirtualMachineInstance created",
        Duration::from_secs(90),
        || async {
            let obj: DynamicObject = serde_json::from_value(json!({
                "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
                "metadata": {"name": name}
            }))
            .unwrap();
            api.create(&PostParams::default(), &obj)
                .await
                .map_err(|e| e.to_string())
        },
    )
    .await;
    vmi.metadata.uid.unwrap()
}

/// A client with kube's default retry of 429/503/504 switched off, as the operator's eviction
/// client is: a PodDisruptionBudget refusal must surface at once (docs/design.md §2).
pub(crate) async fn no_retry_client(cluster: &Cluster) -> Client {
    let kc = kube::config::Kubeconfig::read_from(cluster.kubeconfig()).unwrap();
    let mut config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .unwrap();
    config.default_retry = false;
    Client::try_from(config).unwrap()
}

/// The operator under test, running against [`Cluster::shared`] as the ServiceAccount from
/// `manifests/` (so every end-to-end test also proves the RBAC), with its webhook registered.
pub(crate) struct OperatorEnv {
    /// The cluster.
    pub(crate) cluster: &'static Cluster,
    /// The operator process.
    pub(crate) operator: std::sync::Mutex<nmo_devcluster::operator::Operator>,
    /// The manifests, the ServiceAccount it runs as and that account's kubeconfig.
    pub(crate) installed: Installed,
}

/// Where the repository's `manifests/` directory is.
pub(crate) fn manifests_dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("manifests")
}

/// The operator binary under test: `NMO_OPERATOR_BIN` when set, else cargo's. Cargo's path is
/// shared by every checkout building into one `CARGO_TARGET_DIR` (the last build's binary is
/// copied there), so a checkout sharing it points this at its own binary in `deps/`.
pub(crate) fn operator_binary() -> std::path::PathBuf {
    std::env::var_os("NMO_OPERATOR_BIN").map_or_else(
        || env!("CARGO_BIN_EXE_node-maintenance-operator").into(),
        Into::into,
    )
}

/// A control plane of the test binary's own, with no workers (its tests make their own kwok
/// nodes) and the API server's audit log as `policy` says (`nmo_devcluster::audit`). Panics
/// naming the step that failed.
pub(crate) fn audited_cluster(policy: impl Into<String>) -> Cluster {
    Cluster::start(nmo_devcluster::Options {
        workers: 0,
        control_planes: 1,
        audit_policy: Some(policy.into()),
    })
    .unwrap_or_else(|e| panic!("the local control plane did not start: {e}"))
}

/// `manifests/` installed on `cluster` for this package's operator binary ([`Installed`]).
pub(crate) fn installed(cluster: &Cluster) -> Installed {
    Installed::new(cluster, &manifests_dir(), operator_binary())
        .unwrap_or_else(|e| panic!("installing manifests/: {e}"))
}

/// Options to start the operator binary of this package as `account`.
pub(crate) fn operator_options(
    name: &str,
    account: &nmo_devcluster::operator::ServiceAccountRef,
    kubeconfig: &std::path::Path,
) -> nmo_devcluster::operator::OperatorOptions {
    Installed {
        account: account.clone(),
        kubeconfig: kubeconfig.to_path_buf(),
        binary: operator_binary(),
    }
    .options(name)
}

/// Installs the manifests once per test binary, starts one operator and registers its webhook.
pub(crate) fn operator_env() -> &'static OperatorEnv {
    static ENV: std::sync::OnceLock<OperatorEnv> = std::sync::OnceLock::new();
    ENV.get_or_init(|| start_env(|_| {}))
}

/// Installs the manifests on [`Cluster::shared`], starts an operator named `operator` with the
/// options `customize` leaves, and registers its webhook.
pub(crate) fn start_env(
    customize: impl FnOnce(&mut nmo_devcluster::operator::OperatorOptions),
) -> OperatorEnv {
    let cluster = Cluster::shared();
    let installed = installed(cluster);
    let mut opts = installed.options("operator");
    customize(&mut opts);
    let operator = fixtures::start_registered(cluster, &opts)
        .unwrap_or_else(|e| panic!("operator did not start: {e}"));
    OperatorEnv {
        cluster,
        operator: std::sync::Mutex::new(operator),
        installed,
    }
}

/// Waits up to 60 s until the API server calls the webhook
/// ([`fixtures::wait_for_webhook`]).
pub(crate) fn wait_for_webhook(cluster: &Cluster) {
    fixtures::wait_for_webhook(cluster, Duration::from_secs(60))
        .unwrap_or_else(|e| panic!("the webhook never answered: {e}"));
}

/// NodeMaintenance helpers for end-to-end tests.
pub(crate) mod nm {
    use super::*;
    use k8s_openapi::api::core::v1::Event;
    use node_maintenance_operator::api::{
        MaintenancePhase, NodeMaintenance, NodeMaintenanceStatus,
    };

    /// Builds a NodeMaintenance `name` for `node`.
    pub(crate) fn new(name: &str, node: &str, reason: &str) -> NodeMaintenance {
        serde_json::from_value(json!({
            "apiVersion": "nodemaintenance.medik8s.io/v1beta1",
            "kind": "NodeMaintenance",
            "metadata": {"name": name},
            "spec": {"nodeName": node, "reason": reason}
        }))
        .unwrap()
    }

    /// Creates a NodeMaintenance and returns it.
    pub(crate) async fn create(client: &Client, name: &str, node: &str) -> NodeMaintenance {
        Api::<NodeMaintenance>::all(client.clone())
            .create(&PostParams::default(), &new(name, node, "e2e"))
            .await
            .unwrap_or_else(|e| panic!("creating NodeMaintenance {name} for {node}: {e}"))
    }

    /// Waits until `check` accepts the NodeMaintenance's status; returns the object.
    pub(crate) async fn wait_status(
        client: &Client,
        name: &str,
        what: &str,
        limit: Duration,
        check: impl Fn(&NodeMaintenanceStatus) -> bool,
    ) -> NodeMaintenance {
        let api = Api::<NodeMaintenance>::all(client.clone());
        wait_for(
            &format!("NodeMaintenance {name}: {what}"),
            limit,
            || async {
                let nm = api.get(name).await.map_err(|e| e.to_string())?;
                let status = nm.status.clone().unwrap_or_default();
                if check(&status) {
                    Ok(nm)
                } else {
                    Err(format!("{status:?}"))
                }
            },
        )
        .await
    }

    /// Waits for a phase.
    pub(crate) async fn wait_phase(
        client: &Client,
        name: &str,
        phase: MaintenancePhase,
        limit: Duration,
    ) -> NodeMaintenance {
        wait_status(client, name, &format!("phase {phase}"), limit, |s| {
            s.phase == Some(phase)
        })
        .await
    }

    /// Events about object `name` of `kind` (read through core/v1, as upstream's e2e does).
    /// The Warning events with `reason` about NodeMaintenance `name`: their messages and when
    /// each was last seen.
    pub(crate) async fn warnings(
        client: &Client,
        name: &str,
        reason: &str,
    ) -> Vec<(String, jiff::Timestamp)> {
        events(client, "NodeMaintenance", name)
            .await
            .into_iter()
            .filter(|e| {
                e.type_.as_deref() == Some("Warning") && e.reason.as_deref() == Some(reason)
            })
            .map(|e| {
                let at = e
                    .event_time
                    .map(|t| t.0)
                    .or(e.last_timestamp.map(|t| t.0))
                    .or(e.metadata.creation_timestamp.map(|t| t.0))
                    .unwrap_or_default();
                (e.message.unwrap_or_default(), at)
            })
            .collect()
    }

    pub(crate) async fn events(client: &Client, kind: &str, name: &str) -> Vec<Event> {
        Api::<Event>::namespaced(client.clone(), "default")
            .list(&ListParams::default().fields(&format!(
                "involvedObject.kind={kind},involvedObject.name={name}"
            )))
            .await
            .unwrap()
            .items
    }

    /// `(type, reason, message, count)` of each event about a NodeMaintenance, for assertions.
    pub(crate) async fn event_summary(
        client: &Client,
        name: &str,
    ) -> Vec<(String, String, String, i32)> {
        events(client, "NodeMaintenance", name)
            .await
            .into_iter()
            .map(|e| {
                let count = e
                    .series
                    .as_ref()
                    .and_then(|s| s.count)
                    .or(e.count)
                    .unwrap_or(1);
                (
                    e.type_.unwrap_or_default(),
                    e.reason.unwrap_or_default(),
                    e.message.unwrap_or_default(),
                    count,
                )
            })
            .collect()
    }

    /// Waits until an event with `reason` about NodeMaintenance `name` exists.
    pub(crate) async fn wait_event(client: &Client, name: &str, reason: &str) {
        wait_for(
            &format!("event {reason} about {name}"),
            Duration::from_secs(30),
            || async {
                let seen = event_summary(client, name).await;
                if seen.iter().any(|e| e.1 == reason) {
                    Ok(())
                } else {
                    Err(format!("{seen:?}"))
                }
            },
        )
        .await
    }

    /// Deletes a NodeMaintenance (background).
    pub(crate) async fn delete(client: &Client, name: &str) {
        Api::<NodeMaintenance>::all(client.clone())
            .delete(name, &Default::default())
            .await
            .unwrap();
    }

    /// Deletes the NodeMaintenance, waits until it is gone, then until `node` is restored
    /// (schedulable, neither maintenance taint nor the exclude label).
    pub(crate) async fn delete_and_wait_restored(client: &Client, name: &str, node: &str) {
        delete(client, name).await;
        wait_gone(client, name, Duration::from_secs(60)).await;
        wait_for(
            &format!("node {node} restored"),
            Duration::from_secs(60),
            || super::node::restored(client, node),
        )
        .await;
    }

    /// Deletes the NodeMaintenance as if no operator ran: its finalizers removed first, so
    /// nothing restores the node; returns once it is gone.
    pub(crate) async fn force_delete(client: &Client, name: &str) {
        Api::<NodeMaintenance>::all(client.clone())
            .patch(
                name,
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(serde_json::json!({"metadata": {"finalizers": null}})),
            )
            .await
            .unwrap();
        delete(client, name).await;
        wait_gone(client, name, Duration::from_secs(60)).await;
    }

    /// Waits until the NodeMaintenance is gone.
    pub(crate) async fn wait_gone(client: &Client, name: &str, limit: Duration) {
        let api = Api::<NodeMaintenance>::all(client.clone());
        wait_for(
            &format!("NodeMaintenance {name} to be deleted"),
            limit,
            || async {
                match api.get_opt(name).await.map_err(|e| e.to_string())? {
                    None => Ok(()),
                    Some(nm) => Err(format!(
                        "finalizers {:?}, status {:?}",
                        nm.metadata.finalizers, nm.status
                    )),
                }
            },
        )
        .await
    }
}

/// Node helpers for end-to-end tests.
pub(crate) mod node {
    use super::*;
    use k8s_openapi::api::core::v1::Taint;

    /// The node's `(cordoned, taints as key:effect, labels)`.
    pub(crate) async fn state(
        client: &Client,
        name: &str,
    ) -> (
        bool,
        Vec<String>,
        std::collections::BTreeMap<String, String>,
    ) {
        let n = Api::<Node>::all(client.clone()).get(name).await.unwrap();
        let spec = n.spec.unwrap_or_default();
        let taints = spec
            .taints
            .unwrap_or_default()
            .iter()
            .map(|t: &Taint| format!("{}:{}", t.key, t.effect))
            .collect();
        (
            spec.unschedulable.unwrap_or(false),
            taints,
            n.metadata.labels.unwrap_or_default(),
        )
    }

    /// Whether the node is in maintenance: cordoned, both taints, the exclude label.
    pub(crate) async fn in_maintenance(client: &Client, name: &str) -> Result<(), String> {
        let (cordoned, taints, labels) = state(client, name).await;
        let ok = cordoned
            && taints.contains(&"medik8s.io/drain:NoSchedule".to_string())
            && taints.contains(&"node.kubernetes.io/unschedulable:NoSchedule".to_string())
            && labels
                .get("remediation.medik8s.io/exclude-from-remediation")
                .map(String::as_str)
                == Some("true");
        if ok {
            Ok(())
        } else {
            Err(format!(
                "cordoned={cordoned} taints={taints:?} labels={labels:?}"
            ))
        }
    }

    /// Whether the node is back to schedulable with neither maintenance taint nor the label.
    pub(crate) async fn restored(client: &Client, name: &str) -> Result<(), String> {
        let (cordoned, taints, labels) = state(client, name).await;
        let ok = !cordoned
            && !taints.iter().any(|t| {
                t.starts_with("medik8s.io/drain")
                    || t.starts_with("node.kubernetes.io/unschedulable")
            })
            && !labels.contains_key("remediation.medik8s.io/exclude-from-remediation");
        if ok {
            Ok(())
        } else {
            Err(format!(
                "cordoned={cordoned} taints={taints:?} labels={labels:?}"
            ))
        }
    }
}

/// Creates PodDisruptionBudget `name` in `ns` over pods labelled `app=<app>` with
/// `maxUnavailable`, and waits until the disruption controller has observed it with `healthy`
/// healthy pods (until then the API server answers evictions with "still being processed").
pub(crate) async fn budget(
    client: &Client,
    ns: &str,
    name: &str,
    app: &str,
    max_unavailable: i32,
    healthy: i32,
) -> Api<k8s_openapi::api::policy::v1::PodDisruptionBudget> {
    let limit = json!({"maxUnavailable": max_unavailable});
    create_budget(client, ns, name, app, limit, healthy).await
}

/// [`budget`] with `minAvailable: min_available` instead.
pub(crate) async fn min_available_budget(
    client: &Client,
    ns: &str,
    name: &str,
    app: &str,
    min_available: usize,
    healthy: usize,
) -> Api<k8s_openapi::api::policy::v1::PodDisruptionBudget> {
    let limit = json!({"minAvailable": min_available});
    create_budget(client, ns, name, app, limit, healthy as i32).await
}

async fn create_budget(
    client: &Client,
    ns: &str,
    name: &str,
    app: &str,
    limit: serde_json::Value,
    healthy: i32,
) -> Api<k8s_openapi::api::policy::v1::PodDisruptionBudget> {
    use k8s_openapi::api::policy::v1::PodDisruptionBudget;
    let pdbs = Api::<PodDisruptionBudget>::namespaced(client.clone(), ns);
    let mut spec = json!({"selector": {"matchLabels": {"app": app}}});
    merge(&mut spec, limit);
    let pdb: PodDisruptionBudget =
        serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap();
    pdbs.create(&PostParams::default(), &pdb).await.unwrap();
    wait_budget_observed(&pdbs, name, healthy).await;
    pdbs
}

/// Waits until the disruption controller has observed budget `name` of `pdbs` at its current
/// generation (a spec change included) and counts `healthy` healthy pods.
pub(crate) async fn wait_budget_observed(
    pdbs: &Api<k8s_openapi::api::policy::v1::PodDisruptionBudget>,
    name: &str,
    healthy: i32,
) {
    wait_for(
        &format!("budget {name} observed with {healthy} healthy"),
        Duration::from_secs(300),
        || async {
            let p = pdbs.get(name).await.map_err(|e| e.to_string())?;
            let s = p.status.clone().unwrap_or_default();
            if s.observed_generation == p.metadata.generation && s.current_healthy == Some(healthy)
            {
                Ok(())
            } else {
                Err(format!("{s:?}"))
            }
        },
    )
    .await;
}

/// Requests the API server has answered so far (every client's), from its own
/// `apiserver_request_total`: the sum over the series carrying every one of `labels`
/// (`("code", "429")`, ...).
pub(crate) async fn apiserver_requests(client: &Client, labels: &[(&str, &str)]) -> u64 {
    let req = http::Request::get("/metrics").body(Vec::new()).unwrap();
    let text = client.request_text(req).await.unwrap();
    let wanted: Vec<String> = labels.iter().map(|(k, v)| format!("{k}=\"{v}\"")).collect();
    text.lines()
        .filter(|l| {
            l.strip_prefix("apiserver_request_total{")
                .and_then(|l| l.split_once('}'))
                .is_some_and(|(series, _)| {
                    let series: Vec<&str> = series.split(',').collect();
                    wanted.iter().all(|w| series.contains(&w.as_str()))
                })
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

/// Applies `manifests/overlays/force-delete/force-delete.yaml` (the ClusterRole and its binding
/// to the operator's ServiceAccount that `onTimeout: ForceDelete` needs); already there is fine.
pub(crate) async fn apply_force_delete_overlay(client: &Client) {
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
    use serde::Deserialize as _;
    let text =
        std::fs::read_to_string(manifests_dir().join("overlays/force-delete/force-delete.yaml"))
            .unwrap();
    for doc in serde_yaml::Deserializer::from_str(&text) {
        let v = serde_json::Value::deserialize(doc).unwrap();
        let created = match v["kind"].as_str() {
            Some("ClusterRole") => Api::<ClusterRole>::all(client.clone())
                .create(&PostParams::default(), &serde_json::from_value(v).unwrap())
                .await
                .map(|_| ()),
            Some("ClusterRoleBinding") => Api::<ClusterRoleBinding>::all(client.clone())
                .create(&PostParams::default(), &serde_json::from_value(v).unwrap())
                .await
                .map(|_| ()),
            other => panic!("unexpected {other:?} in the force-delete overlay"),
        };
        match created {
            Ok(()) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => panic!("applying the force-delete overlay: {e}"),
        }
    }
}

/// The drain's start recorded on `node` (`nodemaintenance.medik8s.io/drain-started`, the API
/// server's time); panics when none is recorded.
pub(crate) async fn node_drain_started(client: &Client, node: &str) -> jiff::Timestamp {
    let n = Api::<Node>::all(client.clone()).get(node).await.unwrap();
    n.metadata
        .annotations
        .unwrap_or_default()
        .get(node_maintenance_operator::api::DRAIN_STARTED_ANNOTATION)
        .and_then(|v| v.parse().ok())
        .expect("the drain start recorded on the node")
}

/// `(status, reason, message)` of the node's condition `type_`.
pub(crate) async fn node_condition(
    client: &kube::Client,
    node: &str,
    type_: &str,
) -> Option<(String, String, String)> {
    let n = Api::<Node>::all(client.clone()).get(node).await.unwrap();
    n.status?
        .conditions?
        .into_iter()
        .find(|c| c.type_ == type_)
        .map(|c| {
            (
                c.status,
                c.reason.unwrap_or_default(),
                c.message.unwrap_or_default(),
            )
        })
}

/// Waits until the node's lifecycle conditions are `want` (`(type, status, reason)` each), every
/// message naming `nm`.
pub(crate) async fn wait_node_conditions(
    client: &kube::Client,
    node: &str,
    nm: &str,
    want: [(&str, &str, &str); 4],
) {
    wait_for(
        &format!("node {node} conditions {want:?}"),
        Duration::from_secs(120),
        || async {
            let mut seen = Vec::new();
            for (type_, status, reason) in want {
                let c = node_condition(client, node, type_).await;
                let ok = c.as_ref().is_some_and(|(s, r, m)| {
                    s == status && r == reason && *m == format!("NodeMaintenance {nm}")
                });
                if !ok {
                    seen.push(format!("{type_}: {c:?}"));
                }
            }
            if seen.is_empty() {
                Ok(())
            } else {
                Err(seen.join("; "))
            }
        },
    )
    .await;
}
