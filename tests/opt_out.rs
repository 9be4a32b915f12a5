//! The common opt-out annotations, end to end (`docs/drain-contract.md` §1 "Opt-out
//! annotations"): with `--honor-opt-out-annotations`, a pod annotated
//! `karpenter.sh/do-not-disrupt: "true"` or `cluster-autoscaler.kubernetes.io/safe-to-evict:
//! "false"` is held with a blocker naming the annotation and never evicted; at the drain deadline
//! `onTimeout` applies to it as to any pod (ForceDelete deletes it, Wait keeps it held). Without
//! the flag they are evicted as upstream does: `tests/drain_facts.rs`
//! `the_opt_out_annotations_are_not_read_without_the_flag`.
//!
//! The cluster of this binary records every eviction in the API server's audit log, so "never
//! evicted" is the API server's own record.

mod common;

use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use common::*;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams, PostParams};
use nmo_devcluster::audit::{AuditCursor, AuditEvent, EVICTIONS_POLICY};
use nmo_devcluster::operator::Operator;
use node_maintenance_operator::api::{MaintenancePhase, NodeMaintenance, NodeMaintenanceStatus};
use serde_json::json;

const LIMIT: Duration = Duration::from_secs(120);
/// The drain deadline of these tests.
const TIMEOUT: Duration = Duration::from_secs(20);
const DO_NOT_DISRUPT: &str = "karpenter.sh/do-not-disrupt";
const SAFE_TO_EVICT: &str = "cluster-autoscaler.kubernetes.io/safe-to-evict";

struct Env {
    cluster: Cluster,
    _operator: Mutex<Operator>,
}

/// One cluster with an eviction audit log and one operator started with
/// `--honor-opt-out-annotations`.
fn env() -> &'static Env {
    static ENV: OnceLock<Env> = OnceLock::new();
    ENV.get_or_init(|| {
        let cluster = audited_cluster(EVICTIONS_POLICY);
        let installed = installed(&cluster);
        let mut opts = installed.options("operator");
        opts.extra_args.push("--honor-opt-out-annotations".into());
        let operator = fixtures::start_registered(&cluster, &opts)
            .unwrap_or_else(|e| panic!("operator did not start: {e}"));
        Env {
            cluster,
            _operator: Mutex::new(operator),
        }
    })
}

/// A node of its own with, in a namespace of its own, pods `dnd` (do-not-disrupt "true"),
/// `ste` (safe-to-evict "false"), `plain` (no annotation) and `yes` (do-not-disrupt "yes",
/// which Karpenter does not read as an opt-out), all Running.
async fn node_with_pods(
    client: &kube::Client,
    cluster: &Cluster,
    prefix: &str,
) -> (String, String) {
    let group = unique(prefix);
    let node = worker_nodes(cluster, client, &group, 1).await.remove(0);
    let ns = namespace(client, prefix).await;
    for (name, annotations) in [
        ("dnd", json!({DO_NOT_DISRUPT: "true"})),
        ("ste", json!({SAFE_TO_EVICT: "false"})),
        ("plain", json!({})),
        ("yes", json!({DO_NOT_DISRUPT: "yes"})),
    ] {
        let extra = json!({"metadata": {"annotations": annotations}});
        bare_pod(client, &ns, name, &node, extra).await;
    }
    wait_for("4 pods Running", LIMIT, || async {
        let list = Api::<Pod>::namespaced(client.clone(), &ns)
            .list(&Default::default())
            .await
            .map_err(|e| e.to_string())?;
        let up = list.items.iter().filter(|p| running(p)).count();
        if up == 4 {
            Ok(())
        } else {
            Err(format!("{up} of 4 Running"))
        }
    })
    .await;
    (node, ns)
}

/// Creates NodeMaintenance `name` for `node` with `drainTimeout` [`TIMEOUT`] and `on_timeout`.
async fn create_with_deadline(
    client: &kube::Client,
    name: &str,
    node: &str,
    on_timeout: &str,
) -> Result<(), kube::Error> {
    let mut nm = serde_json::to_value(nm::new(name, node, "e2e")).unwrap();
    nm["spec"]["drainTimeout"] = json!(format!("{}s", TIMEOUT.as_secs()));
    nm["spec"]["onTimeout"] = json!(on_timeout);
    Api::<NodeMaintenance>::all(client.clone())
        .create(&PostParams::default(), &serde_json::from_value(nm).unwrap())
        .await
        .map(|_| ())
}

/// Whether `s` holds exactly `dnd` and `ste` as `OptedOut`, each naming its annotation.
fn held_by_their_annotations(s: &NodeMaintenanceStatus) -> bool {
    let blockers: Vec<_> = s.blockers.iter().flatten().collect();
    blockers.len() == 2
        && blockers.iter().all(|b| {
            let message = b.message.as_deref().unwrap_or_default();
            let annotation = match b.name.as_str() {
                "dnd" => DO_NOT_DISRUPT,
                "ste" => SAFE_TO_EVICT,
                _ => return false,
            };
            b.reason == "OptedOut" && message.contains(annotation) && message.contains("deadline")
        })
}

/// The evictions the API server answered, among `events`, of pods in `ns`, by pod name.
fn evictions_in(events: &[AuditEvent], ns: &str) -> Vec<String> {
    events
        .iter()
        .filter(|e| {
            e.subresource == "eviction" && e.namespace == ns && e.stage == "ResponseComplete"
        })
        .map(|e| e.name.clone())
        .collect()
}

/// Asserts pods `names` of `ns` are there, the same objects as `before`, and not terminating.
async fn still_running(client: &kube::Client, ns: &str, before: &[Pod], names: &[&str]) {
    let api = Api::<Pod>::namespaced(client.clone(), ns);
    for name in names {
        let now = api.get_opt(name).await.unwrap();
        let was = before
            .iter()
            .find(|p| p.metadata.name.as_deref() == Some(name));
        let now = now.unwrap_or_else(|| panic!("{name} is gone"));
        assert_eq!(
            now.metadata.uid,
            was.unwrap().metadata.uid,
            "{name} replaced"
        );
        assert!(
            now.metadata.deletion_timestamp.is_none(),
            "{name} is terminating"
        );
    }
}

/// `onTimeout: ForceDelete`: `dnd` and `ste` are held with `OptedOut` naming their annotation
/// while `plain` and `yes` are evicted; they are never evicted (the audit log), still the same
/// Running pods when the deadline nears, and deleted at the deadline (a `PodForceDeleted`
/// Warning each, none before it); the maintenance then Succeeds.
#[tokio::test]
async fn opted_out_pods_are_held_until_the_deadline_then_force_deleted() {
    let env = env();
    let client = env.cluster.client().await;
    let (node, ns) = node_with_pods(&client, &env.cluster, "optout-force").await;
    let before: Vec<Pod> = Api::<Pod>::namespaced(client.clone(), &ns)
        .list(&Default::default())
        .await
        .unwrap()
        .items;
    let mut audit = AuditCursor::at_end(env.cluster.audit_log_path());
    apply_force_delete_overlay(&client).await;
    let name = unique("nm-optout-force");
    wait_for("ForceDelete admitted with the grant", LIMIT, || async {
        create_with_deadline(&client, &name, &node, "ForceDelete")
            .await
            .map_err(|e| e.to_string())
    })
    .await;
    nm::wait_status(
        &client,
        &name,
        "dnd and ste held by their annotations",
        LIMIT,
        |s| s.phase == Some(MaintenancePhase::Running) && held_by_their_annotations(s),
    )
    .await;
    let deadline =
        node_drain_started(&client, &node).await + jiff::SignedDuration::try_from(TIMEOUT).unwrap();
    // Held, not kept: still Running and still the same pods a few seconds before the deadline.
    let now = jiff::Timestamp::now();
    let until_near = deadline.duration_since(now) - jiff::SignedDuration::from_secs(4);
    // (A machine so loaded that the first held status came later is checked by the audit log
    // alone.)
    if until_near.is_positive() {
        tokio::time::sleep(until_near.unsigned_abs()).await;
        still_running(&client, &ns, &before, &["dnd", "ste"]).await;
        let nm_now = Api::<NodeMaintenance>::all(client.clone())
            .get(&name)
            .await
            .unwrap();
        assert!(
            nm_now.status.as_ref().is_some_and(|s| {
                s.phase == Some(MaintenancePhase::Running) && held_by_their_annotations(s)
            }),
            "still held near the deadline: {:?}",
            nm_now.status
        );
    }

    nm::wait_phase(&client, &name, MaintenancePhase::Succeeded, LIMIT).await;
    let forced = nm::warnings(&client, &name, "PodForceDeleted").await;
    for pod in ["dnd", "ste"] {
        assert!(
            forced.iter().any(|(m, _)| m.contains(pod)),
            "{pod} not force-deleted: {forced:?}"
        );
    }
    assert_eq!(
        forced.len(),
        2,
        "only the held pods were left to delete: {forced:?}"
    );
    for (message, at) in &forced {
        assert!(
            *at >= deadline,
            "deleted at {at}, before the deadline {deadline}: {message}"
        );
    }
    let api = Api::<Pod>::namespaced(client.clone(), &ns);
    for pod in ["dnd", "ste", "plain", "yes"] {
        assert!(
            api.get_opt(pod).await.unwrap().is_none(),
            "{pod} still there"
        );
    }
    let evicted = evictions_in(&audit.read().unwrap(), &ns);
    assert!(
        !evicted.iter().any(|n| n == "dnd" || n == "ste"),
        "an opted-out pod was evicted: {evicted:?}"
    );
    for pod in ["plain", "yes"] {
        assert!(
            evicted.iter().any(|n| n == pod),
            "{pod} not evicted: {evicted:?}"
        );
    }
    nm::delete_and_wait_restored(&client, &name, &node).await;
}

/// `onTimeout: Wait`: past the deadline the held pods stay held, never evicted, with the one
/// `DrainDeadlineExceeded` Warning; once their owners take the opt-outs back
/// (`do-not-disrupt: "false"`, `safe-to-evict: "true"`) they are evicted and the maintenance
/// Succeeds.
#[tokio::test]
async fn under_wait_opted_out_pods_stay_held_past_the_deadline_until_they_opt_back_in() {
    let env = env();
    let client = env.cluster.client().await;
    let (node, ns) = node_with_pods(&client, &env.cluster, "optout-wait").await;
    let before: Vec<Pod> = Api::<Pod>::namespaced(client.clone(), &ns)
        .list(&Default::default())
        .await
        .unwrap()
        .items;
    let mut audit = AuditCursor::at_end(env.cluster.audit_log_path());
    let name = unique("nm-optout-wait");
    create_with_deadline(&client, &name, &node, "Wait")
        .await
        .unwrap();
    nm::wait_status(
        &client,
        &name,
        "dnd and ste held by their annotations",
        LIMIT,
        held_by_their_annotations,
    )
    .await;
    wait_for("the DrainDeadlineExceeded Warning", LIMIT, || async {
        let w = nm::warnings(&client, &name, "DrainDeadlineExceeded").await;
        if w.is_empty() {
            Err("none yet".to_string())
        } else {
            Ok(())
        }
    })
    .await;
    // A few rounds past the deadline: still held, still the same Running pods.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let nm_now = Api::<NodeMaintenance>::all(client.clone())
        .get(&name)
        .await
        .unwrap();
    assert!(
        nm_now.status.as_ref().is_some_and(|s| {
            s.phase == Some(MaintenancePhase::Running) && held_by_their_annotations(s)
        }),
        "still held past the deadline: {:?}",
        nm_now.status
    );
    still_running(&client, &ns, &before, &["dnd", "ste"]).await;
    let evicted = evictions_in(&audit.read().unwrap(), &ns);
    assert!(
        !evicted.iter().any(|n| n == "dnd" || n == "ste"),
        "an opted-out pod was evicted: {evicted:?}"
    );

    let api = Api::<Pod>::namespaced(client.clone(), &ns);
    for (pod, key, value) in [
        ("dnd", DO_NOT_DISRUPT, "false"),
        ("ste", SAFE_TO_EVICT, "true"),
    ] {
        let patch = json!({"metadata": {"annotations": {key: value}}});
        api.patch(pod, &PatchParams::default(), &Patch::Merge(patch))
            .await
            .unwrap();
    }
    nm::wait_phase(&client, &name, MaintenancePhase::Succeeded, LIMIT).await;
    let evicted = evictions_in(&audit.read().unwrap(), &ns);
    for pod in ["dnd", "ste"] {
        assert!(
            evicted.iter().any(|n| n == pod),
            "{pod} not evicted once released: {evicted:?}"
        );
    }
    assert_eq!(
        nm::warnings(&client, &name, "DrainDeadlineExceeded")
            .await
            .len(),
        1,
        "one DrainDeadlineExceeded Warning"
    );
    nm::delete_and_wait_restored(&client, &name, &node).await;
}
