//! The controller where upstream NMO's CRD stays installed (e.g. owned by OLM): its status schema
//! lacks `conditions`, `blockers`, `drainStartTime` and `observedGeneration`, so the API server
//! prunes them from every write, and it has no CEL rule guarding `spec.nodeName`. The CRD is
//! generated from our types minus our additions (`api::upstream_schema_crd`, also
//! `crdgen --upstream`). No webhook is registered. Each test runs its own operator, one test at a
//! time.

mod common;

use std::time::Duration;

use common::*;
use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams, WatchEvent, WatchParams};
use nmo_devcluster::operator::{Operator, ServiceAccountRef};
use node_maintenance_operator::api::{MaintenancePhase, NodeMaintenance, upstream_schema_crd};
use serde_json::json;

const LIMIT: Duration = Duration::from_secs(60);

static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Installs the manifests, then replaces their CRD with upstream's schema.
fn setup() -> (&'static Cluster, ServiceAccountRef, std::path::PathBuf) {
    static SETUP: std::sync::OnceLock<(ServiceAccountRef, std::path::PathBuf)> =
        std::sync::OnceLock::new();
    let cluster = Cluster::shared();
    let (account, kubeconfig) = SETUP.get_or_init(|| {
        let installed = installed(cluster);
        let crd = serde_yaml::to_string(&upstream_schema_crd()).unwrap();
        cluster
            .kubectl_run(
                &["apply", "--server-side", "--force-conflicts", "-f", "-"],
                Some(&crd),
            )
            .unwrap();
        cluster
            .kubectl_run(
                &[
                    "wait",
                    "--for=condition=Established",
                    "--timeout=60s",
                    "crd/nodemaintenances.nodemaintenance.medik8s.io",
                ],
                None,
            )
            .unwrap();
        (installed.account, installed.kubeconfig)
    });
    (cluster, account.clone(), kubeconfig.clone())
}

fn start(
    cluster: &Cluster,
    account: &ServiceAccountRef,
    kubeconfig: &std::path::Path,
    name: &str,
) -> Operator {
    let opts = operator_options(name, account, kubeconfig);
    Operator::start(cluster, &opts).unwrap_or_else(|e| panic!("{name} did not start: {e}"))
}

/// Waits until the served schema prunes our additions: a status written with `conditions` reads
/// back without them (the CRD change reaches the API server's handlers a moment after
/// Established).
async fn wait_pruning(client: &kube::Client) {
    let api = Api::<NodeMaintenance>::all(client.clone());
    let probe = unique("nm-probe");
    nm::create(client, &probe, "probe-no-such-node").await;
    wait_for("the upstream schema served", LIMIT, || async {
        let written = api
            .patch_status(
                &probe,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"lastError": "probe", "conditions": [
                    {"type": "Probe", "status": "True", "reason": "Probe", "message": "",
                     "lastTransitionTime": "2026-01-01T00:00:00Z"}]}})),
            )
            .await
            .map_err(|e| e.to_string())?;
        match written.status.and_then(|s| s.conditions) {
            None => Ok(()),
            Some(c) => Err(format!("conditions kept: {c:?}")),
        }
    })
    .await;
    api.delete(&probe, &Default::default()).await.unwrap();
}

/// Counts the changes of the NodeMaintenance's status seen by a watch during `window`, as the
/// API server records them (a write that changes nothing makes no event).
async fn status_changes(client: &kube::Client, name: &str, window: Duration) -> Vec<String> {
    let api = Api::<NodeMaintenance>::all(client.clone());
    let current = api.get(name).await.unwrap();
    let mut last = serde_json::to_value(&current.status).unwrap();
    let rv = current.metadata.resource_version.clone().unwrap();
    let params = WatchParams::default()
        .fields(&format!("metadata.name={name}"))
        .timeout(window.as_secs() as u32 + 5);
    let mut stream = api.watch(&params, &rv).await.unwrap().boxed();
    let deadline = tokio::time::Instant::now() + window;
    let mut changes = Vec::new();
    while let Ok(Some(event)) = tokio::time::timeout_at(deadline, stream.next()).await {
        if let Ok(WatchEvent::Modified(nm)) = event {
            let status = serde_json::to_value(&nm.status).unwrap();
            if status != last {
                changes.push(format!("rv {:?}: {status}", nm.metadata.resource_version));
                last = status;
            }
        }
    }
    changes
}

/// A change of the node that a reconcile looks at (a label), to make the controller re-check.
async fn nudge(client: &kube::Client, node: &str, value: &str) {
    Api::<Node>::all(client.clone())
        .patch(
            node,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"e2e/nudge": value}}})),
        )
        .await
        .unwrap();
}

/// Lifecycle and restart on upstream's schema: Succeeded with pods drained; after a restart and
/// with reconciles triggered, no status write in 30 s; deletion restores the node.
#[tokio::test]
async fn lifecycle_and_restart_are_quiet_on_upstreams_schema() {
    let _serial = SERIAL.lock().await;
    let (cluster, account, kubeconfig) = setup();
    let client = cluster.client().await;
    wait_pruning(&client).await;
    let group = unique("up-life");
    let nodes = worker_nodes(cluster, &client, &group, 2).await;
    let ns = namespace(&client, "up-life").await;
    cluster.kubectl_run(&["cordon", &nodes[1]], None).unwrap();
    deployment(&client, &ns, "web", &group, 2, 1).await;
    wait_running(&client, &ns, "web", 2, LIMIT).await;
    cluster.kubectl_run(&["uncordon", &nodes[1]], None).unwrap();

    let mut op = start(cluster, &account, &kubeconfig, "op-up-life");
    let name = unique("nm-up-life");
    nm::create(&client, &name, &nodes[0]).await;
    let done = nm::wait_phase(&client, &name, MaintenancePhase::Succeeded, LIMIT).await;
    let s = done.status.unwrap();
    assert_eq!((s.drain_progress, s.eviction_pods), (Some(100), Some(2)));
    assert!(
        s.conditions.is_none() && s.observed_generation.is_none(),
        "pruned: {s:?}"
    );
    node::in_maintenance(&client, &nodes[0]).await.unwrap();

    // Quiet while running on, then across a restart.
    let (changes, ()) = tokio::join!(
        status_changes(&client, &name, Duration::from_secs(12)),
        async {
            for i in 0..3 {
                nudge(&client, &nodes[0], &format!("a{i}")).await;
                tokio::time::sleep(Duration::from_secs(3)).await;
            }
        }
    );
    assert!(changes.is_empty(), "status writes: {changes:#?}");
    op.process().stop(Duration::from_secs(10));
    let op2 = start(cluster, &account, &kubeconfig, "op-up-life-2");
    let (changes, ()) = tokio::join!(
        status_changes(&client, &name, Duration::from_secs(30)),
        async {
            for i in 0..4 {
                nudge(&client, &nodes[0], &format!("b{i}")).await;
                tokio::time::sleep(Duration::from_secs(6)).await;
            }
        }
    );
    assert!(
        changes.is_empty(),
        "status writes in 30 s after Succeeded: {changes:#?}\noperator log:\n{}",
        op2.log()
    );

    nm::delete_and_wait_restored(&client, &name, &nodes[0]).await;
}

/// Lease taken over by another holder on upstream's schema (no `LeaseHeld` condition to read
/// back): `errorOnLeaseCount` rises, the maintenance ends Failed once it passes upstream's
/// threshold of 3, and the node is restored.
#[tokio::test]
async fn lease_lost_is_counted_and_fails_on_upstreams_schema() {
    let _serial = SERIAL.lock().await;
    let (cluster, account, kubeconfig) = setup();
    let client = cluster.client().await;
    wait_pruning(&client).await;
    let group = unique("up-lease");
    let nodes = worker_nodes(cluster, &client, &group, 1).await;
    let _op = start(cluster, &account, &kubeconfig, "op-up-lease");
    let name = unique("nm-up-lease");
    nm::create(&client, &name, &nodes[0]).await;
    nm::wait_phase(&client, &name, MaintenancePhase::Succeeded, LIMIT).await;
    Api::<Lease>::namespaced(client.clone(), "medik8s-leases")
        .patch(
            &format!("node-{}", nodes[0]),
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"holderIdentity": "NodeHealthCheck-e2e"}})),
        )
        .await
        .unwrap();
    nudge(&client, &nodes[0], "lease").await;
    nm::wait_status(&client, &name, "errorOnLeaseCount counting", LIMIT, |s| {
        s.error_on_lease_count.unwrap_or(0) >= 1
    })
    .await;
    let failed = nm::wait_phase(
        &client,
        &name,
        MaintenancePhase::Failed,
        Duration::from_secs(90),
    )
    .await;
    let s = failed.status.unwrap();
    assert_eq!(s.error_on_lease_count, Some(4), "{s:?}");
    assert!(
        s.last_error
            .as_deref()
            .is_some_and(|e| e
                .starts_with("maintenance failed: lease could not be extended after 4 attempts")),
        "{s:?}"
    );
    wait_for("node restored", LIMIT, || {
        node::restored(&client, &nodes[0])
    })
    .await;
    nm::delete(&client, &name).await;
    nm::wait_gone(&client, &name, LIMIT).await;
}

/// Issue 8 item 7 where nothing guards `spec.nodeName` (upstream's CRD, no webhook): a changed
/// nodeName makes the controller restore the node it entered first and maintain the new one;
/// deletion restores the node actually entered.
#[tokio::test]
async fn changed_node_name_restores_the_node_entered_first() {
    let _serial = SERIAL.lock().await;
    let (cluster, account, kubeconfig) = setup();
    let client = cluster.client().await;
    wait_pruning(&client).await;
    let group = unique("up-move");
    let nodes = worker_nodes(cluster, &client, &group, 2).await;
    let _op = start(cluster, &account, &kubeconfig, "op-up-move");
    let name = unique("nm-up-move");
    nm::create(&client, &name, &nodes[0]).await;
    nm::wait_phase(&client, &name, MaintenancePhase::Succeeded, LIMIT).await;
    node::in_maintenance(&client, &nodes[0]).await.unwrap();

    Api::<NodeMaintenance>::all(client.clone())
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"nodeName": nodes[1]}})),
        )
        .await
        .expect("upstream's CRD has no rule against it");
    wait_for("the first node restored", LIMIT, || {
        node::restored(&client, &nodes[0])
    })
    .await;
    wait_for("the new node in maintenance", LIMIT, || {
        node::in_maintenance(&client, &nodes[1])
    })
    .await;
    nm::wait_phase(&client, &name, MaintenancePhase::Succeeded, LIMIT).await;

    // Changed again, to a node that does not exist: the node entered is still left first.
    let missing = format!("{group}-missing");
    Api::<NodeMaintenance>::all(client.clone())
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"nodeName": missing}})),
        )
        .await
        .unwrap();
    wait_for("the second node restored", LIMIT, || {
        node::restored(&client, &nodes[1])
    })
    .await;
    let failed = nm::wait_phase(&client, &name, MaintenancePhase::Failed, LIMIT).await;
    assert_eq!(
        failed.status.unwrap().last_error,
        Some(format!(r#"nodes "{missing}" not found"#))
    );
    nm::delete(&client, &name).await;
    nm::wait_gone(&client, &name, LIMIT).await;
    node::restored(&client, &nodes[0]).await.unwrap();
    node::restored(&client, &nodes[1]).await.unwrap();
}

/// Restart mid-drain on upstream's schema (no `blockers` to read back): the operator is killed
/// while a PodDisruptionBudget holds the drain; the next one finishes it once the budget allows.
#[tokio::test]
async fn killed_mid_drain_then_restarted_completes_on_upstreams_schema() {
    let _serial = SERIAL.lock().await;
    let (cluster, account, kubeconfig) = setup();
    let client = cluster.client().await;
    wait_pruning(&client).await;
    let group = unique("up-kill");
    let nodes = worker_nodes(cluster, &client, &group, 2).await;
    let ns = namespace(&client, "up-kill").await;
    cluster.kubectl_run(&["cordon", &nodes[1]], None).unwrap();
    deployment(&client, &ns, "db", &group, 2, 0).await;
    wait_running(&client, &ns, "db", 2, LIMIT).await;
    cluster.kubectl_run(&["uncordon", &nodes[1]], None).unwrap();
    budget(&client, &ns, "db-guard", "db", 0, 2).await;

    let mut op = start(cluster, &account, &kubeconfig, "op-up-kill");
    let name = unique("nm-up-kill");
    nm::create(&client, &name, &nodes[0]).await;
    let blocked = nm::wait_status(&client, &name, "drain held by the budget", LIMIT, |s| {
        s.last_error
            .as_deref()
            .is_some_and(|e| e.contains("disruption budget"))
    })
    .await;
    assert!(blocked.status.unwrap().blockers.is_none(), "pruned");
    op.process().kill();
    Api::<k8s_openapi::api::policy::v1::PodDisruptionBudget>::namespaced(client.clone(), &ns)
        .patch(
            "db-guard",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"maxUnavailable": 2}})),
        )
        .await
        .unwrap();

    let _op = start(cluster, &account, &kubeconfig, "op-up-kill-2");
    let done = nm::wait_phase(&client, &name, MaintenancePhase::Succeeded, LIMIT).await;
    let s = done.status.unwrap();
    assert_eq!((s.drain_progress, s.last_error), (Some(100), None));
    let begins = nm::event_summary(&client, &name)
        .await
        .into_iter()
        .filter(|e| e.1 == "BeginMaintenance")
        .count();
    assert_eq!(
        begins, 1,
        "the restart does not begin the maintenance again"
    );
    nm::delete_and_wait_restored(&client, &name, &nodes[0]).await;
}

/// `docs/drain-contract.md` §10 on upstream's schema, which prunes the drain knobs' spec fields:
/// set by their annotations they still apply. A maintenance created paused (annotation) with a
/// 10 s deadline and `onTimeout: Fail` (annotations; the spec fields it also carries are
/// pruned) sends no eviction, says it is paused in an event (the condition is pruned too), and
/// at the deadline is Failed with the node still in maintenance; an invalid annotation value is
/// said in a Warning event (no webhook here) and the default applies.
#[tokio::test]
async fn the_drain_knobs_apply_by_annotation_on_upstreams_schema() {
    use node_maintenance_operator::policy::{
        DRAIN_TIMEOUT_ANNOTATION, ON_TIMEOUT_ANNOTATION, PAUSED_ANNOTATION,
    };
    let _serial = SERIAL.lock().await;
    let (cluster, account, kubeconfig) = setup();
    let client = cluster.client().await;
    wait_pruning(&client).await;
    let group = unique("up-knobs");
    let nodes = worker_nodes(cluster, &client, &group, 2).await;
    let ns = namespace(&client, "up-knobs").await;
    bare_pod(&client, &ns, "kept", &nodes[0], json!({})).await;
    bare_pod(&client, &ns, "other", &nodes[1], json!({})).await;
    let _op = start(cluster, &account, &kubeconfig, "op-up-knobs");
    let api = Api::<NodeMaintenance>::all(client.clone());
    let create = |name: String, node: String, annotations: serde_json::Value| {
        let api = api.clone();
        async move {
            let mut nm = serde_json::to_value(nm::new(&name, &node, "e2e")).unwrap();
            nm["metadata"]["annotations"] = annotations;
            nm["spec"]["paused"] = json!(false);
            nm["spec"]["drainTimeout"] = json!("1h");
            nm["spec"]["onTimeout"] = json!("Wait");
            api.create(&Default::default(), &serde_json::from_value(nm).unwrap())
                .await
                .unwrap()
        }
    };
    let name = unique("nm-up-knobs");
    let created = create(
        name.clone(),
        nodes[0].clone(),
        json!({PAUSED_ANNOTATION: "true", DRAIN_TIMEOUT_ANNOTATION: "10s", ON_TIMEOUT_ANNOTATION: "Fail"}),
    )
    .await;
    assert_eq!(
        (
            created.spec.knobs.paused,
            created.spec.knobs.drain_timeout.clone(),
            created.spec.knobs.on_timeout
        ),
        (None, None, None),
        "upstream's schema prunes the knobs' spec fields"
    );
    nm::wait_event(&client, &name, "DrainPaused").await;
    let failed = nm::wait_phase(&client, &name, MaintenancePhase::Failed, LIMIT).await;
    let error = failed.status.unwrap().last_error.unwrap_or_default();
    assert!(error.contains("drainTimeout of 10s"), "{error}");
    node::in_maintenance(&client, &nodes[0]).await.unwrap();
    let pod = Api::<k8s_openapi::api::core::v1::Pod>::namespaced(client.clone(), &ns)
        .get("kept")
        .await
        .unwrap();
    assert!(
        pod.metadata.deletion_timestamp.is_none(),
        "evicted while paused"
    );
    // An invalid value: a Warning event names it, and the default (no deadline) applies.
    let other = unique("nm-up-knobs-bad");
    create(
        other.clone(),
        nodes[1].clone(),
        json!({DRAIN_TIMEOUT_ANNOTATION: "soon"}),
    )
    .await;
    nm::wait_phase(&client, &other, MaintenancePhase::Succeeded, LIMIT).await;
    let invalid = nm::event_summary(&client, &other)
        .await
        .into_iter()
        .find(|e| e.1 == "InvalidDrainPolicy")
        .expect("an InvalidDrainPolicy event");
    assert!(
        invalid.2.contains("drainTimeout") && invalid.2.contains("soon"),
        "{invalid:?}"
    );
    nm::delete_and_wait_restored(&client, &name, &nodes[0]).await;
    nm::delete_and_wait_restored(&client, &other, &nodes[1]).await;
}
