//! `onTimeout: Abort` end to end (`docs/drain-contract.md` §10a): at the drain's deadline the
//! node is given back as a delete would give it back, the maintenance stays Failed with reason
//! `DrainAborted`, and nothing more is evicted; deleting it afterwards leaves the node alone;
//! a restarted operator does not enter the node again, and the drain slot
//! (`--max-parallel-drains=1`) is free for the next maintenance.
//!
//! The cluster of this binary records every eviction in the API server's audit log, so "no
//! eviction after the abort" is the API server's own record. One test at a time: the second
//! restarts the binary's operator.

mod common;

use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use common::*;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, PostParams};
use nmo_devcluster::audit::{AuditCursor, EVICTIONS_POLICY};
use nmo_devcluster::operator::{Operator, OperatorOptions};
use node_maintenance_operator::api::{MaintenancePhase, NodeMaintenance, NodeMaintenanceStatus};
use serde_json::json;

const LIMIT: Duration = Duration::from_secs(120);
/// The drain's timeout: long enough for the first evictions to be refused by the budget.
const TIMEOUT: Duration = Duration::from_secs(15);
/// How long the test watches for an eviction after the abort: three of the blocked drain's 5 s
/// retries (`REQUEUE_BLOCKED`), each of which asked the budget again before the deadline.
const QUIET: Duration = Duration::from_secs(15);

struct Env {
    cluster: Cluster,
    options: OperatorOptions,
    operator: Mutex<Option<Operator>>,
}

/// One cluster with an eviction audit log and one operator with one drain slot
/// (`--max-parallel-drains=1`) and its webhook registered (it must admit `Abort`).
fn env() -> &'static Env {
    static ENV: OnceLock<Env> = OnceLock::new();
    ENV.get_or_init(|| {
        let cluster = audited_cluster(EVICTIONS_POLICY);
        let mut options = installed(&cluster).options("operator");
        options.extra_args.push("--max-parallel-drains=1".into());
        let operator = fixtures::start_registered(&cluster, &options)
            .unwrap_or_else(|e| panic!("operator did not start: {e}"));
        Env {
            cluster,
            options,
            operator: Mutex::new(Some(operator)),
        }
    })
}

/// One test at a time: the slot is shared and a test restarts the operator.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A pod on `node` under a budget that allows no disruption.
async fn held_pod(client: &kube::Client, ns: &str, node: &str) {
    let labels = json!({"metadata": {"labels": {"app": "held"}}});
    bare_pod(client, ns, "held-0", node, labels).await;
    wait_running(client, ns, "held", 1, LIMIT).await;
    min_available_budget(client, ns, "held", "held", 1, 1).await;
}

/// Creates `name` for `node` with `spec.drainTimeout` [`TIMEOUT`] and `spec.onTimeout: Abort`
/// (through the webhook, which must admit the value).
async fn create_aborting(client: &kube::Client, name: &str, node: &str) {
    let mut nm = serde_json::to_value(nm::new(name, node, "e2e")).unwrap();
    nm["spec"]["drainTimeout"] = json!(format!("{}s", TIMEOUT.as_secs()));
    nm["spec"]["onTimeout"] = json!("Abort");
    Api::<NodeMaintenance>::all(client.clone())
        .create(&PostParams::default(), &serde_json::from_value(nm).unwrap())
        .await
        .unwrap_or_else(|e| panic!("creating {name} with onTimeout Abort: {e}"));
}

fn aborted(s: &NodeMaintenanceStatus) -> bool {
    s.phase == Some(MaintenancePhase::Failed)
        && s.conditions
            .iter()
            .flatten()
            .any(|c| c.type_ == "Aborted" && c.status == "True" && c.reason == "DrainAborted")
}

/// The node's medik8s lease, if any.
async fn lease(client: &kube::Client, node: &str) -> Option<Lease> {
    Api::<Lease>::namespaced(client.clone(), "medik8s-leases")
        .get_opt(&format!("node-{node}"))
        .await
        .unwrap()
}

/// Waits until the node is restored and its lease gone.
async fn wait_given_back(client: &kube::Client, node: &str) {
    wait_for(&format!("node {node} given back"), LIMIT, || async {
        node::restored(client, node).await?;
        match lease(client, node).await {
            None => Ok(()),
            Some(l) => Err(format!("the lease is still there: {:?}", l.spec)),
        }
    })
    .await;
}

/// For `window`, `node` stays restored and `name` aborted: nothing enters the node again.
async fn stays_given_back(client: &kube::Client, name: &str, node: &str, window: Duration) {
    let api = Api::<NodeMaintenance>::all(client.clone());
    let until = Instant::now() + window;
    while Instant::now() < until {
        node::restored(client, node)
            .await
            .unwrap_or_else(|e| panic!("node {node} entered again after the abort: {e}"));
        let status = api.get(name).await.unwrap().status.unwrap_or_default();
        assert!(aborted(&status), "{name} no longer aborted: {status:?}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Kills the binary's operator (SIGKILL: no shutdown path runs) and starts another one.
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

/// `docs/drain-contract.md` §10a: `drainTimeout: 15s, onTimeout: Abort` with a budget that
/// allows nothing. Before the deadline the budget refuses evictions; at it the node is
/// schedulable, untainted and unlabelled and the lease gone, the maintenance Failed with reason
/// `DrainAborted` (condition, lastError, one `DrainDeadlineExceeded` Warning), and the API
/// server receives no eviction for it afterwards. An admin's cordon after the abort survives
/// the delete, which changes nothing on the node.
#[tokio::test]
async fn at_the_deadline_abort_gives_the_node_back_and_evicts_nothing_more() {
    let _serial = SERIAL.lock().await;
    let env = env();
    let client = env.cluster.client().await;
    let group = unique("abort");
    let node = worker_nodes(&env.cluster, &client, &group, 1)
        .await
        .remove(0);
    let ns = namespace(&client, "abort").await;
    held_pod(&client, &ns, &node).await;
    let mut audit = AuditCursor::at_end(env.cluster.audit_log_path());
    let name = unique("nm-abort");
    create_aborting(&client, &name, &node).await;
    nm::wait_status(&client, &name, "Running, held by the budget", LIMIT, |s| {
        s.phase == Some(MaintenancePhase::Running)
            && s.blockers
                .iter()
                .flatten()
                .any(|b| b.reason == "PodDisruptionBudget")
    })
    .await;
    node::in_maintenance(&client, &node).await.unwrap();
    assert!(lease(&client, &node).await.is_some(), "the lease is held");

    let nm = nm::wait_status(&client, &name, "aborted", LIMIT, aborted).await;
    wait_given_back(&client, &node).await;
    let given_back = Instant::now();
    let status = nm.status.unwrap();
    let error = status.last_error.unwrap_or_default();
    assert!(
        error.contains("onTimeout Abort") && error.contains("held-0"),
        "{error}"
    );
    assert_eq!(
        nm::warnings(&client, &name, "DrainDeadlineExceeded")
            .await
            .len(),
        1
    );
    // Evictions were asked (and refused) before the deadline: the audit log sees them.
    let evictions = |events: Vec<nmo_devcluster::audit::AuditEvent>| {
        events
            .into_iter()
            .filter(|e| e.subresource == "eviction" && e.namespace == ns)
            .count()
    };
    let before = evictions(audit.read().unwrap());
    assert!(
        before > 0,
        "no eviction reached the API server before the deadline"
    );
    // None after: for three retry intervals the pod stays and the API server receives none.
    stays_given_back(&client, &name, &node, QUIET).await;
    let after = evictions(audit.read().unwrap());
    assert_eq!(
        after,
        0,
        "{after} evictions in the {}s after the node was given back ({before} before)",
        given_back.elapsed().as_secs()
    );
    eprintln!(
        "abort: {before} evictions before the deadline, {after} in the {}s after the node was \
         given back",
        given_back.elapsed().as_secs()
    );
    let pods = Api::<k8s_openapi::api::core::v1::Pod>::namespaced(client.clone(), &ns);
    assert!(
        pods.get("held-0")
            .await
            .unwrap()
            .metadata
            .deletion_timestamp
            .is_none()
    );

    // The admin cordons the node again; deleting the maintenance leaves it so.
    env.cluster.kubectl_run(&["cordon", &node], None).unwrap();
    nm::delete(&client, &name).await;
    nm::wait_gone(&client, &name, LIMIT).await;
    let (cordoned, taints, labels) = node::state(&client, &node).await;
    assert!(cordoned, "the admin's cordon was undone by the delete");
    assert!(
        !taints.iter().any(|t| t.starts_with("medik8s.io/drain"))
            && !labels.contains_key("remediation.medik8s.io/exclude-from-remediation"),
        "the delete touched the node: taints {taints:?} labels {labels:?}"
    );
    assert!(lease(&client, &node).await.is_none());
}

/// `docs/drain-contract.md` §10a across a restart and the drain budget: an aborted maintenance
/// killed with its operator stays aborted under the next one (its node is never entered again),
/// and it holds no slot of `--max-parallel-drains=1`: a maintenance created after it on another
/// node drains at once.
#[tokio::test]
async fn an_aborted_maintenance_stays_aborted_across_a_restart_and_frees_its_slot() {
    let _serial = SERIAL.lock().await;
    let env = env();
    let client = env.cluster.client().await;
    let group = unique("abort-restart");
    let nodes = worker_nodes(&env.cluster, &client, &group, 2).await;
    let ns = namespace(&client, "abort-restart").await;
    held_pod(&client, &ns, &nodes[0]).await;
    let name = unique("nm-abort-restart");
    create_aborting(&client, &name, &nodes[0]).await;
    nm::wait_status(&client, &name, "aborted", LIMIT, aborted).await;
    wait_given_back(&client, &nodes[0]).await;

    restart(env);

    // The new operator runs (it drains the next maintenance) and the slot is free for it.
    let next = unique("nm-after-abort");
    nm::create(&client, &next, &nodes[1]).await;
    nm::wait_phase(&client, &next, MaintenancePhase::Succeeded, LIMIT).await;
    node::in_maintenance(&client, &nodes[1]).await.unwrap();
    stays_given_back(&client, &name, &nodes[0], Duration::from_secs(5)).await;
    nm::delete_and_wait_restored(&client, &next, &nodes[1]).await;
    nm::delete(&client, &name).await;
    nm::wait_gone(&client, &name, LIMIT).await;
    node::restored(&client, &nodes[0]).await.unwrap();
}

/// `docs/drain-contract.md` §10a with pause and stages: a maintenance paused from the start
/// still reaches its deadline and is aborted (its node given back); unpausing changes nothing,
/// nor does a move to `Cordon` (for 5 s the node stays uncordoned, untainted and unlabelled and
/// the maintenance aborted); moved to `Idle` the abort ends (`Aborted=False`, Running), and back at `Drain` a new drain
/// enters the node and is aborted again at its own, later deadline.
#[tokio::test]
async fn a_paused_drain_is_aborted_at_its_deadline_and_idle_then_drain_is_a_new_drain() {
    let _serial = SERIAL.lock().await;
    let env = env();
    let client = env.cluster.client().await;
    let group = unique("abort-stage");
    let node = worker_nodes(&env.cluster, &client, &group, 1)
        .await
        .remove(0);
    let ns = namespace(&client, "abort-stage").await;
    held_pod(&client, &ns, &node).await;
    let name = unique("nm-abort-stage");
    let api = Api::<NodeMaintenance>::all(client.clone());
    let mut nm = serde_json::to_value(nm::new(&name, &node, "e2e")).unwrap();
    nm["spec"]["drainTimeout"] = json!(format!("{}s", TIMEOUT.as_secs()));
    nm["spec"]["onTimeout"] = json!("Abort");
    nm["spec"]["paused"] = json!(true);
    api.create(&PostParams::default(), &serde_json::from_value(nm).unwrap())
        .await
        .unwrap();
    let first = nm::wait_status(&client, &name, "aborted while paused", LIMIT, aborted).await;
    wait_given_back(&client, &node).await;
    let spec = |patch: serde_json::Value| {
        let api = api.clone();
        let name = name.clone();
        async move {
            api.patch(
                &name,
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(json!({ "spec": patch })),
            )
            .await
            .unwrap();
        }
    };
    spec(json!({"paused": false})).await;
    stays_given_back(&client, &name, &node, Duration::from_secs(5)).await;
    // Moved to Cordon, the abort holds: the node is not cordoned again.
    spec(json!({"stage": "Cordon"})).await;
    stays_given_back(&client, &name, &node, Duration::from_secs(5)).await;

    spec(json!({"stage": "Idle"})).await;
    nm::wait_status(&client, &name, "the abort ended by Idle", LIMIT, |s| {
        s.phase == Some(MaintenancePhase::Running)
            && s.conditions
                .iter()
                .flatten()
                .any(|c| c.type_ == "Aborted" && c.status == "False" && c.reason == "AbortEnded")
    })
    .await;
    node::restored(&client, &node).await.unwrap();

    spec(json!({"stage": "Drain"})).await;
    wait_for(
        &format!("node {node} entered by the new drain"),
        LIMIT,
        || node::in_maintenance(&client, &node),
    )
    .await;
    let second = nm::wait_status(&client, &name, "aborted again", LIMIT, aborted).await;
    wait_given_back(&client, &node).await;
    let aborted_at = |nm: &NodeMaintenance| {
        nm.status
            .iter()
            .flat_map(|s| s.conditions.iter().flatten())
            .find(|c| c.type_ == "Aborted")
            .map(|c| c.last_transition_time.0)
            .unwrap()
    };
    let (a, b) = (aborted_at(&first), aborted_at(&second));
    assert!(
        b.duration_since(a) >= jiff::SignedDuration::try_from(TIMEOUT).unwrap(),
        "the second abort at {b} is not a full drainTimeout after the first at {a}"
    );
    eprintln!("abort-stage: aborted at {a}, then at {b} after Idle and Drain");
    nm::delete(&client, &name).await;
    nm::wait_gone(&client, &name, LIMIT).await;
    node::restored(&client, &node).await.unwrap();
}
