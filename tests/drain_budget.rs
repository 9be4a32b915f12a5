//! The cluster-wide drain budget end to end (`docs/drain-contract.md` §10,
//! `--max-parallel-drains`): five maintenances with a budget of two nodes out of service. Two
//! nodes are cordoned; three wait as `DrainQueued` with their positions, their nodes left in
//! service (schedulable, no lease); a maintenance that Succeeded keeps its slot while its node is
//! cordoned, and the API server's audit log shows each node's evictions starting only after the
//! maintenance two places ahead was deleted (its node released), in creation order, across an
//! operator restart mid-queue (a new leader computes the same queue). Then a node budget
//! (`--max-parallel-drains-for`): storage nodes one at a time inside the cluster-wide two, a
//! younger maintenance of another node passing the storage ones that wait. And §10's knob
//! combinations with the queue: a waiting maintenance runs no round whatever its knobs, a paused
//! or Succeeded holder keeps its slot, one moved to `Idle` frees it, and the waiting one's
//! knobs (deadline, rules, DaemonSets, surge) apply from its slot.
//! Its own cluster: the operator runs with flags the other binaries' operators do not have.

mod common;

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use common::*;
use kube::api::{Api, PostParams};
use nmo_devcluster::audit::{AuditCursor, AuditEvent, EVICTIONS_POLICY};
use nmo_devcluster::operator::{Operator, OperatorOptions};
use node_maintenance_operator::api::{MaintenancePhase, NodeMaintenance, Stage};
use serde_json::json;

const LIMIT: Duration = Duration::from_secs(120);
const MAINTENANCES: usize = 5;
const SLOTS: usize = 2;
/// The label of the nodes whose own budget is 1.
const STORAGE_LABEL: &str = "nmo-budget-test/storage";

struct Env {
    cluster: Cluster,
    options: OperatorOptions,
}

fn env() -> &'static Env {
    static ENV: OnceLock<Env> = OnceLock::new();
    ENV.get_or_init(|| {
        let cluster = audited_cluster(EVICTIONS_POLICY);
        let mut options = installed(&cluster).options("operator");
        options
            .extra_args
            .push(format!("--max-parallel-drains={SLOTS}"));
        options
            .extra_args
            .push(format!("--max-parallel-drains-for={STORAGE_LABEL}=1"));
        Env { cluster, options }
    })
}

fn start(env: &Env, name: &str) -> Operator {
    let mut opts = env.options.clone();
    opts.name = name.into();
    fixtures::start_registered(&env.cluster, &opts)
        .unwrap_or_else(|e| panic!("{name} did not start: {e}"))
}

/// For 5 s after `name` Succeeded, `next` still waits and its node stays in service: a slot is
/// held until the node is released, not freed at Succeeded.
async fn still_waits_after_success(client: &kube::Client, name: &str, next: &str, node: &str) {
    let api = Api::<NodeMaintenance>::all(client.clone());
    let until = Instant::now() + Duration::from_secs(5);
    while Instant::now() < until {
        let nm = api.get(next).await.unwrap();
        assert!(
            queue_message(&nm).is_some(),
            "{next} started while {name}, Succeeded, still holds its node: {:?}",
            nm.status
        );
        node::restored(client, node)
            .await
            .unwrap_or_else(|e| panic!("{next}'s node {node} taken out of service: {e}"));
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// One test at a time: each starts its own operator on the binary's one cluster.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn queue_message(nm: &NodeMaintenance) -> Option<String> {
    nm.status
        .iter()
        .flat_map(|s| s.conditions.iter().flatten())
        .find(|c| c.type_ == "DrainQueued" && c.status == "True")
        .map(|c| c.message.clone())
}

#[tokio::test]
async fn max_parallel_drains_keeps_two_draining_in_creation_order_across_a_restart() {
    let _serial = SERIAL.lock().await;
    let env = env();
    let mut operator = Some(start(env, "operator-1"));
    let client = env.cluster.client().await;
    let group = unique("slots");
    let nodes = worker_nodes(&env.cluster, &client, &group, MAINTENANCES).await;
    let ns = namespace(&client, "slots").await;
    // One pod per node, each held by a budget of its own until the test deletes it.
    let mut budgets = Vec::new();
    for (i, node) in nodes.iter().enumerate() {
        bare_pod(&client, &ns, &format!("p{i}"), node, json!({})).await;
        budgets.push(budget(&client, &ns, &format!("b{i}"), &format!("p{i}"), 0, 1).await);
    }
    let mut audit = AuditCursor::at_end(env.cluster.audit_log_path());
    let prefix = unique("nm-slots");
    let names: Vec<String> = (0..MAINTENANCES).map(|i| format!("{prefix}-{i}")).collect();
    let created = Instant::now();
    for (name, node) in names.iter().zip(&nodes) {
        nm::create(&client, name, node).await;
    }
    for node in &nodes[..SLOTS] {
        wait_for(&format!("{node} cordoned"), LIMIT, || {
            node::in_maintenance(&client, node)
        })
        .await;
    }
    eprintln!(
        "{SLOTS} nodes in maintenance {:.1} s after the first create",
        created.elapsed().as_secs_f64()
    );
    for (k, name) in names.iter().enumerate().skip(SLOTS) {
        let position = k - SLOTS + 1;
        let expected = format!("position {position} in the queue");
        nm::wait_status(&client, name, &expected, LIMIT, |s| {
            s.conditions
                .iter()
                .flatten()
                .any(|c| c.type_ == "DrainQueued" && c.message.contains(&expected))
        })
        .await;
        // Waiting, its node stays in service: not cordoned, no taint, no lease.
        node::restored(&client, &nodes[k])
            .await
            .unwrap_or_else(|e| panic!("{name} waits but its node is out of service: {e}"));
    }
    for name in &names[..SLOTS] {
        nm::wait_status(&client, name, "held by its budget", LIMIT, |s| {
            s.blockers
                .iter()
                .flatten()
                .any(|b| b.reason == "PodDisruptionBudget")
        })
        .await;
    }

    // Release the budgets in creation order, each maintenance deleted once it Succeeded (its
    // node released); restart the operator once mid-queue.
    let api = Api::<NodeMaintenance>::all(client.clone());
    let mut released = Vec::new();
    for (k, name) in names.iter().enumerate() {
        if k == 2 {
            let mut old = operator.take().unwrap();
            old.process().stop(Duration::from_secs(10));
            operator = Some(start(env, "operator-2"));
        }
        budgets[k]
            .delete(&format!("b{k}"), &Default::default())
            .await
            .unwrap();
        nm::wait_phase(&client, name, MaintenancePhase::Succeeded, LIMIT).await;
        if let Some(next) = names.get(k + SLOTS) {
            still_waits_after_success(&client, name, next, &nodes[k + SLOTS]).await;
        }
        // The slot frees no sooner than the delete (whole seconds, as the audit log's).
        released.push(jiff::Timestamp::now());
        nm::delete_and_wait_restored(&client, name, &nodes[k]).await;
        if let Some(next) = names.get(k + SLOTS) {
            nm::wait_status(&client, next, "a slot, its evictions started", LIMIT, |s| {
                s.blockers
                    .iter()
                    .flatten()
                    .any(|b| b.reason == "PodDisruptionBudget")
            })
            .await;
        }
    }

    // The API server's record: node k's first eviction came after maintenance k-2 was deleted
    // (1 s of slack for the clocks' whole seconds), and within 10 s of it.
    let events: Vec<AuditEvent> = audit
        .read()
        .unwrap()
        .into_iter()
        .filter(|e| {
            e.subresource == "eviction" && e.namespace == ns && e.stage == "RequestReceived"
        })
        .collect();
    let first: Vec<jiff::Timestamp> = (0..MAINTENANCES)
        .map(|k| {
            events
                .iter()
                .filter(|e| e.name == format!("p{k}"))
                .map(|e| e.received)
                .min()
                .unwrap_or_else(|| panic!("no eviction of p{k} recorded"))
        })
        .collect();
    let slack = jiff::SignedDuration::from_secs(1);
    let mut waits = Vec::new();
    for k in SLOTS..MAINTENANCES {
        let freed = released[k - SLOTS];
        assert!(
            first[k] + slack >= freed,
            "p{k} asked at {} before {} was released at {freed}: more than {SLOTS} nodes out of service at once",
            first[k],
            names[k - SLOTS]
        );
        waits.push(first[k].duration_since(freed));
    }
    // The first two start together; the queued ones in creation order.
    for k in SLOTS + 1..MAINTENANCES {
        assert!(
            first[k] >= first[k - 1],
            "started out of creation order: {first:?}"
        );
    }
    eprintln!("from a slot freeing to the next maintenance's first eviction: {waits:?}");
    for w in &waits {
        assert!(
            *w <= jiff::SignedDuration::from_secs(10),
            "a freed slot started the next maintenance only {w} later: {waits:?}"
        );
    }

    // A node budget: storage nodes one at a time, inside the cluster-wide two. In creation
    // order s0 drains, s1 waits for the storage budget, w0 drains, s2 waits (both budgets full).
    let group = unique("storage");
    let nodes = worker_nodes(&env.cluster, &client, &group, 4).await;
    for node in &nodes[..3] {
        env.cluster
            .kubectl_run(&["label", "node", node, &format!("{STORAGE_LABEL}=")], None)
            .unwrap();
    }
    let order = [&nodes[0], &nodes[1], &nodes[3], &nodes[2]];
    let mut budgets = Vec::new();
    for (i, node) in order.iter().enumerate() {
        bare_pod(&client, &ns, &format!("q{i}"), node, json!({})).await;
        budgets.push(budget(&client, &ns, &format!("c{i}"), &format!("q{i}"), 0, 1).await);
    }
    let prefix = unique("nm-storage");
    let names: Vec<String> = (0..4).map(|i| format!("{prefix}-{i}")).collect();
    for (name, node) in names.iter().zip(order) {
        nm::create(&client, name, node).await;
    }
    let storage_full = format!("--max-parallel-drains-for={STORAGE_LABEL}=1 is full");
    for (k, expected) in [
        (1, "position 1 in the queue"),
        (3, "position 2 in the queue"),
    ] {
        nm::wait_status(&client, &names[k], expected, LIMIT, |s| {
            s.conditions
                .iter()
                .flatten()
                .any(|c| c.type_ == "DrainQueued" && c.message.contains(expected))
        })
        .await;
    }
    let s1 = api.get(&names[1]).await.unwrap();
    let message = queue_message(&s1).unwrap_or_default();
    assert!(message.contains(&storage_full), "{message}");
    for k in [0, 2] {
        nm::wait_status(&client, &names[k], "held by its budget", LIMIT, |s| {
            s.blockers
                .iter()
                .flatten()
                .any(|b| b.reason == "PodDisruptionBudget")
        })
        .await;
    }
    budgets[0].delete("c0", &Default::default()).await.unwrap();
    nm::wait_phase(&client, &names[0], MaintenancePhase::Succeeded, LIMIT).await;
    still_waits_after_success(&client, &names[0], &names[1], order[1]).await;
    nm::delete_and_wait_restored(&client, &names[0], order[0]).await;
    nm::wait_status(
        &client,
        &names[1],
        "the storage slot, its evictions started",
        LIMIT,
        |s| {
            s.blockers
                .iter()
                .flatten()
                .any(|b| b.reason == "PodDisruptionBudget")
        },
    )
    .await;
    let s2 = api.get(&names[3]).await.unwrap();
    assert!(
        queue_message(&s2).is_some(),
        "s2 started with both budgets full"
    );
    for (k, name) in names.iter().enumerate().skip(1) {
        budgets[k]
            .delete(&format!("c{k}"), &Default::default())
            .await
            .unwrap();
        nm::wait_phase(&client, name, MaintenancePhase::Succeeded, LIMIT).await;
        nm::delete_and_wait_restored(&client, name, order[k]).await;
    }
    drop(operator);
}

/// `docs/drain-contract.md` §10 (the queue with `stage` and `startAt`): only a maintenance that
/// goes as far as the drain takes part in the budget. With a budget of two, two older
/// maintenances that do not drain (one at stage `Idle`, one whose window opens in an hour) hold
/// no slot: a younger one at `Drain` is never queued and Succeeds, its pod evicted; the two
/// leave their nodes untouched.
#[tokio::test]
async fn maintenances_short_of_the_drain_or_before_their_window_hold_no_slot() {
    let _serial = SERIAL.lock().await;
    let env = env();
    let _operator = start(env, "operator-short");
    let client = env.cluster.client().await;
    let group = unique("short");
    let nodes = worker_nodes(&env.cluster, &client, &group, SLOTS + 1).await;
    let ns = namespace(&client, "short").await;
    bare_pod(&client, &ns, "web", &nodes[SLOTS], json!({})).await;
    wait_running(&client, &ns, "web", 1, LIMIT).await;
    let api = Api::<NodeMaintenance>::all(client.clone());
    let prefix = unique("nm-short");
    let idle = format!("{prefix}-idle");
    let mut nm = nm::new(&idle, &nodes[0], "e2e kept idle");
    nm.spec.knobs.stage = Some(Stage::Idle);
    api.create(&PostParams::default(), &nm).await.unwrap();
    let later = format!("{prefix}-later");
    let mut nm = nm::new(&later, &nodes[1], "e2e window in an hour");
    let opens = jiff::Timestamp::now() + jiff::SignedDuration::from_hours(1);
    nm.spec.knobs.start_at = Some(opens.to_string());
    api.create(&PostParams::default(), &nm).await.unwrap();
    // Creation order is by whole seconds, then name: the draining one is created a second
    // later, so it is the youngest whatever the names.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let drain = format!("{prefix}-drain");
    nm::create(&client, &drain, &nodes[SLOTS]).await;
    let created = |name: String| {
        let api = api.clone();
        async move {
            api.get(&name)
                .await
                .unwrap()
                .metadata
                .creation_timestamp
                .unwrap()
                .0
        }
    };
    assert!(
        created(drain.clone()).await > created(later.clone()).await,
        "the draining maintenance must be the youngest"
    );

    let done = nm::wait_phase(&client, &drain, MaintenancePhase::Succeeded, LIMIT).await;
    let queued: Vec<String> = done
        .status
        .iter()
        .flat_map(|s| s.conditions.iter().flatten())
        .filter(|c| c.type_ == "DrainQueued" && c.status == "True")
        .map(|c| c.message.clone())
        .collect();
    assert!(
        queued.is_empty(),
        "queued behind maintenances that do not drain: {queued:?}"
    );
    let events = nm::event_summary(&client, &drain).await;
    assert!(!events.iter().any(|e| e.1 == "DrainQueued"), "{events:?}");
    for node in &nodes[..SLOTS] {
        node::restored(&client, node).await.unwrap();
    }
    for (name, node) in [&idle, &later, &drain].into_iter().zip(&nodes) {
        nm::delete_and_wait_restored(&client, name, node).await;
    }
}

/// `docs/drain-contract.md` §10 (the queue with `stage` and `paused`): a maintenance kept at
/// `Idle` while two others hold both slots joins the queue when moved to `Drain` (`DrainQueued`
/// position 1, its node left in service); paused while it waits, it is given the slot when the
/// first one ahead releases its node, so its node is entered (the slot bounds nodes out of
/// service), but it sends no eviction while paused (the API server's audit log, 10 s) and says
/// `DrainPaused`; unpaused, its pod is evicted and it Succeeds.
#[tokio::test]
async fn a_maintenance_moved_to_drain_joins_the_queue_and_sends_nothing_paused_when_its_slot_comes()
{
    let _serial = SERIAL.lock().await;
    let env = env();
    let _operator = start(env, "operator-joins");
    let client = env.cluster.client().await;
    let group = unique("joins");
    let nodes = worker_nodes(&env.cluster, &client, &group, SLOTS + 1).await;
    let ns = namespace(&client, "joins").await;
    let mut budgets = Vec::new();
    for (i, node) in nodes.iter().enumerate().take(SLOTS) {
        bare_pod(&client, &ns, &format!("p{i}"), node, json!({})).await;
        budgets.push(budget(&client, &ns, &format!("b{i}"), &format!("p{i}"), 0, 1).await);
    }
    bare_pod(&client, &ns, "q", &nodes[SLOTS], json!({})).await;
    wait_running(&client, &ns, "q", 1, LIMIT).await;
    let api = Api::<NodeMaintenance>::all(client.clone());
    let prefix = unique("nm-joins");
    let names: Vec<String> = (0..=SLOTS).map(|i| format!("{prefix}-{i}")).collect();
    for (name, node) in names.iter().zip(&nodes).take(SLOTS) {
        nm::create(&client, name, node).await;
    }
    let last = &names[SLOTS];
    let mut nm = nm::new(last, &nodes[SLOTS], "e2e kept idle, then drained");
    nm.spec.knobs.stage = Some(Stage::Idle);
    nm.spec.knobs.node_conditions = Some(true);
    api.create(&PostParams::default(), &nm).await.unwrap();
    for name in &names[..SLOTS] {
        nm::wait_status(&client, name, "held by its budget", LIMIT, |s| {
            s.blockers
                .iter()
                .flatten()
                .any(|b| b.reason == "PodDisruptionBudget")
        })
        .await;
    }

    let patch = |body: serde_json::Value| {
        let api = api.clone();
        async move {
            api.patch(
                last,
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(body),
            )
            .await
            .unwrap_or_else(|e| panic!("patching {last}: {e}"));
        }
    };
    patch(json!({"spec": {"stage": "Drain"}})).await;
    nm::wait_status(&client, last, "position 1 in the queue", LIMIT, |s| {
        s.conditions
            .iter()
            .flatten()
            .any(|c| c.type_ == "DrainQueued" && c.message.contains("position 1 in the queue"))
    })
    .await;
    node::restored(&client, &nodes[SLOTS])
        .await
        .unwrap_or_else(|e| panic!("{last} waits but its node is out of service: {e}"));
    // Waiting, its node's lifecycle conditions say no maintenance and no drain are in progress.
    let not_started = ("MaintenanceNotStarted", "DrainNotStarted");
    wait_node_conditions(
        &client,
        &nodes[SLOTS],
        last,
        [
            ("MaintenancePlanned", "True", "AdminRequested"),
            ("MaintenanceInProgress", "False", not_started.0),
            ("DrainInProgress", "False", not_started.1),
            ("Drained", "False", not_started.1),
        ],
    )
    .await;
    patch(json!({"spec": {"paused": true}})).await;

    let mut audit = AuditCursor::at_end(env.cluster.audit_log_path());
    budgets[0].delete("b0", &Default::default()).await.unwrap();
    nm::wait_phase(&client, &names[0], MaintenancePhase::Succeeded, LIMIT).await;
    nm::delete_and_wait_restored(&client, &names[0], &nodes[0]).await;
    wait_for(&format!("{last}'s node entered"), LIMIT, || {
        node::in_maintenance(&client, &nodes[SLOTS])
    })
    .await;
    nm::wait_status(&client, last, "DrainPaused", LIMIT, |s| {
        s.conditions
            .iter()
            .flatten()
            .any(|c| c.type_ == "DrainPaused" && c.status == "True")
    })
    .await;
    let entered = Instant::now();
    let q_asked = |events: Vec<AuditEvent>| -> Vec<String> {
        events
            .into_iter()
            .filter(|e| e.subresource == "eviction" && e.namespace == ns && e.name == "q")
            .map(|e| format!("{} {} {}", e.stage, e.code, e.received))
            .collect()
    };
    let mut asked = Vec::new();
    while entered.elapsed() < Duration::from_secs(10) {
        asked.extend(q_asked(audit.read().unwrap()));
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(asked.is_empty(), "evictions while paused: {asked:?}");

    patch(json!({"spec": {"paused": false}})).await;
    nm::wait_phase(&client, last, MaintenancePhase::Succeeded, LIMIT).await;
    asked.extend(q_asked(audit.read().unwrap()));
    assert!(!asked.is_empty(), "q gone without an eviction");

    budgets[1].delete("b1", &Default::default()).await.unwrap();
    for (k, name) in names.iter().enumerate().skip(1) {
        nm::delete_and_wait_restored(&client, name, &nodes[k]).await;
    }
}

/// Patches `name`'s spec with `spec` (a merge patch).
async fn patch_spec(client: &kube::Client, name: &str, spec: serde_json::Value) {
    Api::<NodeMaintenance>::all(client.clone())
        .patch(
            name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({ "spec": spec })),
        )
        .await
        .unwrap_or_else(|e| panic!("patching {name}: {e}"));
}

/// Whether `nm`'s status has condition `type_` with `status`.
fn has_condition(
    s: &node_maintenance_operator::api::NodeMaintenanceStatus,
    type_: &str,
    status: &str,
) -> bool {
    s.conditions
        .iter()
        .flatten()
        .any(|c| c.type_ == type_ && c.status == status)
}

/// What the queued maintenance `b` (of `node`, its pods in `ns`) did while it must do nothing:
/// it no longer waits, its node is out of service, the API server received an eviction of one
/// of its pods, its Deployment `web` was restarted for it, its pod `db` is being deleted. Empty
/// when untouched.
async fn queued_touched(
    client: &kube::Client,
    b: &str,
    node: &str,
    ns: &str,
    audit: &mut AuditCursor,
    seen: &mut Vec<AuditEvent>,
) -> Vec<String> {
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::core::v1::Pod;
    let mut touched = Vec::new();
    let nm = Api::<NodeMaintenance>::all(client.clone())
        .get(b)
        .await
        .unwrap();
    if queue_message(&nm).is_none() {
        let s = nm.status.unwrap_or_default();
        let queued = s
            .conditions
            .iter()
            .flatten()
            .find(|c| c.type_ == "DrainQueued")
            .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()));
        touched.push(format!(
            "{b} no longer queued: phase {:?}, DrainQueued {queued:?}, blockers {:?}",
            s.phase,
            s.blockers
                .iter()
                .flatten()
                .map(|b| (&b.name, &b.reason))
                .collect::<Vec<_>>()
        ));
    }
    if let Err(e) = node::restored(client, node).await {
        touched.push(format!("its node {node} out of service: {e}"));
    }
    seen.extend(audit.read().unwrap());
    let asked: Vec<String> = seen
        .iter()
        .filter(|e| e.subresource == "eviction" && e.namespace == ns)
        .map(|e| format!("{} {} {} {}", e.name, e.stage, e.code, e.received))
        .collect();
    if !asked.is_empty() {
        touched.push(format!("evictions of its pods: {asked:?}"));
    }
    let web = Api::<Deployment>::namespaced(client.clone(), ns)
        .get("web")
        .await
        .unwrap();
    if let Some(v) = web
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(RESTARTED_FOR))
    {
        touched.push(format!("web restarted for {v}"));
    }
    let db = Api::<Pod>::namespaced(client.clone(), ns)
        .get("db")
        .await
        .unwrap();
    if let Some(t) = db.metadata.deletion_timestamp {
        touched.push(format!("db being deleted since {:?}", t.0));
    }
    touched
}

/// Checks [`queued_touched`] every 500 ms for `quiet`; panics naming `why` and what was done.
#[allow(clippy::too_many_arguments)]
async fn stays_queued(
    client: &kube::Client,
    b: &str,
    node: &str,
    ns: &str,
    audit: &mut AuditCursor,
    seen: &mut Vec<AuditEvent>,
    quiet: Duration,
    why: &str,
) {
    let until = Instant::now() + quiet;
    while Instant::now() < until {
        let touched = queued_touched(client, b, node, ns, audit, seen).await;
        assert!(touched.is_empty(), "{why}: {touched:?}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

const RESTARTED_FOR: &str = "nodemaintenance.medik8s.io/restarted-for";

/// `docs/drain-contract.md` §10, the queue column and the queue's row: with both slots held,
/// one by `a` (`waitForVolumeDetach`, kept Running by a VolumeAttachment on its node), one by a
/// maintenance whose pod a budget holds, `b` (`drainTimeout: 15s`, `onTimeout: ForceDelete`,
/// a `Skip` drain rule, `daemonSets: EvictLast`, `surge: RolloutRestart`) waits, its node in
/// service, and runs no round: no eviction of its pods in the API server's audit log, its
/// one-replica Deployment not restarted, nothing deleted. `a` paused still holds its slot; `a`
/// Succeeded once the attachment is gone still holds it (its node is cordoned); `b` waits longer
/// than its `drainTimeout`. `a` moved to `Idle` releases its node, and `b` starts: the drain's
/// start on its node is after that move, `status.drainDeadline` is that start plus 15 s, and its
/// budget-held pod `db` is force-deleted only its grace ahead of that deadline, not at once; the
/// plain pod is evicted, the skipped one kept, the Deployment restarted once (its pod replaced
/// on another node) and the DaemonSet pod evicted once, after the ordinary pods left.
#[tokio::test]
async fn a_waiting_maintenance_runs_nothing_and_its_knobs_apply_from_the_slot() {
    use futures::StreamExt as _;
    use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet};
    use k8s_openapi::api::core::v1::{Node, Pod};
    use k8s_openapi::api::storage::v1::VolumeAttachment;
    use kube::runtime::watcher;
    const TIMEOUT: i64 = 15;
    const DB_GRACE: i64 = 2;
    let _serial = SERIAL.lock().await;
    let env = env();
    let _operator = start(env, "operator-waiting");
    let client = env.cluster.client().await;
    let started_test = Instant::now();

    // b's node and a spare one of the same group (cordoned while `web` is created, so its pod
    // runs on b's node; the replacement goes to the spare).
    let gb = unique("waitb");
    let bn = worker_nodes(&env.cluster, &client, &gb, 2).await;
    let cordon = |node: String, on: bool| {
        let client = client.clone();
        async move {
            Api::<Node>::all(client)
                .patch(
                    &node,
                    &kube::api::PatchParams::default(),
                    &kube::api::Patch::Merge(json!({"spec": {"unschedulable": on}})),
                )
                .await
                .unwrap();
        }
    };
    cordon(bn[1].clone(), true).await;
    let ns = namespace(&client, "waitb").await;
    deployment(&client, &ns, "web", &gb, 1, 0).await;
    let web_pod = wait_running(&client, &ns, "web", 1, LIMIT).await.remove(0);
    assert_eq!(node_of(&web_pod), bn[0]);
    cordon(bn[1].clone(), false).await;
    let ds: DaemonSet = serde_json::from_value(json!({
        "metadata": {"name": "ds"},
        "spec": {
            "selector": {"matchLabels": {"app": "ds"}},
            "template": {
                "metadata": {"labels": {"app": "ds"}},
                "spec": {
                    "nodeSelector": {"nmo-test": gb},
                    "terminationGracePeriodSeconds": 0,
                    "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]
                }
            }
        }
    }))
    .unwrap();
    Api::<DaemonSet>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &ds)
        .await
        .unwrap();
    bare_pod(&client, &ns, "plain", &bn[0], json!({})).await;
    bare_pod(&client, &ns, "cache", &bn[0], json!({})).await;
    let db = json!({"spec": {"terminationGracePeriodSeconds": DB_GRACE}});
    let db_pod = bare_pod(&client, &ns, "db", &bn[0], db).await;
    for app in ["plain", "cache", "db"] {
        wait_running(&client, &ns, app, 1, LIMIT).await;
    }
    let ds_pod = wait_running(&client, &ns, "ds", 2, LIMIT)
        .await
        .into_iter()
        .find(|p| node_of(p) == bn[0])
        .expect("a DaemonSet pod on b's node");
    let ds_pod_name = ds_pod.metadata.name.clone().unwrap();
    min_available_budget(&client, &ns, "db", "db", 1, 1).await;
    apply_force_delete_overlay(&client).await;

    // The two slot holders: `a` waits for its node's VolumeAttachment, `f` for its budget.
    let ga = unique("waita");
    let an = worker_nodes(&env.cluster, &client, &ga, 2).await;
    let nsa = namespace(&client, "waita").await;
    bare_pod(&client, &nsa, "f", &an[1], json!({})).await;
    let f_budget = budget(&client, &nsa, "f", "f", 0, 1).await;
    let va_name = unique("waita-va");
    let va: VolumeAttachment = serde_json::from_value(json!({
        "metadata": {"name": va_name},
        "spec": {"attacher": "csi.example.com", "nodeName": an[0],
                 "source": {"persistentVolumeName": "pv-a"}}
    }))
    .unwrap();
    let vas = Api::<VolumeAttachment>::all(client.clone());
    vas.create(&PostParams::default(), &va).await.unwrap();
    let api = Api::<NodeMaintenance>::all(client.clone());
    let prefix = unique("nm-waiting");
    let (a, f, b) = (
        format!("{prefix}-a"),
        format!("{prefix}-f"),
        format!("{prefix}-b"),
    );
    let mut nm = nm::new(&a, &an[0], "e2e held by a volume");
    nm.spec.knobs.wait_for_volume_detach = Some("2m".into());
    api.create(&PostParams::default(), &nm).await.unwrap();
    nm::create(&client, &f, &an[1]).await;
    nm::wait_status(
        &client,
        &a,
        "Running, its VolumeAttachment a blocker",
        LIMIT,
        |s| {
            s.phase == Some(MaintenancePhase::Running)
                && s.blockers
                    .iter()
                    .flatten()
                    .any(|b| b.reason == "VolumeAttached")
        },
    )
    .await;
    nm::wait_status(&client, &f, "held by its budget", LIMIT, |s| {
        s.blockers
            .iter()
            .flatten()
            .any(|b| b.reason == "PodDisruptionBudget")
    })
    .await;

    // `b`: every knob whose promise in the queue is under test.
    let mut audit = AuditCursor::at_end(env.cluster.audit_log_path());
    let mut seen = Vec::new();
    let body = json!({
        "apiVersion": "nodemaintenance.medik8s.io/v1beta1",
        "kind": "NodeMaintenance",
        "metadata": {"name": b},
        "spec": {
            "nodeName": bn[0],
            "reason": "e2e waits with its knobs",
            "drainTimeout": format!("{TIMEOUT}s"),
            "onTimeout": "ForceDelete",
            "daemonSets": "EvictLast",
            "surge": "RolloutRestart",
            "drainRules": [
                {"podSelector": {"matchLabels": {"app": "cache"}}, "behavior": "Skip"}
            ]
        }
    });
    let created = wait_for("b admitted (ForceDelete with the grant)", LIMIT, || async {
        api.create(
            &PostParams::default(),
            &serde_json::from_value(body.clone()).unwrap(),
        )
        .await
        .map_err(|e| e.to_string())
    })
    .await;
    let b_created = created.metadata.creation_timestamp.clone().unwrap().0;
    let b_uid = created.metadata.uid.clone().unwrap();
    // db's deletion as the API server first shows it: its deletion time and grace.
    let pods = Api::<Pod>::namespaced(client.clone(), &ns);
    let terminating = tokio::spawn(
        watcher::watcher(
            pods.clone(),
            watcher::Config::default().fields("metadata.name=db"),
        )
        .filter_map(|e| async move {
            match e {
                Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) => {
                    let m = p.metadata;
                    m.deletion_timestamp
                        .map(|t| (t.0, m.deletion_grace_period_seconds, m.uid))
                }
                _ => None,
            }
        })
        .boxed()
        .into_future(),
    );
    nm::wait_status(&client, &b, "position 1 in the queue", LIMIT, |s| {
        s.conditions
            .iter()
            .flatten()
            .any(|c| c.type_ == "DrainQueued" && c.message.contains("position 1 in the queue"))
    })
    .await;
    let quiet = Duration::from_secs(4);
    stays_queued(
        &client, &b, &bn[0], &ns, &mut audit, &mut seen, quiet, "b queued",
    )
    .await;

    // A paused slot holder keeps its slot.
    patch_spec(&client, &a, json!({"paused": true})).await;
    nm::wait_status(&client, &a, "DrainPaused", LIMIT, |s| {
        has_condition(s, "DrainPaused", "True")
    })
    .await;
    stays_queued(
        &client,
        &b,
        &bn[0],
        &ns,
        &mut audit,
        &mut seen,
        quiet,
        &format!("{a} paused holds its slot, yet b"),
    )
    .await;
    patch_spec(&client, &a, json!({"paused": false})).await;

    // The volume detached: `a` Succeeds and keeps its slot while its node is cordoned.
    vas.delete(&va_name, &Default::default()).await.unwrap();
    nm::wait_phase(&client, &a, MaintenancePhase::Succeeded, LIMIT).await;
    node::in_maintenance(&client, &an[0])
        .await
        .unwrap_or_else(|e| panic!("{a} Succeeded, its node still out of service: {e}"));
    stays_queued(
        &client,
        &b,
        &bn[0],
        &ns,
        &mut audit,
        &mut seen,
        quiet,
        &format!("{a} Succeeded, its node cordoned, holds its slot, yet b"),
    )
    .await;
    // b has waited longer than its drainTimeout.
    let waited = |now: jiff::Timestamp| now.duration_since(b_created);
    let want = jiff::SignedDuration::from_secs(TIMEOUT + 2);
    if let Ok(rest) = Duration::try_from(want - waited(jiff::Timestamp::now())) {
        stays_queued(
            &client, &b, &bn[0], &ns, &mut audit, &mut seen, rest, "b queued",
        )
        .await;
    }

    // `a` moved to Idle: its node restored, its slot freed, `b` starts.
    let moved = jiff::Timestamp::now();
    patch_spec(&client, &a, json!({"stage": "Idle"})).await;
    wait_for(&format!("{a}'s node restored at Idle"), LIMIT, || {
        node::restored(&client, &an[0])
    })
    .await;
    // A freed slot starts the next within a pass or two.
    wait_for(
        &format!("{b}'s node entered"),
        Duration::from_secs(30),
        || node::in_maintenance(&client, &bn[0]),
    )
    .await;
    let drain_started = node_drain_started(&client, &bn[0]).await;
    let slack = jiff::SignedDuration::from_secs(1);
    assert!(
        drain_started + slack >= moved,
        "b's drain started at {drain_started}, before {a} was moved to Idle at {moved}"
    );
    let queued_for = drain_started.duration_since(b_created);
    eprintln!("b waited {queued_for} in the queue, drainTimeout {TIMEOUT}s");
    assert!(
        queued_for > jiff::SignedDuration::from_secs(TIMEOUT),
        "b waited only {queued_for} (created {b_created}, drain started {drain_started})"
    );
    let deadline = drain_started + jiff::SignedDuration::from_secs(TIMEOUT);
    let shown = nm::wait_status(&client, &b, "status.drainDeadline", LIMIT, |s| {
        s.drain_deadline.is_some() && has_condition(s, "DrainQueued", "False")
    })
    .await;
    let status = shown.status.unwrap();
    // The status tells the same start: not b's first pass while it waited.
    let start_shown = status.drain_start_time.map(|t| t.0);
    assert_eq!(
        start_shown,
        Some(drain_started),
        "status.drainStartTime {start_shown:?}: not the drain's start {drain_started} (b created {b_created})"
    );
    let shown = status.drain_deadline.unwrap().0;
    assert_eq!(
        shown, deadline,
        "status.drainDeadline {shown}: not the drain's start {drain_started} plus {TIMEOUT}s (b created {b_created})"
    );

    let done = nm::wait_phase(&client, &b, MaintenancePhase::Succeeded, LIMIT).await;
    eprintln!(
        "b Succeeded {:.1} s after its drain started",
        jiff::Timestamp::now()
            .duration_since(drain_started)
            .as_secs_f64()
    );
    // ForceDelete: db deleted its grace ahead of the deadline counted from the slot, not at once.
    let (first, _) = tokio::time::timeout(LIMIT, terminating)
        .await
        .expect("db was not deleted within the limit")
        .unwrap();
    let (deletion, grace, uid) = first.expect("the watch of db ended");
    assert_eq!(uid, db_pod.metadata.uid, "another pod named db");
    let sent = deletion - jiff::SignedDuration::from_secs(grace.unwrap_or(0));
    assert!(
        deletion <= deadline && deletion >= deadline - jiff::SignedDuration::from_secs(3),
        "db's DELETE sent at {sent} (grace {grace:?}, ends {deletion}); the drain started at \
         {drain_started}, deadline {deadline}: not its grace ahead of the deadline"
    );
    let forced = nm::warnings(&client, &b, "PodForceDeleted").await;
    assert!(
        forced.len() == 1 && forced[0].0.contains("db"),
        "db alone force-deleted: {forced:?}"
    );

    // The evictions, by the API server's record: none before the slot, plain once, cache
    // never, the DaemonSet pod once after the ordinary pods left.
    seen.extend(audit.read().unwrap());
    let evictions: Vec<&AuditEvent> = seen
        .iter()
        .filter(|e| {
            e.subresource == "eviction"
                && e.namespace == ns
                && e.stage == "ResponseComplete"
                && (200..300).contains(&e.code)
        })
        .collect();
    let all: Vec<String> = evictions
        .iter()
        .map(|e| format!("{} {}", e.name, e.received))
        .collect();
    for e in &evictions {
        assert!(
            e.received + slack >= moved,
            "{} evicted at {} before b's slot came ({moved}): {all:?}",
            e.name,
            e.received
        );
    }
    let of =
        |name: &str| -> Vec<&&AuditEvent> { evictions.iter().filter(|e| e.name == name).collect() };
    assert_eq!(of("plain").len(), 1, "plain evicted once: {all:?}");
    assert!(
        of("cache").is_empty(),
        "cache, skipped by the rule, evicted: {all:?}"
    );
    let ds_evicted = of(&ds_pod_name);
    assert_eq!(ds_evicted.len(), 1, "{ds_pod_name} evicted once: {all:?}");
    let last_ordinary = of("plain")[0].completed.max(sent);
    assert!(
        ds_evicted[0].received >= last_ordinary,
        "{ds_pod_name} evicted at {}, before the ordinary pods left (plain evicted, db deleted \
         at {sent}): {all:?}",
        ds_evicted[0].received
    );
    let cache = pods.get("cache").await.unwrap();
    assert!(
        cache.metadata.deletion_timestamp.is_none() && node_of(&cache) == bn[0],
        "cache kept on the node: {:?}",
        cache.metadata
    );
    let drained = done
        .status
        .iter()
        .flat_map(|s| s.conditions.iter().flatten())
        .find(|c| c.type_ == "Drained")
        .map(|c| c.message.clone())
        .unwrap_or_default();
    assert!(
        drained.contains(&format!("{ns}/cache (Skipped)")),
        "cache named as kept: {drained:?}"
    );

    // Surge: web restarted once, for b, its pod replaced on the spare node.
    let web = Api::<Deployment>::namespaced(client.clone(), &ns)
        .get("web")
        .await
        .unwrap();
    let restarted_for = web
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(RESTARTED_FOR))
        .cloned();
    assert!(
        restarted_for
            .as_deref()
            .and_then(|r| r.split_once('@'))
            .is_some_and(|(m, _)| m == b_uid),
        "web restarted for b ({b_uid}): {restarted_for:?}"
    );
    let sets = Api::<ReplicaSet>::namespaced(client.clone(), &ns)
        .list(&kube::api::ListParams::default().labels("app=web"))
        .await
        .unwrap()
        .items;
    assert_eq!(
        sets.len(),
        2,
        "one restart, one new ReplicaSet: {:?}",
        sets.iter()
            .map(|s| s.metadata.name.clone())
            .collect::<Vec<_>>()
    );
    let now = wait_running(&client, &ns, "web", 1, LIMIT).await.remove(0);
    assert_eq!(node_of(&now), bn[1], "web replaced on the spare node");

    f_budget.delete("f", &Default::default()).await.unwrap();
    for (name, node) in [(&b, &bn[0]), (&f, &an[1]), (&a, &an[0])] {
        nm::delete_and_wait_restored(&client, name, node).await;
    }
    eprintln!(
        "a_waiting_maintenance_runs_nothing_and_its_knobs_apply_from_the_slot: {:.1} s",
        started_test.elapsed().as_secs_f64()
    );
}
