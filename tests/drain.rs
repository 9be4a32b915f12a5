//! Which pods the drain evicts, in which order, and how often, end to end: the operator binary,
//! acting as the ServiceAccount from `manifests/`, against a real control plane whose kwok nodes
//! run and terminate pods. The rules are in `docs/drain-contract.md`, `docs/compat.md §7` and
//! `docs/design.md §2`.
//!
//! Order is shown with pods that carry a finalizer of the test's own: an evicted pod then stays
//! (deletionTimestamp set) until the test releases it, so "not evicted before X is gone" is a
//! state the API server holds, not a race. Evictions are counted from what the API server saw:
//! pod UIDs and deletionTimestamps, and its own `apiserver_request_total` for refused evictions.
//! `docs/drain-contract.md` names the test of each rule.

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
/// The tests that create the operator's own pod (one name in one namespace) run one at a time.
static OWN_POD_SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test]
async fn own_pod_is_evicted_last() {
    let _serial = OWN_POD_SERIAL.lock().await;
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

/// `docs/drain-contract.md` §14 (issue 47's acceptance: "our own pod last"): under
/// `daemonSets: EvictLast` the operator's own pod still goes last. While a held ordinary pod
/// terminates, the DaemonSet's pod waits (`DaemonSetLast`) and the own pod waits
/// (`OperatorPod`); once the ordinary pod is gone the DaemonSet's pod is evicted (held by the
/// test's finalizer, copied from its template) and the own pod is not; once the DaemonSet's pod
/// is gone the own pod is evicted; Succeeded once it is gone.
#[tokio::test]
async fn own_pod_goes_after_the_daemon_set_pods_evicted_last() {
    let _serial = OWN_POD_SERIAL.lock().await;
    let env = env();
    let client = env.cluster.client().await;
    let group = unique("ownds");
    let node = worker_nodes(env.cluster, &client, &group, 1)
        .await
        .remove(0);
    let ns = namespace(&client, "ownds").await;
    let own_ns = env.installed.account.namespace.clone();
    let hold = json!({"metadata": {"finalizers": [HOLD]}});
    bare_pod(&client, &ns, "app", &node, hold.clone()).await;
    bare_pod(&client, &own_ns, OWN_POD, &node, hold).await;
    let ds: k8s_openapi::api::apps::v1::DaemonSet = serde_json::from_value(json!({
        "metadata": {"name": "agent"},
        "spec": {
            "selector": {"matchLabels": {"app": "agent"}},
            "template": {
                "metadata": {"labels": {"app": "agent"}, "finalizers": [HOLD]},
                "spec": {
                    "nodeSelector": {"nmo-test": group},
                    "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]
                }
            }
        }
    }))
    .unwrap();
    let daemonsets = Api::<k8s_openapi::api::apps::v1::DaemonSet>::namespaced(client.clone(), &ns);
    daemonsets
        .create(&PostParams::default(), &ds)
        .await
        .unwrap();
    wait_pod_running(&client, &ns, "app").await;
    wait_pod_running(&client, &own_ns, OWN_POD).await;
    let agent = wait_for("the DaemonSet's pod Running", LIMIT, || async {
        let p = pods(&client, &ns, "agent").await;
        match p.iter().find(|p| running(p)) {
            Some(p) => Ok(p.metadata.name.clone().unwrap()),
            None => Err(format!("{} pods, none Running", p.len())),
        }
    })
    .await;

    let name = unique("nm-ownds");
    let mut nm = nm::new(&name, &node, "e2e own pod after DaemonSet pods");
    nm.spec.knobs.daemon_sets = Some(node_maintenance_operator::api::DaemonSets::EvictLast);
    Api::<NodeMaintenance>::all(client.clone())
        .create(&PostParams::default(), &nm)
        .await
        .unwrap();
    nm::wait_status(&client, &name, "both wait for app", LIMIT, |s| {
        let b = s.blockers.clone().unwrap_or_default();
        b.iter().any(|b| b.name == "app" && terminating(&b.reason))
            && b.iter()
                .any(|b| b.name == agent && b.reason == "DaemonSetLast")
            && b.iter()
                .any(|b| b.name == OWN_POD && b.reason == "OperatorPod")
    })
    .await;
    assert!(!deleting(&get_pod(&client, &ns, &agent).await));

    release(&client, &ns, "app").await;
    let waiting = nm::wait_status(&client, &name, "the DaemonSet's pod evicted", LIMIT, |s| {
        let b = s.blockers.clone().unwrap_or_default();
        b.iter().any(|b| b.name == agent && terminating(&b.reason))
    })
    .await;
    assert!(
        !deleting(&get_pod(&client, &own_ns, OWN_POD).await),
        "own pod evicted while the DaemonSet's pod was still on the node: {:?}",
        reasons(&waiting)
    );

    release(&client, &ns, &agent).await;
    wait_pod_gone(&client, &ns, &agent).await;
    nm::wait_status(&client, &name, "own pod the one pending pod", LIMIT, |s| {
        s.pending_pods.as_deref() == Some(&[OWN_POD.to_string()][..])
            && s.blockers
                .as_ref()
                .is_some_and(|b| b.len() == 1 && terminating(&b[0].reason))
    })
    .await;
    assert!(deleting(&get_pod(&client, &own_ns, OWN_POD).await));
    release(&client, &own_ns, OWN_POD).await;
    nm::wait_phase(&client, &name, MaintenancePhase::Succeeded, LIMIT).await;
    daemonsets
        .delete("agent", &Default::default())
        .await
        .unwrap();
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

const TOLERATE_ALL: &str = r#"[{"operator": "Exists"}]"#;

fn tolerate_all() -> serde_json::Value {
    serde_json::from_str(TOLERATE_ALL).unwrap()
}

/// A Deployment `name` of one pod pinned to the nodes of `group` that tolerates every taint.
async fn tolerant_deployment(client: &kube::Client, ns: &str, name: &str, group: &str) {
    let d: k8s_openapi::api::apps::v1::Deployment = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "nodeSelector": {"nmo-test": group},
                    "tolerations": tolerate_all(),
                    "terminationGracePeriodSeconds": 0,
                    "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]
                }
            }
        }
    }))
    .unwrap();
    Api::<k8s_openapi::api::apps::v1::Deployment>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &d)
        .await
        .unwrap();
}

/// `docs/drain-contract.md` §1 and §2: pods that tolerate both maintenance taints and were
/// on the node before the drain are evicted like any other: a virt-launcher pod (controlled by a
/// VirtualMachineInstance), a bare pod and a tolerate-everything Deployment's pod. Only the
/// Deployment's replacement, which arrived after the drain started and tolerates both taints, is
/// kept: named in the `Drained` condition and in one `PodNotEvicted` event, not counted in
/// `evictionPods`, and the maintenance Succeeds with it on the node. A budget holds one ordinary
/// pod until the replacement is back, so that it arrives while the drain is open.
#[tokio::test]
async fn tolerating_pods_are_evicted_and_only_their_replacements_kept() {
    let env = env();
    let client = env.cluster.client().await;
    let group = unique("tol");
    let node = worker_nodes(env.cluster, &client, &group, 1)
        .await
        .remove(0);
    let ns = namespace(&client, "tol").await;
    tolerant_deployment(&client, &ns, "tolerant", &group).await;
    let vmi = virtual_machine_instance(&client, &ns, "vm1").await;
    bare_pod(
        &client,
        &ns,
        "virt-launcher-vm1",
        &node,
        json!({
            "metadata": {"ownerReferences": [{
                "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance", "name": "vm1",
                "uid": vmi, "controller": true, "blockOwnerDeletion": true
            }]},
            "spec": {"tolerations": tolerate_all()}
        }),
    )
    .await;
    bare_pod(
        &client,
        &ns,
        "bare",
        &node,
        json!({"spec": {"tolerations": tolerate_all()}}),
    )
    .await;
    // An ordinary pod held by a budget keeps the drain open until the replacement is back:
    // a replacement that arrives only after Succeeded is neither evicted nor named (§3), so
    // without it the outcome would depend on whether the scheduler beats the drain.
    bare_pod(&client, &ns, "guarded", &node, json!({})).await;
    let before = wait_running(&client, &ns, "tolerant", 1, LIMIT).await;
    let original = before[0].metadata.uid.clone().unwrap();
    wait_pod_running(&client, &ns, "virt-launcher-vm1").await;
    wait_pod_running(&client, &ns, "bare").await;
    wait_pod_running(&client, &ns, "guarded").await;
    let guard = budget(&client, &ns, "guard", "guarded", 0, 1).await;

    let name = unique("nm-tol");
    nm::create(&client, &name, &node).await;
    // The original was evicted; its replacement is back on the node while the drain is open
    // and is named as kept. A replacement created in the start's own second after a restart is
    // evicted once more (§2), so the one named is whichever replacement is on the node now.
    let nms = Api::<NodeMaintenance>::all(client.clone());
    let (kept, kept_named) = wait_for(
        "a replacement of the tolerating Deployment Running on the node and named as kept",
        LIMIT,
        || {
            let (client, ns, original, nms, name, node) = (
                client.clone(),
                ns.clone(),
                original.clone(),
                nms.clone(),
                name.clone(),
                node.clone(),
            );
            async move {
                let now = pods(&client, &ns, "tolerant").await;
                let nm = nms.get(&name).await.map_err(|e| e.to_string())?;
                let drained = nm
                    .status
                    .iter()
                    .flat_map(|s| s.conditions.iter().flatten())
                    .find(|c| c.type_ == "Drained")
                    .map(|c| c.message.clone())
                    .unwrap_or_default();
                match now.as_slice() {
                    [p] if running(p)
                        && p.metadata.uid.as_deref() != Some(original.as_str())
                        && node_of(p) == node
                        && drained.contains(&format!(
                            "{ns}/{} (ToleratesMaintenanceTaints)",
                            p.metadata.name.as_deref().unwrap_or_default()
                        )) =>
                    {
                        Ok((p.metadata.name.clone().unwrap(), nm))
                    }
                    other => Err(format!(
                        "pods {:?}; Drained: {drained:?}",
                        other
                            .iter()
                            .map(|p| (&p.metadata.name, running(p), node_of(p)))
                            .collect::<Vec<_>>()
                    )),
                }
            }
        },
    )
    .await;
    assert_eq!(
        kept_named.status.unwrap().phase,
        Some(MaintenancePhase::Running),
        "the budget still holds `guarded`"
    );
    guard
        .delete("guard", &Default::default())
        .await
        .expect("budget deleted");
    let done = nm::wait_phase(&client, &name, MaintenancePhase::Succeeded, LIMIT).await;
    for p in ["virt-launcher-vm1", "bare"] {
        assert!(
            deleting(&get_pod(&client, &ns, p).await),
            "{p} tolerates both taints but was on the node before the drain: it must be evicted; {:?}",
            done.status
        );
    }
    let s = done.status.clone().unwrap();
    assert_eq!(s.eviction_pods, Some(4), "the four pods of before: {s:?}");
    nm::wait_event(&client, &name, "PodNotEvicted").await;
    let skipped: Vec<_> = nm::event_summary(&client, &name)
        .await
        .into_iter()
        .filter(|e| e.1 == "PodNotEvicted" && e.2.contains(&kept))
        .collect();
    assert!(
        skipped.len() == 1
            && skipped[0].3 == 1
            && skipped[0].2.contains("arrived after the drain started"),
        "{skipped:?}"
    );
    // Still there a while later, not evicted by a later pass (the Node watch sees it).
    let later = pods(&client, &ns, "tolerant").await;
    assert!(
        later.len() == 1
            && later[0].metadata.name.as_deref() == Some(kept.as_str())
            && running(&later[0]),
        "{:?}",
        later
            .iter()
            .map(|p| (&p.metadata.name, p.metadata.deletion_timestamp.is_some()))
            .collect::<Vec<_>>()
    );
    nm::delete_and_wait_restored(&client, &name, &node).await;
}

/// `docs/drain-contract.md` §3: once Succeeded, a pod that arrives (an admin's maintenance
/// job, a bare pod bound with `spec.nodeName`) is not evicted, while the cordon and taints are
/// still enforced: an uncordon by hand is re-applied, and the passes that follows (the Node
/// watch's, an edit of the node's labels and of the NodeMaintenance) evict nothing.
#[tokio::test]
async fn nothing_is_evicted_after_succeeded() {
    let env = env();
    let client = env.cluster.client().await;
    let group = unique("after");
    let node = worker_nodes(env.cluster, &client, &group, 1)
        .await
        .remove(0);
    let ns = namespace(&client, "after").await;
    bare_pod(&client, &ns, "before", &node, json!({})).await;
    wait_pod_running(&client, &ns, "before").await;
    let name = unique("nm-after");
    nm::create(&client, &name, &node).await;
    nm::wait_phase(&client, &name, MaintenancePhase::Succeeded, LIMIT).await;
    assert!(deleting(&get_pod(&client, &ns, "before").await));

    bare_pod(&client, &ns, "firmware-job", &node, json!({})).await;
    wait_pod_running(&client, &ns, "firmware-job").await;
    let nodes = Api::<k8s_openapi::api::core::v1::Node>::all(client.clone());
    nodes
        .patch(
            &node,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"e2e/touched": "1"}}})),
        )
        .await
        .unwrap();
    Api::<NodeMaintenance>::all(client.clone())
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"e2e/touch": "1"}}})),
        )
        .await
        .unwrap();
    // An uncordon by hand: the next pass must re-apply it (so passes do run) and evict nothing.
    nodes
        .patch(
            &node,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"unschedulable": null}})),
        )
        .await
        .unwrap();
    wait_for("the cordon re-applied", LIMIT, || async {
        let n = nodes.get(&node).await.map_err(|e| e.to_string())?;
        if n.spec.as_ref().and_then(|s| s.unschedulable) == Some(true) {
            Ok(())
        } else {
            Err("uncordoned".into())
        }
    })
    .await;
    nm::wait_event(&client, &name, "MaintenanceReapplied").await;
    // Several passes' worth of time (a pass comes at least every second while there is work).
    tokio::time::sleep(Duration::from_secs(3)).await;
    let job = get_pod(&client, &ns, "firmware-job").await;
    assert!(
        job.as_ref().is_some_and(running),
        "the pod that arrived after Succeeded was evicted: {:?}",
        job.map(|p| p.metadata.deletion_timestamp)
    );
    let s = Api::<NodeMaintenance>::all(client.clone())
        .get(&name)
        .await
        .unwrap()
        .status
        .unwrap();
    assert_eq!(s.phase, Some(MaintenancePhase::Succeeded), "{s:?}");
    node::in_maintenance(&client, &node).await.unwrap();
    let lease = Api::<k8s_openapi::api::coordination::v1::Lease>::namespaced(
        client.clone(),
        "medik8s-leases",
    )
    .get(&format!("node-{node}"))
    .await
    .unwrap();
    assert_eq!(
        lease.spec.and_then(|s| s.holder_identity).as_deref(),
        Some("node-maintenance"),
        "the lease is still held"
    );
    nm::delete_and_wait_restored(&client, &name, &node).await;
}

/// `docs/drain-contract.md` §5: a 1 MiB `spec.reason` is admitted and copied onto the node
/// cut to 4 KiB; editing the reason of a running maintenance (to another 1 MiB one) does not stop
/// its drain.
#[tokio::test]
async fn a_reason_of_any_size_is_copied_cut_and_editing_it_keeps_the_drain() {
    let env = env();
    let client = env.cluster.client().await;
    let group = unique("reason");
    let node = worker_nodes(env.cluster, &client, &group, 1)
        .await
        .remove(0);
    let ns = namespace(&client, "reason").await;
    bare_pod(
        &client,
        &ns,
        "held",
        &node,
        json!({"metadata": {"finalizers": [HOLD]}}),
    )
    .await;
    wait_pod_running(&client, &ns, "held").await;
    let name = unique("nm-reason");
    let huge = "a".repeat(1 << 20);
    Api::<NodeMaintenance>::all(client.clone())
        .create(&PostParams::default(), &nm::new(&name, &node, &huge))
        .await
        .unwrap_or_else(|e| panic!("a 1 MiB reason must be admitted: {e}"));
    let reason_on_node = |prefix: char| {
        let client = client.clone();
        let node = node.clone();
        async move {
            wait_for("the reason on the node, cut", LIMIT, || async {
                let n = Api::<k8s_openapi::api::core::v1::Node>::all(client.clone())
                    .get(&node)
                    .await
                    .map_err(|e| e.to_string())?;
                let r = n
                    .metadata
                    .annotations
                    .unwrap_or_default()
                    .get("nodemaintenance.medik8s.io/reason")
                    .cloned()
                    .unwrap_or_default();
                if r.starts_with(prefix) && r.len() <= 4096 && r.len() > 1000 {
                    Ok(r.len())
                } else {
                    Err(format!("{} bytes starting {:?}", r.len(), r.chars().next()))
                }
            })
            .await
        }
    };
    reason_on_node('a').await;
    nm::wait_status(&client, &name, "held evicted", LIMIT, |s| {
        s.blockers
            .as_ref()
            .is_some_and(|b| b.len() == 1 && terminating(&b[0].reason))
    })
    .await;
    Api::<NodeMaintenance>::all(client.clone())
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"reason": "b".repeat(1 << 20)}})),
        )
        .await
        .unwrap();
    reason_on_node('b').await;
    release(&client, &ns, "held").await;
    let done = nm::wait_phase(&client, &name, MaintenancePhase::Succeeded, LIMIT).await;
    assert_eq!(done.status.unwrap().last_error, None);
    nm::delete_and_wait_restored(&client, &name, &node).await;
}

/// Accepts TLS connections' TCP part and never answers: an admission webhook that hangs.
fn hanging_server() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for conn in listener.incoming().flatten() {
            held.push(conn);
        }
    });
    port
}

/// `docs/drain-contract.md` §4: an eviction webhook that never answers, for the pods of one
/// namespace: that pod is `Evicting` while the API server waits for the webhook, then its
/// blocker is the API server's own answer (`failed calling webhook "…"`, after the webhook's
/// 10 s), which `lastError` names; the other pod of the node is evicted meanwhile. Once the
/// webhook is gone the maintenance Succeeds.
#[tokio::test]
async fn a_hung_eviction_is_that_pods_blocker_and_the_others_proceed() {
    use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
    let env = env();
    let client = env.cluster.client().await;
    let group = unique("hang");
    let node = worker_nodes(env.cluster, &client, &group, 1)
        .await
        .remove(0);
    let hung_ns = namespace(&client, "hang").await;
    let ns = namespace(&client, "nohang").await;
    let port = hanging_server();
    let label = unique("hang");
    Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone())
        .patch(
            &hung_ns,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"e2e-hang": label}}})),
        )
        .await
        .unwrap();
    let webhooks = Api::<ValidatingWebhookConfiguration>::all(client.clone());
    let config: ValidatingWebhookConfiguration = serde_json::from_value(json!({
        "metadata": {"name": label},
        "webhooks": [{
            "name": "hang.e2e.medik8s.io",
            "clientConfig": {"url": format!("https://127.0.0.1:{port}/hang")},
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                       "resources": ["pods/eviction"], "scope": "Namespaced"}],
            "namespaceSelector": {"matchLabels": {"e2e-hang": label}},
            "failurePolicy": "Fail",
            "sideEffects": "None",
            "timeoutSeconds": 10,
            "admissionReviewVersions": ["v1"]
        }]
    }))
    .unwrap();
    webhooks
        .create(&PostParams::default(), &config)
        .await
        .unwrap();
    bare_pod(&client, &hung_ns, "hung", &node, json!({})).await;
    bare_pod(&client, &ns, "free", &node, json!({})).await;
    wait_pod_running(&client, &hung_ns, "hung").await;
    wait_pod_running(&client, &ns, "free").await;

    let name = unique("nm-hang");
    nm::create(&client, &name, &node).await;
    let blocked = nm::wait_status(
        &client,
        &name,
        "the hung webhook named by the API server's answer as its pod's blocker",
        LIMIT,
        |s| {
            s.blockers.as_ref().is_some_and(|b| {
                b.len() == 1
                    && b[0].name == "hung"
                    && b[0].reason == "EvictionError"
                    && b[0].message.as_deref().is_some_and(|m| {
                        m.contains("failed calling webhook \"hang.e2e.medik8s.io\"")
                    })
            })
        },
    )
    .await;
    let s = blocked.status.unwrap();
    let last = s.last_error.clone().unwrap_or_default();
    assert!(
        last.contains(&format!("pods/\"hung\" -n \"{hung_ns}\""))
            && last.contains("failed calling webhook"),
        "lastError must name the hung call: {last:?}"
    );
    assert!(!last.contains("reconcile did not finish"), "{last:?}");
    assert!(
        get_pod(&client, &ns, "free")
            .await
            .is_none_or(|p| p.metadata.deletion_timestamp.is_some()),
        "the other pod must be evicted meanwhile"
    );
    webhooks.delete(&label, &Default::default()).await.unwrap();
    nm::wait_phase(&client, &name, MaintenancePhase::Succeeded, LIMIT).await;
    nm::delete_and_wait_restored(&client, &name, &node).await;
}

/// Refused (429) evictions of pods the API server has answered so far, from its own metrics.
async fn refused_evictions(client: &kube::Client) -> u64 {
    let refused = [
        ("resource", "pods"),
        ("subresource", "eviction"),
        ("code", "429"),
    ];
    apiserver_requests(client, &refused).await
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

/// A pod that two budgets select (`docs/drain-contract.md` §1): the API server refuses its
/// eviction with a 500 that names neither; the blocker names both, as the budget watch saw them.
#[tokio::test]
async fn a_pod_under_two_budgets_is_held_with_both_named() {
    let env = env();
    let client = env.cluster.client().await;
    let group = unique("two-pdbs");
    let node = worker_nodes(env.cluster, &client, &group, 1)
        .await
        .remove(0);
    let ns = namespace(&client, "two-pdbs").await;
    deployment(&client, &ns, "db", &group, 1, 0).await;
    wait_running(&client, &ns, "db", 1, LIMIT).await;
    // Each would allow the eviction alone.
    budget(&client, &ns, "guard-b", "db", 1, 1).await;
    budget(&client, &ns, "guard-a", "db", 1, 1).await;
    let name = unique("nm-two-pdbs");
    nm::create(&client, &name, &node).await;
    let s = nm::wait_status(&client, &name, "held by both budgets, named", LIMIT, |s| {
        s.blockers.as_ref().is_some_and(|b| {
            b.len() == 1
                && b[0].reason == "MultiplePodDisruptionBudgets"
                && b[0].pod_disruption_budget.as_deref() == Some("guard-a,guard-b")
        })
    })
    .await
    .status
    .unwrap();
    let b = &s.blockers.unwrap()[0];
    let message = b.message.as_deref().unwrap_or_default();
    assert!(
        message.ends_with("(budgets selecting the pod: guard-a, guard-b)"),
        "{message}"
    );
    assert_eq!(s.phase, Some(MaintenancePhase::Running));
    nm::delete_and_wait_restored(&client, &name, &node).await;
}

/// Without KubeVirt (`docs/drain-contract.md` §4a): the controller starts without watching or
/// asking for its migrations, and its log says nothing about KubeVirt above debug.
#[tokio::test]
async fn without_kubevirt_nothing_is_watched_and_nothing_is_logged() {
    let env = env();
    let log = wait_for("the controller started", LIMIT, || async {
        let log = env.operator.lock().unwrap().log();
        if log.contains("starting NodeMaintenance controller") {
            Ok(log)
        } else {
            Err(log.lines().last().unwrap_or_default().to_string())
        }
    })
    .await;
    let about: Vec<&str> = log
        .lines()
        .filter(|l| {
            let l = l.to_lowercase();
            (l.contains("kubevirt") || l.contains("virtualmachineinstancemigration"))
                && !l.contains("no kubevirt")
        })
        .collect();
    assert!(about.is_empty(), "{about:#?}");
}
