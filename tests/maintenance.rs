//! The maintenance lifecycle end to end: the operator binary, acting as the ServiceAccount from
//! `manifests/`, against a real control plane whose kwok nodes run and terminate pods.
//!
//! Upstream's controller cases (its controller test suite) come first, then our improvements.

mod common;

use std::time::Duration;

use common::*;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use node_maintenance_operator::api::{MaintenancePhase, NodeMaintenance};
use serde_json::json;

const LIMIT: Duration = Duration::from_secs(60);
const LEASE_NS: &str = "medik8s-leases";
/// Reconcile workers of this binary's operator: fewer than the maintenances of
/// [`twenty_maintenances_progress_at_once`], so a drain that held its worker until the node is
/// empty would leave all but two of them without a status (the README's "the drain never
/// blocks a worker"). Every other test here shares the two workers too.
const WORKERS: usize = 2;

/// The operator under test, as [`common::operator_env`] but with [`WORKERS`] reconcile workers.
fn operator_env() -> &'static OperatorEnv {
    static ENV: std::sync::OnceLock<OperatorEnv> = std::sync::OnceLock::new();
    ENV.get_or_init(|| {
        start_env(|opts| {
            opts.extra_args
                .push(format!("--max-concurrent-reconciles={WORKERS}"))
        })
    })
}

fn leases(client: &kube::Client) -> Api<Lease> {
    Api::namespaced(client.clone(), LEASE_NS)
}

async fn pods_on(client: &kube::Client, node: &str) -> Vec<Pod> {
    Api::<Pod>::all(client.clone())
        .list(&ListParams::default().fields(&format!("spec.nodeName={node}")))
        .await
        .unwrap()
        .items
}

/// Changes an annotation of the NodeMaintenance: a watch event, hence a reconcile, without
/// changing what the maintenance asks for.
async fn touch(client: &kube::Client, name: &str, value: &str) {
    Api::<NodeMaintenance>::all(client.clone())
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"e2e/touch": value}}})),
        )
        .await
        .unwrap();
}

/// A Lease time as the API server's MicroTime wants it: exactly six fractional digits.
fn micro(t: jiff::Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%S.%6fZ").to_string()
}

/// A valid lease of another holder (NodeHealthCheck's naming), as remediation would take it.
async fn foreign_lease(client: &kube::Client, node: &str) {
    ensure_lease_namespace(client).await;
    let now = jiff::Timestamp::now();
    let lease: Lease = serde_json::from_value(json!({
        "metadata": {"name": format!("node-{node}")},
        "spec": {
            "holderIdentity": "NodeHealthCheck-e2e",
            "leaseDurationSeconds": 3600,
            "acquireTime": micro(now),
            "renewTime": micro(now),
        }
    }))
    .unwrap();
    leases(client)
        .create(&PostParams::default(), &lease)
        .await
        .unwrap();
}

async fn ensure_lease_namespace(client: &kube::Client) {
    let ns: k8s_openapi::api::core::v1::Namespace =
        serde_json::from_value(json!({"metadata": {"name": LEASE_NS}})).unwrap();
    let _ = Api::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await;
}

/// Upstream #6: a valid NodeMaintenance cordons and taints the node, labels it, takes the lease,
/// evicts the Deployment's pods (which come back elsewhere), leaves DaemonSet pods, reports
/// Succeeded with upstream's counts and events; deletion restores the node and deletes the lease.
#[tokio::test]
async fn success_with_pods_then_restore() {
    let env = operator_env();
    let client = env.cluster.client().await;
    let group = unique("ok");
    let nodes = worker_nodes(env.cluster, &client, &group, 2).await;
    let ns = namespace(&client, "ok").await;
    env.cluster
        .kubectl_run(&["cordon", &nodes[1]], None)
        .unwrap();
    deployment(&client, &ns, "web", &group, 3, 1).await;
    daemonset(&client, &ns, "agent", &group).await;
    wait_running(&client, &ns, "web", 3, LIMIT).await;
    wait_running(&client, &ns, "agent", 2, LIMIT).await;
    env.cluster
        .kubectl_run(&["uncordon", &nodes[1]], None)
        .unwrap();

    let started = jiff::Timestamp::now();
    let name = unique("nm-ok");
    nm::create(&client, &name, &nodes[0]).await;
    let done = nm::wait_phase(&client, &name, MaintenancePhase::Succeeded, LIMIT).await;
    let s = done.status.unwrap();
    assert_eq!(s.drain_progress, Some(100));
    assert_eq!(
        s.eviction_pods,
        Some(3),
        "the Deployment's pods, not the DaemonSet's"
    );
    assert_eq!(s.total_pods, Some(4), "every pod on the node at the start");
    assert!(s.pending_pods.unwrap_or_default().is_empty());
    assert!(s.pending_pods_refs.unwrap_or_default().is_empty());
    assert_eq!(s.last_error, None);
    assert_eq!(s.error_on_lease_count.unwrap_or(0), 0);
    assert!(s.last_update.is_some());
    assert_eq!(
        done.metadata.finalizers,
        Some(vec!["foregroundDeleteNodeMaintenance".to_string()])
    );

    wait_for("node in maintenance", LIMIT, || {
        node::in_maintenance(&client, &nodes[0])
    })
    .await;
    let left: Vec<String> = pods_on(&client, &nodes[0])
        .await
        .iter()
        .map(|p| p.metadata.labels.as_ref().unwrap()["app"].clone())
        .collect();
    assert_eq!(
        left,
        vec!["agent".to_string()],
        "only the DaemonSet pod stays"
    );
    let web = wait_running(&client, &ns, "web", 3, LIMIT).await;
    assert!(
        web.iter().all(|p| node_of(p) == nodes[1]),
        "rescheduled on the other node"
    );

    let lease = leases(&client)
        .get(&format!("node-{}", nodes[0]))
        .await
        .unwrap();
    let spec = lease.spec.unwrap();
    assert_eq!(spec.holder_identity.as_deref(), Some("node-maintenance"));
    assert_eq!(spec.lease_duration_seconds, Some(3600));
    let renew = spec.renew_time.unwrap().0;
    assert!(
        renew
            >= started
                .checked_sub(jiff::SignedDuration::from_secs(1))
                .unwrap()
            && renew <= jiff::Timestamp::now()
    );

    nm::wait_event(&client, &name, "BeginMaintenance").await;
    nm::wait_event(&client, &name, "SucceedMaintenance").await;
    let events = nm::event_summary(&client, &name).await;
    assert!(
        events.contains(&(
            "Normal".into(),
            "BeginMaintenance".into(),
            "Begin a node maintenance".into(),
            1
        )),
        "{events:?}"
    );
    assert!(
        events.contains(&(
            "Normal".into(),
            "SucceedMaintenance".into(),
            "Node maintenance was succeeded".into(),
            1
        )),
        "{events:?}"
    );

    nm::delete_and_wait_restored(&client, &name, &nodes[0]).await;
    assert!(
        leases(&client)
            .get_opt(&format!("node-{}", nodes[0]))
            .await
            .unwrap()
            .is_none(),
        "lease deleted"
    );
    nm::wait_event(&client, &name, "RemovedMaintenance").await;
    wait_for("UncordonNode event on the Node", LIMIT, || async {
        let e = nm::events(&client, "Node", &nodes[0]).await;
        if e.iter()
            .any(|e| e.reason.as_deref() == Some("UncordonNode"))
        {
            Ok(())
        } else {
            Err(format!("{e:?}"))
        }
    })
    .await;
    // The operator runs as the manifests' ServiceAccount: nothing it did was refused.
    let log = env.operator.lock().unwrap().log();
    assert!(
        !log.to_lowercase().contains("forbidden"),
        "RBAC refused something:\n{log}"
    );
}

/// Upstream #7, with our recovery: the node disappears during maintenance -> Failed with
/// upstream's lastError; the node comes back -> the maintenance resumes and succeeds.
#[tokio::test]
async fn missing_node_fails_then_resumes_when_it_returns() {
    let env = operator_env();
    let client = env.cluster.client().await;
    let group = unique("gone");
    let nodes = worker_nodes(env.cluster, &client, &group, 1).await;
    let name = unique("nm-gone");
    // The webhook refuses a maintenance for a node that does not exist, so the node goes after.
    nm::create(&client, &name, &nodes[0]).await;
    nm::wait_phase(&client, &name, MaintenancePhase::Succeeded, LIMIT).await;
    Api::<Node>::all(client.clone())
        .delete(&nodes[0], &Default::default())
        .await
        .unwrap();
    let failed = nm::wait_phase(&client, &name, MaintenancePhase::Failed, LIMIT).await;
    assert_eq!(
        failed.status.unwrap().last_error,
        Some(format!("nodes \"{}\" not found", nodes[0]))
    );
    nm::wait_event(&client, &name, "FailedMaintenance").await;

    // The node returns: the Node watch brings the maintenance back at once.
    create_worker_node(&client, &nodes[0], &group).await;
    nm::wait_phase(&client, &name, MaintenancePhase::Succeeded, LIMIT).await;
    wait_for("node in maintenance again", LIMIT, || {
        node::in_maintenance(&client, &nodes[0])
    })
    .await;
    nm::delete_and_wait_restored(&client, &name, &nodes[0]).await;
}

/// Upstream #8 and #9: a lease held by another holder is retried without counting, the node is
/// not touched meanwhile, and once it is released the maintenance succeeds without Failed.
#[tokio::test]
async fn lease_held_by_another_is_retried_then_succeeds_when_released() {
    let env = operator_env();
    let client = env.cluster.client().await;
    let group = unique("held");
    let nodes = worker_nodes(env.cluster, &client, &group, 1).await;
    foreign_lease(&client, &nodes[0]).await;
    let name = unique("nm-held");
    nm::create(&client, &name, &nodes[0]).await;
    let waiting = nm::wait_status(&client, &name, "waiting for the lease", LIMIT, |s| {
        s.last_error
            .as_deref()
            .is_some_and(|e| e.contains("failed to obtain a lease that is not owned by us"))
    })
    .await;
    let s = waiting.status.unwrap();
    assert_eq!(s.phase, Some(MaintenancePhase::Running));
    assert_eq!(s.error_on_lease_count.unwrap_or(0), 0, "not counted");
    assert_eq!(s.drain_progress.unwrap_or(0), 0);
    let (cordoned, _, _) = node::state(&client, &nodes[0]).await;
    assert!(!cordoned, "no node change without the lease");

    leases(&client)
        .delete(&format!("node-{}", nodes[0]), &Default::default())
        .await
        .unwrap();
    let done = nm::wait_phase(&client, &name, MaintenancePhase::Succeeded, LIMIT).await;
    assert_eq!(done.status.unwrap().error_on_lease_count.unwrap_or(0), 0);
    wait_for("node in maintenance", LIMIT, || {
        node::in_maintenance(&client, &nodes[0])
    })
    .await;
    let events = nm::event_summary(&client, &name).await;
    assert!(
        !events.iter().any(|e| e.1 == "FailedMaintenance"),
        "{events:?}"
    );
    nm::delete(&client, &name).await;
    nm::wait_gone(&client, &name, LIMIT).await;
}

/// `docs/drain-contract.md` §8: NodeHealthCheck's lease renewed 120 s "in the future" (its clock runs
/// ahead of ours) is held by either clock: respected like any valid foreign lease (not taken
/// over, the node not touched) until it is released.
#[tokio::test]
async fn a_foreign_lease_renewed_in_the_future_is_respected() {
    let env = operator_env();
    let client = env.cluster.client().await;
    let group = unique("skew");
    let nodes = worker_nodes(env.cluster, &client, &group, 1).await;
    ensure_lease_namespace(&client).await;
    let ahead = jiff::Timestamp::now() + jiff::SignedDuration::from_secs(120);
    let lease_name = format!("node-{}", nodes[0]);
    let lease: Lease = serde_json::from_value(json!({
        "metadata": {"name": lease_name},
        "spec": {
            "holderIdentity": "NodeHealthCheck-e2e",
            "leaseDurationSeconds": 360,
            "acquireTime": micro(ahead),
            "renewTime": micro(ahead),
        }
    }))
    .unwrap();
    leases(&client)
        .create(&PostParams::default(), &lease)
        .await
        .unwrap();
    let name = unique("nm-skew");
    nm::create(&client, &name, &nodes[0]).await;
    let waiting = nm::wait_status(&client, &name, "waiting for the lease", LIMIT, |s| {
        s.last_error.as_deref().is_some_and(|e| {
            e.contains("failed to obtain a lease that is not owned by us")
                && e.contains("NodeHealthCheck-e2e")
        })
    })
    .await;
    assert_eq!(
        waiting.status.unwrap().phase,
        Some(MaintenancePhase::Running)
    );
    let held = leases(&client).get(&lease_name).await.unwrap();
    assert_eq!(
        held.spec.and_then(|s| s.holder_identity).as_deref(),
        Some("NodeHealthCheck-e2e"),
        "the remediation's lease was taken over"
    );
    let (cordoned, taints, _) = node::state(&client, &nodes[0]).await;
    assert!(
        !cordoned && taints.is_empty(),
        "node changed under a remediation: {taints:?}"
    );

    leases(&client)
        .delete(&lease_name, &Default::default())
        .await
        .unwrap();
    nm::wait_phase(&client, &name, MaintenancePhase::Succeeded, LIMIT).await;
    nm::delete_and_wait_restored(&client, &name, &nodes[0]).await;
}

/// `docs/drain-contract.md` §7, the kind: names derived from a node name that exceed a limit.
/// - A valid node name of 251 characters has no valid lease name (`node-<name>` would have
///   256): the maintenance is Failed at once with the reason, and nothing is touched (no node
///   change, no lease), instead of Running for ever on a 422.
/// - A node name of 240 characters (its lease name fits) under a NodeMaintenance whose name has
///   250: every event name (`<object name>.<hex>`) would exceed 253; the events still appear,
///   about the right objects, and the maintenance completes.
#[tokio::test]
async fn names_derived_from_long_node_names_stay_within_limits() {
    let env = operator_env();
    let client = env.cluster.client().await;
    let nodes_api = Api::<Node>::all(client.clone());
    let tag = unique("long");
    let name_of = |len: usize| {
        let head = format!("{tag}.");
        format!("{head}{}", "n".repeat(len - head.len()))
    };
    let (unleasable, long) = (name_of(251), name_of(240));
    for n in [&unleasable, &long] {
        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": n, "annotations": {"kwok.x-k8s.io/node": "fake"}, "labels": {"type": "kwok"}},
        }))
        .unwrap();
        nodes_api
            .create(&PostParams::default(), &node)
            .await
            .unwrap();
    }

    let failed_name = unique("nm-unleasable");
    nm::create(&client, &failed_name, &unleasable).await;
    let failed = nm::wait_phase(&client, &failed_name, MaintenancePhase::Failed, LIMIT).await;
    let err = failed.status.unwrap().last_error.unwrap_or_default();
    assert!(
        err.starts_with(
            "invalid nodeName, its medik8s lease name node-<nodeName> would have 256 characters, more than the 253 a Lease name may have"
        ) && err.ends_with("no node was changed"),
        "{err}"
    );
    nm::wait_event(&client, &failed_name, "FailedMaintenance").await;
    let n = nodes_api.get(&unleasable).await.unwrap();
    let (cordoned, taints, labels) = node::state(&client, &unleasable).await;
    assert!(
        !cordoned
            && taints.iter().all(|t| !t.starts_with("medik8s.io/"))
            && !labels.contains_key("remediation.medik8s.io/exclude-from-remediation"),
        "cordoned={cordoned} taints={taints:?} labels={labels:?}"
    );
    let ours: Vec<String> = n
        .metadata
        .annotations
        .unwrap_or_default()
        .into_keys()
        .filter(|k| k.starts_with("nodemaintenance.medik8s.io/"))
        .collect();
    assert!(ours.is_empty(), "{ours:?}");
    let owned: Vec<String> = leases(&client)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|l| {
            l.metadata
                .owner_references
                .iter()
                .flatten()
                .any(|o| o.name == unleasable)
        })
        .filter_map(|l| l.metadata.name)
        .collect();
    assert!(owned.is_empty(), "{owned:?}");
    nm::delete(&client, &failed_name).await;
    nm::wait_gone(&client, &failed_name, LIMIT).await;

    let nm_name = format!("{}-{}", unique("nm"), "m".repeat(250));
    let nm_name = nm_name[..250].to_string();
    nm::create(&client, &nm_name, &long).await;
    nm::wait_phase(&client, &nm_name, MaintenancePhase::Succeeded, LIMIT).await;
    nm::wait_event(&client, &nm_name, "BeginMaintenance").await;
    nm::wait_event(&client, &nm_name, "SucceedMaintenance").await;
    let lease = leases(&client).get(&format!("node-{long}")).await.unwrap();
    assert_eq!(
        lease.spec.and_then(|s| s.holder_identity).as_deref(),
        Some("node-maintenance")
    );
    nm::delete_and_wait_restored(&client, &nm_name, &long).await;
    wait_for("UncordonNode about the long-named node", LIMIT, || async {
        let events = nm::events(&client, "Node", &long).await;
        if events
            .iter()
            .any(|e| e.reason.as_deref() == Some("UncordonNode"))
        {
            Ok(())
        } else {
            Err(format!("{events:?}"))
        }
    })
    .await;
}

/// Upstream #10: the lease is lost for a while during maintenance (counted), then recovered:
/// back to Succeeded with the count reset, never Failed.
#[tokio::test]
async fn lease_lost_for_a_while_recovers() {
    let env = operator_env();
    let client = env.cluster.client().await;
    let group = unique("blip");
    let nodes = worker_nodes(env.cluster, &client, &group, 1).await;
    let name = unique("nm-blip");
    nm::create(&client, &name, &nodes[0]).await;
    nm::wait_phase(&client, &name, MaintenancePhase::Succeeded, LIMIT).await;

    let lease_name = format!("node-{}", nodes[0]);
    leases(&client)
        .patch(
            &lease_name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"holderIdentity": "NodeHealthCheck-e2e"}})),
        )
        .await
        .unwrap();
    touch(&client, &name, "lease-lost").await;
    nm::wait_status(&client, &name, "lease loss counted", LIMIT, |s| {
        s.error_on_lease_count.unwrap_or(0) >= 1
            && s.last_error
                .as_deref()
                .is_some_and(|e| e.contains("failed to extend a lease that used to be owned by us"))
    })
    .await;
    leases(&client)
        .delete(&lease_name, &Default::default())
        .await
        .unwrap();
    let done = nm::wait_status(&client, &name, "recovered", LIMIT, |s| {
        s.phase == Some(MaintenancePhase::Succeeded) && s.error_on_lease_count.unwrap_or(0) == 0
    })
    .await;
    assert_eq!(done.status.unwrap().drain_progress, Some(100));
    let events = nm::event_summary(&client, &name).await;
    assert!(
        !events.iter().any(|e| e.1 == "FailedMaintenance"),
        "{events:?}"
    );
    nm::delete(&client, &name).await;
    nm::wait_gone(&client, &name, LIMIT).await;
}

/// Upstream #12: the lease is lost for good: Failed after more than 3 counted attempts, the
/// node is released (uncordoned), one FailedMaintenance.
#[tokio::test]
async fn lease_lost_for_good_fails_and_uncordons() {
    let env = operator_env();
    let client = env.cluster.client().await;
    let group = unique("lost");
    let nodes = worker_nodes(env.cluster, &client, &group, 1).await;
    let name = unique("nm-lost");
    nm::create(&client, &name, &nodes[0]).await;
    nm::wait_phase(&client, &name, MaintenancePhase::Succeeded, LIMIT).await;
    leases(&client)
        .patch(
            &format!("node-{}", nodes[0]),
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"holderIdentity": "NodeHealthCheck-e2e"}})),
        )
        .await
        .unwrap();
    touch(&client, &name, "lease-lost").await;
    let failed = nm::wait_phase(
        &client,
        &name,
        MaintenancePhase::Failed,
        Duration::from_secs(90),
    )
    .await;
    let s = failed.status.unwrap();
    assert!(s.error_on_lease_count.unwrap_or(0) > 3, "{s:?}");
    assert!(
        s.last_error
            .as_deref()
            .unwrap_or("")
            .contains("maintenance failed: lease could not be extended"),
        "{s:?}"
    );
    wait_for("node released", LIMIT, || {
        node::restored(&client, &nodes[0])
    })
    .await;
    nm::wait_event(&client, &name, "FailedMaintenance").await;
    let failures = nm::event_summary(&client, &name)
        .await
        .into_iter()
        .filter(|e| e.1 == "FailedMaintenance")
        .count();
    assert_eq!(failures, 1, "one event on the transition");
    nm::delete(&client, &name).await;
    nm::wait_gone(&client, &name, LIMIT).await;
    let lease = leases(&client)
        .get(&format!("node-{}", nodes[0]))
        .await
        .unwrap();
    assert_eq!(
        lease.spec.unwrap().holder_identity.as_deref(),
        Some("NodeHealthCheck-e2e"),
        "another holder's lease is kept"
    );
}

/// Upstream #11: deleted while another finalizer blocks the object: our cleanup runs once, our
/// finalizer goes, and maintenance is not re-applied while the object lingers.
#[tokio::test]
async fn deleted_with_extra_finalizer_is_not_reapplied() {
    let env = operator_env();
    let client = env.cluster.client().await;
    let group = unique("blocker");
    let nodes = worker_nodes(env.cluster, &client, &group, 1).await;
    let name = unique("nm-blocker");
    let mut obj = nm::new(&name, &nodes[0], "e2e");
    obj.metadata.finalizers = Some(vec!["test/blocker".into()]);
    let api = Api::<NodeMaintenance>::all(client.clone());
    api.create(&PostParams::default(), &obj).await.unwrap();
    nm::wait_phase(&client, &name, MaintenancePhase::Succeeded, LIMIT).await;
    nm::delete(&client, &name).await;
    wait_for("our finalizer removed", LIMIT, || async {
        let f = api
            .get(&name)
            .await
            .map_err(|e| e.to_string())?
            .metadata
            .finalizers
            .unwrap_or_default();
        if f == vec!["test/blocker".to_string()] {
            Ok(())
        } else {
            Err(format!("{f:?}"))
        }
    })
    .await;
    wait_for("node restored", LIMIT, || {
        node::restored(&client, &nodes[0])
    })
    .await;
    // Consistently, for 3 s: nothing puts the node back into maintenance.
    let until = std::time::Instant::now() + Duration::from_secs(3);
    while std::time::Instant::now() < until {
        if let Err(seen) = node::restored(&client, &nodes[0]).await {
            panic!("maintenance re-applied to a deleted NodeMaintenance's node: {seen}");
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    api.patch(
        &name,
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    nm::wait_gone(&client, &name, LIMIT).await;
}

/// A PodDisruptionBudget with maxUnavailable 0 blocks the drain; the status names the budget
/// with the healthy pods it needs and has; relaxing it lets the drain finish.
#[tokio::test]
async fn pdb_blocks_status_names_it_and_relaxing_finishes() {
    let env = operator_env();
    let client = env.cluster.client().await;
    let group = unique("pdb");
    let nodes = worker_nodes(env.cluster, &client, &group, 2).await;
    let ns = namespace(&client, "pdb").await;
    env.cluster
        .kubectl_run(&["cordon", &nodes[1]], None)
        .unwrap();
    deployment(&client, &ns, "db", &group, 2, 0).await;
    wait_running(&client, &ns, "db", 2, LIMIT).await;
    env.cluster
        .kubectl_run(&["uncordon", &nodes[1]], None)
        .unwrap();
    let pdbs = budget(&client, &ns, "db-guard", "db", 0, 2).await;

    let name = unique("nm-pdb");
    nm::create(&client, &name, &nodes[0]).await;
    let blocked = nm::wait_status(&client, &name, "blocked by the budget", LIMIT, |s| {
        s.blockers.as_ref().is_some_and(|b| {
            b.len() == 2
                && b.iter().all(|b| {
                    b.reason == "PodDisruptionBudget"
                        && b.pod_disruption_budget.as_deref() == Some("db-guard")
                        && b.desired_healthy == Some(2)
                        && b.current_healthy == Some(2)
                })
        })
    })
    .await;
    let s = blocked.status.unwrap();
    assert_eq!(s.phase, Some(MaintenancePhase::Running));
    assert_eq!(s.pending_pods.as_ref().map(Vec::len), Some(2));
    assert_eq!(s.drain_progress, Some(0));

    pdbs.patch(
        "db-guard",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"maxUnavailable": 2}})),
    )
    .await
    .unwrap();
    let done = nm::wait_phase(&client, &name, MaintenancePhase::Succeeded, LIMIT).await;
    let s = done.status.unwrap();
    assert_eq!(s.last_error, None, "cleared on success");
    assert!(s.blockers.unwrap_or_default().is_empty());
    assert!(
        env.operator
            .lock()
            .unwrap()
            .log()
            .contains("Reconciling with fixed duration")
    );
    nm::delete(&client, &name).await;
    nm::wait_gone(&client, &name, LIMIT).await;
}

/// The drain never holds a reconcile worker: 20 maintenances on 20 nodes, each blocked by its own
/// budget, all report their blocker at the same time, with [`WORKERS`] (2) reconcile workers,
/// within one deadline for all twenty ([`ALL_TWENTY`]) counted from the first create: a drain
/// that held its worker while blocked, even for a bounded pass, cannot meet it.
#[tokio::test]
async fn twenty_maintenances_progress_at_once() {
    let env = operator_env();
    let client = env.cluster.client().await;
    let group = unique("many");
    let nodes = worker_nodes(env.cluster, &client, &group, 20).await;
    let ns = namespace(&client, "many").await;
    let pods = Api::<Pod>::namespaced(client.clone(), &ns);
    for (i, n) in nodes.iter().enumerate() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": format!("p{i}"), "labels": {"app": format!("p{i}")}},
            "spec": {"nodeName": n, "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}
        }))
        .unwrap();
        pods.create(&PostParams::default(), &pod).await.unwrap();
    }
    for i in 0..nodes.len() {
        wait_running(&client, &ns, &format!("p{i}"), 1, LIMIT).await;
        budget(&client, &ns, &format!("p{i}"), &format!("p{i}"), 0, 1).await;
    }
    let pdbs = Api::<PodDisruptionBudget>::namespaced(client.clone(), &ns);
    let names: Vec<String> = (0..nodes.len()).map(|i| format!("{group}-nm{i}")).collect();
    // One deadline for all twenty, not one per maintenance: waiting for each in turn with its
    // own limit would let a drain that holds its worker for a bounded pass through (a 30 s pass,
    // like upstream's kubectl drain on a 429, on 2 workers needs 20 / 2 x 30 s = 300 s before
    // the last of them is first reconciled). A drain that returns at once takes a few seconds
    // for all twenty: one pass each, two at a time, one eviction refused per pass. 60 s leaves
    // that ten times its room on a loaded 2-core machine and stays well under 300 s.
    const ALL_TWENTY: Duration = Duration::from_secs(60);
    let started = std::time::Instant::now();
    for (name, n) in names.iter().zip(&nodes) {
        nm::create(&client, name, n).await;
    }
    let nms = Api::<NodeMaintenance>::all(client.clone());
    let blocked_by_budget = |nm: &NodeMaintenance| {
        nm.status
            .as_ref()
            .and_then(|s| s.blockers.as_ref())
            .is_some_and(|b| b.iter().any(|b| b.reason == "PodDisruptionBudget"))
    };
    // All twenty blocked at the same time, each in its own status, seen in one list.
    wait_for(
        "all twenty maintenances blocked by their budgets",
        ALL_TWENTY.saturating_sub(started.elapsed()),
        || async {
            let all = nms
                .list(&Default::default())
                .await
                .map_err(|e| e.to_string())?;
            let waiting: Vec<String> = names
                .iter()
                .filter(|name| {
                    !all.items
                        .iter()
                        .any(|nm| nm.metadata.name.as_ref() == Some(*name) && blocked_by_budget(nm))
                })
                .cloned()
                .collect();
            if waiting.is_empty() {
                Ok(())
            } else {
                Err(format!(
                    "{} of 20 not yet blocked by their budget after {:.1} s: {waiting:?}",
                    waiting.len(),
                    started.elapsed().as_secs_f64()
                ))
            }
        },
    )
    .await;
    eprintln!(
        "twenty maintenances blocked by their budgets {:.1} s after the first create",
        started.elapsed().as_secs_f64()
    );
    for i in 0..nodes.len() {
        pdbs.delete(&format!("p{i}"), &Default::default())
            .await
            .unwrap();
    }
    // Once the budgets are gone, again one deadline for all twenty to succeed.
    let released = std::time::Instant::now();
    wait_for("all twenty maintenances Succeeded", ALL_TWENTY, || async {
        let all = nms
            .list(&Default::default())
            .await
            .map_err(|e| e.to_string())?;
        let running: Vec<String> = names
            .iter()
            .filter(|name| {
                !all.items.iter().any(|nm| {
                    nm.metadata.name.as_ref() == Some(*name)
                        && nm.status.as_ref().and_then(|s| s.phase)
                            == Some(MaintenancePhase::Succeeded)
                })
            })
            .cloned()
            .collect();
        if running.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "{} of 20 not Succeeded after {:.1} s: {running:?}",
                running.len(),
                released.elapsed().as_secs_f64()
            ))
        }
    })
    .await;
    for name in &names {
        nm::delete(&client, name).await;
    }
    for name in &names {
        nm::wait_gone(&client, name, LIMIT).await;
    }
}

/// Nodes are watched: an uncordon or a removed maintenance taint during maintenance is
/// re-applied, with a Warning event saying what.
#[tokio::test]
async fn drift_is_reapplied_with_an_event() {
    let env = operator_env();
    let client = env.cluster.client().await;
    let group = unique("drift");
    let nodes = worker_nodes(env.cluster, &client, &group, 1).await;
    let name = unique("nm-drift");
    nm::create(&client, &name, &nodes[0]).await;
    nm::wait_phase(&client, &name, MaintenancePhase::Succeeded, LIMIT).await;
    wait_for("node in maintenance", LIMIT, || {
        node::in_maintenance(&client, &nodes[0])
    })
    .await;

    env.cluster
        .kubectl_run(&["uncordon", &nodes[0]], None)
        .unwrap();
    env.cluster
        .kubectl_run(
            &["taint", "node", &nodes[0], "medik8s.io/drain:NoSchedule-"],
            None,
        )
        .unwrap();
    wait_for("maintenance re-applied", LIMIT, || {
        node::in_maintenance(&client, &nodes[0])
    })
    .await;
    nm::wait_event(&client, &name, "MaintenanceReapplied").await;
    nm::delete_and_wait_restored(&client, &name, &nodes[0]).await;
}

/// Ending maintenance restores the earlier state: a node an admin had cordoned stays cordoned,
/// and a taint and the exclude label that were there before are untouched.
#[tokio::test]
async fn restores_the_earlier_state_not_a_blank_one() {
    let env = operator_env();
    let client = env.cluster.client().await;
    let group = unique("prior");
    let nodes = worker_nodes(env.cluster, &client, &group, 1).await;
    let n = &nodes[0];
    env.cluster.kubectl_run(&["cordon", n], None).unwrap();
    env.cluster
        .kubectl_run(&["taint", "node", n, "dummy-key=x:PreferNoSchedule"], None)
        .unwrap();
    env.cluster
        .kubectl_run(
            &[
                "label",
                "node",
                n,
                "remediation.medik8s.io/exclude-from-remediation=true",
                "dummy=true",
            ],
            None,
        )
        .unwrap();
    // node-lifecycle adds this one for a cordoned node; it predates the maintenance too.
    wait_for(
        "the unschedulable taint of a cordoned node",
        LIMIT,
        || async {
            let (_, taints, _) = node::state(&client, n).await;
            if taints.contains(&"node.kubernetes.io/unschedulable:NoSchedule".to_string()) {
                Ok(())
            } else {
                Err(format!("{taints:?}"))
            }
        },
    )
    .await;

    let name = unique("nm-prior");
    nm::create(&client, &name, n).await;
    nm::wait_phase(&client, &name, MaintenancePhase::Succeeded, LIMIT).await;
    wait_for("node in maintenance", LIMIT, || {
        node::in_maintenance(&client, n)
    })
    .await;
    nm::delete(&client, &name).await;
    nm::wait_gone(&client, &name, LIMIT).await;

    let (cordoned, taints, labels) = node::state(&client, n).await;
    assert!(cordoned, "the admin's cordon stays");
    assert!(
        taints.contains(&"dummy-key:PreferNoSchedule".to_string()),
        "{taints:?}"
    );
    assert!(
        !taints.contains(&"medik8s.io/drain:NoSchedule".to_string()),
        "{taints:?}"
    );
    assert_eq!(
        labels
            .get("remediation.medik8s.io/exclude-from-remediation")
            .map(String::as_str),
        Some("true")
    );
    assert_eq!(labels.get("dummy").map(String::as_str), Some("true"));
    let events = nm::events(&client, "Node", n).await;
    assert!(
        !events
            .iter()
            .any(|e| e.reason.as_deref() == Some("UncordonNode")),
        "nothing was uncordoned"
    );
}

/// A finished maintenance stays quiet: re-reconciles neither re-emit events nor rewrite status,
/// and its lease is renewed before it expires.
#[tokio::test]
async fn finished_maintenance_is_quiet_and_keeps_its_lease() {
    let env = operator_env();
    let client = env.cluster.client().await;
    let group = unique("quiet");
    let nodes = worker_nodes(env.cluster, &client, &group, 1).await;
    let name = unique("nm-quiet");
    nm::create(&client, &name, &nodes[0]).await;
    let done = nm::wait_phase(&client, &name, MaintenancePhase::Succeeded, LIMIT).await;
    let last_update = done.status.unwrap().last_update;

    // An old renewTime: three quarters of the hour have passed since the last renewal.
    let lease_name = format!("node-{}", nodes[0]);
    let old = jiff::Timestamp::now()
        .checked_sub(jiff::SignedDuration::from_secs(3000))
        .unwrap();
    leases(&client)
        .patch(
            &lease_name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"renewTime": micro(old)}})),
        )
        .await
        .unwrap();
    for i in 0..3 {
        touch(&client, &name, &i.to_string()).await;
    }
    wait_for("lease renewed", LIMIT, || async {
        let l = leases(&client)
            .get(&lease_name)
            .await
            .map_err(|e| e.to_string())?;
        let renew = l.spec.and_then(|s| s.renew_time).map(|t| t.0);
        if renew.is_some_and(|r| {
            r > old
                .checked_add(jiff::SignedDuration::from_secs(60))
                .unwrap()
        }) {
            Ok(())
        } else {
            Err(format!("{renew:?}"))
        }
    })
    .await;
    let after = Api::<NodeMaintenance>::all(client.clone())
        .get(&name)
        .await
        .unwrap();
    assert_eq!(
        after.status.unwrap().last_update,
        last_update,
        "status not rewritten"
    );
    let events = nm::event_summary(&client, &name).await;
    let succeeded: i32 = events
        .iter()
        .filter(|e| e.1 == "SucceedMaintenance")
        .map(|e| e.3)
        .sum();
    assert_eq!(succeeded, 1, "{events:?}");
    nm::delete(&client, &name).await;
    nm::wait_gone(&client, &name, LIMIT).await;
}

/// Deleting a NodeMaintenance whose node no longer exists still completes: the lease is
/// invalidated by name, the finalizer is removed, `RemovedMaintenance` is emitted.
#[tokio::test]
async fn deletion_completes_when_the_node_is_gone() {
    let env = operator_env();
    let client = env.cluster.client().await;
    let group = unique("nodegone");
    let nodes = worker_nodes(env.cluster, &client, &group, 1).await;
    let name = unique("nm-nodegone");
    nm::create(&client, &name, &nodes[0]).await;
    nm::wait_phase(&client, &name, MaintenancePhase::Succeeded, LIMIT).await;
    Api::<Node>::all(client.clone())
        .delete(&nodes[0], &Default::default())
        .await
        .unwrap();
    nm::wait_phase(&client, &name, MaintenancePhase::Failed, LIMIT).await;
    nm::delete(&client, &name).await;
    nm::wait_gone(&client, &name, LIMIT).await;
    nm::wait_event(&client, &name, "RemovedMaintenance").await;
    let lease = leases(&client)
        .get_opt(&format!("node-{}", nodes[0]))
        .await
        .unwrap();
    assert!(lease.is_none(), "lease invalidated by name: {lease:?}");
}

/// The node's annotation `key`, if any.
async fn node_annotation(client: &kube::Client, node: &str, key: &str) -> Option<String> {
    Api::<Node>::all(client.clone())
        .get(node)
        .await
        .unwrap()
        .metadata
        .annotations
        .and_then(|a| a.get(key).cloned())
}

/// Issue 8 item 2: a cordon and an exclude label that were there before the maintenance, released
/// by their owners while it runs (`kubectl uncordon`, `kubectl label ... exclude-`), are re-applied
/// for as long as the NodeMaintenance exists, and not restored at its end: the owners let go.
#[tokio::test]
async fn pre_existing_marks_released_during_maintenance_are_not_restored() {
    let env = operator_env();
    let client = env.cluster.client().await;
    let group = unique("released");
    let nodes = worker_nodes(env.cluster, &client, &group, 1).await;
    let n = &nodes[0];
    env.cluster.kubectl_run(&["cordon", n], None).unwrap();
    env.cluster
        .kubectl_run(
            &[
                "label",
                "node",
                n,
                "remediation.medik8s.io/exclude-from-remediation=true",
            ],
            None,
        )
        .unwrap();
    let name = unique("nm-released");
    nm::create(&client, &name, n).await;
    nm::wait_phase(&client, &name, MaintenancePhase::Succeeded, LIMIT).await;
    let prior = node_annotation(&client, n, "nodemaintenance.medik8s.io/prior-state")
        .await
        .unwrap();
    assert!(
        prior.contains(r#""unschedulable":true"#) && prior.contains(r#""excludeLabel":true"#),
        "{prior}"
    );

    env.cluster.kubectl_run(&["uncordon", n], None).unwrap();
    env.cluster
        .kubectl_run(
            &[
                "label",
                "node",
                n,
                "remediation.medik8s.io/exclude-from-remediation-",
            ],
            None,
        )
        .unwrap();
    wait_for(
        "the released marks forgotten by the prior state",
        LIMIT,
        || async {
            let prior = node_annotation(&client, n, "nodemaintenance.medik8s.io/prior-state")
                .await
                .unwrap_or_default();
            if prior.contains(r#""unschedulable":false"#)
                && prior.contains(r#""excludeLabel":false"#)
            {
                Ok(())
            } else {
                Err(prior)
            }
        },
    )
    .await;
    wait_for("maintenance still enforced", LIMIT, || {
        node::in_maintenance(&client, n)
    })
    .await;
    nm::wait_event(&client, &name, "MaintenanceReapplied").await;

    nm::delete(&client, &name).await;
    nm::wait_gone(&client, &name, LIMIT).await;
    wait_for("node restored to what the owners want now", LIMIT, || {
        node::restored(&client, n)
    })
    .await;
    let annotations = Api::<Node>::all(client.clone())
        .get(n)
        .await
        .unwrap()
        .metadata
        .annotations
        .unwrap_or_default();
    assert!(
        !annotations
            .keys()
            .any(|k| k.starts_with("nodemaintenance.medik8s.io/")),
        "{annotations:?}"
    );
}

/// Pods of the budget test: `NMO_DRAIN_BUDGET_PODS` (the long form:
/// `NMO_DRAIN_BUDGET_PODS=2000 cargo test --test maintenance small_status -- --nocapture`), 250 by
/// default, more than the status lists (200 pending, 50 blockers), so the caps are exercised.
fn budget_pods() -> usize {
    std::env::var("NMO_DRAIN_BUDGET_PODS")
        .map(|v| v.parse().expect("NMO_DRAIN_BUDGET_PODS is a number"))
        .unwrap_or(250)
}

/// `docs/drain-contract.md` §5: a node whose pods are all held by one
/// PodDisruptionBudget keeps a status under 256 KiB (lists capped, the count of the rest in the
/// `Drained` condition) and reaches Succeeded within a minute of the budget allowing.
#[tokio::test]
async fn a_node_held_by_one_budget_keeps_a_small_status_and_finishes_in_a_minute() {
    use futures::StreamExt as _;
    let n = budget_pods();
    let env = operator_env();
    let client = env.cluster.client().await;
    let group = unique("budget");
    let node = worker_nodes(env.cluster, &client, &group, 1)
        .await
        .remove(0);
    let ns = namespace(&client, "budget").await;
    let names: Vec<String> = (0..n).map(|i| format!("held-{i:05}")).collect();
    futures::stream::iter(names.iter())
        .for_each_concurrent(16, |p| {
            let client = client.clone();
            let (ns, node) = (ns.clone(), node.clone());
            async move {
                let pod: Pod = serde_json::from_value(json!({
                    "metadata": {"name": p, "labels": {"app": "held"}},
                    "spec": {
                        "nodeName": node,
                        "terminationGracePeriodSeconds": 0,
                        "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]
                    }
                }))
                .unwrap();
                Api::<Pod>::namespaced(client, &ns)
                    .create(&PostParams::default(), &pod)
                    .await
                    .unwrap();
            }
        })
        .await;
    let pdbs = min_available_budget(&client, &ns, "guard", "held", n, n).await;

    let name = unique("nm-budget");
    nm::create(&client, &name, &node).await;
    let blocked = nm::wait_status(
        &client,
        &name,
        "every pod refused, lists capped",
        Duration::from_secs(180),
        |s| {
            // The budget's pods are held by one refusal (`docs/drain-contract.md` §1), each
            // named in lastError once it came back.
            s.last_error.is_some()
                && s.blockers.as_ref().is_some_and(|b| {
                    b.len() == n.min(50) && b.iter().all(|b| b.reason == "PodDisruptionBudget")
                })
                && s.pending_pods
                    .as_ref()
                    .is_some_and(|p| p.len() == n.min(200))
        },
    )
    .await;
    let status = blocked.status.clone().unwrap();
    let size = serde_json::to_vec(&status).unwrap().len();
    eprintln!("status of {n} refused pods: {size} bytes");
    assert!(size < 256 * 1024, "status is {size} bytes");
    if n > 200 {
        let msg = blocked
            .status
            .as_ref()
            .and_then(|s| s.conditions.clone())
            .unwrap_or_default()
            .into_iter()
            .find(|c| c.type_ == "Drained")
            .map(|c| c.message)
            .unwrap_or_default();
        assert!(
            msg.contains(&format!("{n} pods still on the node"))
                && msg.contains("the status lists 200 of them (blockers: 50)"),
            "{msg}"
        );
    }
    let last = status.last_error.unwrap_or_default();
    assert!(
        last.len() < 16 * 1024 && (n <= 10 || last.contains("more errors")),
        "{}",
        last.len()
    );

    // The budget allows by going away. (Relaxing it to `minAvailable: 0` instead left the last
    // pod refused for over a minute in one run: the disruption controller counted it unhealthy,
    // `needs 0 healthy pods and has 0`, which is the budget's bookkeeping, not the drain's.)
    pdbs.delete("guard", &Default::default()).await.unwrap();
    let allowed = std::time::Instant::now();
    nm::wait_phase(
        &client,
        &name,
        MaintenancePhase::Succeeded,
        Duration::from_secs(60),
    )
    .await;
    eprintln!(
        "{n} pods: Succeeded {:.1} s after the budget allowed",
        allowed.elapsed().as_secs_f64()
    );
    nm::delete_and_wait_restored(&client, &name, &node).await;
}

/// The operator's ValidatingWebhookConfiguration as the test tooling registers it.
const WEBHOOK_CONFIGURATION: &str = "node-maintenance-operator-validating-webhook-configuration";
/// The name of the entry [`break_webhook_for`] adds.
const UNREACHABLE_WEBHOOK: &str = "unreachable.e2e.nodemaintenance.medik8s.io";
/// The label that [`break_webhook_for`]'s entry selects NodeMaintenances by.
const UNREACHABLE_LABEL: &str = "e2e.nodemaintenance.medik8s.io/unreachable-webhook";

/// Makes the operator's validating webhook unreachable for the NodeMaintenances labelled
/// [`UNREACHABLE_LABEL`]=`id`, and only for them: adds to the operator's
/// ValidatingWebhookConfiguration a copy of its webhook (same rules, `failurePolicy: Fail`)
/// whose URL is a closed loopback port, selected by that label. Every UPDATE of such an object
/// then fails with `failed calling webhook`, as with the operator's own webhook down; the other
/// tests of this binary, which share the cluster and run at once, keep a working webhook.
/// Returns once an UPDATE of `nm` is refused so.
async fn break_webhook_for(client: &kube::Client, id: &str, nm: &str) {
    use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
    let configs = Api::<ValidatingWebhookConfiguration>::all(client.clone());
    let config = configs.get(WEBHOOK_CONFIGURATION).await.unwrap();
    let mut webhook = config.webhooks.unwrap_or_default()[0].clone();
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    webhook.name = UNREACHABLE_WEBHOOK.into();
    webhook.failure_policy = Some("Fail".into());
    webhook.timeout_seconds = Some(5);
    webhook.client_config.url = Some(format!("https://127.0.0.1:{port}/validate"));
    webhook.object_selector =
        Some(serde_json::from_value(json!({"matchLabels": {UNREACHABLE_LABEL: id}})).unwrap());
    configs
        .patch(
            WEBHOOK_CONFIGURATION,
            &PatchParams::default(),
            &Patch::<()>::Json(
                serde_json::from_value(
                    json!([{"op": "add", "path": "/webhooks/-", "value": webhook}]),
                )
                .unwrap(),
            ),
        )
        .await
        .unwrap();
    let nms = Api::<NodeMaintenance>::all(client.clone());
    wait_for("an UPDATE of the NodeMaintenance refused by the unreachable webhook", LIMIT, || async {
        let probe = json!({"metadata": {"annotations": {"e2e/probe": jiff::Timestamp::now().to_string()}}});
        match nms.patch(nm, &PatchParams::default(), &Patch::Merge(&probe)).await {
            Err(kube::Error::Api(s)) if s.message.contains("failed calling webhook") => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
}

/// Removes what [`break_webhook_for`] added, and returns once an UPDATE of `nm` lands again.
async fn repair_webhook(client: &kube::Client, nm: &str) {
    use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
    let configs = Api::<ValidatingWebhookConfiguration>::all(client.clone());
    let config = configs.get(WEBHOOK_CONFIGURATION).await.unwrap();
    let names: Vec<String> = config
        .webhooks
        .unwrap_or_default()
        .into_iter()
        .map(|w| w.name)
        .collect();
    if let Some(i) = names.iter().position(|n| n == UNREACHABLE_WEBHOOK) {
        let path = format!("/webhooks/{i}/name");
        configs
            .patch(
                WEBHOOK_CONFIGURATION,
                &PatchParams::default(),
                &Patch::<()>::Json(
                    serde_json::from_value(json!([
                        {"op": "test", "path": path, "value": UNREACHABLE_WEBHOOK},
                        {"op": "remove", "path": format!("/webhooks/{i}")},
                    ]))
                    .unwrap(),
                ),
            )
            .await
            .unwrap();
    }
    let nms = Api::<NodeMaintenance>::all(client.clone());
    wait_for("an UPDATE of the NodeMaintenance admitted again", LIMIT, || async {
        let probe = json!({"metadata": {"annotations": {"e2e/probe": jiff::Timestamp::now().to_string()}}});
        nms.patch(nm, &PatchParams::default(), &Patch::Merge(&probe))
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    })
    .await;
}

/// Issue 26 item 6 (docs/drain-contract.md §3, docs/design.md §1 "Entry"): entering needs no
/// write that the operator's own webhook intercepts. An admitted maintenance, held first by a
/// foreign lease, whose webhook then becomes unreachable (`failurePolicy: Fail`, so no UPDATE
/// of it lands): once the lease is released, the node is cordoned and tainted and the
/// maintenance Succeeds, as upstream's would (it writes only status, the Lease and the Node
/// after the finalizer). The NodeMaintenance's own record of the node lands once the webhook
/// answers again.
#[tokio::test]
async fn an_admitted_maintenance_enters_its_node_while_the_webhook_is_unreachable() {
    let env = operator_env();
    let client = env.cluster.client().await;
    let group = unique("nohook");
    let nodes = worker_nodes(env.cluster, &client, &group, 1).await;
    let name = unique("nm-nohook");
    foreign_lease(&client, &nodes[0]).await;
    let mut maintenance = nm::new(&name, &nodes[0], "e2e");
    maintenance
        .metadata
        .labels
        .get_or_insert_with(Default::default)
        .insert(UNREACHABLE_LABEL.into(), name.clone());
    let nms = Api::<NodeMaintenance>::all(client.clone());
    nms.create(&PostParams::default(), &maintenance)
        .await
        .unwrap();
    // Admitted, its finalizer on, waiting for the lease: entry is next.
    nm::wait_status(
        &client,
        &name,
        "waiting for the foreign lease",
        LIMIT,
        |s| {
            s.last_error
                .as_deref()
                .is_some_and(|e| e.contains("failed to obtain a lease that is not owned by us"))
        },
    )
    .await;
    break_webhook_for(&client, &name, &name).await;

    leases(&client)
        .delete(&format!("node-{}", nodes[0]), &Default::default())
        .await
        .unwrap();
    nm::wait_phase(&client, &name, MaintenancePhase::Succeeded, LIMIT).await;
    wait_for("node in maintenance", LIMIT, || {
        node::in_maintenance(&client, &nodes[0])
    })
    .await;
    let lease = leases(&client)
        .get(&format!("node-{}", nodes[0]))
        .await
        .unwrap();
    assert_eq!(
        lease.spec.and_then(|s| s.holder_identity).as_deref(),
        Some("node-maintenance")
    );
    let stored = nms.get(&name).await.unwrap();
    assert_eq!(
        stored
            .annotations()
            .get(node_maintenance_operator::api::ENTERED_NODE_ANNOTATION),
        None,
        "no UPDATE of the NodeMaintenance landed while its webhook was unreachable"
    );

    // The webhook back: the record lands with the next pass (the probe UPDATE starts one).
    repair_webhook(&client, &name).await;
    wait_for(
        "the node entered recorded on the NodeMaintenance",
        LIMIT,
        || async {
            let nm = nms.get(&name).await.map_err(|e| e.to_string())?;
            let entered = nm
                .annotations()
                .get(node_maintenance_operator::api::ENTERED_NODE_ANNOTATION)
                .cloned();
            if entered.as_deref() == Some(nodes[0].as_str()) {
                Ok(())
            } else {
                Err(format!("{:?}", nm.annotations()))
            }
        },
    )
    .await;
    nm::delete_and_wait_restored(&client, &name, &nodes[0]).await;
}

/// Creates a kwok worker node `name` labelled `nmo-test=<group>` with `spec.providerID` set to
/// `provider_id` (the machine it stands for), and waits until it is Ready, and untainted when
/// `untainted` (a node a maintenance enters at once gets its taints before it is Ready).
async fn machine(
    client: &kube::Client,
    name: &str,
    group: &str,
    provider_id: &str,
    untainted: bool,
) {
    let node: Node = serde_json::from_value(json!({
        "metadata": {
            "name": name,
            "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
            "labels": {
                "kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64", "type": "kwok", "nmo-test": group,
            },
        },
        "spec": {"providerID": provider_id},
        "status": {
            "allocatable": {"cpu": "64", "memory": "256Gi", "pods": "1000"},
            "capacity": {"cpu": "64", "memory": "256Gi", "pods": "1000"}
        }
    }))
    .unwrap();
    let nodes = Api::<Node>::all(client.clone());
    nodes.create(&PostParams::default(), &node).await.unwrap();
    wait_for(
        &format!("node {name} Ready and untainted"),
        LIMIT,
        || async {
            let node = nodes.get(name).await.map_err(|e| e.to_string())?;
            let ready = node
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
            let taints = node
                .spec
                .as_ref()
                .and_then(|s| s.taints.clone())
                .unwrap_or_default();
            if ready && (taints.is_empty() || !untainted) {
                Ok(())
            } else {
                Err(format!("ready={ready} taints={taints:?}"))
            }
        },
    )
    .await;
}

/// Deletes Node `name` and waits until it is gone.
async fn delete_node(client: &kube::Client, name: &str) {
    let nodes = Api::<Node>::all(client.clone());
    nodes.delete(name, &Default::default()).await.unwrap();
    wait_for(&format!("node {name} gone"), LIMIT, || async {
        match nodes.get_opt(name).await.map_err(|e| e.to_string())? {
            None => Ok(()),
            Some(n) => Err(format!("still there: {:?}", n.metadata.deletion_timestamp)),
        }
    })
    .await;
}

/// Issue 26 item 7 (docs/drain-contract.md §3): a node name reused by another machine. The
/// maintenance's node is deleted mid-maintenance; a Node registering under that name with
/// another `spec.providerID` is left alone (the maintenance stays Failed, says the node was
/// replaced with both providerIDs, the node stays schedulable and untainted, no lease is held
/// for it); the machine entered coming back (its providerID) resumes the maintenance to
/// Succeeded.
#[tokio::test]
async fn a_reused_node_name_is_entered_only_by_the_machine_entered_before() {
    use node_maintenance_operator::api::ENTERED_NODE_PROVIDER_ID_ANNOTATION;
    let env = operator_env();
    let client = env.cluster.client().await;
    let group = unique("reused");
    let node_name = format!("{group}-n0");
    let entered_id = format!("kwok://{node_name}/machine-a");
    let other_id = format!("kwok://{node_name}/machine-b");
    machine(&client, &node_name, &group, &entered_id, true).await;
    let name = unique("nm-reused");
    nm::create(&client, &name, &node_name).await;
    nm::wait_phase(&client, &name, MaintenancePhase::Succeeded, LIMIT).await;
    let nms = Api::<NodeMaintenance>::all(client.clone());
    wait_for("the machine entered recorded", LIMIT, || async {
        let nm = nms.get(&name).await.map_err(|e| e.to_string())?;
        match nm.annotations().get(ENTERED_NODE_PROVIDER_ID_ANNOTATION) {
            Some(id) if *id == entered_id => Ok(()),
            _ => Err(format!("{:?}", nm.annotations())),
        }
    })
    .await;

    delete_node(&client, &node_name).await;
    nm::wait_phase(&client, &name, MaintenancePhase::Failed, LIMIT).await;
    machine(&client, &node_name, &group, &other_id, true).await;
    let failed = nm::wait_status(&client, &name, "the node said replaced", LIMIT, |s| {
        s.last_error
            .as_deref()
            .is_some_and(|e| e.contains("was replaced"))
    })
    .await;
    let status = failed.status.unwrap();
    assert_eq!(status.phase, Some(MaintenancePhase::Failed));
    let text = status.last_error.unwrap();
    assert!(
        text.contains(&format!("{other_id:?}")) && text.contains(&format!("{entered_id:?}")),
        "{text}"
    );
    nm::wait_event(&client, &name, "NodeReplaced").await;
    let events = nm::event_summary(&client, &name).await;
    assert!(
        events
            .iter()
            .any(|e| e.0 == "Warning" && e.1 == "NodeReplaced" && e.2.contains(&other_id)),
        "{events:?}"
    );
    // Our lease, held for the machine that left, is given up; none is taken for the new one.
    wait_for("no lease for the new machine", LIMIT, || async {
        match leases(&client)
            .get_opt(&format!("node-{node_name}"))
            .await
            .map_err(|e| e.to_string())?
        {
            None => Ok(()),
            Some(l) => Err(format!("{:?}", l.spec)),
        }
    })
    .await;
    node::restored(&client, &node_name)
        .await
        .unwrap_or_else(|e| panic!("the new machine was touched: {e}"));
    let new = Api::<Node>::all(client.clone())
        .get(&node_name)
        .await
        .unwrap();
    assert_eq!(
        new.annotations().get("nodemaintenance.medik8s.io/holder"),
        None,
        "{:?}",
        new.annotations()
    );
    assert_eq!(
        nms.get(&name).await.unwrap().status.unwrap().phase,
        Some(MaintenancePhase::Failed)
    );

    // The machine entered comes back under its name: the maintenance resumes.
    delete_node(&client, &node_name).await;
    machine(&client, &node_name, &group, &entered_id, false).await;
    nm::wait_phase(&client, &name, MaintenancePhase::Succeeded, LIMIT).await;
    wait_for("node in maintenance again", LIMIT, || {
        node::in_maintenance(&client, &node_name)
    })
    .await;
    nm::delete_and_wait_restored(&client, &name, &node_name).await;
}
