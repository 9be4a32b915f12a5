//! Pre-drain hooks end to end (`docs/drain-contract.md` §12): annotations
//! `pre-drain.hook.nodemaintenance.medik8s.io/<owner>` on a NodeMaintenance hold its drain, the
//! node entered, until every owner removed its own; the webhook refuses a hook added once the
//! drain started, an empty owner and a near-miss of the prefix, each by name.
//!
//! The cluster of this binary records every eviction and every pod DELETE in the API server's
//! audit log, so "no eviction while hooked" and "the first eviction 2 s after the last hook
//! went" are the API server's own record, not what the operator believes it sent.

mod common;

use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use common::*;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams, PostParams};
use nmo_devcluster::audit::{AuditCursor, AuditEvent};
use nmo_devcluster::operator::{Operator, OperatorOptions};
use node_maintenance_operator::api::{MaintenancePhase, NodeMaintenance, NodeMaintenanceStatus};
use node_maintenance_operator::policy::pre_drain_hooks::PRE_DRAIN_HOOK_PREFIX;
use serde_json::json;

const LIMIT: Duration = Duration::from_secs(120);

/// Evictions and pod DELETEs by anyone, once each, when the API server received them.
const POLICY: &str = r#"apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["ResponseStarted", "ResponseComplete"]
rules:
- level: Metadata
  resources:
  - group: ""
    resources: ["pods/eviction"]
- level: Metadata
  verbs: ["delete", "deletecollection"]
  resources:
  - group: ""
    resources: ["pods"]
- level: None
"#;

struct Env {
    cluster: Cluster,
    operator: Mutex<Operator>,
    opts: OperatorOptions,
}

/// The tests of this binary one at a time: one of them replaces the operator.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// One cluster with the audit log above, the manifests installed and one operator running with
/// its webhook registered (no leader election, so a replacement starts at once).
fn env() -> &'static Env {
    static ENV: OnceLock<Env> = OnceLock::new();
    ENV.get_or_init(|| {
        let cluster = audited_cluster(POLICY);
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

fn hook(owner: &str) -> String {
    format!("{PRE_DRAIN_HOOK_PREFIX}{owner}")
}

/// The `PreDrainHooks` condition's `(status, message)`.
fn hooks_condition(s: &NodeMaintenanceStatus) -> Option<(String, String)> {
    s.conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "PreDrainHooks")
        .map(|c| (c.status.clone(), c.message.clone()))
}

/// The evictions and pod DELETEs in `ns` the audit log recorded since `cursor` last read,
/// as `verb pod at received`.
fn disruptions(cursor: &mut AuditCursor, ns: &str) -> Vec<AuditEvent> {
    cursor
        .read()
        .unwrap()
        .into_iter()
        .filter(|e| e.namespace == ns && e.resource == "pods")
        .filter(|e| e.subresource == "eviction" || e.verb.starts_with("delete"))
        .collect()
}

fn describe(events: &[AuditEvent]) -> Vec<String> {
    events
        .iter()
        .map(|e| format!("{} {}/{} at {}", e.verb, e.name, e.subresource, e.received))
        .collect()
}

async fn set_annotations(client: &kube::Client, name: &str, annotations: serde_json::Value) {
    Api::<NodeMaintenance>::all(client.clone())
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": annotations}})),
        )
        .await
        .unwrap_or_else(|e| panic!("annotating {name} with {annotations}: {e}"));
}

/// The message of the API server's (or the webhook's) refusal of `result`.
fn refusal<T: std::fmt::Debug>(result: Result<T, kube::Error>) -> String {
    match result {
        Err(kube::Error::Api(s)) => s.message,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

/// `docs/drain-contract.md` §12: a maintenance created with two pre-drain hooks and
/// `drainTimeout: 30s` enters its node (cordon, taints, label) and evicts nothing while either
/// is there: once the status names both, and again once it names the one left after the other
/// owner removed its own, the pods are all there and the API server received no eviction nor pod
/// DELETE; no start is recorded on the node and no deadline is set. Removing the last starts the
/// drain within 2 s (from the removal's response to the first eviction the API server received),
/// the deadline counted from then; a hook added after that is refused by the webhook, naming
/// it; deleted, the node is restored.
#[tokio::test]
async fn two_pre_drain_hooks_hold_the_drain_until_both_owners_remove_theirs() {
    const PODS: usize = 3;
    let _serial = SERIAL.lock().await;
    let env = env();
    let client = env.cluster.client().await;
    let group = unique("hooks");
    let node = worker_nodes(&env.cluster, &client, &group, 1)
        .await
        .remove(0);
    let ns = namespace(&client, "hooks").await;
    deployment(&client, &ns, "web", &group, PODS as i32, 0).await;
    wait_running(&client, &ns, "web", PODS, LIMIT).await;
    let mut audit = AuditCursor::at_end(env.cluster.audit_log_path());
    let name = unique("nm-hooks");
    let mut object = nm::new(&name, &node, "storage first");
    object.metadata.annotations = Some(
        [
            (hook("rook-ceph"), "lowering the OSD budgets".to_string()),
            (hook("backup"), String::new()),
            (
                "nodemaintenance.medik8s.io/drainTimeout".to_string(),
                "30s".to_string(),
            ),
        ]
        .into(),
    );
    let nms = Api::<NodeMaintenance>::all(client.clone());
    nms.create(&PostParams::default(), &object).await.unwrap();
    let names = |owners: &'static [&'static str], absent: &'static [&'static str]| {
        move |s: &NodeMaintenanceStatus| {
            hooks_condition(s).is_some_and(|(status, message)| {
                status == "True"
                    && owners.iter().all(|o| message.contains(&format!("\"{o}\"")))
                    && absent
                        .iter()
                        .all(|o| !message.contains(&format!("\"{o}\"")))
            })
        }
    };
    let held = nm::wait_status(
        &client,
        &name,
        "PreDrainHooks names both",
        LIMIT,
        names(&["backup", "rook-ceph"], &[]),
    )
    .await;
    wait_for("the node entered", LIMIT, || {
        node::in_maintenance(&client, &node)
    })
    .await;
    let held_status = held.status.unwrap_or_default();
    let assert_held = |audit: &mut AuditCursor, status: &NodeMaintenanceStatus, when: &str| {
        let seen = disruptions(audit, &ns);
        assert!(seen.is_empty(), "{when}: {:?}", describe(&seen));
        assert_eq!(status.phase, Some(MaintenancePhase::Running), "{when}");
        assert_eq!(
            status.drain_deadline, None,
            "{when}: no deadline while held"
        );
    };
    assert_held(&mut audit, &held_status, "both hooks present");
    assert_eq!(
        pods(&client, &ns, "web")
            .await
            .iter()
            .filter(|p| running(p))
            .count(),
        PODS
    );
    let nodes = Api::<Node>::all(client.clone());
    let started = |n: &Node| {
        n.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(node_maintenance_operator::api::DRAIN_STARTED_ANNOTATION))
            .cloned()
    };
    assert_eq!(
        started(&nodes.get(&node).await.unwrap()),
        None,
        "no start while held"
    );

    // One owner lets go: still held, naming the other.
    set_annotations(&client, &name, json!({ hook("backup"): null })).await;
    let one = nm::wait_status(
        &client,
        &name,
        "PreDrainHooks names rook-ceph alone",
        LIMIT,
        names(&["rook-ceph"], &["backup"]),
    )
    .await;
    assert_held(
        &mut audit,
        &one.status.unwrap_or_default(),
        "rook-ceph's hook present",
    );
    assert_eq!(
        pods(&client, &ns, "web")
            .await
            .iter()
            .filter(|p| running(p))
            .count(),
        PODS
    );
    assert_eq!(
        started(&nodes.get(&node).await.unwrap()),
        None,
        "no start while held"
    );

    // The last one goes: the drain starts within 2 s.
    set_annotations(&client, &name, json!({ hook("rook-ceph"): null })).await;
    let removed = jiff::Timestamp::now();
    let first = wait_for("the first eviction", LIMIT, || {
        let seen = disruptions(&mut audit, &ns);
        let first = seen
            .iter()
            .find(|e| e.subresource == "eviction")
            .map(|e| e.received);
        async move { first.ok_or_else(|| "none yet".to_string()) }
    })
    .await;
    let after = first.duration_since(removed);
    println!("first eviction {after:?} after the last hook's removal was answered");
    assert!(
        after < jiff::SignedDuration::from_secs(2),
        "the first eviction came {after:?} after the last hook was removed"
    );
    let done = nm::wait_phase(&client, &name, MaintenancePhase::Succeeded, LIMIT).await;
    let status = done.status.unwrap_or_default();
    assert_eq!(
        hooks_condition(&status).map(|c| c.0),
        Some("False".to_string())
    );
    // The deadline counts from the start recorded when the drain started, not from creation.
    let start: jiff::Timestamp = started(&nodes.get(&node).await.unwrap())
        .expect("the start recorded")
        .parse()
        .unwrap();
    assert!(
        start >= removed - jiff::SignedDuration::from_secs(1),
        "the start {start} predates the last hook's removal at {removed}"
    );
    assert_eq!(
        status.drain_deadline.map(|d| d.0),
        Some(start + jiff::SignedDuration::from_secs(30))
    );

    // Once the drain started, a new hook is refused by name; removing is always allowed.
    let denied = refusal(
        nms.patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": { hook("late"): "" }}})),
        )
        .await,
    );
    println!("late hook: {denied}");
    assert!(
        denied.contains(&format!(
            "{}: a pre-drain hook cannot be added once the drain has started",
            hook("late")
        )),
        "{denied}"
    );
    nm::delete_and_wait_restored(&client, &name, &node).await;
}

/// `docs/drain-contract.md` §12: a hook added before the drain started (stage Cordon) is
/// accepted; the webhook refuses an empty owner and a near-miss of the prefix within
/// `nodemaintenance.medik8s.io` by name, leaves other domains alone; a hooked maintenance moved
/// from Cordon to Drain stays held (cordoned, no eviction) and, deleted while hooked, restores
/// its node.
#[tokio::test]
async fn hook_names_are_checked_and_a_hooked_maintenance_deleted_restores_its_node() {
    let _serial = SERIAL.lock().await;
    let env = env();
    let client = env.cluster.client().await;
    let group = unique("hookname");
    let node = worker_nodes(&env.cluster, &client, &group, 1)
        .await
        .remove(0);
    let ns = namespace(&client, "hookname").await;
    deployment(&client, &ns, "web", &group, 2, 0).await;
    wait_running(&client, &ns, "web", 2, LIMIT).await;
    let nms = Api::<NodeMaintenance>::all(client.clone());
    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let with = |key: &str| {
        let mut object = nm::new(&unique("nm-hookname"), &node, "names");
        object.metadata.annotations = Some([(key.to_string(), "x".to_string())].into());
        object
    };
    for typo in [
        "pre-drain.hooks.nodemaintenance.medik8s.io/x",
        "predrain.hook.nodemaintenance.medik8s.io/x",
    ] {
        let denied = refusal(nms.create(&dry, &with(typo)).await);
        println!("{typo}: {denied}");
        assert!(
            denied.contains(&format!("{typo}: unknown annotation")),
            "{denied}"
        );
    }
    // Empty owner: the API server's own annotation rules refuse it before any webhook, naming
    // the key; the webhook's rule (unit-tested) says the same where the API server would not.
    let denied = refusal(nms.create(&dry, &with(PRE_DRAIN_HOOK_PREFIX)).await);
    println!("empty owner: {denied}");
    assert!(denied.contains(PRE_DRAIN_HOOK_PREFIX), "{denied}");
    // Another domain's hook is not ours to judge; ours at creation is accepted.
    nms.create(&dry, &with("pre-drain.hook.example.com/x"))
        .await
        .unwrap();
    nms.create(&dry, &with(&hook("rook-ceph"))).await.unwrap();

    // Created at Cordon, a hook added before the drain started is accepted.
    let name = unique("nm-hookcordon");
    let mut object = nm::new(&name, &node, "cordon first");
    object.metadata.annotations = Some(
        [(
            "nodemaintenance.medik8s.io/stage".to_string(),
            "Cordon".to_string(),
        )]
        .into(),
    );
    nms.create(&PostParams::default(), &object).await.unwrap();
    wait_for("the node entered", LIMIT, || {
        node::in_maintenance(&client, &node)
    })
    .await;
    let mut audit = AuditCursor::at_end(env.cluster.audit_log_path());
    set_annotations(&client, &name, json!({ hook("rook-ceph"): "" })).await;
    set_annotations(
        &client,
        &name,
        json!({"nodemaintenance.medik8s.io/stage": "Drain"}),
    )
    .await;
    nm::wait_status(&client, &name, "held at Drain by the hook", LIMIT, |s| {
        hooks_condition(s).is_some_and(|(v, m)| v == "True" && m.contains("\"rook-ceph\""))
            && s.conditions
                .iter()
                .flatten()
                .any(|c| c.type_ == "Stage" && c.reason == "Drain")
    })
    .await;
    wait_for("the node still entered", LIMIT, || {
        node::in_maintenance(&client, &node)
    })
    .await;
    let seen = disruptions(&mut audit, &ns);
    assert!(seen.is_empty(), "hooked at Drain: {:?}", describe(&seen));
    nm::delete_and_wait_restored(&client, &name, &node).await;
    let seen = disruptions(&mut audit, &ns);
    assert!(
        seen.is_empty(),
        "deleted while hooked: {:?}",
        describe(&seen)
    );
    assert_eq!(
        pods(&client, &ns, "web")
            .await
            .iter()
            .filter(|p| running(p))
            .count(),
        2
    );
}

/// `docs/drain-contract.md` §12, the restart: hooks are read from the object, no memory holds
/// them. A hooked maintenance's operator is SIGKILLed and a new one started; a second hook added
/// then is named by the new process's status (its pass ran) while the API server still received
/// no eviction nor pod DELETE; removing both starts the drain within 2 s and it Succeeds.
#[tokio::test]
async fn hooks_hold_across_a_sigkill_and_a_new_operator() {
    let _serial = SERIAL.lock().await;
    let env = env();
    let client = env.cluster.client().await;
    let group = unique("hookkill");
    let node = worker_nodes(&env.cluster, &client, &group, 1)
        .await
        .remove(0);
    let ns = namespace(&client, "hookkill").await;
    deployment(&client, &ns, "web", &group, 2, 0).await;
    wait_running(&client, &ns, "web", 2, LIMIT).await;
    let mut audit = AuditCursor::at_end(env.cluster.audit_log_path());
    let name = unique("nm-hookkill");
    let mut object = nm::new(&name, &node, "restart");
    object.metadata.annotations = Some([(hook("rook-ceph"), String::new())].into());
    let nms = Api::<NodeMaintenance>::all(client.clone());
    nms.create(&PostParams::default(), &object).await.unwrap();
    nm::wait_status(
        &client,
        &name,
        "PreDrainHooks names rook-ceph",
        LIMIT,
        |s| hooks_condition(s).is_some_and(|(v, m)| v == "True" && m.contains("\"rook-ceph\"")),
    )
    .await;
    wait_for("the node entered", LIMIT, || {
        node::in_maintenance(&client, &node)
    })
    .await;
    env.operator.lock().unwrap().process().kill();
    let replacement = fixtures::start_registered(&env.cluster, &env.opts)
        .unwrap_or_else(|e| panic!("the new operator did not start: {e}"));
    *env.operator.lock().unwrap() = replacement;
    set_annotations(&client, &name, json!({ hook("backup"): "" })).await;
    nm::wait_status(
        &client,
        &name,
        "the new process names both hooks",
        LIMIT,
        |s| {
            hooks_condition(s).is_some_and(|(v, m)| {
                v == "True" && m.contains("\"rook-ceph\"") && m.contains("\"backup\"")
            })
        },
    )
    .await;
    let seen = disruptions(&mut audit, &ns);
    assert!(
        seen.is_empty(),
        "hooked across the restart: {:?}",
        describe(&seen)
    );
    wait_for("the node still entered", LIMIT, || {
        node::in_maintenance(&client, &node)
    })
    .await;
    set_annotations(
        &client,
        &name,
        json!({ hook("backup"): null, hook("rook-ceph"): null }),
    )
    .await;
    let removed = jiff::Timestamp::now();
    let first = wait_for("the first eviction", LIMIT, || {
        let seen = disruptions(&mut audit, &ns);
        let first = seen
            .iter()
            .find(|e| e.subresource == "eviction")
            .map(|e| e.received);
        async move { first.ok_or_else(|| "none yet".to_string()) }
    })
    .await;
    let after = first.duration_since(removed);
    println!("after the restart: first eviction {after:?} after both hooks' removal was answered");
    assert!(after < jiff::SignedDuration::from_secs(2), "{after:?}");
    nm::wait_phase(&client, &name, MaintenancePhase::Succeeded, LIMIT).await;
    nm::delete_and_wait_restored(&client, &name, &node).await;
}

/// `docs/drain-contract.md` §12, pause and hooks: both hold. A paused maintenance with a hook
/// whose hook is removed stays held by the pause: once its status says the hooks are gone
/// (`PreDrainHooks=False`, a pass ran after the removal) with `DrainPaused=True`, the API server
/// has received no eviction nor pod DELETE. The drain's start is recorded then, not before: a
/// pause holds evictions, not the deadline (§10), a hook holds both. Unpaused, it drains and
/// Succeeds.
#[tokio::test]
async fn a_paused_maintenance_whose_hooks_are_gone_stays_held_until_unpaused() {
    let _serial = SERIAL.lock().await;
    let env = env();
    let client = env.cluster.client().await;
    let group = unique("hookpause");
    let node = worker_nodes(&env.cluster, &client, &group, 1)
        .await
        .remove(0);
    let ns = namespace(&client, "hookpause").await;
    deployment(&client, &ns, "web", &group, 2, 0).await;
    wait_running(&client, &ns, "web", 2, LIMIT).await;
    let mut audit = AuditCursor::at_end(env.cluster.audit_log_path());
    let name = unique("nm-hookpause");
    let mut object = nm::new(&name, &node, "pause and hook");
    object.metadata.annotations = Some(
        [
            (hook("rook-ceph"), String::new()),
            (
                node_maintenance_operator::policy::PAUSED_ANNOTATION.to_string(),
                "true".to_string(),
            ),
        ]
        .into(),
    );
    let nms = Api::<NodeMaintenance>::all(client.clone());
    nms.create(&PostParams::default(), &object).await.unwrap();
    nm::wait_status(&client, &name, "hooked and paused", LIMIT, |s| {
        hooks_condition(s).is_some_and(|(v, _)| v == "True")
    })
    .await;
    let held = Api::<Node>::all(client.clone()).get(&node).await.unwrap();
    let annotations = held.metadata.annotations.unwrap_or_default();
    assert!(
        !annotations.contains_key(node_maintenance_operator::api::DRAIN_STARTED_ANNOTATION),
        "no start while hooked: {annotations:?}"
    );
    set_annotations(&client, &name, json!({ hook("rook-ceph"): null })).await;
    let removed = jiff::Timestamp::now();
    let paused = |s: &NodeMaintenanceStatus| {
        s.conditions
            .iter()
            .flatten()
            .any(|c| c.type_ == "DrainPaused" && c.status == "True")
    };
    nm::wait_status(&client, &name, "hooks gone, still paused", LIMIT, |s| {
        hooks_condition(s).is_some_and(|(v, _)| v == "False") && paused(s)
    })
    .await;
    wait_for("the node entered", LIMIT, || {
        node::in_maintenance(&client, &node)
    })
    .await;
    let seen = disruptions(&mut audit, &ns);
    assert!(seen.is_empty(), "paused, hooks gone: {:?}", describe(&seen));
    let start = node_drain_started(&client, &node).await;
    assert!(
        start >= removed - jiff::SignedDuration::from_secs(1),
        "the start {start} predates the hook's removal at {removed}"
    );
    set_annotations(
        &client,
        &name,
        json!({ node_maintenance_operator::policy::PAUSED_ANNOTATION: "false" }),
    )
    .await;
    nm::wait_phase(&client, &name, MaintenancePhase::Succeeded, LIMIT).await;
    let seen = disruptions(&mut audit, &ns);
    assert!(
        seen.iter().any(|e| e.subresource == "eviction"),
        "unpaused, evicted: {:?}",
        describe(&seen)
    );
    nm::delete_and_wait_restored(&client, &name, &node).await;
}
