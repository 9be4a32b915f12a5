//! DaemonSet pods last, end to end (`docs/drain-contract.md` "DaemonSet pods last"): with
//! `daemonSets: EvictLast` a node's DaemonSet pods are evicted once every other pod has left the
//! node; one whose DaemonSet does not tolerate `medik8s.io/drain` is not recreated on it, one
//! whose DaemonSet tolerates everything comes back and is named as kept; the maintenance
//! Succeeds. With the knob off (the default, upstream's), DaemonSet pods are never evicted.
//!
//! The cluster of this binary records every eviction in the API server's audit log, so the order
//! of the evictions and "never evicted" are the API server's own record.

mod common;

use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use common::*;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams, PostParams};
use nmo_devcluster::audit::{AuditCursor, AuditEvent, EVICTIONS_POLICY};
use nmo_devcluster::operator::{Operator, OperatorOptions};
use node_maintenance_operator::api::{MaintenancePhase, NodeMaintenance, NodeMaintenanceStatus};
use serde_json::json;

const LIMIT: Duration = Duration::from_secs(120);
const ANNOTATION: &str = "nodemaintenance.medik8s.io/daemonSets";
/// The finalizer that keeps the ordinary pod `held` terminating until the test lets it go.
const HOLD: &str = "example.com/hold";

struct Env {
    cluster: Cluster,
    operator: Mutex<Operator>,
    opts: OperatorOptions,
}

/// The tests of this binary one at a time: one of them replaces the operator.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// One cluster with an eviction audit log and one operator with its default flags (so
/// `daemonSets: Ignore` unless a maintenance says otherwise) and its webhook registered (no
/// leader election, so a replacement starts at once).
fn env() -> &'static Env {
    static ENV: OnceLock<Env> = OnceLock::new();
    ENV.get_or_init(|| {
        let cluster = audited_cluster(EVICTIONS_POLICY);
        let installed = installed(&cluster);
        let mut opts = installed.options("operator");
        opts.leader_elect = false;
        let operator = fixtures::start_registered(&cluster, &opts)
            .unwrap_or_else(|e| panic!("operator did not start: {e}"));
        Env {
            cluster,
            operator: Mutex::new(operator),
            opts,
        }
    })
}

/// A DaemonSet `name` on the nodes labelled `nmo-test=<group>` whose pods have `tolerations`
/// (the DaemonSet controller adds `node.kubernetes.io/unschedulable` and the node-problem
/// ones to every pod).
async fn daemon_set(
    client: &kube::Client,
    ns: &str,
    name: &str,
    group: &str,
    tolerations: serde_json::Value,
) {
    let d: DaemonSet = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "nodeSelector": {"nmo-test": group},
                    "tolerations": tolerations,
                    "terminationGracePeriodSeconds": 0,
                    "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]
                }
            }
        }
    }))
    .unwrap();
    Api::<DaemonSet>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &d)
        .await
        .unwrap();
}

/// A node of its own with, in a namespace of its own: a Deployment `web` of 2 pods, a bare pod
/// `held` with the finalizer [`HOLD`] (it stays terminating once evicted until the test lets it
/// go), and the DaemonSets `strict` (no toleration of `medik8s.io/drain`) and `tolerant`
/// (`operator: Exists`), one pod each on the node. Returns the node, the namespace and the
/// DaemonSet pods as they were before the maintenance.
async fn node_with_daemon_sets(
    client: &kube::Client,
    cluster: &Cluster,
    prefix: &str,
) -> (String, String, Vec<Pod>) {
    let group = unique(prefix);
    let node = worker_nodes(cluster, client, &group, 1).await.remove(0);
    let ns = namespace(client, prefix).await;
    deployment(client, &ns, "web", &group, 2, 0).await;
    bare_pod(
        client,
        &ns,
        "held",
        &node,
        json!({"metadata": {"finalizers": [HOLD]}}),
    )
    .await;
    daemon_set(client, &ns, "strict", &group, json!([])).await;
    daemon_set(
        client,
        &ns,
        "tolerant",
        &group,
        json!([{"operator": "Exists"}]),
    )
    .await;
    wait_running(client, &ns, "web", 2, LIMIT).await;
    wait_running(client, &ns, "held", 1, LIMIT).await;
    let mut ds_pods = wait_running(client, &ns, "strict", 1, LIMIT).await;
    ds_pods.extend(wait_running(client, &ns, "tolerant", 1, LIMIT).await);
    (node, ns, ds_pods)
}

/// Lets the pod `held` go (removes its finalizer).
async fn release(client: &kube::Client, ns: &str) {
    Api::<Pod>::namespaced(client.clone(), ns)
        .patch(
            "held",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await
        .unwrap();
}

/// Waits until a Running pod of `original`'s DaemonSet (label `app`), other than `original`, is
/// on `node` and the original is gone, and returns it.
async fn wait_back(client: &kube::Client, ns: &str, original: &Pod, node: &str) -> Pod {
    let app = original.labels().get("app").cloned().unwrap_or_default();
    wait_for(&format!("{app}'s pod back on {node}"), LIMIT, || async {
        let all = pods(client, ns, &app).await;
        let back: Vec<&Pod> = all
            .iter()
            .filter(|p| p.metadata.uid != original.metadata.uid && running(p))
            .filter(|p| node_of(p) == node)
            .collect();
        match (all.len(), back.first()) {
            (1, Some(p)) => Ok((*p).clone()),
            _ => Err(all
                .iter()
                .map(|p| {
                    let name = p.metadata.name.as_deref().unwrap_or("");
                    format!(
                        "{name} deleting={}",
                        p.metadata.deletion_timestamp.is_some()
                    )
                })
                .collect::<Vec<_>>()
                .join(", ")),
        }
    })
    .await
}

/// The accepted evictions (2xx) the API server recorded, among `events`, of pods in `ns`.
fn accepted_in<'a>(events: &'a [AuditEvent], ns: &str) -> Vec<&'a AuditEvent> {
    events
        .iter()
        .filter(|e| {
            e.subresource == "eviction" && e.namespace == ns && (200..300).contains(&e.code)
        })
        .collect()
}

fn names(events: &[&AuditEvent]) -> Vec<String> {
    events.iter().map(|e| e.name.clone()).collect()
}

/// The message of the `Drained` condition (where the kept pods are named).
fn drained_message(nm: &NodeMaintenance) -> String {
    nm.status
        .iter()
        .flat_map(|s| s.conditions.iter().flatten())
        .find(|c| c.type_ == "Drained")
        .map(|c| c.message.clone())
        .unwrap_or_default()
}

/// Whether the status shows `held` terminating and both DaemonSet pods waiting their turn.
fn daemon_sets_wait(s: &NodeMaintenanceStatus, ds_pods: &[Pod]) -> bool {
    let blockers: Vec<_> = s.blockers.iter().flatten().collect();
    let waiting = |name: &str| {
        blockers
            .iter()
            .any(|b| b.name == name && b.reason == "DaemonSetLast")
    };
    s.phase == Some(MaintenancePhase::Running)
        && blockers
            .iter()
            .any(|b| b.name == "held" && b.reason == "Terminating")
        && ds_pods
            .iter()
            .all(|p| waiting(p.metadata.name.as_deref().unwrap_or_default()))
}

/// `daemonSets: EvictLast` (annotation, with `nodeConditions`): while an ordinary pod is still on
/// the node (`held`, terminating behind a finalizer) the DaemonSet pods wait, named with
/// `DaemonSetLast`, the node's `DrainInProgress` is already True, and no DaemonSet pod is
/// evicted; once it is gone, both are evicted (each after every ordinary
/// eviction and after `held` was let go, by the audit log); `strict`'s pod is not recreated on
/// the node (its DaemonSet schedules nothing there), `tolerant`'s comes back as a new pod named
/// as kept while the system-critical [`HELD_OPEN`] holds the drain open, [`HELD_OPEN`] is evicted after
/// the DaemonSet pods, and the maintenance Succeeds.
#[tokio::test]
async fn evict_last_evicts_daemon_set_pods_after_every_other_pod_and_keeps_the_one_that_comes_back()
{
    let env = env();
    let _serial = SERIAL.lock().await;
    let client = env.cluster.client().await;
    let (node, ns, ds_pods) = node_with_daemon_sets(&client, &env.cluster, "dslast").await;
    hold_the_drain_open(&client, &ns, &node).await;
    let mut audit = AuditCursor::at_end(env.cluster.audit_log_path());
    let name = unique("nm-dslast");
    let mut nm = nm::new(&name, &node, "e2e daemonSets EvictLast");
    nm.metadata.annotations = Some(
        [
            (ANNOTATION.to_string(), "EvictLast".to_string()),
            (
                "nodemaintenance.medik8s.io/nodeConditions".to_string(),
                "true".to_string(),
            ),
        ]
        .into(),
    );
    Api::<NodeMaintenance>::all(client.clone())
        .create(&PostParams::default(), &nm)
        .await
        .unwrap();
    nm::wait_status(
        &client,
        &name,
        "held terminating, both DaemonSet pods waiting their turn",
        LIMIT,
        |s| daemon_sets_wait(s, &ds_pods),
    )
    .await;
    // KEP-6249: the node says a drain is in progress before its DaemonSet pods are evicted.
    let draining = node_condition(&client, &node, "DrainInProgress").await;
    assert_eq!(
        draining.as_ref().map(|(s, r, _)| (s.as_str(), r.as_str())),
        Some(("True", "DrainStarted")),
        "{draining:?}"
    );
    let mut events = audit.read().unwrap();
    let so_far = accepted_in(&events, &ns);
    assert!(
        so_far
            .iter()
            .all(|e| e.name.starts_with("web-") || e.name == "held"),
        "only ordinary pods evicted while one is on the node: {:?}",
        names(&so_far)
    );
    let released_at = jiff::Timestamp::now();
    release(&client, &ns).await;
    // tolerant: back as a new pod while `last` holds the drain open.
    let back = wait_back(&client, &ns, &ds_pods[1], &node).await;
    let_the_drain_end(&client, &ns).await;

    let done = nm::wait_phase(&client, &name, MaintenancePhase::Succeeded, LIMIT).await;
    events.extend(audit.read().unwrap());
    let accepted = accepted_in(&events, &ns);
    let (critical, accepted): (Vec<&AuditEvent>, Vec<&AuditEvent>) =
        accepted.into_iter().partition(|e| e.name == HELD_OPEN);
    let (daemon, ordinary): (Vec<&AuditEvent>, Vec<&AuditEvent>) = accepted
        .iter()
        .partition(|e| e.name.starts_with("strict-") || e.name.starts_with("tolerant-"));
    let last_daemon = daemon.iter().map(|e| e.completed).max();
    assert!(
        critical.len() == 1 && Some(critical[0].received) > last_daemon,
        "{HELD_OPEN} (system-critical) evicted once, after the DaemonSet pods ({last_daemon:?}): {:?}",
        critical.iter().map(|e| e.received).collect::<Vec<_>>()
    );
    assert_eq!(
        ordinary.len(),
        3,
        "web's two pods and held: {:?}",
        names(&ordinary)
    );
    for p in &ds_pods {
        let pod = p.metadata.name.as_deref().unwrap();
        let evictions: Vec<_> = daemon.iter().filter(|e| e.name == pod).collect();
        assert_eq!(
            evictions.len(),
            1,
            "{pod} evicted once: {:?}",
            names(&daemon)
        );
        let at = evictions[0].received;
        let last_ordinary = ordinary.iter().map(|e| e.completed).max().unwrap();
        assert!(
            at > last_ordinary && at > released_at,
            "{pod} evicted at {at}, before the last ordinary eviction ({last_ordinary}) or the \
             release of held ({released_at})"
        );
    }
    // The originals once each (above); at most one eviction more, of a replacement of
    // `tolerant` (§2: a replacement judged as there before is evicted at most once more per
    // workload). Seen once in about 20 runs (two tests in parallel, before the binary's tests
    // ran one at a time), never since; the text says when and what if it happens again.
    assert!(
        daemon.len() <= 3
            && daemon
                .iter()
                .filter(|e| e.name.starts_with("strict-"))
                .count()
                == 1,
        "only the originals and at most one replacement of tolerant (drain started {}): {:?}; \
         now: {:?}",
        node_drain_started(&client, &node).await,
        daemon
            .iter()
            .map(|e| (&e.name, e.received))
            .collect::<Vec<_>>(),
        pods(&client, &ns, "tolerant")
            .await
            .iter()
            .map(|p| (
                p.metadata.name.clone(),
                p.metadata.creation_timestamp.clone()
            ))
            .collect::<Vec<_>>()
    );

    // strict: not recreated on the node while the maintenance stands.
    let ds = Api::<DaemonSet>::namespaced(client.clone(), &ns);
    wait_for("strict schedules no pod on the node", LIMIT, || async {
        let d = ds.get("strict").await.map_err(|e| e.to_string())?;
        let desired = d.status.as_ref().map(|s| s.desired_number_scheduled);
        let on_node: Vec<String> = pods(&client, &ns, "strict")
            .await
            .iter()
            .filter(|p| node_of(p) == node)
            .filter_map(|p| p.metadata.name.clone())
            .collect();
        if desired == Some(0) && on_node.is_empty() {
            Ok(())
        } else {
            Err(format!("desired {desired:?}, on the node {on_node:?}"))
        }
    })
    .await;
    // tolerant: back as a new pod, named as kept.
    let back_name = back.name_any();
    let drained = drained_message(&done);
    assert!(
        drained.contains(&format!("{ns}/{back_name} (ToleratesMaintenanceTaints)")),
        "the pod that came back is named as kept: {drained:?}"
    );

    nm::delete_and_wait_restored(&client, &name, &node).await;
    wait_running(&client, &ns, "strict", 1, LIMIT).await;
}

/// The default (`daemonSets` unset, `Ignore` by the flag): DaemonSet pods are not evicted (the
/// audit log), they are the same pods at Succeeded, and the ordinary pods are evicted as today.
#[tokio::test]
async fn by_default_daemon_set_pods_are_never_evicted() {
    let env = env();
    let _serial = SERIAL.lock().await;
    let client = env.cluster.client().await;
    let (node, ns, ds_pods) = node_with_daemon_sets(&client, &env.cluster, "dsignore").await;
    let mut audit = AuditCursor::at_end(env.cluster.audit_log_path());
    let name = unique("nm-dsignore");
    nm::create(&client, &name, &node).await;
    nm::wait_status(&client, &name, "held terminating", LIMIT, |s| {
        s.blockers
            .iter()
            .flatten()
            .any(|b| b.name == "held" && b.reason == "Terminating")
    })
    .await;
    release(&client, &ns).await;
    nm::wait_phase(&client, &name, MaintenancePhase::Succeeded, LIMIT).await;
    let events = audit.read().unwrap();
    let accepted = accepted_in(&events, &ns);
    assert!(
        accepted
            .iter()
            .all(|e| e.name.starts_with("web-") || e.name == "held"),
        "a DaemonSet pod was evicted: {:?}",
        names(&accepted)
    );
    assert_eq!(accepted.len(), 3, "{:?}", names(&accepted));
    let api = Api::<Pod>::namespaced(client.clone(), &ns);
    for p in &ds_pods {
        let pod = p.metadata.name.as_deref().unwrap();
        let now = api.get_opt(pod).await.unwrap();
        assert!(
            now.as_ref().is_some_and(
                |n| n.metadata.uid == p.metadata.uid && n.metadata.deletion_timestamp.is_none()
            ),
            "{pod} still the same running pod: {now:?}"
        );
    }
    nm::delete_and_wait_restored(&client, &name, &node).await;
}

/// A `daemonSets` value neither `Ignore` nor `EvictLast` is refused, naming the knob and the
/// value: by the webhook for the annotation, by the CRD's enum for the spec field; nothing is
/// created.
#[tokio::test]
async fn an_unknown_daemon_sets_value_is_refused_naming_it() {
    let env = env();
    let _serial = SERIAL.lock().await;
    let client = env.cluster.client().await;
    let group = unique("dsbad");
    let node = worker_nodes(&env.cluster, &client, &group, 1)
        .await
        .remove(0);
    let api = Api::<NodeMaintenance>::all(client.clone());
    let name = unique("nm-dsbad");
    let mut nm = nm::new(&name, &node, "e2e daemonSets refused");
    nm.metadata.annotations = Some([(ANNOTATION.to_string(), "Evict".to_string())].into());
    let text = api
        .create(&PostParams::default(), &nm)
        .await
        .expect_err("daemonSets=Evict admitted")
        .to_string();
    assert!(
        text.contains(ANNOTATION)
            && text.contains("\"Evict\"")
            && text.contains("accepted: Ignore, EvictLast"),
        "{text}"
    );
    // The typed spec cannot hold an unknown value: the object is sent as JSON.
    let mut spec = serde_json::to_value(nm::new(&name, &node, "e2e daemonSets refused")).unwrap();
    spec["spec"]["daemonSets"] = json!("evictlast");
    let dynamic = Api::<kube::core::DynamicObject>::all_with(
        client.clone(),
        &kube::discovery::ApiResource::erase::<NodeMaintenance>(&()),
    );
    let refused = dynamic
        .create(
            &PostParams::default(),
            &serde_json::from_value(spec).unwrap(),
        )
        .await
        .expect_err("spec.daemonSets=evictlast admitted")
        .to_string();
    assert!(
        refused.contains("daemonSets") && refused.contains("evictlast"),
        "{refused}"
    );
    assert!(api.get_opt(&name).await.unwrap().is_none());
}

/// Sets annotation `key` of NodeMaintenance `name` to `value`.
async fn annotate(client: &kube::Client, name: &str, key: &str, value: &str) {
    Api::<NodeMaintenance>::all(client.clone())
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {key: value}}})),
        )
        .await
        .unwrap();
}

/// Creates an `EvictLast` maintenance `name` of `node` and waits until its DaemonSet pods wait
/// their turn behind `held`.
async fn evict_last_waiting(client: &kube::Client, name: &str, node: &str, ds_pods: &[Pod]) {
    let mut nm = nm::new(name, node, "e2e daemonSets EvictLast");
    nm.metadata.annotations = Some([(ANNOTATION.to_string(), "EvictLast".to_string())].into());
    Api::<NodeMaintenance>::all(client.clone())
        .create(&PostParams::default(), &nm)
        .await
        .unwrap();
    nm::wait_status(
        client,
        name,
        "held terminating, both DaemonSet pods waiting their turn",
        LIMIT,
        |s| daemon_sets_wait(s, ds_pods),
    )
    .await;
}

/// Lets `held` go and waits until it has left the node.
async fn release_and_wait_gone(client: &kube::Client, ns: &str) {
    release(client, ns).await;
    let api = Api::<Pod>::namespaced(client.clone(), ns);
    wait_for("held gone", LIMIT, || async {
        match api.get_opt("held").await.map_err(|e| e.to_string())? {
            None => Ok(()),
            Some(p) => Err(format!(
                "deleting since {:?}",
                p.metadata.deletion_timestamp
            )),
        }
    })
    .await;
}

/// How long "nothing is evicted" is watched once nothing holds the DaemonSet pods but the
/// knob under test: unheld, they are evicted within about a second of `held` leaving (the
/// passes above), so five seconds of silence is the pause's or the stage's doing.
const QUIET: Duration = Duration::from_secs(5);

/// Asserts that for [`QUIET`] no pod of `ns` is evicted (the audit log from `audit`) and the
/// DaemonSet pods stay the same running pods.
async fn no_daemon_set_pod_evicted(
    client: &kube::Client,
    audit: &mut AuditCursor,
    ns: &str,
    ds_pods: &[Pod],
    why: &str,
) {
    let api = Api::<Pod>::namespaced(client.clone(), ns);
    let until = std::time::Instant::now() + QUIET;
    while std::time::Instant::now() < until {
        let events = audit.read().unwrap();
        let daemon: Vec<_> = accepted_in(&events, ns)
            .into_iter()
            .filter(|e| e.name.starts_with("strict-") || e.name.starts_with("tolerant-"))
            .collect();
        assert!(daemon.is_empty(), "{why}: evicted {:?}", names(&daemon));
        for p in ds_pods {
            let pod = p.metadata.name.as_deref().unwrap();
            let now = api.get_opt(pod).await.unwrap();
            assert!(
                now.as_ref()
                    .is_some_and(|n| n.metadata.uid == p.metadata.uid
                        && n.metadata.deletion_timestamp.is_none()),
                "{why}: {pod} is not the same running pod: {now:?}"
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// §10 combination, pause: an `EvictLast` maintenance paused while its DaemonSet pods wait their
/// turn sends nothing once the last ordinary pod has left (no eviction in the audit log for
/// [`QUIET`], the same DaemonSet pods); unpaused, both are evicted and it Succeeds.
#[tokio::test]
async fn a_paused_evict_last_maintenance_evicts_no_daemon_set_pod_until_unpaused() {
    let env = env();
    let _serial = SERIAL.lock().await;
    let client = env.cluster.client().await;
    let (node, ns, ds_pods) = node_with_daemon_sets(&client, &env.cluster, "dspause").await;
    let name = unique("nm-dspause");
    evict_last_waiting(&client, &name, &node, &ds_pods).await;
    annotate(&client, &name, "nodemaintenance.medik8s.io/paused", "true").await;
    nm::wait_status(&client, &name, "DrainPaused=True", LIMIT, |s| {
        s.conditions
            .iter()
            .flatten()
            .any(|c| c.type_ == "DrainPaused" && c.status == "True")
    })
    .await;
    let mut audit = AuditCursor::at_end(env.cluster.audit_log_path());
    release_and_wait_gone(&client, &ns).await;
    no_daemon_set_pod_evicted(&client, &mut audit, &ns, &ds_pods, "paused").await;

    let unpaused_at = jiff::Timestamp::now();
    annotate(&client, &name, "nodemaintenance.medik8s.io/paused", "false").await;
    nm::wait_phase(&client, &name, MaintenancePhase::Succeeded, LIMIT).await;
    let events = audit.read().unwrap();
    let accepted = accepted_in(&events, &ns);
    for p in &ds_pods {
        let pod = p.metadata.name.as_deref().unwrap();
        let at: Vec<_> = accepted
            .iter()
            .filter(|e| e.name == pod)
            .map(|e| e.received)
            .collect();
        assert!(
            at.len() == 1 && at[0] > unpaused_at,
            "{pod} evicted once, after the pause ended at {unpaused_at}: {at:?}"
        );
    }
    nm::delete_and_wait_restored(&client, &name, &node).await;
}

/// §10 combination, stage back: an `EvictLast` maintenance moved back to `Idle` while its
/// DaemonSet pods wait their turn restores the node, and once the last ordinary pod has left no
/// DaemonSet pod is evicted (the audit log for [`QUIET`], the same pods); deleted, nothing more.
#[tokio::test]
async fn back_to_idle_an_evict_last_maintenance_restores_the_node_and_evicts_no_daemon_set_pod() {
    let env = env();
    let _serial = SERIAL.lock().await;
    let client = env.cluster.client().await;
    let (node, ns, ds_pods) = node_with_daemon_sets(&client, &env.cluster, "dsidle").await;
    let name = unique("nm-dsidle");
    evict_last_waiting(&client, &name, &node, &ds_pods).await;
    annotate(&client, &name, "nodemaintenance.medik8s.io/stage", "Idle").await;
    wait_for(&format!("node {node} restored"), LIMIT, || {
        node::restored(&client, &node)
    })
    .await;
    let mut audit = AuditCursor::at_end(env.cluster.audit_log_path());
    release_and_wait_gone(&client, &ns).await;
    no_daemon_set_pod_evicted(&client, &mut audit, &ns, &ds_pods, "back at Idle").await;
    nm::delete(&client, &name).await;
    nm::wait_gone(&client, &name, LIMIT).await;
    no_daemon_set_pod_evicted(&client, &mut audit, &ns, &ds_pods, "deleted").await;
}

/// §10 combination, restart: an `EvictLast` maintenance whose operator is SIGKILLed while the
/// DaemonSet pods wait their turn, and replaced by a new process, decides the same from the pods
/// alone: once the last ordinary pod has left, each DaemonSet pod is evicted once (after the
/// release, by the audit log), `strict`'s is not recreated on the node, the pod `tolerant` brings
/// back (while [`HELD_OPEN`] holds the drain open) is named as kept, and the maintenance Succeeds.
#[tokio::test]
async fn across_a_sigkill_and_restart_daemon_set_pods_still_go_last() {
    let env = env();
    let _serial = SERIAL.lock().await;
    let client = env.cluster.client().await;
    let (node, ns, ds_pods) = node_with_daemon_sets(&client, &env.cluster, "dskill").await;
    let mut audit = AuditCursor::at_end(env.cluster.audit_log_path());
    hold_the_drain_open(&client, &ns, &node).await;
    let name = unique("nm-dskill");
    evict_last_waiting(&client, &name, &node, &ds_pods).await;
    env.operator.lock().unwrap().process().kill();
    let replacement = fixtures::start_registered(&env.cluster, &env.opts)
        .unwrap_or_else(|e| panic!("the new operator did not start: {e}"));
    *env.operator.lock().unwrap() = replacement;
    let released_at = jiff::Timestamp::now();
    release(&client, &ns).await;
    let back = wait_back(&client, &ns, &ds_pods[1], &node).await;
    let_the_drain_end(&client, &ns).await;
    let done = nm::wait_phase(&client, &name, MaintenancePhase::Succeeded, LIMIT).await;
    let events = audit.read().unwrap();
    let accepted = accepted_in(&events, &ns);
    for p in &ds_pods {
        let pod = p.metadata.name.as_deref().unwrap();
        let at: Vec<_> = accepted
            .iter()
            .filter(|e| e.name == pod)
            .map(|e| e.received)
            .collect();
        assert!(
            at.len() == 1 && at[0] > released_at,
            "{pod} evicted once, after held was let go at {released_at}: {at:?}"
        );
    }
    let strict_on_node = pods(&client, &ns, "strict")
        .await
        .iter()
        .filter(|p| node_of(p) == node)
        .count();
    assert_eq!(strict_on_node, 0, "strict not recreated on the node");
    let back_name = back.name_any();
    let drained = drained_message(&done);
    assert!(
        drained.contains(&format!("{ns}/{back_name} (ToleratesMaintenanceTaints)")),
        "the pod that came back is named as kept by the new process: {drained:?}"
    );
    nm::delete_and_wait_restored(&client, &name, &node).await;
}

/// Preflight asks the drain's own decision with the maintenance's `daemonSets`: at stage
/// `Preflight` with `EvictLast`, the DaemonSet pod a budget allows no disruption of is a
/// `PodDisruptionBudget` blocker (a dry-run eviction); the same maintenance switched to `Ignore`
/// drops it (the drain would leave that pod); nothing is evicted either way.
#[tokio::test]
async fn preflight_dry_runs_daemon_set_pods_only_when_they_are_evicted_last() {
    let env = env();
    let _serial = SERIAL.lock().await;
    let client = env.cluster.client().await;
    let (node, ns, ds_pods) = node_with_daemon_sets(&client, &env.cluster, "dspre").await;
    min_available_budget(&client, &ns, "agent-guard", "strict", 1, 1).await;
    let mut audit = AuditCursor::at_end(env.cluster.audit_log_path());
    let strict = ds_pods[0].metadata.name.clone().unwrap();
    let name = unique("nm-dspre");
    let mut nm = nm::new(&name, &node, "e2e daemonSets Preflight");
    nm.metadata.annotations = Some(
        [
            (ANNOTATION.to_string(), "EvictLast".to_string()),
            (
                "nodemaintenance.medik8s.io/stage".to_string(),
                "Preflight".to_string(),
            ),
        ]
        .into(),
    );
    Api::<NodeMaintenance>::all(client.clone())
        .create(&PostParams::default(), &nm)
        .await
        .unwrap();
    nm::wait_status(
        &client,
        &name,
        "the strict DaemonSet pod blocked by its budget",
        LIMIT,
        |s| {
            s.blockers.iter().flatten().any(|b| {
                b.name == strict
                    && b.reason == "PodDisruptionBudget"
                    && b.pod_disruption_budget.as_deref() == Some("agent-guard")
            })
        },
    )
    .await;
    annotate(&client, &name, ANNOTATION, "Ignore").await;
    nm::wait_status(
        &client,
        &name,
        "no blocker names the strict DaemonSet pod",
        LIMIT,
        |s| {
            s.conditions.iter().flatten().any(|c| c.type_ == "Stage")
                && s.blockers.iter().flatten().all(|b| b.name != strict)
        },
    )
    .await;
    // Preflight's dry runs (`dryRun=All`) are in the audit log too; none is a real eviction.
    let events = audit.read().unwrap();
    let real: Vec<_> = accepted_in(&events, &ns)
        .into_iter()
        .filter(|e| !e.uri.contains("dryRun"))
        .collect();
    assert!(real.is_empty(), "Preflight evicted {:?}", names(&real));
    let dry_ds = accepted_in(&events, &ns)
        .into_iter()
        .filter(|e| e.name.starts_with("tolerant-") || e.name.starts_with("strict-"))
        .count();
    assert!(
        dry_ds > 0,
        "the DaemonSet pods were dry-run under EvictLast"
    );
    nm::delete(&client, &name).await;
    nm::wait_gone(&client, &name, LIMIT).await;
    release(&client, &ns).await;
}
