//! A maintenance's timeline end to end (`docs/drain-contract.md` §11): the drain starts when
//! stage Drain first applies, not at the cordon, so its deadline and its arrival rule count from
//! then; expiry counts from this drain's success, not the first one.

mod common;

use std::time::Duration;

use common::*;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, Patch, PatchParams, PostParams};
use node_maintenance_operator::api::{
    DRAIN_STARTED_ANNOTATION, MaintenancePhase, NodeMaintenance, NodeMaintenanceStatus,
};
use serde_json::json;

/// Generous for a loaded 2-core machine.
const LIMIT: Duration = Duration::from_secs(120);

async fn set_stage(client: &kube::Client, name: &str, stage: &str) {
    Api::<NodeMaintenance>::all(client.clone())
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"stage": stage}})),
        )
        .await
        .unwrap_or_else(|e| panic!("moving NodeMaintenance {name} to {stage}: {e}"));
}

/// `(status, reason, lastTransitionTime)` of condition `type_`.
fn condition(s: &NodeMaintenanceStatus, type_: &str) -> Option<(String, String, jiff::Timestamp)> {
    s.conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status.clone(), c.reason.clone(), c.last_transition_time.0))
}

/// The pod `ns/name`, `None` once it is gone or being deleted.
async fn live_pod(client: &kube::Client, ns: &str, name: &str) -> Option<Pod> {
    Api::<Pod>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
        .unwrap()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
}

/// The drain's start recorded on `node` (the API server's clock), if any.
async fn drain_started(client: &kube::Client, node: &str) -> Option<jiff::Timestamp> {
    Api::<Node>::all(client.clone())
        .get(node)
        .await
        .unwrap()
        .metadata
        .annotations
        .unwrap_or_default()
        .get(DRAIN_STARTED_ANNOTATION)
        .and_then(|v| v.parse().ok())
}

/// Issue 46 item 1: a maintenance created in stage Cordon with `drainTimeout: 20s, onTimeout:
/// ForceDelete`, moved to Drain 25 s later. No pod is force-deleted at the drain's start (a
/// budget holds one): `status.drainDeadline` is the drain's start (recorded on the node when
/// stage Drain first applied, after the cordon) plus 20 s, and the pod is deleted only then. A
/// pod tolerating both maintenance taints that was scheduled onto the node while it sat cordoned
/// did not arrive after the drain started: it is evicted, not kept.
#[tokio::test]
async fn a_drain_moved_on_from_cordon_counts_its_deadline_and_arrivals_from_its_own_start() {
    let env = operator_env();
    let client = env.cluster.client().await;
    let group = unique("tlc");
    let node = worker_nodes(env.cluster, &client, &group, 1)
        .await
        .remove(0);
    let ns = namespace(&client, "tlc").await;
    bare_pod(&client, &ns, "db", &node, json!({})).await;
    wait_running(&client, &ns, "db", 1, LIMIT).await;
    min_available_budget(&client, &ns, "db", "db", 1, 1).await;
    apply_force_delete_overlay(&client).await;

    let name = unique("nm-tlc");
    let mut nm = nm::new(&name, &node, "e2e timeline: cordon now, drain later");
    nm.spec.knobs.stage = serde_json::from_value(json!("Cordon")).unwrap();
    nm.spec.knobs.drain_timeout = Some("20s".into());
    nm.spec.knobs.on_timeout = serde_json::from_value(json!("ForceDelete")).unwrap();
    wait_for("ForceDelete admitted with the grant", LIMIT, || async {
        Api::<NodeMaintenance>::all(client.clone())
            .create(&PostParams::default(), &nm)
            .await
            .map_err(|e| e.to_string())
    })
    .await;
    wait_for("node in maintenance", LIMIT, || {
        node::in_maintenance(&client, &node)
    })
    .await;
    let cordoned = nm::wait_status(&client, &name, "Stage=Cordon, Cordoned", LIMIT, |s| {
        condition(s, "Stage").is_some_and(|c| c.1 == "Cordon")
            && condition(s, "Cordoned").is_some_and(|c| c.0 == "True")
    })
    .await;
    let cordoned = condition(cordoned.status.as_ref().unwrap(), "Cordoned")
        .unwrap()
        .2;
    assert_eq!(
        drain_started(&client, &node).await,
        None,
        "stage Cordon recorded a drain start"
    );

    // Scheduled onto the cordoned node, tolerating both maintenance taints, in a later second
    // than the cordon (one of the same second would be told apart by the drain's first listing).
    let later = cordoned + jiff::SignedDuration::from_secs(2);
    if let Ok(wait) = Duration::try_from(later.duration_since(jiff::Timestamp::now())) {
        tokio::time::sleep(wait).await;
    }
    let tolerates = json!({"spec": {"tolerations": [
        {"key": "medik8s.io/drain", "operator": "Exists", "effect": "NoSchedule"},
        {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"},
    ]}});
    let late = bare_pod(&client, &ns, "late", &node, tolerates).await;
    wait_running(&client, &ns, "late", 1, LIMIT).await;
    let late_created = late.metadata.creation_timestamp.unwrap().0;

    // Sat cordoned longer than its drainTimeout (the scenario's time, not a wait for an outcome).
    tokio::time::sleep(Duration::from_secs(25)).await;
    set_stage(&client, &name, "Drain").await;

    // The tolerating pod that was there before the drain is evicted.
    wait_for(
        "the pod scheduled while cordoned evicted",
        LIMIT,
        || async {
            match live_pod(&client, &ns, "late").await {
                Some(p) => Err(format!("{:?}", p.status.map(|s| s.phase))),
                None => Ok(()),
            }
        },
    )
    .await;
    let started = drain_started(&client, &node)
        .await
        .expect("the drain's start recorded on the node");
    assert!(
        started >= late_created + jiff::SignedDuration::from_secs(25),
        "the drain started at {started}, the cordoned node got its pod at {late_created}"
    );
    // Nothing force-deleted at the drain's start: the budget's pod is still there.
    assert_eq!(
        nm::warnings(&client, &name, "PodForceDeleted").await,
        vec![]
    );
    assert!(live_pod(&client, &ns, "db").await.is_some(), "db deleted");
    let deadline = started + jiff::SignedDuration::from_secs(20);
    nm::wait_status(
        &client,
        &name,
        "drainDeadline 20 s after the start",
        LIMIT,
        |s| s.drain_deadline.as_ref().map(|d| d.0) == Some(deadline),
    )
    .await;

    // At the deadline the budget's pod is deleted, and only it: ForceDelete deletes a pod its
    // own grace (0 s here) and a second ahead of the deadline (docs/drain-contract.md §10), so
    // no sooner than the deadline less 1 s, never at the drain's start 20 s before it.
    nm::wait_phase(&client, &name, MaintenancePhase::Succeeded, LIMIT).await;
    let forced = nm::warnings(&client, &name, "PodForceDeleted").await;
    assert_eq!(forced.len(), 1, "{forced:?}");
    assert!(forced[0].0.contains("/db "), "{forced:?}");
    let due = deadline - jiff::SignedDuration::from_secs(1);
    assert!(
        forced[0].1 >= due,
        "deleted at {}, before the deadline {deadline} less the pod's grace (0 s) and 1 s",
        forced[0].1
    );
    nm::delete_and_wait_restored(&client, &name, &node).await;
}

/// Issue 46 item 4: `expireAfter: 20s`; the maintenance Succeeds, is moved to Idle (the node
/// restored, `Drained=False` reason `Released`), and moved back to Drain more than 20 s after its
/// first success: it drains and Succeeds again without deleting itself on re-entry, and expires
/// 20 s after its new success.
#[tokio::test]
async fn expiry_counts_from_this_drains_success_after_idle_and_back() {
    let env = operator_env();
    let client = env.cluster.client().await;
    let group = unique("tle");
    let node = worker_nodes(env.cluster, &client, &group, 1)
        .await
        .remove(0);
    let name = unique("nm-tle");
    let mut nm = nm::new(&name, &node, "e2e timeline: expiry");
    nm.spec.knobs.expire_after = Some("20s".into());
    Api::<NodeMaintenance>::all(client.clone())
        .create(&PostParams::default(), &nm)
        .await
        .unwrap();
    let done = nm::wait_phase(&client, &name, MaintenancePhase::Succeeded, LIMIT).await;
    let first = condition(done.status.as_ref().unwrap(), "Drained")
        .filter(|c| c.0 == "True")
        .expect("Drained=True")
        .2;

    set_stage(&client, &name, "Idle").await;
    wait_for("node restored", LIMIT, || node::restored(&client, &node)).await;
    nm::wait_status(&client, &name, "Drained released", LIMIT, |s| {
        condition(s, "Drained").is_some_and(|c| c.0 == "False" && c.1 == "Released")
    })
    .await;

    // Back to Drain more than expireAfter after the first success.
    let back = first + jiff::SignedDuration::from_secs(25);
    if let Ok(wait) = Duration::try_from(back.duration_since(jiff::Timestamp::now())) {
        tokio::time::sleep(wait).await;
    }
    set_stage(&client, &name, "Drain").await;
    let again = nm::wait_status(&client, &name, "Succeeded again", LIMIT, |s| {
        s.phase == Some(MaintenancePhase::Succeeded)
            && condition(s, "Drained").is_some_and(|c| c.0 == "True" && c.2 > first)
    })
    .await;
    let second = condition(again.status.as_ref().unwrap(), "Drained")
        .unwrap()
        .2;
    node::in_maintenance(&client, &node).await.unwrap();
    // It stays until 20 s after its new success (checked up to 5 s before).
    let api = Api::<NodeMaintenance>::all(client.clone());
    while jiff::Timestamp::now() < second + jiff::SignedDuration::from_secs(15) {
        let nm = api.get_opt(&name).await.unwrap();
        assert!(
            nm.is_some_and(|nm| nm.metadata.deletion_timestamp.is_none()),
            "deleted at {}, Succeeded again at {second}: expired from the first success \
             {first}",
            jiff::Timestamp::now()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    nm::wait_gone(&client, &name, LIMIT).await;
    let gone = jiff::Timestamp::now();
    assert!(
        gone >= second + jiff::SignedDuration::from_secs(20),
        "gone at {gone}, Succeeded again at {second}: before expireAfter"
    );
    wait_for("node restored", LIMIT, || node::restored(&client, &node)).await;
    let events = nm::event_summary(&client, &name).await;
    assert!(
        events.iter().any(|e| e.1 == "MaintenanceExpired"),
        "{events:?}"
    );
}
