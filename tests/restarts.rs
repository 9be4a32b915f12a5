//! The operator process dies, restarts, runs twice: maintenance still completes and nodes are
//! still restored. No webhook is registered in this binary, which also lets a duplicate
//! NodeMaintenance "slip past" it. Each test runs its own operator processes, one test at a time.

mod common;

use std::time::Duration;

use common::*;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, Patch, PatchParams, PostParams};
use nmo_devcluster::operator::{Operator, ServiceAccountRef};
use node_maintenance_operator::api::{MaintenancePhase, NodeMaintenance};
use serde_json::json;

const LIMIT: Duration = Duration::from_secs(60);

/// One test at a time: each starts and kills its own operators.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn setup() -> (&'static Cluster, ServiceAccountRef, std::path::PathBuf) {
    static SETUP: std::sync::OnceLock<(ServiceAccountRef, std::path::PathBuf)> =
        std::sync::OnceLock::new();
    let cluster = Cluster::shared();
    let (account, kubeconfig) = SETUP.get_or_init(|| {
        let installed = installed(cluster);
        (installed.account, installed.kubeconfig)
    });
    (cluster, account.clone(), kubeconfig.clone())
}

fn start(
    cluster: &Cluster,
    account: &ServiceAccountRef,
    kubeconfig: &std::path::Path,
    name: &str,
    leader: bool,
) -> Operator {
    let mut opts = operator_options(name, account, kubeconfig);
    opts.leader_elect = leader;
    Operator::start(cluster, &opts).unwrap_or_else(|e| panic!("{name} did not start: {e}"))
}

/// A Deployment of two pods on `nodes[0]` guarded by a budget that allows no disruption, so a
/// drain of that node stays in progress until the test relaxes it.
async fn blocked_workload(
    cluster: &Cluster,
    client: &kube::Client,
    group: &str,
    nodes: &[String],
) -> (String, Api<PodDisruptionBudget>) {
    let ns = namespace(client, group).await;
    cluster.kubectl_run(&["cordon", &nodes[1]], None).unwrap();
    deployment(client, &ns, "db", group, 2, 0).await;
    wait_running(client, &ns, "db", 2, LIMIT).await;
    cluster.kubectl_run(&["uncordon", &nodes[1]], None).unwrap();
    let pdbs = budget(client, &ns, "db-guard", "db", 0, 2).await;
    (ns, pdbs)
}

async fn relax(pdbs: &Api<PodDisruptionBudget>) {
    pdbs.patch(
        "db-guard",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"maxUnavailable": 2}})),
    )
    .await
    .unwrap();
}

#[tokio::test]
async fn sigkill_mid_drain_then_restart_completes() {
    let _serial = SERIAL.lock().await;
    let (cluster, account, kubeconfig) = setup();
    let client = cluster.client().await;
    let group = unique("kill");
    let nodes = worker_nodes(cluster, &client, &group, 2).await;
    let (_ns, pdbs) = blocked_workload(cluster, &client, &group, &nodes).await;

    let mut op = start(cluster, &account, &kubeconfig, "op-kill", false);
    let name = unique("nm-kill");
    nm::create(&client, &name, &nodes[0]).await;
    nm::wait_status(&client, &name, "drain in progress", LIMIT, |s| {
        s.blockers.as_ref().is_some_and(|b| !b.is_empty())
    })
    .await;
    op.process().kill();
    relax(&pdbs).await;

    let _op = start(cluster, &account, &kubeconfig, "op-kill-2", false);
    let done = nm::wait_phase(&client, &name, MaintenancePhase::Succeeded, LIMIT).await;
    assert_eq!(done.status.unwrap().drain_progress, Some(100));
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

/// `docs/drain-contract.md` §10 (`paused` across a restart): a drain held by a budget is paused
/// by its annotation, the operator is SIGKILLed, the budget relaxed so that both pods could be
/// evicted, and a new operator started. The pause is read from the object, not from the dead
/// process: for 20 s both pods stay on the node, the node cordoned, `DrainPaused=True`; unpaused,
/// the same operator drains the node and the maintenance Succeeds.
#[tokio::test]
async fn a_paused_maintenance_stays_paused_across_a_sigkill_and_restart() {
    let _serial = SERIAL.lock().await;
    let (cluster, account, kubeconfig) = setup();
    let client = cluster.client().await;
    let group = unique("pkill");
    let nodes = worker_nodes(cluster, &client, &group, 2).await;
    let (ns, pdbs) = blocked_workload(cluster, &client, &group, &nodes).await;

    let mut op = start(cluster, &account, &kubeconfig, "op-pkill", false);
    let name = unique("nm-pkill");
    nm::create(&client, &name, &nodes[0]).await;
    nm::wait_status(&client, &name, "drain held by the budget", LIMIT, |s| {
        s.blockers.as_ref().is_some_and(|b| !b.is_empty())
    })
    .await;
    let nms = Api::<NodeMaintenance>::all(client.clone());
    let annotate = |value: &'static str| {
        let nms = nms.clone();
        let name = name.clone();
        async move {
            let patch = json!({"metadata": {"annotations": {
                node_maintenance_operator::policy::PAUSED_ANNOTATION: value
            }}});
            nms.patch(&name, &PatchParams::default(), &Patch::Merge(patch))
                .await
                .unwrap();
        }
    };
    let paused = |s: &node_maintenance_operator::api::NodeMaintenanceStatus| {
        s.conditions
            .iter()
            .flatten()
            .any(|c| c.type_ == "DrainPaused" && c.status == "True")
    };
    annotate("true").await;
    nm::wait_status(&client, &name, "DrainPaused", LIMIT, paused).await;
    op.process().kill();
    relax(&pdbs).await;
    wait_for("the budget allows both pods", LIMIT, || {
        let pdbs = pdbs.clone();
        async move {
            let allowed = pdbs
                .get("db-guard")
                .await
                .ok()
                .and_then(|p| p.status)
                .and_then(|s| s.disruptions_allowed);
            if allowed == Some(2) {
                Ok(())
            } else {
                Err(format!("disruptionsAllowed {allowed:?}"))
            }
        }
    })
    .await;

    let _op = start(cluster, &account, &kubeconfig, "op-pkill-2", false);
    // The property is an absence; 20 s is four of the drain's 5 s retries.
    tokio::time::sleep(Duration::from_secs(20)).await;
    let left = pods_on(&client, &ns, &nodes[0]).await;
    assert_eq!(left.len(), 2, "pods evicted while paused: left {left:?}");
    node::in_maintenance(&client, &nodes[0]).await.unwrap();
    let status = nms.get(&name).await.unwrap().status.unwrap();
    assert!(
        paused(&status) && status.phase == Some(MaintenancePhase::Running),
        "{status:?}"
    );

    annotate("false").await;
    nm::wait_phase(&client, &name, MaintenancePhase::Succeeded, LIMIT).await;
    assert!(pods_on(&client, &ns, &nodes[0]).await.is_empty());
    nm::delete_and_wait_restored(&client, &name, &nodes[0]).await;
}

/// `docs/drain-contract.md` §10 (`expireAfter` across a restart): a maintenance with
/// `expireAfter: 20s` Succeeds and the operator is SIGKILLed at once; the next operator starts
/// once the 20 s have passed while nothing ran. The expiry is counted from `Drained`'s
/// `lastTransitionTime` (the API server's record), not from the process: the maintenance is
/// deleted well before 20 s after the restart (an operator counting from its own start would
/// wait them again), with a `MaintenanceExpired` event, and the node is restored.
#[tokio::test]
async fn an_expiry_that_passed_while_the_operator_was_down_deletes_the_maintenance_on_start() {
    const EXPIRE: i64 = 20;
    let _serial = SERIAL.lock().await;
    let (cluster, account, kubeconfig) = setup();
    let client = cluster.client().await;
    let group = unique("xkill");
    let node = worker_nodes(cluster, &client, &group, 1).await.remove(0);
    let mut op = start(cluster, &account, &kubeconfig, "op-xkill", false);
    let name = unique("nm-xkill");
    let mut object = nm::new(&name, &node, "e2e expiry across a restart");
    object.spec.knobs.expire_after = Some(format!("{EXPIRE}s"));
    Api::<NodeMaintenance>::all(client.clone())
        .create(&PostParams::default(), &object)
        .await
        .unwrap();
    let done = nm::wait_phase(&client, &name, MaintenancePhase::Succeeded, LIMIT).await;
    op.process().kill();
    let succeeded = done
        .status
        .iter()
        .flat_map(|s| s.conditions.iter().flatten())
        .find(|c| c.type_ == "Drained" && c.status == "True")
        .map(|c| jiff::Timestamp::from_second(c.last_transition_time.0.as_second()).unwrap())
        .expect("Drained=True");
    let expires = succeeded + jiff::SignedDuration::from_secs(EXPIRE);
    // Waits for a moment on the clock (the machine's and the API server's are the same here).
    wait_for(
        "the expiry to pass while the operator is down",
        LIMIT,
        || {
            let now = jiff::Timestamp::now();
            async move {
                if now >= expires + jiff::SignedDuration::from_secs(1) {
                    Ok(())
                } else {
                    Err(format!("{now}, expires at {expires}"))
                }
            }
        },
    )
    .await;
    assert!(
        Api::<NodeMaintenance>::all(client.clone())
            .get_opt(&name)
            .await
            .unwrap()
            .is_some(),
        "nothing deletes it while the operator is down"
    );
    node::in_maintenance(&client, &node).await.unwrap();

    let restarted = jiff::Timestamp::now();
    let _op = start(cluster, &account, &kubeconfig, "op-xkill-2", false);
    nm::wait_gone(&client, &name, LIMIT).await;
    let gone = jiff::Timestamp::now();
    assert!(
        gone < restarted + jiff::SignedDuration::from_secs(EXPIRE),
        "gone at {gone}: expireAfter counted again from the restart at {restarted}"
    );
    wait_for("node restored", LIMIT, || node::restored(&client, &node)).await;
    let events = nm::event_summary(&client, &name).await;
    assert!(
        events.iter().any(|e| e.1 == "MaintenanceExpired"),
        "{events:?}"
    );
}

#[tokio::test]
async fn deleted_while_operator_down_is_restored_on_start() {
    let _serial = SERIAL.lock().await;
    let (cluster, account, kubeconfig) = setup();
    let client = cluster.client().await;
    let group = unique("down");
    let nodes = worker_nodes(cluster, &client, &group, 1).await;
    let mut op = start(cluster, &account, &kubeconfig, "op-down", false);
    let name = unique("nm-down");
    nm::create(&client, &name, &nodes[0]).await;
    nm::wait_phase(&client, &name, MaintenancePhase::Succeeded, LIMIT).await;
    op.process().stop(Duration::from_secs(10));

    nm::delete(&client, &name).await;
    let lingering = Api::<NodeMaintenance>::all(client.clone())
        .get(&name)
        .await
        .unwrap();
    assert!(
        lingering.metadata.deletion_timestamp.is_some(),
        "held by the finalizer while the operator is down"
    );
    node::in_maintenance(&client, &nodes[0]).await.unwrap();

    let _op = start(cluster, &account, &kubeconfig, "op-down-2", false);
    nm::wait_gone(&client, &name, LIMIT).await;
    wait_for("node fully restored", LIMIT, || {
        node::restored(&client, &nodes[0])
    })
    .await;
    let lease = Api::<k8s_openapi::api::coordination::v1::Lease>::namespaced(
        client.clone(),
        "medik8s-leases",
    )
    .get_opt(&format!("node-{}", nodes[0]))
    .await
    .unwrap();
    assert!(lease.is_none(), "lease deleted");
}

/// A NodeMaintenance at stage Idle leaves no record on its node, only the `MaintenancePlanned`
/// condition; force-deleted (finalizers removed) while the operator is down, it sends no deletion
/// event to anyone. The first Node list of the next start names the node by its True lifecycle
/// condition, and the orphan sweep ends the conditions (`docs/design.md §3`).
#[tokio::test]
async fn idle_maintenance_force_deleted_while_down_has_its_conditions_ended_on_start() {
    let _serial = SERIAL.lock().await;
    let (cluster, account, kubeconfig) = setup();
    let client = cluster.client().await;
    let group = unique("idle-down");
    let node = worker_nodes(cluster, &client, &group, 1).await.remove(0);
    let mut op = start(cluster, &account, &kubeconfig, "op-idle-down", false);
    let name = unique("nm-idle-down");
    let mut nm = nm::new(&name, &node, "e2e idle force-deleted");
    nm.spec.knobs.stage = Some(node_maintenance_operator::api::Stage::Idle);
    nm.metadata.annotations = Some(
        [(
            "nodemaintenance.medik8s.io/nodeConditions".to_string(),
            "true".to_string(),
        )]
        .into(),
    );
    let nms = Api::<NodeMaintenance>::all(client.clone());
    nms.create(&PostParams::default(), &nm).await.unwrap();
    let planned = || async {
        let n = Api::<k8s_openapi::api::core::v1::Node>::all(client.clone())
            .get(&node)
            .await
            .map_err(|e| e.to_string())?;
        let c = n
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .into_iter()
            .find(|c| c.type_ == "MaintenancePlanned");
        Ok::<_, String>(c.map(|c| (c.status, c.reason.unwrap_or_default())))
    };
    wait_for("MaintenancePlanned True", LIMIT, || async {
        match planned().await? {
            Some((s, r)) if s == "True" => Ok(r),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    op.process().stop(Duration::from_secs(10));

    nm::force_delete(&client, &name).await;
    assert_eq!(
        planned().await.unwrap().map(|(s, _)| s).as_deref(),
        Some("True"),
        "nobody ended the condition while the operator was down"
    );

    let _op = start(cluster, &account, &kubeconfig, "op-idle-down-2", false);
    wait_for("MaintenancePlanned ended", LIMIT, || async {
        match planned().await? {
            Some((s, r)) if s == "False" && r == "MaintenanceEnded" => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
}

/// A second NodeMaintenance for a node that is already held does not drain again, says who holds
/// the node, and deleting it leaves the first one's maintenance in place.
#[tokio::test]
async fn duplicate_that_slipped_past_the_webhook_is_harmless() {
    let _serial = SERIAL.lock().await;
    let (cluster, account, kubeconfig) = setup();
    let client = cluster.client().await;
    let group = unique("dup");
    let nodes = worker_nodes(cluster, &client, &group, 1).await;
    let _op = start(cluster, &account, &kubeconfig, "op-dup", false);
    let first = unique("nm-first");
    nm::create(&client, &first, &nodes[0]).await;
    nm::wait_phase(&client, &first, MaintenancePhase::Succeeded, LIMIT).await;

    let second = unique("nm-second");
    nm::create(&client, &second, &nodes[0]).await;
    let held = nm::wait_status(&client, &second, "says who holds the node", LIMIT, |s| {
        s.last_error.as_deref().is_some_and(|e| e.contains(&first))
    })
    .await;
    assert_ne!(
        held.status.unwrap().phase,
        Some(MaintenancePhase::Succeeded)
    );

    nm::delete(&client, &second).await;
    nm::wait_gone(&client, &second, LIMIT).await;
    node::in_maintenance(&client, &nodes[0])
        .await
        .expect("the first maintenance goes on");
    let first_now = Api::<NodeMaintenance>::all(client.clone())
        .get(&first)
        .await
        .unwrap();
    assert_eq!(
        first_now.status.unwrap().phase,
        Some(MaintenancePhase::Succeeded)
    );

    nm::delete_and_wait_restored(&client, &first, &nodes[0]).await;
}

/// Two replicas with leader election: one reconciles; kill it mid-drain and the other completes
/// the maintenance.
#[tokio::test]
async fn leader_killed_mid_drain_standby_completes() {
    let _serial = SERIAL.lock().await;
    let (cluster, account, kubeconfig) = setup();
    let client = cluster.client().await;
    let group = unique("leader");
    let nodes = worker_nodes(cluster, &client, &group, 2).await;
    let (_ns, pdbs) = blocked_workload(cluster, &client, &group, &nodes).await;

    let mut a = start(cluster, &account, &kubeconfig, "replica-a", true);
    let mut b = start(cluster, &account, &kubeconfig, "replica-b", true);
    let name = unique("nm-leader");
    nm::create(&client, &name, &nodes[0]).await;
    nm::wait_status(&client, &name, "drain in progress", LIMIT, |s| {
        s.blockers.as_ref().is_some_and(|b| !b.is_empty())
    })
    .await;
    let leader_lease = Api::<k8s_openapi::api::coordination::v1::Lease>::namespaced(
        client.clone(),
        &account.namespace,
    )
    .get("135b1886.medik8s.io")
    .await
    .unwrap();
    let holder = leader_lease
        .spec
        .unwrap()
        .holder_identity
        .unwrap_or_default();
    let a_leads = a.log().contains("Reconciling") && !b.log().contains("Reconciling");
    let b_leads = b.log().contains("Reconciling") && !a.log().contains("Reconciling");
    assert!(
        a_leads ^ b_leads,
        "exactly one replica reconciles (holder {holder})"
    );
    let (leader, standby) = if a_leads {
        (&mut a, &mut b)
    } else {
        (&mut b, &mut a)
    };
    leader.process().kill();
    relax(&pdbs).await;

    nm::wait_phase(&client, &name, MaintenancePhase::Succeeded, LIMIT).await;
    assert!(
        standby.log().contains("Reconciling"),
        "the standby took over"
    );
    nm::delete_and_wait_restored(&client, &name, &nodes[0]).await;
}

/// Upgrading from upstream NMO: a node it left in maintenance (cordon, both taints, the label, no
/// annotations of ours) whose NodeMaintenance is deleted before this operator ever entered it is
/// handed back as upstream would have.
#[tokio::test]
async fn node_left_by_upstream_is_restored_on_deletion() {
    let _serial = SERIAL.lock().await;
    let (cluster, account, kubeconfig) = setup();
    let client = cluster.client().await;
    let group = unique("upgrade");
    let nodes = worker_nodes(cluster, &client, &group, 1).await;
    let n = &nodes[0];
    cluster.kubectl_run(&["cordon", n], None).unwrap();
    cluster
        .kubectl_run(&["taint", "node", n, "medik8s.io/drain:NoSchedule"], None)
        .unwrap();
    cluster
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
    let name = unique("nm-upstream");
    let mut obj = nm::new(&name, n, "left by upstream");
    obj.metadata.finalizers = Some(vec!["foregroundDeleteNodeMaintenance".into()]);
    let api = Api::<NodeMaintenance>::all(client.clone());
    api.create(&PostParams::default(), &obj).await.unwrap();
    api.patch_status(
        &name,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"phase": "Succeeded", "drainProgress": 100}})),
    )
    .await
    .unwrap();
    node::in_maintenance(&client, n)
        .await
        .expect("looks like upstream's maintenance");
    nm::delete(&client, &name).await;

    let _op = start(cluster, &account, &kubeconfig, "op-upgrade", false);
    nm::wait_gone(&client, &name, LIMIT).await;
    wait_for("node restored", LIMIT, || node::restored(&client, n)).await;
}

/// A malformed nodeName that slipped past the webhook: the status says so in plain words, and no
/// node is touched.
#[tokio::test]
async fn malformed_node_name_is_reported_and_touches_nothing() {
    let _serial = SERIAL.lock().await;
    let (cluster, account, kubeconfig) = setup();
    let client = cluster.client().await;
    let _op = start(cluster, &account, &kubeconfig, "op-badname", false);
    // Upstream's e2e input first: its lastError for this name is the API's `not found`, which
    // ours starts with (docs/compat.md §5).
    for node in ["doesNotExist", "Not_A/Node"] {
        let name = unique("nm-badname");
        nm::create(&client, &name, node).await;
        let failed = nm::wait_phase(&client, &name, MaintenancePhase::Failed, LIMIT).await;
        let err = failed.status.unwrap().last_error.unwrap_or_default();
        assert!(
            err.starts_with(&format!(r#"nodes "{node}" not found: invalid nodeName"#))
                && err.contains("no node was changed"),
            "{err}"
        );
        nm::delete(&client, &name).await;
        nm::wait_gone(&client, &name, LIMIT).await;
    }
}

/// Issue 46 item 6 where the webhook is bypassed (not registered, as when it is down with
/// `failurePolicy: Ignore` or the object predates it): drain rules meant to keep the database
/// (`behavior: Skip`), written as Cluster API's MachineDrainRule (`selector:`) or with a label map
/// as `podSelector`, in the annotation (JSON text) and in `spec.drainRules` (which the API server
/// prunes to a rule with no selector, or an empty selector). Each maintenance says
/// `DrainPolicyValid=False` naming the path and the key, and the default applies: no rule, so the
/// database pod is evicted like every other and nothing is reported kept.
#[tokio::test]
async fn drain_rules_that_bypassed_the_webhook_are_reported_and_select_nothing() {
    use node_maintenance_operator::policy::DRAIN_RULES_ANNOTATION;
    let _serial = SERIAL.lock().await;
    let (cluster, account, kubeconfig) = setup();
    let client = cluster.client().await;
    let group = unique("bypass");
    let nodes = worker_nodes(cluster, &client, &group, 4).await;
    let ns = namespace(&client, "bypass").await;
    for node in &nodes {
        for app in ["db", "web"] {
            let pod = format!("{app}-{node}");
            bare_pod(
                &client,
                &ns,
                &pod,
                node,
                json!({"metadata": {"labels": {"app": app}}}),
            )
            .await;
        }
    }
    let _op = start(cluster, &account, &kubeconfig, "op-bypass", false);
    let machine_drain_rule =
        json!([{"selector": {"matchLabels": {"app": "db"}}, "behavior": "Skip"}]);
    let label_map = json!([{"podSelector": {"app": "db"}, "behavior": "Skip"}]);
    // (rules, in the annotation, what DrainPolicyValid names)
    let inputs = [
        (
            &machine_drain_rule,
            true,
            r#"nodemaintenance.medik8s.io/drainRules[0].selector: unknown field "selector""#,
        ),
        (
            &label_map,
            true,
            r#"nodemaintenance.medik8s.io/drainRules[0].podSelector.app: unknown field "app""#,
        ),
        (
            &machine_drain_rule,
            false,
            "spec.drainRules[0]: the rule has neither podSelector nor namespaceSelector",
        ),
        (
            &label_map,
            false,
            "spec.drainRules[0].podSelector: the selector has no matchLabels or matchExpressions entry",
        ),
    ];
    let mut names = Vec::new();
    for ((rules, annotation, _), node) in inputs.iter().zip(&nodes) {
        let name = unique("nm-bypass");
        let mut o = serde_json::to_value(nm::new(&name, node, "e2e")).unwrap();
        if *annotation {
            o["metadata"]["annotations"] = json!({ DRAIN_RULES_ANNOTATION: rules.to_string() });
        } else {
            o["spec"]["drainRules"] = (*rules).clone();
        }
        // kube's client: the server's default field validation (Warn), so the spec's unknown key
        // is pruned with a warning, not refused.
        let o: kube::api::DynamicObject = serde_json::from_value(o).unwrap();
        Api::<kube::api::DynamicObject>::all_with(
            client.clone(),
            &kube::discovery::ApiResource::erase::<NodeMaintenance>(&()),
        )
        .create(&PostParams::default(), &o)
        .await
        .unwrap_or_else(|e| panic!("{rules} was refused without the webhook: {e}"));
        names.push(name);
    }
    for ((rules, annotation, named), (name, node)) in inputs.iter().zip(names.iter().zip(&nodes)) {
        let done = nm::wait_phase(&client, name, MaintenancePhase::Succeeded, LIMIT).await;
        let status = done.status.unwrap_or_default();
        let valid = status
            .conditions
            .iter()
            .flatten()
            .find(|c| c.type_ == "DrainPolicyValid")
            .unwrap_or_else(|| panic!("{rules} ({annotation}): no DrainPolicyValid: {status:?}"));
        assert!(
            valid.status == "False" && valid.message.contains(named),
            "{rules} (annotation: {annotation}): {valid:?}"
        );
        // Every pod evicted (the default: no rule), none kept by the rule that could not be read.
        let left: Vec<String> = pods_on(&client, &ns, node).await;
        assert!(
            left.is_empty(),
            "{rules} (annotation: {annotation}): pods left {left:?}"
        );
        assert_eq!(status.eviction_pods, Some(2), "{rules}: {status:?}");
    }
    for (name, node) in names.iter().zip(&nodes) {
        nm::delete_and_wait_restored(&client, name, node).await;
    }
}

/// The names of the pods of `ns` on `node` that are not terminating.
async fn pods_on(client: &kube::Client, ns: &str, node: &str) -> Vec<String> {
    Api::<k8s_openapi::api::core::v1::Pod>::namespaced(client.clone(), ns)
        .list(&kube::api::ListParams::default().fields(&format!("spec.nodeName={node}")))
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter_map(|p| p.metadata.name)
        .collect()
}

/// SIGTERM: in-flight work finishes, leadership is released (a standby takes over at once rather
/// than after the lease expires), exit code 0.
#[tokio::test]
async fn sigterm_shuts_down_cleanly_and_releases_leadership() {
    let _serial = SERIAL.lock().await;
    let (cluster, account, kubeconfig) = setup();
    let client = cluster.client().await;
    let mut op = start(cluster, &account, &kubeconfig, "op-sigterm", true);
    let leases = Api::<k8s_openapi::api::coordination::v1::Lease>::namespaced(
        client.clone(),
        &account.namespace,
    );
    // A replica killed by an earlier test may still hold the lease until it expires (15 s).
    wait_for("this replica to lead", LIMIT, || {
        let log = op.log();
        async move {
            if log.contains("successfully acquired lease") {
                Ok(())
            } else {
                Err(log)
            }
        }
    })
    .await;
    let status = op
        .process()
        .stop(Duration::from_secs(30))
        .expect("exits by itself on SIGTERM");
    assert!(status.success(), "exit status {status}; log:\n{}", op.log());
    let holder = leases
        .get("135b1886.medik8s.io")
        .await
        .unwrap()
        .spec
        .and_then(|s| s.holder_identity)
        .unwrap_or_default();
    assert!(
        holder.is_empty(),
        "leadership released on SIGTERM, holder now {holder:?}"
    );
}

/// Issue 8 item 7: with no webhook in the way, the CRD itself refuses a changed `spec.nodeName`,
/// with upstream's admission message.
#[tokio::test]
async fn node_name_is_immutable_without_the_webhook() {
    let _serial = SERIAL.lock().await;
    let (cluster, _account, _kubeconfig) = setup();
    let client = cluster.client().await;
    let name = unique("nm-immutable");
    nm::create(&client, &name, "immutable-n1").await;
    let api = Api::<NodeMaintenance>::all(client.clone());
    let err = api
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"nodeName": "immutable-n2"}})),
        )
        .await
        .expect_err("the CRD refuses the change");
    assert!(
        err.to_string()
            .contains("updating spec.NodeName isn't allowed"),
        "{err}"
    );
    // The reason may still change.
    api.patch(
        &name,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"reason": "another"}})),
    )
    .await
    .unwrap();
    api.delete(&name, &Default::default()).await.unwrap();
    nm::wait_gone(&client, &name, LIMIT).await;
}

/// Issue 8 item 10: our record on a node outlives a rollback to upstream NMO, which ends the
/// maintenance without knowing our annotations; an admin then cordons the node. The next
/// maintenance by us must not trust the stale record ("was not cordoned"): the admin's cordon
/// survives its end, and our annotations go with it.
#[tokio::test]
async fn a_stale_record_left_across_a_rollback_is_not_trusted() {
    let _serial = SERIAL.lock().await;
    let (cluster, account, kubeconfig) = setup();
    let client = cluster.client().await;
    let group = unique("rollback");
    let nodes = worker_nodes(cluster, &client, &group, 1).await;
    let n = &nodes[0];
    let nodes_api = Api::<k8s_openapi::api::core::v1::Node>::all(client.clone());

    let mut op = start(cluster, &account, &kubeconfig, "op-before-rollback", false);
    let b = unique("nm-b");
    nm::create(&client, &b, n).await;
    nm::wait_phase(&client, &b, MaintenancePhase::Succeeded, LIMIT).await;
    node::in_maintenance(&client, n).await.unwrap();
    op.process().stop(Duration::from_secs(10));

    // Upstream ends `b`: uncordon, both taints and the label removed, lease invalidated,
    // finalizer removed. Our annotations stay.
    nodes_api
        .patch(
            n,
            &PatchParams::default(),
            &Patch::Merge(json!({
                "metadata": {"labels": {"remediation.medik8s.io/exclude-from-remediation": null}},
                "spec": {"unschedulable": false, "taints": null},
            })),
        )
        .await
        .unwrap();
    Api::<k8s_openapi::api::coordination::v1::Lease>::namespaced(client.clone(), "medik8s-leases")
        .delete(&format!("node-{n}"), &Default::default())
        .await
        .unwrap();
    nm::force_delete(&client, &b).await;
    let left = nodes_api
        .get(n)
        .await
        .unwrap()
        .metadata
        .annotations
        .unwrap_or_default();
    assert_eq!(
        left.get("nodemaintenance.medik8s.io/holder"),
        Some(&b),
        "the stale record is there: {left:?}"
    );
    cluster.kubectl_run(&["cordon", n], None).unwrap();

    // `c` exists before ours starts again, so it is `c`'s first reconcile that meets the stale
    // record (not the sweep of records nobody targets).
    let c = unique("nm-c");
    nm::create(&client, &c, n).await;
    let _op = start(cluster, &account, &kubeconfig, "op-after-rollback", false);
    nm::wait_phase(&client, &c, MaintenancePhase::Succeeded, LIMIT).await;
    node::in_maintenance(&client, n).await.unwrap();
    nm::delete(&client, &c).await;
    nm::wait_gone(&client, &c, LIMIT).await;
    wait_for(
        "maintenance ended with the admin's cordon kept",
        LIMIT,
        || async {
            let (cordoned, taints, labels) = node::state(&client, n).await;
            let annotations = nodes_api
                .get(n)
                .await
                .map_err(|e| e.to_string())?
                .metadata
                .annotations
                .unwrap_or_default();
            let ours: Vec<&String> = annotations
                .keys()
                .filter(|k| k.starts_with("nodemaintenance.medik8s.io/"))
                .collect();
            if cordoned
                && !taints.contains(&"medik8s.io/drain:NoSchedule".to_string())
                && !labels.contains_key("remediation.medik8s.io/exclude-from-remediation")
                && ours.is_empty()
            {
                Ok(())
            } else {
                Err(format!(
                    "cordoned={cordoned} taints={taints:?} labels={labels:?} annotations={ours:?}"
                ))
            }
        },
    )
    .await;
    cluster.kubectl_run(&["uncordon", n], None).unwrap();
}

/// Removes the CRD's root validation rule added by
/// [`an_invalid_status_write_is_reported_and_backed_off`], also when that test fails, so the
/// other tests of this binary see the CRD as shipped.
struct RootRule(&'static Cluster);

impl Drop for RootRule {
    fn drop(&mut self) {
        let _ = self.0.kubectl_run(
            &[
                "patch",
                "crd",
                "nodemaintenances.nodemaintenance.medik8s.io",
                "--type=json",
                "-p",
                r#"[{"op":"remove","path":"/spec/versions/0/schema/openAPIV3Schema/x-kubernetes-validations"}]"#,
            ],
            None,
        );
    }
}

/// Issue 8 item 4: a status write the API server refuses as Invalid (422, here from a CEL rule
/// added to the CRD for this one object, standing in for a schema our status violates) is logged
/// with the field the API server names and retried with growing back-off, never every second;
/// once the cause is gone the maintenance completes.
#[tokio::test]
async fn an_invalid_status_write_is_reported_and_backed_off() {
    let _serial = SERIAL.lock().await;
    let (cluster, account, kubeconfig) = setup();
    let client = cluster.client().await;
    let group = unique("invalid");
    let nodes = worker_nodes(cluster, &client, &group, 1).await;
    let name = unique("nm-invalid");
    let rule = json!([{"op": "add",
    "path": "/spec/versions/0/schema/openAPIV3Schema/x-kubernetes-validations",
    "value": [{
        "rule": format!("self.metadata.name != '{name}' || !has(self.status) || !has(self.status.phase)"),
        "message": "e2e refuses a phase for this object",
        "fieldPath": ".status.phase",
        "reason": "FieldValueInvalid",
    }]}]);
    let _rule = RootRule(cluster);
    cluster
        .kubectl_run(
            &[
                "patch",
                "crd",
                "nodemaintenances.nodemaintenance.medik8s.io",
                "--type=json",
                "-p",
                &rule.to_string(),
            ],
            None,
        )
        .unwrap();
    let nms = Api::<NodeMaintenance>::all(client.clone());
    nm::create(&client, &name, &nodes[0]).await;
    wait_for("the CRD refuses a phase with 422", LIMIT, || async {
        match nms
            .patch_status(
                &name,
                &PatchParams::default().dry_run(),
                &Patch::Merge(json!({"status": {"phase": "Running"}})),
            )
            .await
        {
            Err(kube::Error::Api(s)) if s.code == 422 => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    // Only now does an operator see the object.
    let op = start(cluster, &account, &kubeconfig, "op-invalid", false);
    let started = std::time::Instant::now();
    let marker = format!("nodemaintenance={name}");
    wait_for("the refusal logged with the field", LIMIT, || {
        let log = op.log();
        let marker = marker.clone();
        async move {
            if log
                .lines()
                .any(|l| l.contains(&marker) && l.contains("Invalid") && l.contains("status.phase"))
            {
                Ok(())
            } else {
                Err(log.lines().rev().take(5).collect::<Vec<_>>().join("\n"))
            }
        }
    })
    .await;
    let window = Duration::from_secs(20);
    tokio::time::sleep(window.saturating_sub(started.elapsed())).await;
    let retries = op
        .log()
        .lines()
        .filter(|l| l.contains(&marker) && l.contains("Reconciling with exponential duration"))
        .count();
    // 1 + 2 + 4 + 8 s of back-off fit 5 attempts into 20 s, plus a few woken by watch events
    // (our finalizer and lastError writes); a retry every second would be 20.
    assert!(
        (1..=9).contains(&retries),
        "{retries} failed reconciles in {:?}",
        started.elapsed()
    );
    let metrics = op.metrics().unwrap_or_default();
    let counted = |l: &&str| {
        (l.starts_with(r#"nmo_reconcile_failures_total{error="status"}"#)
            || l.starts_with("controller_runtime_reconcile_errors_total"))
            && !l.ends_with(" 0")
    };
    assert!(metrics.lines().any(|l| counted(&l)), "{metrics}");

    drop(_rule);
    // The back-off is long by now; a change of the object brings the next pass at once. The
    // rule's removal takes a moment to reach the API server's handlers.
    wait_for("Succeeded once the cause is gone", LIMIT, || async {
        nms.patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"e2e/touch": jiff::Timestamp::now().to_string()}}})),
        )
        .await
        .map_err(|e| e.to_string())?;
        tokio::time::sleep(Duration::from_secs(2)).await;
        let now = nms.get(&name).await.map_err(|e| e.to_string())?;
        match now.status.as_ref().and_then(|s| s.phase) {
            Some(MaintenancePhase::Succeeded) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    nm::delete_and_wait_restored(&client, &name, &nodes[0]).await;
}

/// Issue 8 item 10, the kind: state kept outside the NodeMaintenance whose owner vanished without
/// us. A NodeMaintenance whose finalizer is removed by hand is gone before our cleanup runs;
/// nothing targets its node any more, so its record is settled: the node restored by it, the
/// lease invalidated, the annotations removed.
#[tokio::test]
async fn a_node_whose_maintenance_vanished_without_cleanup_is_restored() {
    let _serial = SERIAL.lock().await;
    let (cluster, account, kubeconfig) = setup();
    let client = cluster.client().await;
    let group = unique("orphan");
    let nodes = worker_nodes(cluster, &client, &group, 1).await;
    let n = &nodes[0];
    cluster.kubectl_run(&["cordon", n], None).unwrap();
    let _op = start(cluster, &account, &kubeconfig, "op-orphan", false);
    let name = unique("nm-orphan");
    nm::create(&client, &name, n).await;
    nm::wait_phase(&client, &name, MaintenancePhase::Succeeded, LIMIT).await;
    node::in_maintenance(&client, n).await.unwrap();

    nm::force_delete(&client, &name).await;

    let leases = Api::<k8s_openapi::api::coordination::v1::Lease>::namespaced(
        client.clone(),
        "medik8s-leases",
    );
    let nodes_api = Api::<k8s_openapi::api::core::v1::Node>::all(client.clone());
    wait_for("the orphaned node settled", LIMIT, || async {
        let (cordoned, taints, labels) = node::state(&client, n).await;
        let annotations = nodes_api
            .get(n)
            .await
            .map_err(|e| e.to_string())?
            .metadata
            .annotations
            .unwrap_or_default();
        let ours: Vec<&String> = annotations
            .keys()
            .filter(|k| k.starts_with("nodemaintenance.medik8s.io/"))
            .collect();
        let lease = leases
            .get_opt(&format!("node-{n}"))
            .await
            .map_err(|e| e.to_string())?;
        if cordoned
            && !taints.contains(&"medik8s.io/drain:NoSchedule".to_string())
            && !labels.contains_key("remediation.medik8s.io/exclude-from-remediation")
            && ours.is_empty()
            && lease.is_none()
        {
            Ok(())
        } else {
            Err(format!(
                "cordoned={cordoned} taints={taints:?} labels={labels:?} annotations={ours:?} lease={}",
                lease.is_some()
            ))
        }
    })
    .await;
    cluster.kubectl_run(&["uncordon", n], None).unwrap();
}

/// `docs/drain-contract.md` §6: the operator uninstalled mid-maintenance, the finalizers removed by hand,
/// the nodes uncordoned by hand, the operator installed again. No NodeMaintenance targets the
/// nodes, but the drain taint, the exclude label, the lease and the record are still there: all
/// of what the operator put there is removed; an admin's own taint and label that predated the
/// maintenance stay (`docs/drain-contract.md` §6).
#[tokio::test]
async fn an_orphan_partly_undone_by_hand_is_cleaned_up_completely() {
    let _serial = SERIAL.lock().await;
    let (cluster, account, kubeconfig) = setup();
    let client = cluster.client().await;
    let group = unique("uninstalled");
    let nodes = worker_nodes(cluster, &client, &group, 3).await;
    let (plain, admin, targeted) = (&nodes[0], &nodes[1], &nodes[2]);
    let nodes_api = Api::<k8s_openapi::api::core::v1::Node>::all(client.clone());
    let leases = Api::<k8s_openapi::api::coordination::v1::Lease>::namespaced(
        client.clone(),
        "medik8s-leases",
    );
    // The admin's own marks on the second node, before any maintenance; the third has the
    // admin's label only.
    nodes_api
        .patch(
            targeted,
            &PatchParams::default(),
            &Patch::Merge(json!({
                "metadata": {"labels": {"remediation.medik8s.io/exclude-from-remediation": "true"}},
            })),
        )
        .await
        .unwrap();
    nodes_api
        .patch(
            admin,
            &PatchParams::default(),
            &Patch::Merge(json!({
                "metadata": {"labels": {"remediation.medik8s.io/exclude-from-remediation": "true"}},
                "spec": {"taints": [{"key": "example.com/admin", "value": "x", "effect": "NoSchedule"}]},
            })),
        )
        .await
        .unwrap();

    let mut op = start(cluster, &account, &kubeconfig, "op-before-uninstall", false);
    let names = [
        unique("nm-plain"),
        unique("nm-admin"),
        unique("nm-targeted"),
    ];
    for (name, n) in names.iter().zip([plain, admin, targeted]) {
        nm::create(&client, name, n).await;
    }
    for (name, n) in names.iter().zip([plain, admin, targeted]) {
        nm::wait_phase(&client, name, MaintenancePhase::Succeeded, LIMIT).await;
        node::in_maintenance(&client, n).await.unwrap();
    }
    op.process().stop(Duration::from_secs(10));

    for (name, n) in names.iter().zip([plain, admin, targeted]) {
        nm::force_delete(&client, name).await;
        cluster.kubectl_run(&["uncordon", n], None).unwrap();
    }
    for n in [plain, admin, targeted] {
        let (_, taints, _) = node::state(&client, n).await;
        assert!(
            taints.contains(&"medik8s.io/drain:NoSchedule".to_string()),
            "the input: the drain taint is left on {n}: {taints:?}"
        );
        assert!(
            leases
                .get_opt(&format!("node-{n}"))
                .await
                .unwrap()
                .is_some()
        );
    }

    // A new maintenance of the third node exists before the operator is back: its own reconcile
    // meets the vanished record, takes it over (the maintenance it describes is still in place)
    // and, when it ends, restores by it: the admin's label that predated both stays.
    let again = unique("nm-again");
    nm::create(&client, &again, targeted).await;
    let _op = start(cluster, &account, &kubeconfig, "op-reinstalled", false);
    nm::wait_phase(&client, &again, MaintenancePhase::Succeeded, LIMIT).await;
    nm::delete(&client, &again).await;
    nm::wait_gone(&client, &again, LIMIT).await;
    for n in [plain, admin, targeted] {
        wait_for(&format!("{n} cleaned up"), LIMIT, || async {
            let (cordoned, taints, labels) = node::state(&client, n).await;
            let annotations = nodes_api
                .get(n)
                .await
                .map_err(|e| e.to_string())?
                .metadata
                .annotations
                .unwrap_or_default();
            let ours: Vec<&String> = annotations
                .keys()
                .filter(|k| k.starts_with("nodemaintenance.medik8s.io/"))
                .collect();
            let lease = leases
                .get_opt(&format!("node-{n}"))
                .await
                .map_err(|e| e.to_string())?;
            let maintenance_taints: Vec<&String> = taints
                .iter()
                .filter(|t| {
                    t.starts_with("medik8s.io/drain")
                        || t.starts_with("node.kubernetes.io/unschedulable")
                })
                .collect();
            let label = labels
                .get("remediation.medik8s.io/exclude-from-remediation")
                .cloned();
            let admins = n == admin;
            let expected_label = (admins || n == targeted).then(|| "true".to_string());
            let admin_taint = taints.contains(&"example.com/admin:NoSchedule".to_string());
            if !cordoned
                && maintenance_taints.is_empty()
                && label == expected_label
                && admin_taint == admins
                && ours.is_empty()
                && lease.is_none()
            {
                Ok(())
            } else {
                Err(format!(
                    "cordoned={cordoned} taints={taints:?} label={label:?} annotations={ours:?} lease={}",
                    lease.is_some()
                ))
            }
        })
        .await;
    }
}

/// Starts an operator whose Node watch uses kube's watcher with paged JSON lists although this
/// API server streams initial lists (`NMO_NODE_WATCH_ENCODING=json`, `src/watch/nodes`): the path
/// of API servers before Kubernetes 1.32. Checks that its log says so and that its first list
/// held every Node the API server has (`nodes`, counted before the start), across pages.
/// Readiness does not wait for the Node list (README, start at scale), so the listing line is
/// waited for, not read once.
async fn start_json(
    cluster: &Cluster,
    account: &ServiceAccountRef,
    kubeconfig: &std::path::Path,
    name: &str,
    nodes: usize,
) -> Operator {
    let mut opts = operator_options(name, account, kubeconfig);
    opts.env
        .push(("NMO_NODE_WATCH_ENCODING".into(), "json".into()));
    let op =
        Operator::start(cluster, &opts).unwrap_or_else(|e| panic!("{name} did not start: {e}"));
    wait_for(&format!("{name} to list every node"), LIMIT, || {
        let log = op.log();
        async move {
            let listed: Vec<usize> = log
                .lines()
                .filter(|l| l.contains("Node watch listed all nodes"))
                .filter_map(|l| {
                    let at = l.find(" nodes=")? + " nodes=".len();
                    l[at..].split_whitespace().next()?.parse().ok()
                })
                .collect();
            if log.contains("Node watch: paged JSON lists")
                && !listed.is_empty()
                && listed.iter().all(|n| *n == nodes)
            {
                Ok(())
            } else {
                Err(format!(
                    "{name} listed {listed:?} nodes, the API server has {nodes}:\n{log}"
                ))
            }
        }
    })
    .await;
    op
}

/// The restart cases with the JSON Node watch, on a cluster of more Nodes than one page of its
/// lists (`watch::nodes::NODE_PAGE_SIZE`, 100): the first list after a SIGKILL mid-drain resumes
/// the drain, and the first list after a deletion while the operator was down restores the node
/// (a node carrying our holder annotation is reconciled from that list).
#[tokio::test]
async fn restarts_with_the_json_node_watch_over_several_pages() {
    let _serial = SERIAL.lock().await;
    let (cluster, account, kubeconfig) = setup();
    let client = cluster.client().await;
    let group = unique("json");
    let nodes = worker_nodes(cluster, &client, &group, 2).await;
    // Plain Node objects (no kubelet, so NotReady), only to make the lists span pages.
    let node_api = Api::<k8s_openapi::api::core::v1::Node>::all(client.clone());
    let filler: Vec<String> = (0..150).map(|i| format!("{group}-page-{i}")).collect();
    futures::future::join_all(filler.iter().map(|n| {
        let api = node_api.clone();
        async move {
            let node: k8s_openapi::api::core::v1::Node = serde_json::from_value(
                json!({"metadata": {"name": n, "labels": {"nmo-test": "json-filler"}}}),
            )
            .unwrap();
            api.create(&PostParams::default(), &node).await.unwrap();
        }
    }))
    .await;
    let count = || async {
        node_api
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .len()
    };

    // SIGKILL mid-drain, then a restart completes the drain.
    let (_ns, pdbs) = blocked_workload(cluster, &client, &group, &nodes).await;
    let mut op = start_json(cluster, &account, &kubeconfig, "op-json", count().await).await;
    let name = unique("nm-json");
    nm::create(&client, &name, &nodes[0]).await;
    nm::wait_status(&client, &name, "drain in progress", LIMIT, |s| {
        s.blockers.as_ref().is_some_and(|b| !b.is_empty())
    })
    .await;
    op.process().kill();
    relax(&pdbs).await;
    let mut op = start_json(cluster, &account, &kubeconfig, "op-json-2", count().await).await;
    nm::wait_phase(&client, &name, MaintenancePhase::Succeeded, LIMIT).await;

    // Deleted while the operator is down: the next start restores the node.
    op.process().stop(Duration::from_secs(10));
    nm::delete(&client, &name).await;
    node::in_maintenance(&client, &nodes[0]).await.unwrap();
    let _op = start_json(cluster, &account, &kubeconfig, "op-json-3", count().await).await;
    nm::wait_gone(&client, &name, LIMIT).await;
    wait_for("node fully restored", LIMIT, || {
        node::restored(&client, &nodes[0])
    })
    .await;

    futures::future::join_all(filler.iter().map(|n| {
        let api = node_api.clone();
        async move {
            let _ = api.delete(n, &Default::default()).await;
        }
    }))
    .await;
}

/// `(type, status, reason, message)` of condition `type_` of a NodeMaintenance status.
fn nm_condition(
    s: &node_maintenance_operator::api::NodeMaintenanceStatus,
    type_: &str,
) -> Option<(String, String, String)> {
    s.conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

/// `(name, reason)` of each blocker of a NodeMaintenance status.
fn blocker_reasons(
    s: &node_maintenance_operator::api::NodeMaintenanceStatus,
) -> Vec<(String, String)> {
    s.blockers
        .iter()
        .flatten()
        .map(|b| (b.name.clone(), b.reason.clone()))
        .collect()
}

/// Creates NodeMaintenance `name` of `node` with `spec` merged into its spec.
async fn create_with(client: &kube::Client, name: &str, node: &str, spec: serde_json::Value) {
    let mut o = serde_json::to_value(nm::new(name, node, "e2e restart column")).unwrap();
    merge(&mut o, json!({ "spec": spec }));
    Api::<NodeMaintenance>::all(client.clone())
        .create(&PostParams::default(), &serde_json::from_value(o).unwrap())
        .await
        .unwrap_or_else(|e| panic!("creating NodeMaintenance {name}: {e}"));
}

/// Waits until `node` is in maintenance with the drain's start recorded on it; returns the
/// start.
async fn wait_entered(client: &kube::Client, node: &str, what: &str) -> jiff::Timestamp {
    wait_for(what, LIMIT, || async {
        node::in_maintenance(client, node).await?;
        our_node_annotations(client, node)
            .await
            .get(node_maintenance_operator::api::DRAIN_STARTED_ANNOTATION)
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| "no drain start recorded".to_string())
    })
    .await
}

/// The node's annotations of this operator (`nodemaintenance.medik8s.io/…`).
async fn our_node_annotations(
    client: &kube::Client,
    node: &str,
) -> std::collections::BTreeMap<String, String> {
    Api::<k8s_openapi::api::core::v1::Node>::all(client.clone())
        .get(node)
        .await
        .unwrap()
        .metadata
        .annotations
        .unwrap_or_default()
        .into_iter()
        .filter(|(k, _)| k.starts_with("nodemaintenance.medik8s.io/"))
        .collect()
}

/// `docs/drain-contract.md` §10, the column "a restart of the operator", one SIGKILL for five
/// rows. Six nodes, one maintenance each, all set up before the kill:
/// - `stage: Cordon` (its pod `cordon-web`): cordoned, tainted, the lease held;
/// - `drainTimeout: 35s`, `onTimeout: Fail`, its pod `held` under a budget that allows nothing;
/// - `spec.drainRules` keeping `rules-db` (`behavior: Skip`), `rules-cache` labelled `skip`,
///   `rules-job` labelled `wait-completed` and waited for, `rules-web` evicted;
/// - `waitForVolumeDetach: 2m`, its pod gone, held by a VolumeAttachment;
/// - `startAt` 5 s ahead (it opens while the operator is down) and 25 s ahead (after the
///   restart).
///
/// The new operator finds everything as the objects and nodes say: the Cordon node untouched
/// (no new entry in the new process's log, our record and the lease object unchanged, the pod
/// there), then moved to Drain it Succeeds and its deletion uncordons the node; the deadline and
/// the drain's start on the node unchanged, Failed at that deadline (its `DrainDeadlineExceeded`
/// event), not `drainTimeout` after the restart; the rule- and label-kept pods still kept and
/// named, the job still waited for until it completes; the volume wait's blocker and bound
/// unchanged, Succeeded once the attachment is deleted; the window that opened while the
/// operator was down entered at start, the other still Idle until it opens, then entered.
#[tokio::test]
async fn one_restart_keeps_each_knobs_state_as_the_objects_and_the_nodes_record_it() {
    use k8s_openapi::api::coordination::v1::Lease;
    use k8s_openapi::api::core::v1::Pod;
    use k8s_openapi::api::storage::v1::VolumeAttachment;
    const TIMEOUT: i64 = 35;
    let _serial = SERIAL.lock().await;
    let began = std::time::Instant::now();
    let (cluster, account, kubeconfig) = setup();
    let client = cluster.client().await;
    let group = unique("rcol");
    let nodes = worker_nodes(cluster, &client, &group, 6).await;
    let [
        cordon_node,
        fail_node,
        rules_node,
        volume_node,
        later_node,
        opened_node,
    ]: [String; 6] = nodes.try_into().unwrap();
    let ns = namespace(&client, "rcol").await;
    let nms = Api::<NodeMaintenance>::all(client.clone());
    let leases = Api::<Lease>::namespaced(client.clone(), "medik8s-leases");
    let pods_api = Api::<Pod>::namespaced(client.clone(), &ns);
    let live = |name: &'static str| {
        let pods_api = pods_api.clone();
        async move {
            pods_api
                .get_opt(name)
                .await
                .unwrap()
                .is_some_and(|p| p.metadata.deletion_timestamp.is_none())
        }
    };
    let status_of = |name: String| {
        let nms = nms.clone();
        async move { nms.get(&name).await.unwrap().status.unwrap_or_default() }
    };
    let label = |v: &str| json!({"metadata": {"labels": {"nodemaintenance.medik8s.io/drain": v}}});
    let placed = [
        ("cordon-web", &cordon_node, json!({})),
        ("held", &fail_node, json!({})),
        ("rules-web", &rules_node, json!({})),
        ("rules-db", &rules_node, json!({})),
        ("rules-cache", &rules_node, label("skip")),
        ("rules-job", &rules_node, label("wait-completed")),
        ("volume-app", &volume_node, json!({})),
    ];
    for (pod, node, extra) in &placed {
        bare_pod(&client, &ns, pod, node, extra.clone()).await;
    }
    for (pod, _, _) in &placed {
        wait_running(&client, &ns, pod, 1, LIMIT).await;
    }
    min_available_budget(&client, &ns, "held", "held", 1, 1).await;
    let attachment = unique("rcol-va");
    let va: VolumeAttachment = serde_json::from_value(json!({
        "metadata": {"name": attachment},
        "spec": {"attacher": "csi.example.com", "nodeName": volume_node,
                 "source": {"persistentVolumeName": "pv-rcol"}}
    }))
    .unwrap();
    let attachments = Api::<VolumeAttachment>::all(client.clone());
    attachments
        .create(&PostParams::default(), &va)
        .await
        .unwrap();

    let mut op = start(cluster, &account, &kubeconfig, "op-rcol", false);
    let (cordon_nm, fail_nm, rules_nm, volume_nm, later_nm, opened_nm) = (
        unique("nm-rcol-cordon"),
        unique("nm-rcol-fail"),
        unique("nm-rcol-rules"),
        unique("nm-rcol-volume"),
        unique("nm-rcol-later"),
        unique("nm-rcol-opened"),
    );
    // The deadline's maintenance first, so that the restart comes well into its drain.
    create_with(
        &client,
        &fail_nm,
        &fail_node,
        json!({"drainTimeout": format!("{TIMEOUT}s"), "onTimeout": "Fail"}),
    )
    .await;
    create_with(
        &client,
        &cordon_nm,
        &cordon_node,
        json!({"stage": "Cordon"}),
    )
    .await;
    create_with(
        &client,
        &rules_nm,
        &rules_node,
        json!({"drainRules": [
            {"podSelector": {"matchLabels": {"app": "rules-db"}}, "behavior": "Skip"}
        ]}),
    )
    .await;
    create_with(
        &client,
        &volume_nm,
        &volume_node,
        json!({"waitForVolumeDetach": "2m"}),
    )
    .await;

    // Before the kill: each maintenance where its knob holds it.
    wait_for("the Cordon node entered", LIMIT, || {
        node::in_maintenance(&client, &cordon_node)
    })
    .await;
    let rules_waiting = |s: &node_maintenance_operator::api::NodeMaintenanceStatus| {
        s.phase == Some(MaintenancePhase::Running)
            && blocker_reasons(s) == [("rules-job".to_string(), "WaitingForCompletion".to_string())]
    };
    nm::wait_status(
        &client,
        &rules_nm,
        "only the job waited for",
        LIMIT,
        rules_waiting,
    )
    .await;
    wait_for("rules-web evicted", LIMIT, || async {
        if live("rules-web").await {
            Err("still there".to_string())
        } else {
            Ok(())
        }
    })
    .await;
    let volume_waiting = |s: &node_maintenance_operator::api::NodeMaintenanceStatus| {
        s.phase == Some(MaintenancePhase::Running)
            && blocker_reasons(s) == [(attachment.clone(), "VolumeAttached".to_string())]
    };
    let volume_before = nm::wait_status(
        &client,
        &volume_nm,
        "Running, held by the attachment",
        LIMIT,
        volume_waiting,
    )
    .await
    .status
    .unwrap();
    let volume_drained_before = nm_condition(&volume_before, "Drained");
    for kept in ["rules-db", "rules-cache", "rules-job"] {
        assert!(live(kept).await, "{kept} evicted before the restart");
    }
    let volume_started_before = node_drain_started(&client, &volume_node).await;

    // The two windows last, just before the kill.
    let now_s = jiff::Timestamp::now().as_second();
    let opened_opens = jiff::Timestamp::from_second(now_s + 5).unwrap();
    let later_opens = jiff::Timestamp::from_second(now_s + 25).unwrap();
    create_with(
        &client,
        &opened_nm,
        &opened_node,
        json!({"startAt": opened_opens.to_string()}),
    )
    .await;
    create_with(
        &client,
        &later_nm,
        &later_node,
        json!({"startAt": later_opens.to_string()}),
    )
    .await;
    let fail_before = nm::wait_status(
        &client,
        &fail_nm,
        "Running, held by the budget, with a deadline",
        LIMIT,
        |s| {
            s.phase == Some(MaintenancePhase::Running)
                && s.drain_deadline.is_some()
                && blocker_reasons(s)
                    .iter()
                    .any(|b| b.1 == "PodDisruptionBudget")
        },
    )
    .await
    .status
    .unwrap();
    let fail_started = node_drain_started(&client, &fail_node).await;
    let deadline = fail_before.drain_deadline.clone().unwrap().0;
    assert_eq!(
        deadline,
        fail_started + jiff::SignedDuration::from_secs(TIMEOUT),
        "drainDeadline {deadline} is not the drain's start on the node {fail_started} + {TIMEOUT}s"
    );
    for name in [&opened_nm, &later_nm] {
        nm::wait_status(&client, name, "Stage=MaintenanceWindow", LIMIT, |s| {
            nm_condition(s, "Stage").is_some_and(|c| c.0 == "True" && c.1 == "MaintenanceWindow")
        })
        .await;
    }
    let cordon_lease = leases
        .get(&format!("node-{cordon_node}"))
        .await
        .expect("the Cordon maintenance holds the lease");
    let cordon_record = our_node_annotations(&client, &cordon_node).await;
    assert!(live("cordon-web").await, "Cordon evicted cordon-web");

    op.process().kill();
    let killed = jiff::Timestamp::now();
    assert!(
        killed < opened_opens,
        "killed at {killed}, after the first window opened at {opened_opens}: the set-up took too \
         long to tell"
    );
    wait_for(
        "the first window to open while the operator is down",
        LIMIT,
        || {
            let now = jiff::Timestamp::now();
            async move {
                if now >= opened_opens + jiff::SignedDuration::from_secs(1) {
                    Ok(())
                } else {
                    Err(format!("{now}"))
                }
            }
        },
    )
    .await;
    node::restored(&client, &opened_node)
        .await
        .unwrap_or_else(|e| panic!("the node of the window entered while no operator ran: {e}"));

    let restarted = jiff::Timestamp::now();
    let op2 = start(cluster, &account, &kubeconfig, "op-rcol-2", false);
    eprintln!(
        "restarted {:?} after the drain with a deadline started ({fail_started}), {:?} into the test",
        restarted.duration_since(fail_started),
        began.elapsed()
    );

    // startAt, the window that opened while the operator was down: entered at start.
    let opened_started = wait_entered(
        &client,
        &opened_node,
        "the opened window's node entered at start",
    )
    .await;
    let entered = jiff::Timestamp::now();
    assert!(
        entered.duration_since(restarted) < jiff::SignedDuration::from_secs(15),
        "the window that opened while the operator was down was entered only at {entered}, \
         restarted at {restarted}"
    );
    assert!(
        opened_started >= opened_opens,
        "entered at {opened_started}, before its window opened at {opened_opens}"
    );
    assert!(
        op2.log().contains(&format!(
            "Maintenance taints will be added to node {opened_node}"
        )),
        "the new process's log does not name the entry it made:\n{}",
        op2.log()
    );
    // A few of the new process's passes (a drain round every 5 s, the volume wait's each 1 s).
    tokio::time::sleep(Duration::from_secs(6)).await;

    // stage: the Cordon maintenance's node as it was: cordoned, tainted, our record and the
    // lease object unchanged (no write), no new entry, the pod there.
    node::in_maintenance(&client, &cordon_node)
        .await
        .unwrap_or_else(|e| panic!("the Cordon node after the restart: {e}"));
    let lease_now = leases
        .get_opt(&format!("node-{cordon_node}"))
        .await
        .unwrap();
    let ident = |l: &Lease| {
        (
            l.metadata.uid.clone(),
            l.metadata.resource_version.clone(),
            l.spec.as_ref().and_then(|s| s.holder_identity.clone()),
        )
    };
    assert_eq!(
        lease_now.as_ref().map(ident),
        Some(ident(&cordon_lease)),
        "the Cordon node's lease after the restart (uid, resourceVersion, holder), was {:?}",
        ident(&cordon_lease)
    );
    let record_now = our_node_annotations(&client, &cordon_node).await;
    assert_eq!(
        record_now, cordon_record,
        "our record on the Cordon node changed across the restart"
    );
    let log = op2.log();
    let entries: Vec<&str> = log
        .lines()
        .filter(|l| {
            l.contains(&format!(
                "Maintenance taints will be added to node {cordon_node}"
            )) || l.contains("re-applied")
        })
        .collect();
    assert!(
        entries.is_empty(),
        "the new process entered the Cordon node again: {entries:#?}"
    );
    assert!(
        live("cordon-web").await,
        "cordon-web evicted at Cordon after the restart"
    );

    // The deadline's maintenance: the same deadline and the same start on the node.
    let fail_now = status_of(fail_nm.clone()).await;
    assert_eq!(
        fail_now.drain_deadline, fail_before.drain_deadline,
        "drainDeadline moved across the restart: {fail_now:?}"
    );
    assert_eq!(
        node_drain_started(&client, &fail_node).await,
        fail_started,
        "the drain's start on the node moved across the restart"
    );

    // drainRules and the pod drain labels: still kept, the job still waited for.
    let rules_now = status_of(rules_nm.clone()).await;
    assert!(
        rules_waiting(&rules_now),
        "the rules' maintenance after the restart: {rules_now:?}"
    );
    for kept in ["rules-db", "rules-cache", "rules-job"] {
        assert!(live(kept).await, "{kept} evicted after the restart");
    }

    // waitForVolumeDetach: the same blocker, the same bound, the same start on the node.
    let volume_now = status_of(volume_nm.clone()).await;
    assert!(
        volume_waiting(&volume_now),
        "the volume wait after the restart: {volume_now:?}"
    );
    assert_eq!(
        nm_condition(&volume_now, "Drained"),
        volume_drained_before,
        "the volume wait's Drained condition (its bound) changed across the restart"
    );
    assert_eq!(
        node_drain_started(&client, &volume_node).await,
        volume_started_before,
        "the volume node's drain start changed across the restart"
    );

    // startAt, the window that opens after the restart: still Idle, nothing on the node.
    let now = jiff::Timestamp::now();
    assert!(
        now < later_opens,
        "{now}: the second window opened before it could be seen idle ({later_opens})"
    );
    let later_now = status_of(later_nm.clone()).await;
    assert!(
        nm_condition(&later_now, "Stage").is_some_and(|c| c.1 == "MaintenanceWindow"),
        "before its window after the restart: {later_now:?}"
    );
    node::restored(&client, &later_node)
        .await
        .unwrap_or_else(|e| panic!("the later window's node entered early: {e}"));
    assert!(
        leases
            .get_opt(&format!("node-{later_node}"))
            .await
            .unwrap()
            .is_none(),
        "a lease held before the window opened"
    );

    // Now each goes on.
    nms.patch(
        &cordon_nm,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"stage": "Drain"}})),
    )
    .await
    .unwrap();
    pods_api
        .patch_status(
            "rules-job",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Succeeded"}})),
        )
        .await
        .unwrap();
    attachments
        .delete(&attachment, &Default::default())
        .await
        .unwrap();

    nm::wait_phase(&client, &cordon_nm, MaintenancePhase::Succeeded, LIMIT).await;
    assert!(!live("cordon-web").await, "cordon-web not evicted at Drain");
    let rules_done = nm::wait_phase(&client, &rules_nm, MaintenancePhase::Succeeded, LIMIT).await;
    let drained = rules_done
        .status
        .as_ref()
        .and_then(|s| nm_condition(s, "Drained"))
        .map(|c| c.2)
        .unwrap_or_default();
    for kept in ["rules-db", "rules-cache"] {
        assert!(
            drained.contains(&format!("{ns}/{kept} (Skipped)")),
            "{kept} not named as kept: {drained:?}"
        );
        assert!(live(kept).await, "{kept} evicted after the restart");
    }
    nm::wait_phase(&client, &volume_nm, MaintenancePhase::Succeeded, LIMIT).await;

    let later_started = wait_entered(&client, &later_node, "the later window's node entered").await;
    assert!(
        later_started >= later_opens,
        "entered at {later_started}, before its window opened at {later_opens}"
    );
    nm::wait_phase(&client, &later_nm, MaintenancePhase::Succeeded, LIMIT).await;

    // The deadline's action at the recorded deadline, not drainTimeout after the restart.
    let failed = nm::wait_phase(&client, &fail_nm, MaintenancePhase::Failed, LIMIT).await;
    let exceeded = nm::warnings(&client, &fail_nm, "DrainDeadlineExceeded").await;
    let at = exceeded
        .first()
        .map(|e| e.1)
        .unwrap_or_else(|| panic!("no DrainDeadlineExceeded event: {failed:?}"));
    eprintln!("DrainDeadlineExceeded at {at}, the recorded deadline {deadline}");
    let late = jiff::SignedDuration::from_secs(4);
    let from_restart = restarted + jiff::SignedDuration::from_secs(TIMEOUT);
    assert!(
        from_restart > deadline + late,
        "restarted at {restarted}: too close to the deadline {deadline} to tell"
    );
    assert!(
        at >= deadline - jiff::SignedDuration::from_secs(1) && at <= deadline + late,
        "DrainDeadlineExceeded at {at}: the recorded deadline is {deadline} (drainTimeout after \
         the restart would be {from_restart})"
    );
    let error = failed.status.unwrap().last_error.unwrap_or_default();
    assert!(error.contains("held"), "lastError {error:?}");
    node::in_maintenance(&client, &fail_node)
        .await
        .unwrap_or_else(|e| panic!("the failed maintenance's node: {e}"));

    // Deleting each restores its node; the Cordon one's record said it was not cordoned before.
    let all = [
        (&cordon_nm, &cordon_node),
        (&fail_nm, &fail_node),
        (&rules_nm, &rules_node),
        (&volume_nm, &volume_node),
        (&later_nm, &later_node),
        (&opened_nm, &opened_node),
    ];
    for (name, _) in &all {
        nm::delete(&client, name).await;
    }
    for (name, node) in &all {
        nm::wait_gone(&client, name, LIMIT).await;
        wait_for(&format!("node {node} restored"), LIMIT, || {
            node::restored(&client, node)
        })
        .await;
    }
    eprintln!("the restart column took {:?}", began.elapsed());
}
