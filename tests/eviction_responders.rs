//! KEP-4563's eviction responders shown in the blocker, end to end on the real control plane
//! (`docs/drain-contract.md` §4b): Kubernetes 1.37 serves `lifecycle.k8s.io/v1alpha1` (gate
//! `EvictionRequestAPI`) but runs no evictionrequest controller, so the test creates the pod's
//! `Eviction` and writes its status through the `/status` subresource as that controller and a
//! responder would, within the API server's validation of Evictions (a responder priority of
//! 0-999 is reserved for `*.k8s.io` responders; start, heartbeat and completion times must be the
//! API server's present; a responder's report is written while it is `Active`, before its state
//! moves on).
//!
//! On a cluster that does not serve the API (`KUBE_VERSION=v1.36.x`) the tests say so and pass:
//! there, nothing is watched.

mod common;

use std::time::Duration;

use common::*;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use node_maintenance_operator::api::{NodeMaintenanceStatus, PodBlocker};
use serde_json::json;

/// Generous: a loaded 2-core machine runs several control planes.
const LIMIT: Duration = Duration::from_secs(120);
/// The responder the test plays.
const RESPONDER: &str = "example.com/responder";
/// Its message.
const MESSAGE: &str = "moving the workload";

/// Whether the control plane serves the EvictionRequest API (from 1.37, with its gate).
fn served() -> bool {
    let version = nmo_devcluster::versions::kube();
    let yes = nmo_devcluster::versions::minor(&version).is_some_and(|m| m >= 37);
    if !yes {
        eprintln!("{version}: no EvictionRequest API to show responders from");
    }
    yes
}

fn evictions(client: &kube::Client, ns: &str) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk(
        "lifecycle.k8s.io",
        "v1alpha1",
        "Eviction",
    ));
    Api::namespaced_with(client.clone(), ns, &ar)
}

/// The API server's clock now: the creation time of a throwaway ConfigMap in `ns` (the
/// Eviction API wants its start and completion times "the present time" by that clock, within
/// 30 s).
async fn server_now(client: &kube::Client, ns: &str) -> jiff::Timestamp {
    let cm: ConfigMap =
        serde_json::from_value(json!({"metadata": {"generateName": "clock-"}})).unwrap();
    Api::<ConfigMap>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &cm)
        .await
        .unwrap()
        .metadata
        .creation_timestamp
        .unwrap()
        .0
}

fn rfc3339(t: jiff::Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// Writes `status` on Eviction `name` through its `/status` subresource (a JSON merge patch:
/// lists are replaced whole, as the controller's and the responder's writes would leave them).
async fn write_status(
    api: &Api<DynamicObject>,
    name: &str,
    status: serde_json::Value,
) -> Result<DynamicObject, kube::Error> {
    api.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({ "status": status })),
    )
    .await
}

fn blocker<'a>(s: &'a NodeMaintenanceStatus, pod: &str) -> Option<&'a PodBlocker> {
    s.blockers.iter().flatten().find(|b| b.name == pod)
}

/// The operator logs, at start, the group version that serves EvictionRequests
/// (`src/controller/mod.rs`), and that it watches Evictions there (`drain::responders`).
#[tokio::test]
async fn the_eviction_request_api_is_found_where_the_api_server_serves_it() {
    let env = operator_env();
    if !served() {
        return;
    }
    let log = wait_for("the controller started", LIMIT, || async {
        let log = env.operator.lock().unwrap().log();
        if log.contains("starting NodeMaintenance controller") {
            Ok(log)
        } else {
            Err(log.lines().last().unwrap_or_default().to_string())
        }
    })
    .await;
    let named = |l: &&str| {
        l.contains("group_version=lifecycle.k8s.io/v1alpha1")
            || l.contains(r#""group_version":"lifecycle.k8s.io/v1alpha1""#)
    };
    let lines: Vec<&str> = log.lines().filter(named).collect();
    assert!(
        lines.iter().any(|l| l.contains("serves EvictionRequest")),
        "the served version logged: {lines:#?}\n{log}"
    );
    assert!(
        lines.iter().any(|l| l.contains("Evictions watched")),
        "Evictions watched where they are served: {lines:#?}"
    );
    assert!(
        !log.contains("Evictions cannot be listed"),
        "the manifests' RBAC lets the operator list Evictions: {log}"
    );
}

/// A pod held by a budget that allows nothing: while an `Active` responder works on its
/// Eviction, its blocker is `EvictionResponder` with the responder's name, message and expected
/// completion, not an error, and `kubectl nm why` prints them; once the responder is
/// `Completed`, the blocker is the budget's again (and its refusal an error again).
#[tokio::test]
async fn an_active_eviction_responder_is_the_budget_held_pods_blocker_until_it_completes() {
    let env = operator_env();
    if !served() {
        return;
    }
    let cluster = env.cluster;
    let client = cluster.client().await;
    let group = unique("resp");
    let node = worker_nodes(cluster, &client, &group, 1).await.remove(0);
    let ns = namespace(&client, "resp").await;
    deployment(&client, &ns, "web", &group, 1, 0).await;
    let pod = wait_running(&client, &ns, "web", 1, LIMIT).await.remove(0);
    let (pod_name, pod_uid) = (
        pod.metadata.name.clone().unwrap(),
        pod.metadata.uid.clone().unwrap(),
    );
    budget(&client, &ns, "web-guard", "web", 0, 1).await;

    let name = unique("nm-resp");
    nm::create(&client, &name, &node).await;
    nm::wait_status(&client, &name, "the budget holds the pod", LIMIT, |s| {
        blocker(s, &pod_name).is_some_and(|b| b.reason == "PodDisruptionBudget")
    })
    .await;

    // The Eviction, as the evictionrequest controller would make it for the pod.
    let api = evictions(&client, &ns);
    let eviction: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "lifecycle.k8s.io/v1alpha1", "kind": "Eviction",
        "metadata": {"name": format!("{pod_name}-eviction")},
        "spec": {"target": {"pod": {"name": pod_name, "uid": pod_uid}}}
    }))
    .unwrap();
    let eviction_name = api
        .create(&PostParams::default(), &eviction)
        .await
        .unwrap_or_else(|e| panic!("creating the Eviction: {e}"))
        .metadata
        .name
        .unwrap();
    let start = server_now(&client, &ns).await;
    let expected = start + jiff::SignedDuration::from_mins(10);
    let responders = |priority: i32, state: &str, completion: Option<jiff::Timestamp>| {
        let mut report = json!({"name": RESPONDER, "startTime": rfc3339(start),
            "expectedCompletionTime": rfc3339(expected), "message": MESSAGE});
        if let Some(t) = completion {
            report["completionTime"] = rfc3339(t).into();
        }
        json!({
            "targetResponders": [{"name": RESPONDER, "priority": priority, "state": state}],
            "responders": [report]
        })
    };
    // The brief's priority 10 is refused: 0-999 is reserved for `*.k8s.io` responders.
    let refused = write_status(&api, &eviction_name, responders(10, "Active", None))
        .await
        .expect_err("priority 10 for example.com/responder");
    assert!(
        refused
            .to_string()
            .contains("priorities 0-999 are reserved for responders with *.k8s.io suffix"),
        "{refused}"
    );
    // The priority a pod's managing controller's responder takes.
    write_status(&api, &eviction_name, responders(10000, "Active", None))
        .await
        .unwrap_or_else(|e| panic!("writing the Eviction's status: {e}"));

    let shown = nm::wait_status(&client, &name, "the responder is the blocker", LIMIT, |s| {
        blocker(s, &pod_name).is_some_and(|b| b.reason == "EvictionResponder")
    })
    .await
    .status
    .unwrap();
    let b = blocker(&shown, &pod_name).unwrap();
    assert_eq!(
        (b.responder.as_deref(), b.message.as_deref()),
        (Some(RESPONDER), Some(MESSAGE)),
        "{b:?}"
    );
    let shown_expected: jiff::Timestamp = b
        .expected_completion_time
        .as_deref()
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("expectedCompletionTime: {b:?}"));
    assert_eq!(shown_expected, expected, "{b:?}");
    assert_eq!(
        b.pod_disruption_budget.as_deref(),
        Some("web-guard"),
        "the budget that still refuses stays named"
    );
    assert!(
        shown
            .last_error
            .as_deref()
            .is_none_or(|e| !e.contains(&pod_name)),
        "a responder at work is progress, not an error: {:?}",
        shown.last_error
    );
    assert_eq!(shown.evacuating_pods, Some(1), "{shown:?}");

    let kubeconfig = cluster.kubeconfig().display().to_string();
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let code = kubectl_nm::run(
        [
            "kubectl-nm",
            "--kubeconfig",
            kubeconfig.as_str(),
            "why",
            node.as_str(),
        ],
        &mut out,
        &mut err,
    )
    .await;
    let out = String::from_utf8(out).unwrap();
    assert_eq!(code, 0, "{out}{}", String::from_utf8_lossy(&err));
    let line = format!(
        "{ns}/{pod_name}: responder {RESPONDER}: {MESSAGE} (expected by {})",
        b.expected_completion_time.as_deref().unwrap()
    );
    assert!(
        out.contains(&line),
        "kubectl nm why:\n{out}\nwanted: {line}"
    );

    // The responder reports its completion while Active, then is marked Completed (the API
    // server refuses a change of a responder's report once it is no longer Active).
    let done = server_now(&client, &ns).await;
    write_status(
        &api,
        &eviction_name,
        responders(10000, "Active", Some(done)),
    )
    .await
    .unwrap_or_else(|e| panic!("reporting completion: {e}"));
    write_status(
        &api,
        &eviction_name,
        responders(10000, "Completed", Some(done)),
    )
    .await
    .unwrap_or_else(|e| panic!("marking the responder Completed: {e}"));
    let back = nm::wait_status(&client, &name, "the budget's blocker again", LIMIT, |s| {
        blocker(s, &pod_name).is_some_and(|b| b.reason == "PodDisruptionBudget")
    })
    .await
    .status
    .unwrap();
    let b = blocker(&back, &pod_name).unwrap();
    assert_eq!(
        (
            b.responder.as_deref(),
            b.expected_completion_time.as_deref()
        ),
        (None, None),
        "{b:?}"
    );
    nm::wait_status(
        &client,
        &name,
        "the budget's refusal in lastError",
        LIMIT,
        |s| {
            s.last_error
                .as_deref()
                .is_some_and(|e| e.contains(&pod_name))
                && s.evacuating_pods.is_none()
        },
    )
    .await;

    nm::delete_and_wait_restored(&client, &name, &node).await;
}
