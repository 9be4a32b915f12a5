//! Which pods the drain evicts, in which order, and how often, end to end: the operator binary,
//! acting as the ServiceAccount from `manifests/`, against a real control plane whose kwok nodes
//! run and terminate pods. The rules are in `docs/compat.md §7` and `docs/design.md §2`.
//!
//! Order is shown with pods that carry a finalizer of the test's own: an evicted pod then stays
//! (deletionTimestamp set) until the test releases it, so "not evicted before X is gone" is a
//! state the API server holds, not a race. Evictions are counted from what the API server saw:
//! pod UIDs and deletionTimestamps, and its own `apiserver_request_total` for refused evictions.

mod common;

use std::time::{Duration, Instant};

use common::*;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use node_maintenance_operator::api::{MaintenancePhase, NodeMaintenance};
use serde_json::json;

const LIMIT: Duration = Duration::from_secs(90);
/// The operator of this binary believes it runs as this pod (`POD_NAME`) in its namespace.
const OWN_POD: &str = "nmo-operator-self";
const HOLD: &str = "e2e.medik8s.io/hold";

/// The operator under test, like [`operator_env`] but told its own pod's name.
fn env() -> &'static OperatorEnv {
    static ENV: std::sync::OnceLock<OperatorEnv> = std::sync::OnceLock::new();
    ENV.get_or_init(|| start_env(|opts| opts.env.push(("POD_NAME".into(), OWN_POD.into()))))
}

/// Creates pod `name` in `ns`, bound to `node`, merged with `extra` (metadata and spec fields).
async fn bare_pod(
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

fn merge(into: &mut serde_json::Value, from: serde_json::Value) {
    match (into, from) {
        (serde_json::Value::Object(a), serde_json::Value::Object(b)) => {
            for (k, v) in b {
                merge(a.entry(k).or_insert(serde_json::Value::Null), v);
            }
        }
        (a, b) => *a = b,
    }
}

async fn get_pod(client: &kube::Client, ns: &str, name: &str) -> Option<Pod> {
    Api::<Pod>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
        .unwrap()
}

fn deleting(pod: &Option<Pod>) -> bool {
    pod.as_ref()
        .is_none_or(|p| p.metadata.deletion_timestamp.is_some())
}

/// Removes the test's finalizer, letting an evicted pod go.
async fn release(client: &kube::Client, ns: &str, name: &str) {
    Api::<Pod>::namespaced(client.clone(), ns)
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await
        .unwrap();
}

async fn wait_pod_running(client: &kube::Client, ns: &str, name: &str) {
    wait_for(&format!("pod {ns}/{name} Running"), LIMIT, || async {
        match get_pod(client, ns, name).await {
            Some(p) if running(&p) => Ok(()),
            other => Err(format!("{:?}", other.map(|p| p.status))),
        }
    })
    .await;
}

async fn wait_pod_gone(client: &kube::Client, ns: &str, name: &str) {
    wait_for(&format!("pod {ns}/{name} gone"), LIMIT, || async {
        match get_pod(client, ns, name).await {
            None => Ok(()),
            Some(p) => Err(format!(
                "deleting={} finalizers={:?}",
                p.metadata.deletion_timestamp.is_some(),
                p.metadata.finalizers
            )),
        }
    })
    .await;
}

/// Evicted and held by the test's finalizer: `Terminating`, or `StuckTerminating` once held for a
/// minute (a slow machine).
fn terminating(reason: &str) -> bool {
    reason == "Terminating" || reason == "StuckTerminating"
}

fn reasons(nm: &NodeMaintenance) -> Vec<(String, String)> {
    nm.status
        .as_ref()
        .and_then(|s| s.blockers.clone())
        .unwrap_or_default()
        .into_iter()
        .map(|b| (b.name, b.reason))
        .collect()
}

/// Item 3: the operator's own pod is evicted last, after every other evictable pod is gone, and
/// is then the one pending pod; the maintenance Succeeds once it is gone.
#[tokio::test]
async fn own_pod_is_evicted_last() {
    let env = env();
    let client = env.cluster.client().await;
    let group = unique("own");
    let node = worker_nodes(env.cluster, &client, &group, 1)
        .await
        .remove(0);
    let ns = namespace(&client, "own").await;
    let own_ns = env.installed.account.namespace.clone();
    let hold = json!({"metadata": {"finalizers": [HOLD]}});
    bare_pod(&client, &ns, "app", &node, hold.clone()).await;
    bare_pod(&client, &own_ns, OWN_POD, &node, hold).await;
    wait_pod_running(&client, &ns, "app").await;
    wait_pod_running(&client, &own_ns, OWN_POD).await;

    let name = unique("nm-own");
    nm::create(&client, &name, &node).await;
    let waiting = nm::wait_status(&client, &name, "own pod waits for app", LIMIT, |s| {
        let b = s.blockers.clone().unwrap_or_default();
        b.iter().any(|b| b.name == "app" && terminating(&b.reason))
            && b.iter()
                .any(|b| b.name == OWN_POD && b.reason == "OperatorPod")
    })
    .await;
    assert!(deleting(&get_pod(&client, &ns, "app").await));
    assert!(
        !deleting(&get_pod(&client, &own_ns, OWN_POD).await),
        "own pod evicted while app was still on the node: {:?}",
        reasons(&waiting)
    );

    release(&client, &ns, "app").await;
    wait_pod_gone(&client, &ns, "app").await;
    let last = nm::wait_status(&client, &name, "own pod the one pending pod", LIMIT, |s| {
        s.pending_pods.as_deref() == Some(&[OWN_POD.to_string()][..])
            && s.blockers
                .as_ref()
                .is_some_and(|b| b.len() == 1 && terminating(&b[0].reason))
    })
    .await;
    assert_eq!(last.status.unwrap().phase, Some(MaintenancePhase::Running));
    assert!(deleting(&get_pod(&client, &own_ns, OWN_POD).await));

    release(&client, &own_ns, OWN_POD).await;
    nm::wait_phase(&client, &name, MaintenancePhase::Succeeded, LIMIT).await;
    nm::delete_and_wait_restored(&client, &name, &node).await;
}

/// Item 5: a pod controlled by a custom resource of kind `DaemonSet` (group `apps.example.com`),
/// in a namespace with an `apps/v1` DaemonSet of the same name, is drained like any other
/// controlled pod; a real DaemonSet's pod stays.
#[tokio::test]
async fn daemonset_kind_of_another_group_is_drained() {
    let env = env();
    let client = env.cluster.client().await;
    let group = unique("dsk");
    let node = worker_nodes(env.cluster, &client, &group, 1)
        .await
        .remove(0);
    let ns = namespace(&client, "dsk").await;

    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "metadata": {"name": "daemonsets.apps.example.com"},
        "spec": {
            "group": "apps.example.com",
            "scope": "Namespaced",
            "names": {"plural": "daemonsets", "singular": "daemonset", "kind": "DaemonSet"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]
        }
    }))
    .unwrap();
    let crds = Api::<CustomResourceDefinition>::all(client.clone());
    crds.create(&PostParams::default(), &crd).await.unwrap();
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk(
        "apps.example.com",
        "v1",
        "DaemonSet",
    ));
    let custom_api = Api::<DynamicObject>::namespaced_with(client.clone(), &ns, &ar);
    let custom = wait_for("custom DaemonSet created", LIMIT, || async {
        let obj: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "apps.example.com/v1", "kind": "DaemonSet",
            "metadata": {"name": "agent"}
        }))
        .unwrap();
        custom_api
            .create(&PostParams::default(), &obj)
            .await
            .map_err(|e| e.to_string())
    })
    .await;
    // The apps/v1 DaemonSet of the same name runs nowhere; "real" runs on the node.
    daemonset(&client, &ns, "agent", &unique("nowhere")).await;
    daemonset(&client, &ns, "real", &group).await;
    bare_pod(
        &client,
        &ns,
        "agent-custom",
        &node,
        json!({"metadata": {"ownerReferences": [{
            "apiVersion": "apps.example.com/v1", "kind": "DaemonSet", "name": "agent",
            "uid": custom.metadata.uid.clone().unwrap(), "controller": true
        }]}}),
    )
    .await;
    wait_pod_running(&client, &ns, "agent-custom").await;
    wait_running(&client, &ns, "real", 1, LIMIT).await;

    let name = unique("nm-dsk");
    nm::create(&client, &name, &node).await;
    let done = nm::wait_phase(&client, &name, MaintenancePhase::Succeeded, LIMIT).await;
    assert!(
        deleting(&get_pod(&client, &ns, "agent-custom").await),
        "the custom resource's pod is still on the node: {:?}",
        done.status
    );
    let s = done.status.unwrap();
    assert_eq!(s.eviction_pods, Some(1), "{s:?}");
    let real = pods(&client, &ns, "real").await;
    assert!(
        real.len() == 1 && running(&real[0]) && node_of(&real[0]) == node,
        "the apps/v1 DaemonSet's pod must stay"
    );
    nm::delete_and_wait_restored(&client, &name, &node).await;
    crds.delete("daemonsets.apps.example.com", &Default::default())
        .await
        .unwrap();
}

/// Item 6: system-critical pods are evicted only after every other evictable pod is gone, with a
/// blocker saying why they wait; a node with only critical pods left proceeds at once.
#[tokio::test]
async fn critical_pods_leave_after_the_others() {
    let env = env();
    let client = env.cluster.client().await;
    let group = unique("crit");
    let nodes = worker_nodes(env.cluster, &client, &group, 2).await;
    let ns = namespace(&client, "crit").await;
    bare_pod(
        &client,
        &ns,
        "app",
        &nodes[0],
        json!({"metadata": {"finalizers": [HOLD]}}),
    )
    .await;
    for (pod, class, node) in [
        ("dns", "system-cluster-critical", &nodes[0]),
        ("cni", "system-node-critical", &nodes[0]),
        ("alone", "system-node-critical", &nodes[1]),
    ] {
        bare_pod(
            &client,
            &ns,
            pod,
            node,
            json!({"spec": {"priorityClassName": class}}),
        )
        .await;
        wait_pod_running(&client, &ns, pod).await;
    }
    wait_pod_running(&client, &ns, "app").await;

    let name = unique("nm-crit");
    nm::create(&client, &name, &nodes[0]).await;
    let waiting = nm::wait_status(&client, &name, "critical pods wait for app", LIMIT, |s| {
        let b = s.blockers.clone().unwrap_or_default();
        b.iter().any(|b| b.name == "app" && terminating(&b.reason))
            && ["dns", "cni"].iter().all(|p| {
                b.iter().any(|b| {
                    b.name == *p
                        && b.reason == "SystemCritical"
                        && b.message
                            .as_deref()
                            .is_some_and(|m| m.contains("-critical"))
                })
            })
    })
    .await;
    for p in ["dns", "cni"] {
        assert!(
            !deleting(&get_pod(&client, &ns, p).await),
            "{p} evicted while app was still on the node: {:?}",
            reasons(&waiting)
        );
    }
    let s = waiting.status.unwrap();
    assert_eq!(s.pending_pods.as_ref().map(Vec::len), Some(3), "{s:?}");

    release(&client, &ns, "app").await;
    nm::wait_phase(&client, &name, MaintenancePhase::Succeeded, LIMIT).await;
    for p in ["app", "dns", "cni"] {
        assert!(deleting(&get_pod(&client, &ns, p).await), "{p} still there");
    }

    // Only a critical pod on the node: evicted at once.
    let alone = unique("nm-crit-alone");
    nm::create(&client, &alone, &nodes[1]).await;
    nm::wait_phase(&client, &alone, MaintenancePhase::Succeeded, LIMIT).await;
    assert!(deleting(&get_pod(&client, &ns, "alone").await));
    nm::delete_and_wait_restored(&client, &name, &nodes[0]).await;
    nm::delete_and_wait_restored(&client, &alone, &nodes[1]).await;
}

/// Item 8: a Deployment's pod whose tolerations cover both maintenance taints is never evicted
/// (its replacement would be scheduled straight back); it is named in status as not evicted, with
/// one event, and the maintenance Succeeds.
#[tokio::test]
async fn pods_tolerating_the_maintenance_taints_are_not_evicted() {
    let env = env();
    let client = env.cluster.client().await;
    let group = unique("tol");
    let node = worker_nodes(env.cluster, &client, &group, 1)
        .await
        .remove(0);
    let ns = namespace(&client, "tol").await;
    let d: k8s_openapi::api::apps::v1::Deployment = serde_json::from_value(json!({
        "metadata": {"name": "tolerant"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "tolerant"}},
            "template": {
                "metadata": {"labels": {"app": "tolerant"}},
                "spec": {
                    "nodeSelector": {"nmo-test": group},
                    "tolerations": [{"operator": "Exists"}],
                    "terminationGracePeriodSeconds": 0,
                    "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]
                }
            }
        }
    }))
    .unwrap();
    Api::<k8s_openapi::api::apps::v1::Deployment>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &d)
        .await
        .unwrap();
    // An ordinary pod too, so the drain takes several passes that all see the tolerant pod.
    bare_pod(
        &client,
        &ns,
        "plain",
        &node,
        json!({"metadata": {"finalizers": [HOLD]}}),
    )
    .await;
    let before = wait_running(&client, &ns, "tolerant", 1, LIMIT).await;
    let uid = before[0].metadata.uid.clone().unwrap();
    let pod_name = before[0].metadata.name.clone().unwrap();
    wait_pod_running(&client, &ns, "plain").await;

    let name = unique("nm-tol");
    nm::create(&client, &name, &node).await;
    nm::wait_status(&client, &name, "plain evicted", LIMIT, |s| {
        s.blockers
            .as_ref()
            .is_some_and(|b| b.len() == 1 && b[0].name == "plain" && terminating(&b[0].reason))
    })
    .await;
    release(&client, &ns, "plain").await;
    let done = nm::wait_phase(&client, &name, MaintenancePhase::Succeeded, LIMIT).await;

    let after = pods(&client, &ns, "tolerant").await;
    assert!(
        after.len() == 1
            && after[0].metadata.uid.as_deref() == Some(uid.as_str())
            && running(&after[0]),
        "the tolerant pod was evicted (replaced or deleting): {:?}",
        after
            .iter()
            .map(|p| (
                &p.metadata.name,
                &p.metadata.uid,
                p.metadata.deletion_timestamp.is_some()
            ))
            .collect::<Vec<_>>()
    );
    let s = done.status.unwrap();
    assert_eq!(
        s.eviction_pods,
        Some(1),
        "only the plain pod is up for eviction: {s:?}"
    );
    let drained = s
        .conditions
        .unwrap_or_default()
        .into_iter()
        .find(|c| c.type_ == "Drained")
        .unwrap();
    assert!(
        drained
            .message
            .contains(&format!("{ns}/{pod_name} (ToleratesMaintenanceTaints)")),
        "{}",
        drained.message
    );
    nm::wait_event(&client, &name, "PodNotEvicted").await;
    let skipped: Vec<_> = nm::event_summary(&client, &name)
        .await
        .into_iter()
        .filter(|e| e.1 == "PodNotEvicted")
        .collect();
    assert!(
        skipped.len() == 1 && skipped[0].3 == 1 && skipped[0].2.contains(&pod_name),
        "{skipped:?}"
    );
    nm::delete_and_wait_restored(&client, &name, &node).await;
}

/// Refused (429) evictions of pods the API server has answered so far, from its own metrics.
async fn refused_evictions(client: &kube::Client) -> u64 {
    let req = http::Request::get("/metrics").body(Vec::new()).unwrap();
    let text = client.request_text(req).await.unwrap();
    text.lines()
        .filter(|l| {
            l.starts_with("apiserver_request_total{")
                && l.contains("resource=\"pods\"")
                && l.contains("subresource=\"eviction\"")
                && l.contains("code=\"429\"")
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

/// The 5 s retry interval less what the API server's clock and request handling may blur.
const RETRY_FLOOR: Duration = Duration::from_millis(4500);

/// One refused eviction as the API server's counter showed it: the counter's new value, and an
/// interval that contains the refusal.
#[derive(Debug)]
struct Refusal {
    count: u64,
    /// When the last read that did not count it began.
    after: Instant,
    /// When the first read that counted it ended.
    by: Instant,
    /// When that read began: the next refusal happened after this.
    read_began: Instant,
}

/// Reads the API server's count of refused evictions until it exceeds `last` (a count read by
/// a read that began at `after`), for up to `limit`.
async fn next_refusal(
    client: &kube::Client,
    last: u64,
    mut after: Instant,
    limit: Duration,
) -> Refusal {
    let deadline = Instant::now() + limit;
    loop {
        let began = Instant::now();
        let count = refused_evictions(client).await;
        if count > last {
            return Refusal {
                count,
                after,
                by: Instant::now(),
                read_began: began,
            };
        }
        after = began;
        assert!(
            Instant::now() < deadline,
            "no refused eviction after the {last}th within {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Item 9: while a PodDisruptionBudget refuses, the pod is asked once per retry interval (5 s),
/// whatever else triggers a pass (our own status write right after the first refusal, an edit of
/// the NodeMaintenance). The only test of this binary that gets 429s, so the API server's counter
/// is this test's.
#[tokio::test]
async fn a_refused_pod_is_asked_once_per_retry_interval() {
    let env = env();
    let client = env.cluster.client().await;
    let group = unique("once");
    let node = worker_nodes(env.cluster, &client, &group, 1)
        .await
        .remove(0);
    let ns = namespace(&client, "once").await;
    deployment(&client, &ns, "db", &group, 1, 0).await;
    wait_running(&client, &ns, "db", 1, LIMIT).await;
    budget(&client, &ns, "db-guard", "db", 0, 1).await;
    let base_read = Instant::now();
    let base = refused_evictions(&client).await;

    let name = unique("nm-once");
    nm::create(&client, &name, &node).await;
    // Each refusal is bracketed by the API server's counter: it happened after the start of the
    // last read that did not count it and before the end of the first read that did. The reads
    // may be slow on a loaded machine, which widens the bracket but never puts it in the wrong
    // place, so a gap is judged from the brackets, never from when a poll happened to look.
    let first = next_refusal(&client, base, base_read, LIMIT).await;
    assert_eq!(
        first.count,
        base + 1,
        "several evictions at once after the first refusal"
    );
    // A pass of our own choosing inside the interval: it must not ask again.
    Api::<NodeMaintenance>::all(client.clone())
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"e2e/touch": "1"}}})),
        )
        .await
        .unwrap();
    let mut seen = vec![first];
    while seen.len() < 3 {
        let prev = seen.last().unwrap();
        let last = prev.count;
        let next = next_refusal(&client, last, prev.read_began, Duration::from_secs(30)).await;
        assert_eq!(
            next.count,
            last + 1,
            "more than one eviction per retry: {seen:?} then {next:?}"
        );
        seen.push(next);
    }
    for w in seen.windows(2) {
        // The longest the gap can have been: from the earliest the first refusal can have
        // happened to the latest the second can have.
        let longest = w[1].by - w[0].after;
        assert!(
            longest >= RETRY_FLOOR,
            "asked again within {longest:?} at most, before the 5 s retry interval: {w:?}"
        );
    }
    let s = nm::wait_status(&client, &name, "blocked by the budget", LIMIT, |s| {
        s.blockers
            .as_ref()
            .is_some_and(|b| b.len() == 1 && b[0].reason == "PodDisruptionBudget")
    })
    .await
    .status
    .unwrap();
    assert_eq!(s.phase, Some(MaintenancePhase::Running));
    nm::delete_and_wait_restored(&client, &name, &node).await;
}
