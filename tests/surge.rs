//! The `surge` knob end to end (`docs/drain-contract.md` "Surge"): with `surge:
//! RolloutRestart`, a one-replica Deployment under a budget `minAvailable: 1` is restarted (as
//! `kubectl rollout restart` does) instead of evicted, its replacement is Ready on another node
//! before the old pod is gone, the maintenance Succeeds, and the Deployment is patched once,
//! even across an operator restart; without the knob the pod is held by its budget as before;
//! a Deployment whose rollout cannot surge (`maxSurge: 0`) is a blocker naming it, with no
//! patch.
//!
//! The cluster of this binary records evictions and the GETs and patches of Deployments in the
//! API server's audit log, so "one restart" and "no refused-eviction loop" are the API server's
//! own record; the order "Ready elsewhere before the old pod is gone" is that of one watch of
//! the Deployment's pods (the API server's revision order). One test at a time: the first
//! restarts the binary's operator.

mod common;

use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use common::*;
use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use nmo_devcluster::audit::{AuditCursor, AuditEvent, RESPONSE_COMPLETE};
use nmo_devcluster::operator::{Operator, OperatorOptions};
use node_maintenance_operator::api::{MaintenancePhase, NodeMaintenance, NodeMaintenanceStatus};
use serde_json::json;

const LIMIT: Duration = Duration::from_secs(120);

/// Evictions, and the GETs and patches of Deployments, once each (when answered).
const POLICY: &str = r#"apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived", "ResponseStarted"]
rules:
- level: Metadata
  resources:
  - group: ""
    resources: ["pods/eviction"]
- level: Metadata
  verbs: ["get", "patch"]
  resources:
  - group: "apps"
    resources: ["deployments"]
- level: None
"#;

struct Env {
    cluster: Cluster,
    options: OperatorOptions,
    operator: Mutex<Option<Operator>>,
}

/// One cluster with the audit log above and one operator with its webhook registered (it must
/// admit `spec.surge`).
fn env() -> &'static Env {
    static ENV: OnceLock<Env> = OnceLock::new();
    ENV.get_or_init(|| {
        let cluster = audited_cluster(POLICY);
        let options = installed(&cluster).options("operator");
        let operator = fixtures::start_registered(&cluster, &options)
            .unwrap_or_else(|e| panic!("operator did not start: {e}"));
        Env {
            cluster,
            options,
            operator: Mutex::new(Some(operator)),
        }
    })
}

static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Kills the binary's operator (SIGKILL: nothing of it survives but what the API server
/// holds) and starts another one.
fn restart(env: &Env) {
    let mut slot = env.operator.lock().unwrap();
    if let Some(mut op) = slot.take() {
        op.process().kill();
    }
    let mut options = env.options.clone();
    options.name = "operator-2".into();
    *slot = Some(
        fixtures::start_registered(&env.cluster, &options)
            .unwrap_or_else(|e| panic!("the second operator did not start: {e}")),
    );
}

async fn cordon(client: &kube::Client, node: &str, unschedulable: bool) {
    Api::<Node>::all(client.clone())
        .patch(
            node,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"unschedulable": unschedulable}})),
        )
        .await
        .unwrap();
}

/// Creates `name` for `node` with `spec.surge` (through the webhook), when given.
async fn create(client: &kube::Client, name: &str, node: &str, surge: Option<&str>) {
    let mut nm = serde_json::to_value(nm::new(name, node, "e2e")).unwrap();
    if let Some(surge) = surge {
        nm["spec"]["surge"] = json!(surge);
    }
    Api::<NodeMaintenance>::all(client.clone())
        .create(&PostParams::default(), &serde_json::from_value(nm).unwrap())
        .await
        .unwrap_or_else(|e| panic!("creating {name} with surge {surge:?}: {e}"));
}

/// Two nodes of their own, the second cordoned, and a one-replica Deployment `web` (patched
/// with `spec`) whose pod therefore runs on the first; returns the nodes, the namespace and the
/// pod.
async fn one_replica(
    env: &Env,
    client: &kube::Client,
    prefix: &str,
    spec: serde_json::Value,
) -> (Vec<String>, String, Pod) {
    let group = unique(prefix);
    let nodes = worker_nodes(&env.cluster, client, &group, 2).await;
    cordon(client, &nodes[1], true).await;
    let ns = namespace(client, prefix).await;
    deployment(client, &ns, "web", &group, 1, 0).await;
    if !spec.is_null() {
        Api::<Deployment>::namespaced(client.clone(), &ns)
            .patch(
                "web",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": spec})),
            )
            .await
            .unwrap();
    }
    let pod = wait_running(client, &ns, "web", 1, LIMIT).await.remove(0);
    assert_eq!(node_of(&pod), nodes[0]);
    (nodes, ns, pod)
}

fn ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// What one watch of `ns`'s pods saw, in the API server's order: `(uid, node, ready, gone)`.
type Seen = Arc<Mutex<Vec<(String, String, bool, bool)>>>;

fn watch_pods(client: &kube::Client, ns: &str) -> Seen {
    let seen: Seen = Arc::default();
    let api = Api::<Pod>::namespaced(client.clone(), ns);
    let into = seen.clone();
    tokio::spawn(async move {
        let mut events = watcher(api, watcher::Config::default()).boxed();
        while let Some(Ok(e)) = events.next().await {
            let (pod, gone) = match e {
                watcher::Event::Apply(p) | watcher::Event::InitApply(p) => (p, false),
                watcher::Event::Delete(p) => (p, true),
                _ => continue,
            };
            let uid = pod.metadata.uid.clone().unwrap_or_default();
            let entry = (uid, node_of(&pod).to_string(), ready(&pod), gone);
            into.lock().unwrap().push(entry);
        }
    });
    seen
}

fn deployment_requests(events: &[AuditEvent], ns: &str, verb: &str) -> usize {
    events
        .iter()
        .filter(|e| {
            e.stage == RESPONSE_COMPLETE
                && e.resource == "deployments"
                && e.namespace == ns
                && e.verb == verb
        })
        .count()
}

fn refused_evictions(events: &[AuditEvent], ns: &str) -> usize {
    events
        .iter()
        .filter(|e| e.subresource == "eviction" && e.namespace == ns && e.code == 429)
        .count()
}

fn blocker<'a>(s: &'a NodeMaintenanceStatus, reason: &str) -> Option<&'a str> {
    s.blockers
        .iter()
        .flatten()
        .find(|b| b.name.starts_with("web-") && b.reason == reason)
        .map(|b| b.message.as_deref().unwrap_or_default())
}

/// "Surge": a one-replica Deployment under `minAvailable: 1` with `surge: RolloutRestart` is
/// restarted once, not evicted: while its replacement cannot schedule (the other node cordoned)
/// the blocker names the Deployment and the scheduler's reason; a restarted operator does not
/// restart it again (one patch in the audit log); once the other node takes it, the replacement
/// is Ready there before the old pod is gone, the maintenance Succeeds, one `WorkloadRestarted`
/// event names the Deployment, and the budget refused at most a couple of evictions.
#[tokio::test]
async fn a_single_replica_under_a_budget_is_replaced_elsewhere_before_it_goes() {
    let _serial = SERIAL.lock().await;
    let env = env();
    let client = env.cluster.client().await;
    let (nodes, ns, old) = one_replica(env, &client, "surge", serde_json::Value::Null).await;
    let old_uid = old.metadata.uid.clone().unwrap();
    min_available_budget(&client, &ns, "web-pdb", "web", 1, 1).await;
    let seen = watch_pods(&client, &ns);
    let mut audit = AuditCursor::at_end(env.cluster.audit_log_path());
    let name = unique("nm-surge");
    create(&client, &name, &nodes[0], Some("RolloutRestart")).await;

    // Restarted; its replacement cannot schedule (both nodes cordoned): a blocker naming why.
    let nm = nm::wait_status(
        &client,
        &name,
        "SurgeStuck naming the Deployment",
        LIMIT,
        |s| {
            blocker(s, "SurgeStuck").is_some_and(|m| {
                m.contains(&format!("Deployment {ns}/web")) && m.contains("not scheduled")
            })
        },
    )
    .await;
    assert_eq!(nm.status.unwrap().phase, Some(MaintenancePhase::Running));
    let mut events = audit.read().unwrap();
    assert_eq!(deployment_requests(&events, &ns, "patch"), 1, "one restart");
    let d = Api::<Deployment>::namespaced(client.clone(), &ns)
        .get("web")
        .await
        .unwrap();
    let uid = Api::<NodeMaintenance>::all(client.clone())
        .get(&name)
        .await
        .unwrap()
        .metadata
        .uid
        .unwrap();
    let annotations = d.metadata.annotations.unwrap_or_default();
    let recorded = annotations.get("nodemaintenance.medik8s.io/restarted-for");
    assert!(
        of_maintenance(recorded, Some(&uid)),
        "restarted-for {recorded:?}: not this maintenance's ({uid})"
    );
    let restarted_at = d
        .spec
        .template
        .metadata
        .unwrap()
        .annotations
        .unwrap_or_default()["kubectl.kubernetes.io/restartedAt"]
        .clone();
    assert!(
        restarted_at.parse::<jiff::Timestamp>().is_ok() && restarted_at.ends_with('Z'),
        "{restarted_at}"
    );

    // A new operator reads the Deployment again and does not restart it.
    restart(env);
    // The old process is dead: a GET received from now on is the new operator's.
    let killed = jiff::Timestamp::now();
    wait_for("the new operator's GET of the Deployment", LIMIT, || {
        events.extend(audit.read().unwrap());
        let gets = events
            .iter()
            .filter(|e| e.verb == "get" && e.resource == "deployments" && e.namespace == ns)
            .filter(|e| e.received > killed)
            .count();
        std::future::ready(if gets > 0 {
            Ok(())
        } else {
            Err("no GET yet".to_string())
        })
    })
    .await;
    // Its pass after that GET has written its blockers (still stuck, still one patch).
    nm::wait_status(&client, &name, "still SurgeStuck", LIMIT, |s| {
        blocker(s, "SurgeStuck").is_some()
    })
    .await;
    events.extend(audit.read().unwrap());
    assert_eq!(
        deployment_requests(&events, &ns, "patch"),
        1,
        "restarted once"
    );

    // Room on the other node: the replacement runs there, the old pod goes, Succeeded.
    cordon(&client, &nodes[1], false).await;
    nm::wait_phase(&client, &name, MaintenancePhase::Succeeded, LIMIT).await;
    let new = wait_running(&client, &ns, "web", 1, LIMIT).await.remove(0);
    assert_eq!(node_of(&new), nodes[1]);
    let new_uid = new.metadata.uid.clone().unwrap();
    let seen = seen.lock().unwrap().clone();
    let ready_at = seen.iter().position(|(uid, node, ready, gone)| {
        *uid == new_uid && *node == nodes[1] && *ready && !gone
    });
    let old_gone_at = seen
        .iter()
        .position(|(uid, _, _, gone)| *uid == old_uid && *gone);
    match (ready_at, old_gone_at) {
        (Some(r), Some(g)) => assert!(
            r < g,
            "the replacement Ready at {r}, the old pod gone at {g}: {seen:?}"
        ),
        other => panic!("{other:?} in {seen:?}"),
    }
    events.extend(audit.read().unwrap());
    assert_eq!(
        deployment_requests(&events, &ns, "patch"),
        1,
        "restarted once"
    );
    let refused = refused_evictions(&events, &ns);
    let asked = events
        .iter()
        .filter(|e| e.subresource == "eviction" && e.namespace == ns)
        .count();
    eprintln!(
        "surge figures: {asked} evictions asked, {refused} refused (429), {} restart patch(es), \
         {} watch events",
        deployment_requests(&events, &ns, "patch"),
        seen.len()
    );
    assert!(refused <= 2, "{refused} evictions refused by the budget");
    let restarted: Vec<_> = nm::events(&client, "NodeMaintenance", &name)
        .await
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("WorkloadRestarted"))
        .collect();
    assert_eq!(restarted.len(), 1, "{restarted:?}");
    let note = restarted[0].message.clone().unwrap_or_default();
    assert!(note.contains(&format!("Deployment {ns}/web")), "{note}");
    nm::delete_and_wait_restored(&client, &name, &nodes[0]).await;
}

/// Without the knob the one replica is held by its budget as upstream holds it: it stays on
/// the node, the blocker names the budget, and the Deployment is never patched.
#[tokio::test]
async fn without_the_knob_a_single_replica_is_held_by_its_budget() {
    let _serial = SERIAL.lock().await;
    let env = env();
    let client = env.cluster.client().await;
    let (nodes, ns, old) = one_replica(env, &client, "nosurge", serde_json::Value::Null).await;
    cordon(&client, &nodes[1], false).await;
    min_available_budget(&client, &ns, "web-pdb", "web", 1, 1).await;
    let mut audit = AuditCursor::at_end(env.cluster.audit_log_path());
    let name = unique("nm-nosurge");
    create(&client, &name, &nodes[0], None).await;
    nm::wait_status(&client, &name, "held by the budget", LIMIT, |s| {
        s.blockers.iter().flatten().any(|b| {
            b.name == old.metadata.name.clone().unwrap()
                && b.reason == "PodDisruptionBudget"
                && b.pod_disruption_budget.as_deref() == Some("web-pdb")
        })
    })
    .await;
    let now = wait_running(&client, &ns, "web", 1, LIMIT).await.remove(0);
    assert_eq!(now.metadata.uid, old.metadata.uid, "the pod stays");
    let events = audit.read().unwrap();
    assert_eq!(deployment_requests(&events, &ns, "patch"), 0);
    assert!(refused_evictions(&events, &ns) >= 1, "the budget was asked");
    nm::delete_and_wait_restored(&client, &name, &nodes[0]).await;
}

/// A one-replica Deployment whose rollout cannot surge (`maxSurge: 0`, `maxUnavailable: 1`)
/// is not restarted: a `CannotSurge` blocker names the Deployment and why, the pod stays, no
/// patch.
#[tokio::test]
async fn a_deployment_that_cannot_surge_is_a_blocker_naming_why() {
    let _serial = SERIAL.lock().await;
    let env = env();
    let client = env.cluster.client().await;
    let strategy = json!({"strategy": {"type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}}});
    let (nodes, ns, old) = one_replica(env, &client, "nosurge0", strategy).await;
    cordon(&client, &nodes[1], false).await;
    let mut audit = AuditCursor::at_end(env.cluster.audit_log_path());
    let name = unique("nm-maxsurge0");
    create(&client, &name, &nodes[0], Some("RolloutRestart")).await;
    nm::wait_status(
        &client,
        &name,
        "CannotSurge naming the Deployment",
        LIMIT,
        |s| {
            blocker(s, "CannotSurge").is_some_and(|m| {
                m.contains(&format!("Deployment {ns}/web cannot surge"))
                    && m.contains("maxSurge is 0")
            })
        },
    )
    .await;
    let now = wait_running(&client, &ns, "web", 1, LIMIT).await.remove(0);
    assert_eq!(now.metadata.uid, old.metadata.uid, "the pod stays");
    let events = audit.read().unwrap();
    assert_eq!(deployment_requests(&events, &ns, "patch"), 0);
    assert_eq!(
        events
            .iter()
            .filter(|e| e.subresource == "eviction" && e.namespace == ns)
            .count(),
        0,
        "no eviction"
    );
    nm::delete_and_wait_restored(&client, &name, &nodes[0]).await;
}

/// An unknown value of the knob is refused naming it and the accepted values: the annotation
/// by the webhook, `spec.surge` by the CRD's enum (or the webhook); nothing is created.
#[tokio::test]
async fn an_unknown_surge_is_refused_naming_the_value() {
    let env = env();
    let client = env.cluster.client().await;
    let group = unique("surgebad");
    let node = worker_nodes(&env.cluster, &client, &group, 1)
        .await
        .remove(0);
    let api = Api::<NodeMaintenance>::all(client.clone());
    for how in ["annotation", "spec"] {
        let name = unique("nm-surgebad");
        let mut nm = serde_json::to_value(nm::new(&name, &node, "e2e")).unwrap();
        match how {
            "annotation" => {
                nm["metadata"]["annotations"] =
                    json!({"nodemaintenance.medik8s.io/surge": "Always"})
            }
            _ => nm["spec"]["surge"] = json!("Always"),
        }
        // As JSON: the typed object cannot hold an unknown value.
        let resource = kube::api::ApiResource::erase::<NodeMaintenance>(&());
        let raw = Api::<kube::api::DynamicObject>::all_with(client.clone(), &resource);
        let refused = raw
            .create(&PostParams::default(), &serde_json::from_value(nm).unwrap())
            .await;
        let text = match refused {
            Err(e) => e.to_string(),
            Ok(_) => panic!("{how}: surge Always was admitted"),
        };
        assert!(
            text.contains("surge") && text.contains("Always") && text.contains("RolloutRestart"),
            "{how}: {text}"
        );
        assert!(api.get_opt(&name).await.unwrap().is_none());
    }
}

/// A StatefulSet cannot surge (one pod per identity): with `surge: RolloutRestart` its one pod
/// under `minAvailable: 1` stays held by its budget, and the blocker says it cannot surge and
/// names the budget; nothing is patched.
#[tokio::test]
async fn a_statefulset_cannot_surge_and_stays_held_by_its_budget() {
    let _serial = SERIAL.lock().await;
    let env = env();
    let client = env.cluster.client().await;
    let group = unique("sts");
    let node = worker_nodes(&env.cluster, &client, &group, 1)
        .await
        .remove(0);
    let ns = namespace(&client, "sts").await;
    let sts: k8s_openapi::api::apps::v1::StatefulSet = serde_json::from_value(json!({
        "metadata": {"name": "db"},
        "spec": {
            "replicas": 1,
            "serviceName": "db",
            "selector": {"matchLabels": {"app": "db"}},
            "template": {
                "metadata": {"labels": {"app": "db"}},
                "spec": {
                    "nodeSelector": {"nmo-test": group},
                    "terminationGracePeriodSeconds": 0,
                    "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]
                }
            }
        }
    }))
    .unwrap();
    Api::<k8s_openapi::api::apps::v1::StatefulSet>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &sts)
        .await
        .unwrap();
    wait_running(&client, &ns, "db", 1, LIMIT).await;
    min_available_budget(&client, &ns, "db-pdb", "db", 1, 1).await;
    let mut audit = AuditCursor::at_end(env.cluster.audit_log_path());
    let name = unique("nm-sts");
    create(&client, &name, &node, Some("RolloutRestart")).await;
    nm::wait_status(&client, &name, "held by the budget, cannot surge", LIMIT, |s| {
        s.blockers.iter().flatten().any(|b| {
            let m = b.message.as_deref().unwrap_or_default();
            b.name == "db-0"
                && b.reason == "PodDisruptionBudget"
                && b.pod_disruption_budget.as_deref() == Some("db-pdb")
                && m.starts_with("StatefulSet pods cannot surge (StatefulSet db: one pod per identity); held by budget db-pdb")
        })
    })
    .await;
    let still = wait_running(&client, &ns, "db", 1, LIMIT).await.remove(0);
    assert_eq!(node_of(&still), node);
    assert_eq!(deployment_requests(&audit.read().unwrap(), &ns, "patch"), 0);
    nm::delete_and_wait_restored(&client, &name, &node).await;
}

/// `surge` with `paused` (§10's combinations): a paused maintenance restarts nothing (no GET or
/// patch of the Deployment while `DrainPaused=True`, the pod stays); unpaused, the Deployment is
/// restarted once and the maintenance Succeeds with the replacement on the other node.
#[tokio::test]
async fn a_paused_maintenance_restarts_nothing_until_unpaused() {
    let _serial = SERIAL.lock().await;
    let env = env();
    let client = env.cluster.client().await;
    let (nodes, ns, old) = one_replica(env, &client, "surgep", serde_json::Value::Null).await;
    cordon(&client, &nodes[1], false).await;
    min_available_budget(&client, &ns, "web-pdb", "web", 1, 1).await;
    let mut audit = AuditCursor::at_end(env.cluster.audit_log_path());
    let name = unique("nm-surgep");
    let mut nm = serde_json::to_value(nm::new(&name, &nodes[0], "e2e")).unwrap();
    nm["spec"]["surge"] = json!("RolloutRestart");
    nm["spec"]["paused"] = json!(true);
    let api = Api::<NodeMaintenance>::all(client.clone());
    api.create(&PostParams::default(), &serde_json::from_value(nm).unwrap())
        .await
        .unwrap();
    nm::wait_status(&client, &name, "DrainPaused", LIMIT, |s| {
        s.conditions
            .iter()
            .flatten()
            .any(|c| c.type_ == "DrainPaused" && c.status == "True")
    })
    .await;
    node::in_maintenance(&client, &nodes[0]).await.unwrap();
    let now = wait_running(&client, &ns, "web", 1, LIMIT).await.remove(0);
    assert_eq!(
        now.metadata.uid, old.metadata.uid,
        "the pod stays while paused"
    );
    let mut events = audit.read().unwrap();
    assert_eq!(
        deployment_requests(&events, &ns, "get"),
        0,
        "not read while paused"
    );
    assert_eq!(
        deployment_requests(&events, &ns, "patch"),
        0,
        "not restarted while paused"
    );
    api.patch(
        &name,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"paused": false}})),
    )
    .await
    .unwrap();
    nm::wait_phase(&client, &name, MaintenancePhase::Succeeded, LIMIT).await;
    let new = wait_running(&client, &ns, "web", 1, LIMIT).await.remove(0);
    assert_eq!(node_of(&new), nodes[1]);
    events.extend(audit.read().unwrap());
    assert_eq!(
        deployment_requests(&events, &ns, "patch"),
        1,
        "restarted once"
    );
    nm::delete_and_wait_restored(&client, &name, &nodes[0]).await;
}

/// Merge-patches `name`'s spec with `spec`.
async fn patch_spec(client: &kube::Client, name: &str, spec: serde_json::Value) {
    Api::<NodeMaintenance>::all(client.clone())
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": spec })),
        )
        .await
        .unwrap_or_else(|e| panic!("patching {name}'s spec with {spec}: {e}"));
}

/// Whether a `restarted-for` record names the maintenance `uid` (`<uid>@<its drain's start>`).
fn of_maintenance(recorded: Option<&String>, uid: Option<&String>) -> bool {
    match (recorded, uid) {
        (Some(r), Some(u)) => r
            .split_once('@')
            .is_some_and(|(m, start)| m == u.as_str() && start.parse::<jiff::Timestamp>().is_ok()),
        _ => false,
    }
}

/// The Deployment `web`'s `(restarted-for, restartedAt)`.
async fn restart_record(client: &kube::Client, ns: &str) -> (Option<String>, Option<String>) {
    let d = Api::<Deployment>::namespaced(client.clone(), ns)
        .get("web")
        .await
        .unwrap();
    let recorded = d
        .metadata
        .annotations
        .unwrap_or_default()
        .get("nodemaintenance.medik8s.io/restarted-for")
        .cloned();
    let at = d
        .spec
        .template
        .metadata
        .and_then(|m| m.annotations)
        .unwrap_or_default()
        .get("kubectl.kubernetes.io/restartedAt")
        .cloned();
    (recorded, at)
}

/// A DaemonSet `agent` (grace 0, no toleration of `medik8s.io/drain`) on the nodes of `group`.
async fn agent(client: &kube::Client, ns: &str, group: &str) {
    let d: k8s_openapi::api::apps::v1::DaemonSet = serde_json::from_value(json!({
        "metadata": {"name": "agent"},
        "spec": {
            "selector": {"matchLabels": {"app": "agent"}},
            "template": {
                "metadata": {"labels": {"app": "agent"}},
                "spec": {
                    "nodeSelector": {"nmo-test": group},
                    "terminationGracePeriodSeconds": 0,
                    "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]
                }
            }
        }
    }))
    .unwrap();
    Api::<k8s_openapi::api::apps::v1::DaemonSet>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &d)
        .await
        .unwrap();
}

/// Sets (`on`) or removes the test's own `example.com/hold:NoSchedule` taint on `node`, keeping
/// the others, so that a pod waiting to schedule cannot land there once the maintenance restores
/// it.
async fn hold_taint(client: &kube::Client, node: &str, on: bool) {
    let nodes = Api::<Node>::all(client.clone());
    wait_for(
        &format!("the hold taint on {node} set to {on}"),
        LIMIT,
        || async {
            let mut n = nodes.get(node).await.map_err(|e| e.to_string())?;
            let spec = n.spec.get_or_insert_with(Default::default);
            let mut taints: Vec<_> = spec.taints.take().unwrap_or_default();
            taints.retain(|t| t.key != "example.com/hold");
            if on {
                taints.push(k8s_openapi::api::core::v1::Taint {
                    key: "example.com/hold".into(),
                    effect: "NoSchedule".into(),
                    ..Default::default()
                });
            }
            spec.taints = Some(taints);
            nodes
                .replace(node, &PostParams::default(), &n)
                .await
                .map(|_| ())
                .map_err(|e| e.to_string())
        },
    )
    .await;
}

fn stage_is(s: &NodeMaintenanceStatus, stage: &str) -> bool {
    s.conditions
        .iter()
        .flatten()
        .any(|c| c.type_ == "Stage" && c.status == "True" && c.reason == stage)
}

/// The evictions of `ns`'s pods the API server accepted, among `events`.
fn accepted<'a>(events: &'a [AuditEvent], ns: &str) -> Vec<&'a AuditEvent> {
    events
        .iter()
        .filter(|e| {
            e.subresource == "eviction" && e.namespace == ns && (200..300).contains(&e.code)
        })
        .collect()
}

/// §10 `daemonSets: EvictLast` and `surge: RolloutRestart` with `stage`, forward and back: on a
/// node with a plain pod, a DaemonSet pod and a one-replica Deployment under `minAvailable: 1`
/// (its other node cordoned, so the replacement cannot schedule yet), a maintenance created at
/// `Cordon` with both knobs cordons the node and, 6 s on, has restarted nothing (no GET or patch
/// of the Deployment) and evicted nothing. Moved to `Drain`: the plain pod is evicted, the
/// Deployment restarted once, its pod `SurgeStuck`, the DaemonSet pod waits (`DaemonSetLast`).
/// Moved back to `Idle` (the node restored; a test taint keeps the replacement off it) and on to
/// `Drain` again: two rounds later the Deployment is still patched once, its record and
/// `restartedAt` unchanged. The other node uncordoned: the replacement runs there, the DaemonSet
/// pod of the node is evicted once, after every other eviction and after the restart, and the
/// maintenance Succeeds.
#[tokio::test]
async fn from_cordon_to_drain_and_back_and_on_a_deployment_is_restarted_once_and_daemon_set_pods_go_last()
 {
    let _serial = SERIAL.lock().await;
    let env = env();
    let client = env.cluster.client().await;
    let started = std::time::Instant::now();
    let (nodes, ns, web) = one_replica(env, &client, "surgest", serde_json::Value::Null).await;
    let group = nodes[0].trim_end_matches("-n0").to_string();
    bare_pod(&client, &ns, "plain", &nodes[0], json!({})).await;
    agent(&client, &ns, &group).await;
    wait_running(&client, &ns, "plain", 1, LIMIT).await;
    let agents = wait_running(&client, &ns, "agent", 2, LIMIT).await;
    let agent_pod = agents
        .iter()
        .find(|p| node_of(p) == nodes[0])
        .and_then(|p| p.metadata.name.clone())
        .expect("an agent pod on the first node");
    min_available_budget(&client, &ns, "web-pdb", "web", 1, 1).await;
    let mut audit = AuditCursor::at_end(env.cluster.audit_log_path());
    let name = unique("nm-surgest");
    let mut nm = serde_json::to_value(nm::new(&name, &nodes[0], "e2e")).unwrap();
    nm["spec"]["stage"] = json!("Cordon");
    nm["spec"]["surge"] = json!("RolloutRestart");
    nm["spec"]["daemonSets"] = json!("EvictLast");
    Api::<NodeMaintenance>::all(client.clone())
        .create(&PostParams::default(), &serde_json::from_value(nm).unwrap())
        .await
        .unwrap();

    // Cordon: the node entered, nothing restarted or evicted.
    nm::wait_status(&client, &name, "Stage=Cordon", LIMIT, |s| {
        stage_is(s, "Cordon")
    })
    .await;
    wait_for("node entered at Cordon", LIMIT, || {
        node::in_maintenance(&client, &nodes[0])
    })
    .await;
    tokio::time::sleep(Duration::from_secs(6)).await;
    let mut events = audit.read().unwrap();
    assert_eq!(
        deployment_requests(&events, &ns, "patch"),
        0,
        "the Deployment was restarted at Cordon"
    );
    let at_cordon: Vec<_> = events
        .iter()
        .filter(|e| e.subresource == "eviction" && e.namespace == ns)
        .map(|e| format!("{} {}", e.name, e.code))
        .collect();
    assert!(at_cordon.is_empty(), "evictions at Cordon: {at_cordon:?}");
    assert_eq!(
        deployment_requests(&events, &ns, "get"),
        0,
        "the Deployment was read at Cordon"
    );
    for app in ["plain", "agent", "web"] {
        let n = if app == "agent" { 2 } else { 1 };
        wait_running(&client, &ns, app, n, LIMIT).await;
    }

    // Drain: the plain pod goes, the Deployment is restarted once (its replacement cannot
    // schedule), the DaemonSet pod waits its turn.
    patch_spec(&client, &name, json!({"stage": "Drain"})).await;
    nm::wait_status(
        &client,
        &name,
        "web SurgeStuck, the DaemonSet pod DaemonSetLast, plain gone",
        LIMIT,
        |s| {
            blocker(s, "SurgeStuck").is_some()
                && s.blockers
                    .iter()
                    .flatten()
                    .any(|b| b.name == agent_pod && b.reason == "DaemonSetLast")
                && !s.blockers.iter().flatten().any(|b| b.name == "plain")
        },
    )
    .await;
    events.extend(audit.read().unwrap());
    assert_eq!(
        deployment_requests(&events, &ns, "patch"),
        1,
        "one restart at Drain"
    );
    let evicted: Vec<String> = accepted(&events, &ns)
        .iter()
        .map(|e| e.name.clone())
        .collect();
    assert_eq!(evicted, ["plain"], "evicted at Drain so far");
    let (recorded, restarted_at) = restart_record(&client, &ns).await;
    let uid = Api::<NodeMaintenance>::all(client.clone())
        .get(&name)
        .await
        .unwrap()
        .metadata
        .uid;
    assert!(
        of_maintenance(recorded.as_ref(), uid.as_ref()),
        "the restart recorded for this maintenance: {recorded:?}, {uid:?}"
    );

    // Back to Idle (the replacement kept off the restored node) and on to Drain again.
    hold_taint(&client, &nodes[0], true).await;
    patch_spec(&client, &name, json!({"stage": "Idle"})).await;
    wait_for("node restored at Idle", LIMIT, || {
        node::restored(&client, &nodes[0])
    })
    .await;
    let now = pods(&client, &ns, "web").await;
    assert!(
        now.iter()
            .any(|p| p.metadata.uid == web.metadata.uid && running(p)),
        "the old web pod is still there at Idle: {:?}",
        now.iter()
            .map(|p| (&p.metadata.name, node_of(p)))
            .collect::<Vec<_>>()
    );
    let moved_on = jiff::Timestamp::now();
    patch_spec(&client, &name, json!({"stage": "Drain"})).await;
    wait_for(
        "two rounds at Drain again (GETs of the Deployment)",
        LIMIT,
        || {
            events.extend(audit.read().unwrap());
            let gets = events
                .iter()
                .filter(|e| e.verb == "get" && e.resource == "deployments" && e.namespace == ns)
                .filter(|e| e.received > moved_on)
                .count();
            std::future::ready(if gets >= 2 {
                Ok(())
            } else {
                Err(format!("{gets} GETs since the move on"))
            })
        },
    )
    .await;
    node::in_maintenance(&client, &nodes[0]).await.unwrap();
    events.extend(audit.read().unwrap());
    assert_eq!(
        deployment_requests(&events, &ns, "patch"),
        1,
        "restarted again after Idle and Drain"
    );
    assert_eq!(
        restart_record(&client, &ns).await,
        (recorded.clone(), restarted_at.clone()),
        "the restart record changed after Idle and Drain"
    );

    // Room on the other node: the replacement runs there, the DaemonSet pod goes last.
    cordon(&client, &nodes[1], false).await;
    nm::wait_phase(&client, &name, MaintenancePhase::Succeeded, LIMIT).await;
    let new = wait_running(&client, &ns, "web", 1, LIMIT).await.remove(0);
    assert_eq!(node_of(&new), nodes[1]);
    events.extend(audit.read().unwrap());
    assert_eq!(
        deployment_requests(&events, &ns, "patch"),
        1,
        "restarted once in all"
    );
    let all = accepted(&events, &ns);
    let (daemon, ordinary): (Vec<&AuditEvent>, Vec<&AuditEvent>) =
        all.iter().partition(|e| e.name.starts_with("agent-"));
    assert_eq!(
        daemon.iter().map(|e| e.name.as_str()).collect::<Vec<_>>(),
        [agent_pod.as_str()],
        "the node's DaemonSet pod evicted once, the other node's never"
    );
    let last_ordinary = ordinary.iter().map(|e| e.completed).max().unwrap();
    let patched = events
        .iter()
        .filter(|e| e.verb == "patch" && e.resource == "deployments" && e.namespace == ns)
        .map(|e| e.completed)
        .max()
        .unwrap();
    assert!(
        daemon[0].received > last_ordinary && daemon[0].received > patched,
        "the DaemonSet pod evicted at {}, before the last ordinary eviction ({last_ordinary}) or \
         the restart ({patched})",
        daemon[0].received
    );
    hold_taint(&client, &nodes[0], false).await;
    nm::delete_and_wait_restored(&client, &name, &nodes[0]).await;
    eprintln!("surge-stages: {:?}", started.elapsed());
}

/// §10 `surge` with deletion: a maintenance deleted while the Deployment it restarted waits for
/// its replacement (`SurgeStuck`: the other node cordoned) restores its node and sends nothing
/// more (no patch or eviction in the 6 s after it is gone); the restarted rollout goes on (the
/// replacement Ready on the other node once uncordoned, the old pod gone), and the
/// `restarted-for` record and `restartedAt` stay on the Deployment.
#[tokio::test]
async fn a_deleted_maintenance_sends_nothing_more_and_its_restarted_rollout_goes_on() {
    let _serial = SERIAL.lock().await;
    let env = env();
    let client = env.cluster.client().await;
    let started = std::time::Instant::now();
    let (nodes, ns, web) = one_replica(env, &client, "surgedel", serde_json::Value::Null).await;
    min_available_budget(&client, &ns, "web-pdb", "web", 1, 1).await;
    let name = unique("nm-surgedel");
    create(&client, &name, &nodes[0], Some("RolloutRestart")).await;
    nm::wait_status(&client, &name, "SurgeStuck", LIMIT, |s| {
        blocker(s, "SurgeStuck").is_some()
    })
    .await;
    let record = restart_record(&client, &ns).await;
    let uid = Api::<NodeMaintenance>::all(client.clone())
        .get(&name)
        .await
        .unwrap()
        .metadata
        .uid;
    assert!(
        of_maintenance(record.0.as_ref(), uid.as_ref()),
        "restarted for this maintenance: {record:?}, {uid:?}"
    );
    // The replacement kept off the node once it is restored: it waits for room elsewhere.
    hold_taint(&client, &nodes[0], true).await;
    nm::delete_and_wait_restored(&client, &name, &nodes[0]).await;
    let mut audit = AuditCursor::at_end(env.cluster.audit_log_path());
    tokio::time::sleep(Duration::from_secs(6)).await;
    let after = audit.read().unwrap();
    let sent: Vec<String> = after
        .iter()
        .filter(|e| e.namespace == ns && (e.subresource == "eviction" || e.verb == "patch"))
        .map(|e| format!("{} {} {}", e.verb, e.name, e.code))
        .collect();
    assert!(sent.is_empty(), "sent after the deletion: {sent:?}");
    let old = pods(&client, &ns, "web").await;
    assert!(
        old.iter()
            .any(|p| p.metadata.uid == web.metadata.uid && running(p)),
        "the old pod is left to its rollout: {:?}",
        old.iter()
            .map(|p| (&p.metadata.name, node_of(p)))
            .collect::<Vec<_>>()
    );
    cordon(&client, &nodes[1], false).await;
    let new = wait_running(&client, &ns, "web", 1, LIMIT).await.remove(0);
    assert_eq!(
        node_of(&new),
        nodes[1],
        "the rollout went on to the other node"
    );
    assert_ne!(new.metadata.uid, web.metadata.uid);
    assert_eq!(
        restart_record(&client, &ns).await,
        record,
        "the record on the Deployment after the deletion"
    );
    let late: Vec<String> = audit
        .read()
        .unwrap()
        .iter()
        .filter(|e| e.namespace == ns && (e.subresource == "eviction" || e.verb == "patch"))
        .map(|e| format!("{} {} {}", e.verb, e.name, e.code))
        .collect();
    assert!(late.is_empty(), "sent after the deletion: {late:?}");
    hold_taint(&client, &nodes[0], false).await;
    eprintln!("surge-delete: {:?}", started.elapsed());
}

/// The record is per drain (`docs/drain-contract.md` §15): a maintenance restarts `web`, is
/// moved back to Idle, and the replacement, with no room elsewhere, is scheduled back onto the
/// released node and replaces the old pod there; moved on to Drain, the new drain restarts it
/// again, once (the replacement runs on the other node, now with room), and Succeeds. Before
/// the record named the drain, the pod that came back stayed `Surging` for ever: the
/// maintenance had already restarted the Deployment once.
#[tokio::test]
async fn a_replacement_back_on_a_released_node_is_restarted_once_by_the_next_drain() {
    let _serial = SERIAL.lock().await;
    let env = env();
    let client = env.cluster.client().await;
    let started = std::time::Instant::now();
    let (nodes, ns, web) = one_replica(env, &client, "surgeback", serde_json::Value::Null).await;
    min_available_budget(&client, &ns, "web-pdb", "web", 1, 1).await;
    let mut audit = AuditCursor::at_end(env.cluster.audit_log_path());
    let name = unique("nm-surgeback");
    create(&client, &name, &nodes[0], Some("RolloutRestart")).await;
    nm::wait_status(
        &client,
        &name,
        "SurgeStuck (no room elsewhere)",
        LIMIT,
        |s| blocker(s, "SurgeStuck").is_some(),
    )
    .await;
    let first = restart_record(&client, &ns).await;
    let first_start = node_drain_started(&client, &nodes[0]).await;
    eprintln!("surge-back: first drain {first_start}, record {first:?}");

    // Idle: the node restored, the replacement runs on it and the old pod is gone.
    patch_spec(&client, &name, json!({"stage": "Idle"})).await;
    wait_for("node restored at Idle", LIMIT, || {
        node::restored(&client, &nodes[0])
    })
    .await;
    let back = wait_for("the replacement alone, on the released node", LIMIT, || {
        let client = client.clone();
        let (ns, node, old) = (ns.clone(), nodes[0].clone(), web.metadata.uid.clone());
        async move {
            let now = pods(&client, &ns, "web").await;
            match now.as_slice() {
                [p] if p.metadata.uid != old && running(p) && node_of(p) == node => Ok(p.clone()),
                _ => Err(format!(
                    "{:?}",
                    now.iter()
                        .map(|p| (&p.metadata.name, node_of(p), running(p)))
                        .collect::<Vec<_>>()
                )),
            }
        }
    })
    .await;

    // Room on the other node, and Drain again: a new drain restarts it once more. A drain is
    // known by its start in whole seconds of the API server's clock (§15): the next one starts
    // in a later second (the control plane runs on this machine's clock).
    cordon(&client, &nodes[1], false).await;
    wait_for("a second past the first drain's start", LIMIT, || {
        let now = jiff::Timestamp::now();
        std::future::ready(if now.as_second() > first_start.as_second() {
            Ok(())
        } else {
            Err(format!("{now}, the first drain started at {first_start}"))
        })
    })
    .await;
    patch_spec(&client, &name, json!({"stage": "Drain"})).await;
    wait_for("Succeeded after the second drain", LIMIT, || {
        let (client, ns, name) = (client.clone(), ns.clone(), name.clone());
        async move {
            let nm = Api::<NodeMaintenance>::all(client.clone())
                .get(&name)
                .await
                .unwrap();
            let status = nm.status.unwrap_or_default();
            if status.phase == Some(MaintenancePhase::Succeeded) {
                return Ok(());
            }
            let seen: Vec<_> = pods(&client, &ns, "web")
                .await
                .iter()
                .map(|p| {
                    let created = p.metadata.creation_timestamp.as_ref().map(|t| t.0);
                    (p.metadata.name.clone(), node_of(p).to_string(), created)
                })
                .collect();
            Err(format!(
                "phase {:?}, drainStartTime {:?}, blockers {:?}; web pods {seen:?}; record {:?}",
                status.phase,
                status.drain_start_time.map(|t| t.0),
                status
                    .blockers
                    .unwrap_or_default()
                    .iter()
                    .map(|b| b.reason.clone())
                    .collect::<Vec<_>>(),
                restart_record(&client, &ns).await
            ))
        }
    })
    .await;
    let now = wait_running(&client, &ns, "web", 1, LIMIT).await.remove(0);
    assert_eq!(node_of(&now), nodes[1], "the second replacement's node");
    assert_ne!(now.metadata.uid, back.metadata.uid);
    let second = restart_record(&client, &ns).await;
    let uid = Api::<NodeMaintenance>::all(client.clone())
        .get(&name)
        .await
        .unwrap()
        .metadata
        .uid;
    assert!(
        of_maintenance(second.0.as_ref(), uid.as_ref()) && second.0 != first.0,
        "the second drain's record {second:?}, the first's {first:?}"
    );
    let events = audit.read().unwrap();
    assert_eq!(
        deployment_requests(&events, &ns, "patch"),
        2,
        "one restart per drain"
    );
    nm::delete_and_wait_restored(&client, &name, &nodes[0]).await;
    eprintln!("surge-back: {:?}", started.elapsed());
}
