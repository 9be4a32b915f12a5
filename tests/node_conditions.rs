//! Kubernetes 1.37's Node lifecycle conditions end to end (`docs/design.md` §3, "Node lifecycle
//! conditions"; `docs/drain-contract.md` §4, "A node going down"), on the local control plane
//! with the `NodeLifecycleConditions` gate on: the reasons a maintenance writes through its life
//! (KEP-5683's vocabulary), `Drained` reset to False by the pass that starts a drain before that
//! drain's first eviction, and `GracefulNodeShutdownInProgress=True` written on a node by an
//! admin stopping its drain's evictions until it is cleared.
//!
//! "Before the first eviction" and "no eviction after" are the API server's own record: this
//! binary's cluster audits every eviction (received, by anyone) and the operator's `nodes/status`
//! writes with their bodies.

mod common;

use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use common::*;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams, PostParams};
use nmo_devcluster::operator::Operator;
use node_maintenance_operator::api::{MaintenancePhase, NodeMaintenance};
use serde_json::{Value, json};

/// Generous for a loaded 2-core machine.
const LIMIT: Duration = Duration::from_secs(120);
/// The field manager of the operator's condition writes (`node::conditions::FIELD_MANAGER`).
const CONDITIONS_MANAGER: &str = "node-maintenance-operator-conditions";

/// Evictions by anyone at Metadata (when received, and when answered), and the status writes of
/// a service account (only the operator is one here) on nodes with their request bodies.
const POLICY: &str = r#"apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["ResponseStarted"]
rules:
- level: Metadata
  resources:
  - group: ""
    resources: ["pods/eviction"]
- level: Request
  omitStages: ["RequestReceived"]
  userGroups: ["system:serviceaccounts"]
  resources:
  - group: ""
    resources: ["nodes/status"]
- level: None
"#;

struct Env {
    cluster: Cluster,
    _operator: Mutex<Operator>,
}

/// One cluster auditing as [`POLICY`] says, the manifests installed and one operator running
/// with its webhook registered (the `nodeConditions` knob at its default, off).
fn env() -> &'static Env {
    static ENV: OnceLock<Env> = OnceLock::new();
    ENV.get_or_init(|| {
        let cluster = audited_cluster(POLICY);
        let installed = installed(&cluster);
        let opts = installed.options("operator");
        let operator = fixtures::start_registered(&cluster, &opts)
            .unwrap_or_else(|e| panic!("operator did not start: {e}"));
        Env {
            cluster,
            _operator: Mutex::new(operator),
        }
    })
}

/// Reads the audit log's events (as JSON) appended since the last read.
struct Audit {
    path: std::path::PathBuf,
    offset: usize,
}

impl Audit {
    fn at_end(cluster: &Cluster) -> Self {
        let path = cluster.audit_log_path();
        let offset = std::fs::metadata(&path).map_or(0, |m| m.len() as usize);
        Audit { path, offset }
    }

    fn read(&mut self) -> Vec<Value> {
        let bytes = std::fs::read(&self.path)
            .unwrap_or_else(|e| panic!("audit log {}: {e}", self.path.display()));
        let complete = bytes[self.offset..]
            .iter()
            .rposition(|b| *b == b'\n')
            .map_or(0, |i| i + 1);
        let lines = &bytes[self.offset..self.offset + complete];
        self.offset += complete;
        lines
            .split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
            .map(|l| serde_json::from_slice(l).expect("an audit event"))
            .collect()
    }
}

fn ts(e: &Value, key: &str) -> jiff::Timestamp {
    e[key].as_str().unwrap().parse().unwrap()
}

/// Evictions of pods in `ns` received by the API server, with when (RequestReceived).
fn evictions(events: &[Value], ns: &str) -> Vec<(String, jiff::Timestamp)> {
    events
        .iter()
        .filter(|e| {
            e["objectRef"]["subresource"] == "eviction"
                && e["objectRef"]["namespace"] == ns
                && e["stage"] == "RequestReceived"
        })
        .map(|e| {
            let name = e["objectRef"]["name"].as_str().unwrap_or_default();
            (name.to_string(), ts(e, "requestReceivedTimestamp"))
        })
        .collect()
}

/// `(type, status, reason)` of each condition a write sent.
type Sent = Vec<(String, String, String)>;

/// The operator's condition writes on `node` that answered 200, each with when it completed and
/// the `(type, status, reason)` it sent.
fn condition_writes(events: &[Value], node: &str) -> Vec<(jiff::Timestamp, Sent)> {
    events
        .iter()
        .filter(|e| {
            e["objectRef"]["resource"] == "nodes"
                && e["objectRef"]["subresource"] == "status"
                && e["objectRef"]["name"] == node
                && e["stage"] == "ResponseComplete"
                && e["responseStatus"]["code"] == 200
                && e["requestURI"]
                    .as_str()
                    .is_some_and(|u| u.contains(CONDITIONS_MANAGER))
        })
        .map(|e| {
            let sent = e["requestObject"]["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|c| {
                    let f = |k: &str| c[k].as_str().unwrap_or_default().to_string();
                    (f("type"), f("status"), f("reason"))
                })
                .collect();
            (ts(e, "stageTimestamp"), sent)
        })
        .collect()
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

/// Writes condition `type_` on `node`'s status as an admin (or another tool) would.
async fn admin_condition(
    client: &kube::Client,
    node: &str,
    type_: &str,
    status: &str,
    reason: &str,
) {
    let now = jiff::Timestamp::from_second(jiff::Timestamp::now().as_second()).unwrap();
    Api::<Node>::all(client.clone())
        .patch_status(
            node,
            &PatchParams::default(),
            &Patch::Strategic(json!({"status": {"conditions": [{
                "type": type_, "status": status, "reason": reason, "message": "e2e admin",
                "lastHeartbeatTime": now, "lastTransitionTime": now
            }]}})),
        )
        .await
        .unwrap_or_else(|e| panic!("writing {type_}={status} on node {node}: {e}"));
}

/// `docs/design.md` §3: the reasons through a maintenance's life, Idle → Cordon → Drain
/// (Succeeded) → Idle → Drain → deleted; and the second drain resets a `Drained=True` (ours,
/// then rewritten True by another tool while Idle) to False with reason `DrainStarted` before
/// its first eviction, True again at its success.
#[tokio::test]
async fn lifecycle_reasons_follow_a_maintenance_and_a_drain_resets_drained_before_evicting() {
    let env = env();
    let client = env.cluster.client().await;
    let group = unique("lcr");
    let node = worker_nodes(&env.cluster, &client, &group, 1)
        .await
        .remove(0);
    let ns = namespace(&client, "lcr").await;
    bare_pod(&client, &ns, "first", &node, json!({})).await;
    wait_running(&client, &ns, "first", 1, LIMIT).await;
    let name = unique("nm-lcr");
    let mut nm = nm::new(&name, &node, "e2e lifecycle reasons");
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
    let idle = [
        ("MaintenancePlanned", "True", "AdminRequested"),
        ("MaintenanceInProgress", "False", "MaintenanceNotStarted"),
        ("DrainInProgress", "False", "DrainNotStarted"),
        ("Drained", "False", "DrainNotStarted"),
    ];
    wait_node_conditions(&client, &node, &name, idle).await;
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
    set_stage(&client, &name, "Drain").await;
    nm::wait_phase(&client, &name, MaintenancePhase::Succeeded, LIMIT).await;
    let drained = [
        ("MaintenancePlanned", "True", "AdminRequested"),
        ("MaintenanceInProgress", "True", "AdminRequested"),
        ("DrainInProgress", "False", "DrainCompleted"),
        ("Drained", "True", "DrainCompleted"),
    ];
    wait_node_conditions(&client, &node, &name, drained).await;

    // Back to Idle: the node is released, the drain's conditions False again.
    set_stage(&client, &name, "Idle").await;
    wait_node_conditions(&client, &node, &name, idle).await;
    bare_pod(&client, &ns, "second", &node, json!({})).await;
    wait_running(&client, &ns, "second", 1, LIMIT).await;
    // Another tool says the node is drained; then the maintenance drains again.
    admin_condition(&client, &node, "Drained", "True", "DrainCompleted").await;
    let mut audit = Audit::at_end(&env.cluster);
    set_stage(&client, &name, "Drain").await;
    nm::wait_phase(&client, &name, MaintenancePhase::Succeeded, LIMIT).await;
    wait_node_conditions(&client, &node, &name, drained).await;
    // The API server's record: the reset completed before the second drain's first eviction.
    let mut events = Vec::new();
    let mut first_eviction = None;
    wait_for(
        "the second drain's eviction in the audit log",
        LIMIT,
        || {
            events.extend(audit.read());
            first_eviction = evictions(&events, &ns).into_iter().map(|(_, t)| t).min();
            let r = first_eviction.ok_or("no eviction audited yet".to_string());
            async move { r }
        },
    )
    .await;
    let first_eviction = first_eviction.unwrap();
    let writes = condition_writes(&events, &node);
    let reset = writes
        .iter()
        .find(|(_, sent)| sent.contains(&("Drained".into(), "False".into(), "DrainStarted".into())))
        .unwrap_or_else(|| panic!("no write of Drained=False (DrainStarted): {writes:?}"));
    assert!(
        reset.0 < first_eviction,
        "Drained=False completed at {}, after the first eviction received at {first_eviction}",
        reset.0
    );
    let done = writes
        .iter()
        .find(|(_, sent)| sent.iter().any(|(t, s, _)| t == "Drained" && s == "True"))
        .unwrap_or_else(|| panic!("no write of Drained=True: {writes:?}"));
    assert!(done.0 > first_eviction, "{writes:?}");
    eprintln!(
        "Drained=False written at {}, first eviction received at {first_eviction}, Drained=True at {}",
        reset.0, done.0
    );

    nm::delete_and_wait_restored(&client, &name, &node).await;
    let ended = ("False", "MaintenanceEnded");
    wait_node_conditions(
        &client,
        &node,
        &name,
        [
            ("MaintenancePlanned", ended.0, ended.1),
            ("MaintenanceInProgress", ended.0, ended.1),
            ("DrainInProgress", ended.0, ended.1),
            ("Drained", ended.0, ended.1),
        ],
    )
    .await;
}

/// `docs/drain-contract.md` §4, "A node going down": a drain held by a budget retries its
/// eviction every 5 s; `GracefulNodeShutdownInProgress=True` written by an admin on the node's
/// status (the `nodeConditions` knob off: reading a condition is not writing one) stops them:
/// none is received more than 2 s after the write, the maintenance says why, kwok leaves the
/// condition as written; cleared, the evictions resume and the drain succeeds once the budget
/// allows.
#[tokio::test]
async fn a_node_going_down_stops_new_evictions_until_the_condition_is_cleared() {
    let env = env();
    let client = env.cluster.client().await;
    let group = unique("gns");
    let node = worker_nodes(&env.cluster, &client, &group, 1)
        .await
        .remove(0);
    let ns = namespace(&client, "gns").await;
    bare_pod(&client, &ns, "held", &node, json!({})).await;
    wait_running(&client, &ns, "held", 1, LIMIT).await;
    let pdbs = budget(&client, &ns, "held", "held", 0, 1).await;
    let mut audit = Audit::at_end(&env.cluster);
    let name = unique("nm-gns");
    nm::create(&client, &name, &node).await;
    let mut events = Vec::new();
    wait_for("two refused evictions", LIMIT, || {
        events.extend(audit.read());
        let n = evictions(&events, &ns).len();
        let r = if n >= 2 {
            Ok(())
        } else {
            Err(format!("{n} evictions"))
        };
        async move { r }
    })
    .await;

    admin_condition(
        &client,
        &node,
        "GracefulNodeShutdownInProgress",
        "True",
        "AdminShutdown",
    )
    .await;
    let written = jiff::Timestamp::now();
    let halted = nm::wait_status(&client, &name, "NodeShuttingDown True", LIMIT, |s| {
        s.conditions.iter().flatten().any(|c| {
            c.type_ == "NodeShuttingDown"
                && c.status == "True"
                && c.reason == "GracefulNodeShutdownInProgress"
                && c.message.contains(&node)
        })
    })
    .await;
    assert_eq!(
        halted.status.unwrap().phase,
        Some(MaintenancePhase::Running)
    );
    // Three retry intervals with the node going down.
    tokio::time::sleep(Duration::from_secs(16)).await;
    events.extend(audit.read());
    let late: Vec<_> = evictions(&events, &ns)
        .into_iter()
        .filter(|(_, t)| *t > written + jiff::SignedDuration::from_secs(2))
        .collect();
    assert!(
        late.is_empty(),
        "evictions received more than 2 s after GracefulNodeShutdownInProgress=True was written at {written}: {late:?}"
    );
    // kwok plays the kubelet; it leaves a condition it does not manage as written.
    let kept = node_condition(&client, &node, "GracefulNodeShutdownInProgress").await;
    assert_eq!(
        kept.as_ref().map(|(s, r, _)| (s.as_str(), r.as_str())),
        Some(("True", "AdminShutdown")),
        "{kept:?}"
    );
    // The operator never writes it (only the admin's field manager owns it).
    let n = Api::<Node>::all(client.clone()).get(&node).await.unwrap();
    for m in n.metadata.managed_fields.iter().flatten() {
        let fields = serde_json::to_string(&m.fields_v1).unwrap();
        if m.manager
            .as_deref()
            .is_some_and(|m| m.starts_with("node-maintenance-operator"))
        {
            assert!(
                !fields.contains("GracefulNodeShutdownInProgress"),
                "{fields}"
            );
        }
    }

    admin_condition(
        &client,
        &node,
        "GracefulNodeShutdownInProgress",
        "False",
        "AdminShutdown",
    )
    .await;
    let cleared = jiff::Timestamp::now();
    nm::wait_status(&client, &name, "NodeShuttingDown False", LIMIT, |s| {
        s.conditions
            .iter()
            .flatten()
            .any(|c| c.type_ == "NodeShuttingDown" && c.status == "False")
    })
    .await;
    wait_for("an eviction after the condition was cleared", LIMIT, || {
        events.extend(audit.read());
        let after = evictions(&events, &ns)
            .into_iter()
            .filter(|(_, t)| *t > cleared)
            .count();
        let r = if after > 0 {
            Ok(())
        } else {
            Err("none yet".to_string())
        };
        async move { r }
    })
    .await;
    pdbs.delete("held", &Default::default()).await.unwrap();
    nm::wait_phase(&client, &name, MaintenancePhase::Succeeded, LIMIT).await;
    let all = evictions(&events, &ns);
    eprintln!(
        "{} evictions: {} before the write at {written}, {} after the clear at {cleared}",
        all.len(),
        all.iter().filter(|(_, t)| *t <= written).count(),
        all.iter().filter(|(_, t)| *t > cleared).count()
    );
    nm::delete_and_wait_restored(&client, &name, &node).await;
}

/// `docs/design.md` §3: a Drain maintenance waiting for its `startAt` window says
/// `MaintenancePlanned=True` with reason `MaintenanceWindow` (nothing in progress), then
/// `AdminRequested` once the window opens and the drain runs to `DrainCompleted`.
#[tokio::test]
async fn a_maintenance_waiting_for_its_window_is_planned_for_the_window() {
    let env = env();
    let client = env.cluster.client().await;
    let group = unique("lcw");
    let node = worker_nodes(&env.cluster, &client, &group, 1)
        .await
        .remove(0);
    let name = unique("nm-lcw");
    let opens = jiff::Timestamp::from_second(jiff::Timestamp::now().as_second() + 20).unwrap();
    let mut nm = nm::new(&name, &node, "e2e window conditions");
    nm.spec.knobs.start_at = Some(opens.to_string());
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
            ("MaintenancePlanned", "True", "MaintenanceWindow"),
            ("MaintenanceInProgress", "False", "MaintenanceNotStarted"),
            ("DrainInProgress", "False", "DrainNotStarted"),
            ("Drained", "False", "DrainNotStarted"),
        ],
    )
    .await;
    assert!(
        jiff::Timestamp::now() < opens,
        "the window opened before its conditions were seen: the test proves nothing"
    );
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
