//! The stages end to end (`docs/design.md` §1, "Stages"; the `stage` knob): Preflight lists
//! what would block the drain from dry-run evictions and touches nothing else; Idle, Cordon and
//! Drain each leave the node as they say, in order; moving back from Cordon to Idle restores the
//! node and gives up the lease while the object stays; a preflight's events say "preflight"
//! (`BeginPreflight`, `RemovedPreflight`) where a Drain keeps upstream's.

mod common;

use std::time::Duration;

use common::*;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, Patch, PatchParams, PostParams};
use node_maintenance_operator::api::{MaintenancePhase, NodeMaintenance, NodeMaintenanceStatus};
use serde_json::json;

/// Generous for a loaded 2-core machine.
const LIMIT: Duration = Duration::from_secs(90);
const LEASE_NS: &str = "medik8s-leases";

async fn create(client: &kube::Client, name: &str, node: &str, stage: &str) {
    let mut nm = nm::new(name, node, "e2e stages");
    nm.spec.knobs.stage = serde_json::from_value(json!(stage)).unwrap();
    Api::<NodeMaintenance>::all(client.clone())
        .create(&PostParams::default(), &nm)
        .await
        .unwrap_or_else(|e| panic!("creating NodeMaintenance {name} ({stage}): {e}"));
}

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

/// `(status, reason)` of condition `type_`.
fn condition(s: &NodeMaintenanceStatus, type_: &str) -> Option<(String, String)> {
    s.conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status.clone(), c.reason.clone()))
}

fn is(status: &str, reason: &str) -> Option<(String, String)> {
    Some((status.into(), reason.into()))
}

async fn wait_stage(client: &kube::Client, name: &str, stage: &str) -> NodeMaintenance {
    nm::wait_status(client, name, &format!("Stage={stage}"), LIMIT, |s| {
        condition(s, "Stage") == is("True", stage)
    })
    .await
}

async fn lease(client: &kube::Client, node: &str) -> Option<Lease> {
    Api::<Lease>::namespaced(client.clone(), LEASE_NS)
        .get_opt(&format!("node-{node}"))
        .await
        .unwrap()
}

async fn wait_lease(client: &kube::Client, node: &str, held: bool) {
    wait_for(
        &format!("lease of {node} {}", if held { "held" } else { "gone" }),
        LIMIT,
        || async {
            match lease(client, node).await {
                Some(l) if !held => Err(format!("{:?}", l.spec)),
                None if held => Err("no lease".into()),
                _ => Ok(()),
            }
        },
    )
    .await;
}

/// A fresh worker node (group `<prefix>-…`) and namespace with one Running bare pod `web` on
/// the node: (node, namespace).
async fn node_with_web(client: &kube::Client, prefix: &str) -> (String, String) {
    let group = unique(prefix);
    let node = worker_nodes(operator_env().cluster, client, &group, 1)
        .await
        .remove(0);
    let ns = namespace(client, prefix).await;
    bare_pod(client, &ns, "web", &node, json!({})).await;
    wait_running(client, &ns, "web", 1, LIMIT).await;
    (node, ns)
}

/// When `nm`'s `Drained` condition turned True (its success, by the API server's clock).
fn drained_at(nm: &NodeMaintenance) -> jiff::Timestamp {
    nm.status
        .iter()
        .flat_map(|s| s.conditions.iter().flatten())
        .find(|c| c.type_ == "Drained" && c.status == "True")
        .map(|c| c.last_transition_time.0)
        .expect("Drained=True")
}

/// The pod `ns/name`, `None` once it is gone or being deleted.
async fn live_pod(client: &kube::Client, ns: &str, name: &str) -> Option<Pod> {
    Api::<Pod>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
        .unwrap()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
}

#[tokio::test]
async fn preflight_lists_a_budget_blocked_pod_and_touches_nothing_else() {
    let env = operator_env();
    let client = env.cluster.client().await;
    let group = unique("pf");
    let node = worker_nodes(env.cluster, &client, &group, 1)
        .await
        .remove(0);
    let ns = namespace(&client, "pf").await;
    // One pod a budget allows no disruption for, one whose budget allows one: a real eviction
    // of the second would consume it.
    bare_pod(&client, &ns, "guarded", &node, json!({})).await;
    bare_pod(&client, &ns, "free", &node, json!({})).await;
    wait_running(&client, &ns, "guarded", 1, LIMIT).await;
    wait_running(&client, &ns, "free", 1, LIMIT).await;
    let budgets = budget(&client, &ns, "guard", "guarded", 0, 1).await;
    // minAvailable 0: a bare pod has no scale for maxUnavailable to count from.
    let loose: PodDisruptionBudget = serde_json::from_value(json!({
        "metadata": {"name": "loose"},
        "spec": {"minAvailable": 0, "selector": {"matchLabels": {"app": "free"}}}
    }))
    .unwrap();
    budgets
        .create(&PostParams::default(), &loose)
        .await
        .unwrap();
    let allowed = |p: PodDisruptionBudget| p.status.and_then(|s| s.disruptions_allowed);
    wait_for("budget loose allows one disruption", LIMIT, || async {
        let p = budgets.get("loose").await.map_err(|e| e.to_string())?;
        match allowed(p.clone()) {
            Some(1) => Ok(()),
            _ => Err(format!("{:?}", p.status)),
        }
    })
    .await;
    let nodes = Api::<Node>::all(client.clone());
    let before = nodes.get(&node).await.unwrap();

    let name = unique("nm-pf");
    create(&client, &name, &node, "Preflight").await;
    let found = nm::wait_status(
        &client,
        &name,
        "status.blockers names the guarded pod and its budget",
        LIMIT,
        |s| {
            s.blockers.iter().flatten().any(|b| {
                b.name == "guarded"
                    && b.reason == "PodDisruptionBudget"
                    && b.pod_disruption_budget.as_deref() == Some("guard")
            })
        },
    )
    .await;
    let status = found.status.unwrap();
    assert_eq!(condition(&status, "Stage"), is("True", "Preflight"));
    assert_eq!(status.phase, Some(MaintenancePhase::Running));
    assert!(
        status.blockers.iter().flatten().all(|b| b.name != "free"),
        "the pod its budget lets go is no blocker: {:?}",
        status.blockers
    );
    // The pass that wrote the blockers is done: it touched nothing else.
    let after = nodes.get(&node).await.unwrap();
    assert_eq!(
        after.metadata.resource_version, before.metadata.resource_version,
        "the Node was written: {:?}",
        after.metadata.managed_fields
    );
    assert!(lease(&client, &node).await.is_none(), "a lease was taken");
    assert_eq!(allowed(budgets.get("loose").await.unwrap()), Some(1));
    assert!(
        live_pod(&client, &ns, "free").await.is_some(),
        "free was evicted"
    );
    assert!(live_pod(&client, &ns, "guarded").await.is_some());

    nm::delete(&client, &name).await;
    nm::wait_gone(&client, &name, LIMIT).await;
    assert!(live_pod(&client, &ns, "free").await.is_some());
}

/// Dry-run evictions the API server refused with 429 so far (every client's).
async fn refused_dry_runs(client: &kube::Client) -> u64 {
    let refused = [
        ("subresource", "eviction"),
        ("code", "429"),
        ("dry_run", "All"),
    ];
    apiserver_requests(client, &refused).await
}

#[tokio::test]
async fn preflight_asks_a_budget_that_allows_none_through_one_pod_and_lists_them_all() {
    const PODS: usize = 20;
    let env = operator_env();
    let client = env.cluster.client().await;
    let group = unique("pfb");
    let node = worker_nodes(env.cluster, &client, &group, 1)
        .await
        .remove(0);
    let ns = namespace(&client, "pfb").await;
    let names: Vec<String> = (0..PODS).map(|i| format!("db-{i}")).collect();
    for name in &names {
        bare_pod(
            &client,
            &ns,
            name,
            &node,
            json!({"metadata": {"labels": {"app": "db"}}}),
        )
        .await;
    }
    wait_running(&client, &ns, "db", PODS, LIMIT).await;
    budget(&client, &ns, "db", "db", 0, PODS as i32).await;

    let before = refused_dry_runs(&client).await;
    let name = unique("nm-pfb");
    create(&client, &name, &node, "Preflight").await;
    let found = nm::wait_status(
        &client,
        &name,
        "status.blockers names every pod of the budget",
        LIMIT,
        |s| {
            let listed: std::collections::BTreeSet<&str> = s
                .blockers
                .iter()
                .flatten()
                .filter(|b| {
                    b.namespace == ns
                        && b.reason == "PodDisruptionBudget"
                        && b.pod_disruption_budget.as_deref() == Some("db")
                })
                .map(|b| b.name.as_str())
                .collect();
            listed == names.iter().map(String::as_str).collect()
        },
    )
    .await;
    let after = refused_dry_runs(&client).await;
    assert!(
        after >= before,
        "the API server's counter went back ({before} -> {after}): it restarted, nothing is measured"
    );
    let refused = after - before;
    assert!(
        refused >= 1,
        "no refused dry-run eviction counted: the budget was never asked, or the count reads \
         the wrong series"
    );
    // One per preflight round (alone, this test sees 1; a round every 60 s), plus the other
    // preflight test's (2 alone), which may run beside this one; asking every pod would be at
    // least PODS.
    assert!(
        refused < PODS as u64 / 2,
        "{refused} dry-run evictions refused for {PODS} pods under one budget; blockers: {:?}",
        found.status.map(|s| s.blockers)
    );
    assert!(lease(&client, &node).await.is_none(), "a lease was taken");
    for name in &names {
        assert!(
            live_pod(&client, &ns, name).await.is_some(),
            "{name} was evicted"
        );
    }
    nm::delete(&client, &name).await;
    nm::wait_gone(&client, &name, LIMIT).await;
}

#[tokio::test]
async fn idle_cordon_drain_in_order_and_back_from_cordon_to_idle_restores_the_node() {
    let env = operator_env();
    let client = env.cluster.client().await;
    let (node, ns) = node_with_web(&client, "st").await;
    let name = unique("nm-st");

    // Idle: nothing on the node, no lease, the pod stays.
    create(&client, &name, &node, "Idle").await;
    let idle = wait_stage(&client, &name, "Idle").await;
    assert_eq!(idle.status.unwrap().phase, Some(MaintenancePhase::Running));
    node::restored(&client, &node).await.unwrap();
    assert!(lease(&client, &node).await.is_none());

    // Cordon: lease, cordon, taints, label; no eviction.
    set_stage(&client, &name, "Cordon").await;
    wait_for("node in maintenance", LIMIT, || {
        node::in_maintenance(&client, &node)
    })
    .await;
    wait_lease(&client, &node, true).await;
    let cordon = nm::wait_status(&client, &name, "Stage=Cordon, Cordoned", LIMIT, |s| {
        condition(s, "Stage") == is("True", "Cordon") && condition(s, "Cordoned").is_some()
    })
    .await;
    assert_eq!(
        condition(&cordon.status.unwrap(), "Cordoned"),
        is("True", "NodeCordoned")
    );
    assert!(
        live_pod(&client, &ns, "web").await.is_some(),
        "Cordon evicted"
    );

    // Back to Idle: the node restored as a delete would, the lease given up, the object kept.
    set_stage(&client, &name, "Idle").await;
    wait_for("node restored", LIMIT, || node::restored(&client, &node)).await;
    wait_lease(&client, &node, false).await;
    let back = nm::wait_status(
        &client,
        &name,
        "Stage=Idle, Cordoned released",
        LIMIT,
        |s| {
            condition(s, "Stage") == is("True", "Idle")
                && condition(s, "Cordoned") == is("False", "Released")
        },
    )
    .await;
    assert!(back.metadata.deletion_timestamp.is_none());
    wait_for("UncordonNode event on the node", LIMIT, || async {
        let seen = nm::events(&client, "Node", &node).await;
        let reasons: Vec<_> = seen.iter().filter_map(|e| e.reason.clone()).collect();
        if reasons.iter().any(|r| r == "UncordonNode") {
            Ok(())
        } else {
            Err(format!("{reasons:?}"))
        }
    })
    .await;
    assert!(live_pod(&client, &ns, "web").await.is_some());

    // Cordon again, then Drain: the pod evicted, Succeeded.
    set_stage(&client, &name, "Cordon").await;
    wait_for("node in maintenance again", LIMIT, || {
        node::in_maintenance(&client, &node)
    })
    .await;
    assert!(
        live_pod(&client, &ns, "web").await.is_some(),
        "Cordon evicted"
    );
    set_stage(&client, &name, "Drain").await;
    let done = nm::wait_phase(&client, &name, MaintenancePhase::Succeeded, LIMIT).await;
    assert_eq!(
        condition(&done.status.unwrap(), "Stage"),
        is("True", "Drain")
    );
    assert!(live_pod(&client, &ns, "web").await.is_none());
    node::in_maintenance(&client, &node).await.unwrap();

    nm::delete_and_wait_restored(&client, &name, &node).await;
}

/// A kubelet's heartbeat: `Ready`'s `lastHeartbeatTime` set to `at`, as the kubelet patches it.
async fn heartbeat(client: &kube::Client, node: &str, at: &str) {
    Api::<Node>::all(client.clone())
        .patch_status(
            node,
            &PatchParams::default(),
            &Patch::Strategic(json!({"status": {"conditions": [
                {"type": "Ready", "status": "True", "lastHeartbeatTime": at}
            ]}})),
        )
        .await
        .unwrap();
}

async fn ready_heartbeat(client: &kube::Client, node: &str) -> Option<String> {
    let n = Api::<Node>::all(client.clone()).get(node).await.unwrap();
    n.status?
        .conditions?
        .into_iter()
        .find(|c| c.type_ == "Ready")?
        .last_heartbeat_time
        .map(|t| t.0.to_string())
}

#[tokio::test]
async fn node_lifecycle_conditions_follow_the_stages_end_false_and_leave_the_kubelets_alone() {
    let env = operator_env();
    let client = env.cluster.client().await;
    let (node, _ns) = node_with_web(&client, "lc").await;
    let name = unique("nm-lc");
    let mut nm = nm::new(&name, &node, "e2e node conditions");
    nm.spec.knobs.stage = Some(node_maintenance_operator::api::Stage::Idle);
    nm.metadata.annotations = Some(
        [(
            "nodemaintenance.medik8s.io/nodeConditions".to_string(),
            "true".to_string(),
        )]
        .into(),
    );
    Api::<NodeMaintenance>::all(client.clone())
        .create(&PostParams::default(), &nm)
        .await
        .unwrap();

    wait_node_conditions(
        &client,
        &node,
        &name,
        [
            ("MaintenancePlanned", "True", "AdminRequested"),
            ("MaintenanceInProgress", "False", "MaintenanceNotStarted"),
            ("DrainInProgress", "False", "DrainNotStarted"),
            ("Drained", "False", "DrainNotStarted"),
        ],
    )
    .await;
    // The kubelet keeps writing its own conditions; ours are merged by type beside them.
    heartbeat(&client, &node, "2030-01-01T00:00:01Z").await;
    set_stage(&client, &name, "Cordon").await;
    wait_node_conditions(
        &client,
        &node,
        &name,
        [
            ("MaintenancePlanned", "True", "AdminRequested"),
            ("MaintenanceInProgress", "True", "AdminRequested"),
            ("DrainInProgress", "False", "DrainNotStarted"),
            ("Drained", "False", "DrainNotStarted"),
        ],
    )
    .await;
    assert_eq!(
        ready_heartbeat(&client, &node).await.as_deref(),
        Some("2030-01-01T00:00:01Z")
    );
    heartbeat(&client, &node, "2030-01-01T00:00:02Z").await;
    set_stage(&client, &name, "Drain").await;
    nm::wait_phase(&client, &name, MaintenancePhase::Succeeded, LIMIT).await;
    wait_node_conditions(
        &client,
        &node,
        &name,
        [
            ("MaintenancePlanned", "True", "AdminRequested"),
            ("MaintenanceInProgress", "True", "AdminRequested"),
            ("DrainInProgress", "False", "DrainCompleted"),
            ("Drained", "True", "DrainCompleted"),
        ],
    )
    .await;
    assert_eq!(
        ready_heartbeat(&client, &node).await.as_deref(),
        Some("2030-01-01T00:00:02Z")
    );
    heartbeat(&client, &node, "2030-01-01T00:00:03Z").await;
    nm::delete_and_wait_restored(&client, &name, &node).await;
    let ended = ("MaintenanceEnded", "False");
    wait_node_conditions(
        &client,
        &node,
        &name,
        [
            ("MaintenancePlanned", ended.1, ended.0),
            ("MaintenanceInProgress", ended.1, ended.0),
            ("DrainInProgress", ended.1, ended.0),
            ("Drained", ended.1, ended.0),
        ],
    )
    .await;
    let ready = node_condition(&client, &node, "Ready").await.unwrap();
    assert_eq!(
        ready.0, "True",
        "the kubelet's Ready was touched: {ready:?}"
    );
    assert_eq!(
        ready_heartbeat(&client, &node).await.as_deref(),
        Some("2030-01-01T00:00:03Z")
    );
    // Only our four types are our field manager's.
    let n = Api::<Node>::all(client.clone()).get(&node).await.unwrap();
    let ours = n
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter(|m| m.manager.as_deref() == Some("node-maintenance-operator-conditions"))
        .map(|m| serde_json::to_string(&m.fields_v1).unwrap())
        .collect::<String>();
    assert!(ours.contains("MaintenancePlanned"), "{ours}");
    assert!(!ours.contains("\\\"Ready\\\""), "{ours}");
}

#[tokio::test]
async fn a_maintenance_waits_idle_for_its_window_then_cordons_and_drains() {
    let env = operator_env();
    let client = env.cluster.client().await;
    let (node, ns) = node_with_web(&client, "win").await;
    let name = unique("nm-win");
    let opens = jiff::Timestamp::from_second(jiff::Timestamp::now().as_second() + 20).unwrap();
    let mut nm = nm::new(&name, &node, "e2e window");
    nm.spec.knobs.start_at = Some(opens.to_string());
    Api::<NodeMaintenance>::all(client.clone())
        .create(&PostParams::default(), &nm)
        .await
        .unwrap();

    wait_stage(&client, &name, "MaintenanceWindow").await;
    // Seen before the window opened: the node untouched, no lease, the pod there.
    assert!(
        jiff::Timestamp::now() < opens,
        "the window opened too soon to tell"
    );
    node::restored(&client, &node).await.unwrap();
    assert!(lease(&client, &node).await.is_none());
    assert!(live_pod(&client, &ns, "web").await.is_some());

    nm::wait_phase(&client, &name, MaintenancePhase::Succeeded, LIMIT).await;
    let n = Api::<Node>::all(client.clone()).get(&node).await.unwrap();
    let started: jiff::Timestamp = n
        .metadata
        .annotations
        .unwrap_or_default()
        .get("nodemaintenance.medik8s.io/drain-started")
        .expect("the drain's start on the node")
        .parse()
        .unwrap();
    assert!(
        started >= opens,
        "entered at {started}, before the window opened at {opens}"
    );
    assert!(live_pod(&client, &ns, "web").await.is_none());
    nm::delete_and_wait_restored(&client, &name, &node).await;
}

#[tokio::test]
async fn an_expired_maintenance_deletes_itself_and_the_node_is_restored() {
    let env = operator_env();
    let client = env.cluster.client().await;
    let group = unique("exp");
    let node = worker_nodes(env.cluster, &client, &group, 1)
        .await
        .remove(0);
    let name = unique("nm-exp");
    let mut nm = nm::new(&name, &node, "e2e expiry");
    nm.spec.knobs.expire_after = Some("10s".into());
    Api::<NodeMaintenance>::all(client.clone())
        .create(&PostParams::default(), &nm)
        .await
        .unwrap();
    let done = nm::wait_phase(&client, &name, MaintenancePhase::Succeeded, LIMIT).await;
    let succeeded = drained_at(&done);
    node::in_maintenance(&client, &node).await.unwrap();
    nm::wait_gone(&client, &name, LIMIT).await;
    let gone = jiff::Timestamp::now();
    assert!(
        gone >= succeeded + jiff::SignedDuration::from_secs(10),
        "gone at {gone}, Succeeded at {succeeded}: before expireAfter"
    );
    wait_for("node restored", LIMIT, || node::restored(&client, &node)).await;
    assert!(lease(&client, &node).await.is_none());
    let events = nm::event_summary(&client, &name).await;
    assert!(
        events.iter().any(|e| e.1 == "MaintenanceExpired"),
        "{events:?}"
    );
}

/// `(reason, message)` of every event about a NodeMaintenance whose name starts with `prefix`.
async fn events_of_names_starting(client: &kube::Client, prefix: &str) -> Vec<(String, String)> {
    use k8s_openapi::api::core::v1::Event;
    Api::<Event>::namespaced(client.clone(), "default")
        .list(&kube::api::ListParams::default().fields("involvedObject.kind=NodeMaintenance"))
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| {
            e.involved_object
                .name
                .as_deref()
                .is_some_and(|n| n.starts_with(prefix))
        })
        .map(|e| (e.reason.unwrap_or_default(), e.message.unwrap_or_default()))
        .collect()
}

#[tokio::test]
async fn a_preflights_events_say_preflight_and_a_drains_keep_upstreams() {
    let env = operator_env();
    let client = env.cluster.client().await;
    let group = unique("pfe");
    let nodes = worker_nodes(env.cluster, &client, &group, 2).await;

    // `kubectl nm preflight`'s temporary object: begun and removed as a preflight.
    let kubeconfig = env.cluster.kubeconfig().display().to_string();
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let argv = [
        "kubectl-nm",
        "--kubeconfig",
        &kubeconfig,
        "preflight",
        &nodes[0],
    ];
    let code = kubectl_nm::run(argv, &mut out, &mut err).await;
    assert_eq!(
        code,
        0,
        "kubectl nm preflight: {}{}",
        String::from_utf8_lossy(&out),
        String::from_utf8_lossy(&err)
    );
    let prefix = format!("nm-preflight-{}-", nodes[0]);
    let seen = wait_for(
        "BeginPreflight and RemovedPreflight about the preflight's object",
        LIMIT,
        || async {
            let seen = events_of_names_starting(&client, &prefix).await;
            let has = |r: &str| seen.iter().any(|(reason, _)| reason == r);
            if has("BeginPreflight") && has("RemovedPreflight") {
                Ok(seen)
            } else {
                Err(format!("{seen:?}"))
            }
        },
    )
    .await;
    assert!(
        seen.iter()
            .all(|(reason, _)| reason != "BeginMaintenance" && reason != "RemovedMaintenance"),
        "a preflight's events read as a maintenance: {seen:?}"
    );
    assert!(
        seen.iter()
            .any(|(r, m)| r == "BeginPreflight" && m.contains("the node is not cordoned")),
        "{seen:?}"
    );

    // Stage Drain (upstream's only behaviour): upstream's events.
    let name = unique("nm-pfe");
    nm::create(&client, &name, &nodes[1]).await;
    nm::wait_phase(&client, &name, MaintenancePhase::Succeeded, LIMIT).await;
    nm::delete_and_wait_restored(&client, &name, &nodes[1]).await;
    wait_for("upstream's events about the Drain", LIMIT, || async {
        let seen = nm::event_summary(&client, &name).await;
        let has = |r: &str, m: &str| seen.iter().any(|e| e.1 == r && e.2 == m);
        if has("BeginMaintenance", "Begin a node maintenance")
            && has("RemovedMaintenance", "Removed a node maintenance")
            && !seen.iter().any(|e| e.1.ends_with("Preflight"))
        {
            Ok(())
        } else {
            Err(format!("{seen:?}"))
        }
    })
    .await;
}

async fn set_paused(client: &kube::Client, name: &str, paused: bool) {
    Api::<NodeMaintenance>::all(client.clone())
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"paused": paused}})),
        )
        .await
        .unwrap_or_else(|e| panic!("pausing NodeMaintenance {name} ({paused}): {e}"));
}

/// Waits for `name`'s `DrainPaused` condition to be `status`.
async fn wait_paused(client: &kube::Client, name: &str, status: &str) {
    nm::wait_status(client, name, &format!("DrainPaused={status}"), LIMIT, |s| {
        condition(s, "DrainPaused").is_some_and(|c| c.0 == status)
    })
    .await;
}

/// For `quiet`, the pod `ns/name` stays and is not being deleted: no round evicted it.
async fn stays(client: &kube::Client, ns: &str, pod: &str, quiet: Duration, why: &str) {
    let until = std::time::Instant::now() + quiet;
    while std::time::Instant::now() < until {
        assert!(live_pod(client, ns, pod).await.is_some(), "{why}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// `docs/drain-contract.md` §10 (`paused` with `stage`): the pause holds evictions only, never
/// the node steps. A maintenance created paused at `Idle` and moved to `Drain` enters its node
/// (cordon, taints, lease) and evicts nothing for 10 s, saying `DrainPaused`; moved back to
/// `Idle` while still paused, its node is restored and the lease given up; moved to `Drain`
/// again and unpaused, its pod is evicted and it Succeeds.
#[tokio::test]
async fn a_paused_maintenance_moved_between_stages_enters_and_restores_its_node_and_evicts_nothing()
{
    let env = operator_env();
    let client = env.cluster.client().await;
    let (node, ns) = node_with_web(&client, "pst").await;
    let name = unique("nm-pst");
    let mut nm = nm::new(&name, &node, "e2e paused across stages");
    nm.spec.knobs.stage = serde_json::from_value(json!("Idle")).unwrap();
    nm.spec.knobs.paused = Some(true);
    Api::<NodeMaintenance>::all(client.clone())
        .create(&PostParams::default(), &nm)
        .await
        .unwrap();
    wait_stage(&client, &name, "Idle").await;

    set_stage(&client, &name, "Drain").await;
    wait_for("node entered while paused", LIMIT, || {
        node::in_maintenance(&client, &node)
    })
    .await;
    wait_lease(&client, &node, true).await;
    wait_paused(&client, &name, "True").await;
    stays(
        &client,
        &ns,
        "web",
        Duration::from_secs(10),
        "evicted while paused at Drain",
    )
    .await;

    set_stage(&client, &name, "Idle").await;
    wait_for("node restored while paused", LIMIT, || {
        node::restored(&client, &node)
    })
    .await;
    wait_lease(&client, &node, false).await;
    assert!(live_pod(&client, &ns, "web").await.is_some());

    set_stage(&client, &name, "Drain").await;
    wait_for("node entered again", LIMIT, || {
        node::in_maintenance(&client, &node)
    })
    .await;
    set_paused(&client, &name, false).await;
    nm::wait_phase(&client, &name, MaintenancePhase::Succeeded, LIMIT).await;
    assert!(live_pod(&client, &ns, "web").await.is_none());
    nm::delete_and_wait_restored(&client, &name, &node).await;
}

/// `docs/drain-contract.md` §10 (`stage` and `startAt` with deletion): a maintenance deleted at
/// `Cordon` restores what Cordon put on the node (cordon, taints, label, lease) and its pod
/// stays; one deleted before its window opens is gone with nothing on its node (no lease, no
/// drain start) and its pod untouched.
#[tokio::test]
async fn deleting_at_cordon_or_before_the_window_restores_what_that_stage_put_on_the_node() {
    let env = operator_env();
    let client = env.cluster.client().await;
    let group = unique("del");
    let nodes = worker_nodes(env.cluster, &client, &group, 2).await;
    let ns = namespace(&client, "del").await;
    for (i, node) in nodes.iter().enumerate() {
        bare_pod(&client, &ns, &format!("web{i}"), node, json!({})).await;
        wait_running(&client, &ns, &format!("web{i}"), 1, LIMIT).await;
    }
    let cordon = unique("nm-delc");
    create(&client, &cordon, &nodes[0], "Cordon").await;
    let window = unique("nm-delw");
    let mut nm = nm::new(&window, &nodes[1], "e2e deleted before its window");
    let opens = jiff::Timestamp::now() + jiff::SignedDuration::from_hours(1);
    nm.spec.knobs.start_at = Some(opens.to_string());
    Api::<NodeMaintenance>::all(client.clone())
        .create(&PostParams::default(), &nm)
        .await
        .unwrap();
    wait_for("node entered at Cordon", LIMIT, || {
        node::in_maintenance(&client, &nodes[0])
    })
    .await;
    wait_lease(&client, &nodes[0], true).await;
    wait_stage(&client, &window, "MaintenanceWindow").await;

    nm::delete_and_wait_restored(&client, &cordon, &nodes[0]).await;
    wait_lease(&client, &nodes[0], false).await;
    nm::delete(&client, &window).await;
    nm::wait_gone(&client, &window, LIMIT).await;
    node::restored(&client, &nodes[1]).await.unwrap();
    assert!(lease(&client, &nodes[1]).await.is_none());
    let n = Api::<Node>::all(client.clone())
        .get(&nodes[1])
        .await
        .unwrap();
    let annotations = n.metadata.annotations.unwrap_or_default();
    assert!(
        !annotations.contains_key("nodemaintenance.medik8s.io/drain-started"),
        "a drain start on a node whose window never opened: {annotations:?}"
    );
    for i in 0..2 {
        assert!(live_pod(&client, &ns, &format!("web{i}")).await.is_some());
    }
}

/// `docs/drain-contract.md` §10 (`expireAfter` with `paused`): a Succeeded maintenance that is
/// then paused stays Succeeded and still deletes itself once `expireAfter` has passed since its
/// `Drained` turned True; its node is restored.
#[tokio::test]
async fn a_succeeded_maintenance_paused_still_expires() {
    let env = operator_env();
    let client = env.cluster.client().await;
    let group = unique("pexp");
    let node = worker_nodes(env.cluster, &client, &group, 1)
        .await
        .remove(0);
    let name = unique("nm-pexp");
    let mut nm = nm::new(&name, &node, "e2e expiry while paused");
    nm.spec.knobs.expire_after = Some("15s".into());
    Api::<NodeMaintenance>::all(client.clone())
        .create(&PostParams::default(), &nm)
        .await
        .unwrap();
    let done = nm::wait_phase(&client, &name, MaintenancePhase::Succeeded, LIMIT).await;
    let succeeded = drained_at(&done);
    set_paused(&client, &name, true).await;
    nm::wait_gone(&client, &name, LIMIT).await;
    let gone = jiff::Timestamp::now();
    assert!(
        gone >= succeeded + jiff::SignedDuration::from_secs(15),
        "gone at {gone}, Succeeded at {succeeded}: before expireAfter"
    );
    wait_for("node restored", LIMIT, || node::restored(&client, &node)).await;
    assert!(lease(&client, &node).await.is_none());
}

/// `docs/drain-contract.md` §10 (`startAt` with `paused`): a maintenance created paused with a
/// window 20 s ahead leaves its node alone until the window opens; then its node is entered
/// (the pause holds evictions, not the node steps) and its pod stays, `DrainPaused`, until it is
/// unpaused; then it Succeeds.
#[tokio::test]
async fn a_paused_maintenance_waits_for_its_window_then_enters_its_node_and_evicts_once_unpaused() {
    let env = operator_env();
    let client = env.cluster.client().await;
    let (node, ns) = node_with_web(&client, "pwin").await;
    let name = unique("nm-pwin");
    let opens = jiff::Timestamp::from_second(jiff::Timestamp::now().as_second() + 20).unwrap();
    let mut nm = nm::new(&name, &node, "e2e paused with a window");
    nm.spec.knobs.start_at = Some(opens.to_string());
    nm.spec.knobs.paused = Some(true);
    Api::<NodeMaintenance>::all(client.clone())
        .create(&PostParams::default(), &nm)
        .await
        .unwrap();
    wait_stage(&client, &name, "MaintenanceWindow").await;
    assert!(
        jiff::Timestamp::now() < opens,
        "the window opened too soon to tell"
    );
    node::restored(&client, &node).await.unwrap();
    assert!(lease(&client, &node).await.is_none());

    wait_for("node entered once the window opened", LIMIT, || {
        node::in_maintenance(&client, &node)
    })
    .await;
    assert!(
        jiff::Timestamp::now() >= opens,
        "entered before the window opened at {opens}"
    );
    wait_paused(&client, &name, "True").await;
    stays(
        &client,
        &ns,
        "web",
        Duration::from_secs(10),
        "evicted while paused after the window opened",
    )
    .await;
    set_paused(&client, &name, false).await;
    nm::wait_phase(&client, &name, MaintenancePhase::Succeeded, LIMIT).await;
    assert!(live_pod(&client, &ns, "web").await.is_none());
    nm::delete_and_wait_restored(&client, &name, &node).await;
}

/// `docs/drain-contract.md` §10 (`nodeConditions` with `paused` and a move back): a paused
/// maintenance at `Drain` holds its node and its drain has started (`DrainInProgress=True`,
/// `DrainStarted`) though nothing is evicted; moved back to `Idle`, the conditions follow the
/// stage (`MaintenanceInProgress=False`, `MaintenanceNotStarted`; the drain `DrainNotStarted`);
/// moved to `Drain` again and unpaused, the drain completes (`Drained=True`, `DrainCompleted`).
#[tokio::test]
async fn node_conditions_follow_a_paused_maintenance_moved_back_and_on() {
    let env = operator_env();
    let client = env.cluster.client().await;
    let (node, ns) = node_with_web(&client, "plc").await;
    let name = unique("nm-plc");
    let mut nm = nm::new(&name, &node, "e2e node conditions, paused");
    nm.spec.knobs.paused = Some(true);
    nm.spec.knobs.node_conditions = Some(true);
    Api::<NodeMaintenance>::all(client.clone())
        .create(&PostParams::default(), &nm)
        .await
        .unwrap();
    let started = ("DrainStarted", "AdminRequested");
    wait_node_conditions(
        &client,
        &node,
        &name,
        [
            ("MaintenancePlanned", "True", started.1),
            ("MaintenanceInProgress", "True", started.1),
            ("DrainInProgress", "True", started.0),
            ("Drained", "False", started.0),
        ],
    )
    .await;
    wait_paused(&client, &name, "True").await;
    assert!(
        live_pod(&client, &ns, "web").await.is_some(),
        "evicted while paused"
    );

    set_stage(&client, &name, "Idle").await;
    let not_started = ("DrainNotStarted", "MaintenanceNotStarted");
    wait_node_conditions(
        &client,
        &node,
        &name,
        [
            ("MaintenancePlanned", "True", "AdminRequested"),
            ("MaintenanceInProgress", "False", not_started.1),
            ("DrainInProgress", "False", not_started.0),
            ("Drained", "False", not_started.0),
        ],
    )
    .await;
    wait_for("node restored", LIMIT, || node::restored(&client, &node)).await;

    set_stage(&client, &name, "Drain").await;
    set_paused(&client, &name, false).await;
    nm::wait_phase(&client, &name, MaintenancePhase::Succeeded, LIMIT).await;
    wait_node_conditions(
        &client,
        &node,
        &name,
        [
            ("MaintenancePlanned", "True", "AdminRequested"),
            ("MaintenanceInProgress", "True", "AdminRequested"),
            ("DrainInProgress", "False", "DrainCompleted"),
            ("Drained", "True", "DrainCompleted"),
        ],
    )
    .await;
    nm::delete_and_wait_restored(&client, &name, &node).await;
}

/// `docs/drain-contract.md` §10 (pod drain labels with `stage` and deletion): created at
/// `Cordon`, nothing is evicted; moved to `Drain`, the first round applies the labels: the plain
/// pod is evicted, the `skip` pod kept, the `wait-completed` pod waited for (Running,
/// `WaitingForCompletion`); moved back to `Idle`, the node is restored and neither labelled pod
/// is evicted by the move; deleted while the job still runs, the node is restored and the job
/// and the skipped pod are still there (a pod waited for never holds back the deletion).
#[tokio::test]
async fn drain_labels_apply_from_the_first_drain_round_and_never_hold_a_move_back_or_a_delete() {
    let env = operator_env();
    let client = env.cluster.client().await;
    let group = unique("lbl");
    let node = worker_nodes(env.cluster, &client, &group, 1)
        .await
        .remove(0);
    let ns = namespace(&client, "lbl").await;
    let label = |v: &str| json!({"metadata": {"labels": {"nodemaintenance.medik8s.io/drain": v}}});
    bare_pod(&client, &ns, "web", &node, json!({})).await;
    bare_pod(&client, &ns, "cache", &node, label("skip")).await;
    bare_pod(&client, &ns, "job", &node, label("wait-completed")).await;
    for p in ["web", "cache", "job"] {
        wait_running(&client, &ns, p, 1, LIMIT).await;
    }
    let name = unique("nm-lbl");
    create(&client, &name, &node, "Cordon").await;
    wait_for("node entered at Cordon", LIMIT, || {
        node::in_maintenance(&client, &node)
    })
    .await;
    stays(
        &client,
        &ns,
        "web",
        Duration::from_secs(3),
        "Cordon evicted a pod",
    )
    .await;

    set_stage(&client, &name, "Drain").await;
    let waiting = nm::wait_status(&client, &name, "only the job waited for", LIMIT, |s| {
        let reasons: Vec<&str> = s
            .blockers
            .iter()
            .flatten()
            .map(|b| b.reason.as_str())
            .collect();
        reasons == ["WaitingForCompletion"]
    })
    .await;
    assert_eq!(
        waiting.status.and_then(|s| s.phase),
        Some(MaintenancePhase::Running)
    );
    wait_for("web evicted", LIMIT, || async {
        match live_pod(&client, &ns, "web").await {
            Some(_) => Err("still there".to_string()),
            None => Ok(()),
        }
    })
    .await;
    for kept in ["cache", "job"] {
        assert!(
            live_pod(&client, &ns, kept).await.is_some(),
            "{kept} evicted at Drain"
        );
    }

    set_stage(&client, &name, "Idle").await;
    wait_for("node restored", LIMIT, || node::restored(&client, &node)).await;
    stays(
        &client,
        &ns,
        "job",
        Duration::from_secs(3),
        "the job evicted by the move back",
    )
    .await;
    assert!(live_pod(&client, &ns, "cache").await.is_some());

    set_stage(&client, &name, "Drain").await;
    nm::wait_status(&client, &name, "the job waited for again", LIMIT, |s| {
        s.blockers
            .iter()
            .flatten()
            .any(|b| b.reason == "WaitingForCompletion")
    })
    .await;
    nm::delete_and_wait_restored(&client, &name, &node).await;
    for kept in ["cache", "job"] {
        assert!(
            live_pod(&client, &ns, kept).await.is_some(),
            "{kept} evicted by the deletion"
        );
    }
}

/// `docs/drain-contract.md` §10 (`expireAfter` with deletion): a Succeeded maintenance deleted by
/// hand before it expires restores its node at once, and no `MaintenanceExpired` event is
/// written for it.
#[tokio::test]
async fn a_maintenance_deleted_before_it_expires_restores_its_node_without_expiring() {
    let env = operator_env();
    let client = env.cluster.client().await;
    let group = unique("dexp");
    let node = worker_nodes(env.cluster, &client, &group, 1)
        .await
        .remove(0);
    let name = unique("nm-dexp");
    let mut nm = nm::new(&name, &node, "e2e deleted before its expiry");
    nm.spec.knobs.expire_after = Some("1h".into());
    Api::<NodeMaintenance>::all(client.clone())
        .create(&PostParams::default(), &nm)
        .await
        .unwrap();
    nm::wait_phase(&client, &name, MaintenancePhase::Succeeded, LIMIT).await;
    nm::delete_and_wait_restored(&client, &name, &node).await;
    assert!(lease(&client, &node).await.is_none());
    let events = nm::event_summary(&client, &name).await;
    assert!(
        !events.iter().any(|e| e.1 == "MaintenanceExpired"),
        "{events:?}"
    );
}

/// `docs/drain-contract.md` §10 (`startAt` with a move back): a maintenance at `Drain` whose
/// window opens in 20 s, moved back to `Idle` before it opens, stays `Idle` after it opened
/// (nothing on the node, the pod there); moved to `Drain` again once the window is open, it
/// drains at once and Succeeds.
#[tokio::test]
async fn a_maintenance_moved_back_before_its_window_stays_idle_after_it_opens() {
    let env = operator_env();
    let client = env.cluster.client().await;
    let (node, ns) = node_with_web(&client, "wback").await;
    let name = unique("nm-wback");
    let opens = jiff::Timestamp::from_second(jiff::Timestamp::now().as_second() + 20).unwrap();
    let mut nm = nm::new(&name, &node, "e2e window, moved back");
    nm.spec.knobs.start_at = Some(opens.to_string());
    Api::<NodeMaintenance>::all(client.clone())
        .create(&PostParams::default(), &nm)
        .await
        .unwrap();
    wait_stage(&client, &name, "MaintenanceWindow").await;
    set_stage(&client, &name, "Idle").await;
    wait_stage(&client, &name, "Idle").await;
    assert!(
        jiff::Timestamp::now() < opens,
        "the window opened too soon to tell"
    );
    // Past the window's opening by a few passes: still Idle, nothing on the node.
    let past = opens + jiff::SignedDuration::from_secs(3);
    if let Ok(wait) = Duration::try_from(past.duration_since(jiff::Timestamp::now())) {
        tokio::time::sleep(wait).await;
    }
    wait_stage(&client, &name, "Idle").await;
    node::restored(&client, &node).await.unwrap();
    assert!(lease(&client, &node).await.is_none());
    assert!(live_pod(&client, &ns, "web").await.is_some());

    set_stage(&client, &name, "Drain").await;
    nm::wait_phase(&client, &name, MaintenancePhase::Succeeded, LIMIT).await;
    assert!(live_pod(&client, &ns, "web").await.is_none());
    nm::delete_and_wait_restored(&client, &name, &node).await;
}
