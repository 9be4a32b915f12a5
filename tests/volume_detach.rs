//! The `waitForVolumeDetach` knob end to end (`docs/drain-contract.md` §12): with it, a
//! maintenance whose pods are all gone stays Running, with one `VolumeAttached` blocker per
//! storage.k8s.io/v1 VolumeAttachment naming its node, until they are gone; at its bound
//! `onTimeout` applies. Without it, Succeeded comes as upstream's, attachments or not.
//!
//! The attachments are created directly through the API (attacher `csi.example.com`): the local
//! control plane runs no attach-detach controller, and each test checks they stay until it
//! deletes them. `kubectl nm why` lists the attachments meanwhile.

mod common;

use std::time::{Duration, Instant};

use common::*;
use k8s_openapi::api::storage::v1::VolumeAttachment;
use kube::api::{Api, DeleteParams, PostParams};
use node_maintenance_operator::api::{MaintenancePhase, NodeMaintenance, NodeMaintenanceStatus};
use serde_json::json;

/// Generous for a loaded 2-core machine.
const LIMIT: Duration = Duration::from_secs(120);

/// Creates VolumeAttachment `name` of PersistentVolume `pv` on `node`.
async fn attachment(client: &kube::Client, name: &str, node: &str, pv: &str) {
    let va: VolumeAttachment = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"attacher": "csi.example.com", "nodeName": node,
                 "source": {"persistentVolumeName": pv}}
    }))
    .unwrap();
    Api::<VolumeAttachment>::all(client.clone())
        .create(&PostParams::default(), &va)
        .await
        .unwrap_or_else(|e| panic!("creating VolumeAttachment {name}: {e}"));
}

/// The names of the VolumeAttachments among `names` that exist.
async fn existing(client: &kube::Client, names: &[&str]) -> Vec<String> {
    let api = Api::<VolumeAttachment>::all(client.clone());
    let mut out = Vec::new();
    for n in names {
        if api.get_opt(n).await.unwrap().is_some() {
            out.push((*n).to_string());
        }
    }
    out
}

async fn delete_attachments(client: &kube::Client, names: &[&str]) {
    let api = Api::<VolumeAttachment>::all(client.clone());
    for n in names {
        let _ = api.delete(n, &DeleteParams::default()).await;
    }
}

/// `kubectl nm why <nm>` against the cluster (in-process): (exit status, stdout, stderr).
async fn kubectl_nm_why(name: &str) -> (u8, String, String) {
    let kubeconfig = operator_env().cluster.kubeconfig().display().to_string();
    let argv = vec![
        "kubectl-nm",
        "--kubeconfig",
        kubeconfig.as_str(),
        "why",
        name,
    ];
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let code = kubectl_nm::run(argv, &mut out, &mut err).await;
    (
        code,
        String::from_utf8(out).unwrap(),
        String::from_utf8(err).unwrap(),
    )
}

/// `(name, reason)` of the blockers, sorted.
fn blockers(s: &NodeMaintenanceStatus) -> Vec<(String, String)> {
    let mut b: Vec<_> = s
        .blockers
        .iter()
        .flatten()
        .map(|b| (b.name.clone(), b.reason.clone()))
        .collect();
    b.sort();
    b
}

/// A maintenance of `node` with `spec` merged in, created.
async fn create(client: &kube::Client, name: &str, node: &str, spec: serde_json::Value) {
    let mut nm = serde_json::to_value(nm::new(name, node, "e2e volume detach")).unwrap();
    merge(&mut nm, json!({ "spec": spec }));
    let nm: NodeMaintenance = serde_json::from_value(nm).unwrap();
    Api::<NodeMaintenance>::all(client.clone())
        .create(&PostParams::default(), &nm)
        .await
        .unwrap_or_else(|e| panic!("creating NodeMaintenance {name}: {e}"));
}

/// A node with one evictable pod, and two attachments on it (`<prefix>-a` of PersistentVolume
/// pv-a, `<prefix>-b` of pv-b): the node, the namespace and the attachments' names.
async fn node_with_attachments(
    client: &kube::Client,
    prefix: &str,
) -> (String, String, [String; 2]) {
    let env = operator_env();
    let group = unique(prefix);
    let node = worker_nodes(env.cluster, client, &group, 1).await.remove(0);
    let ns = namespace(client, prefix).await;
    bare_pod(client, &ns, "app", &node, json!({})).await;
    wait_running(client, &ns, "app", 1, LIMIT).await;
    let names = [
        unique(&format!("{prefix}-a")),
        unique(&format!("{prefix}-b")),
    ];
    attachment(client, &names[0], &node, "pv-a").await;
    attachment(client, &names[1], &node, "pv-b").await;
    (node, ns, names)
}

/// §12: with `waitForVolumeDetach: 2m`, every pod gone, the maintenance stays Running with one
/// `VolumeAttached` blocker per attachment on its node (the attachments, which no controller
/// here touches, stay); once they are deleted it Succeeds within 5 s.
#[tokio::test]
async fn succeeded_waits_until_the_nodes_volume_attachments_are_gone() {
    let client = operator_env().cluster.client().await;
    let (node, ns, names) = node_with_attachments(&client, "vd").await;
    let refs = [names[0].as_str(), names[1].as_str()];

    let name = unique("nm-vd");
    create(&client, &name, &node, json!({"waitForVolumeDetach": "2m"})).await;
    let held = nm::wait_status(
        &client,
        &name,
        "Running, two VolumeAttached blockers",
        LIMIT,
        |s| {
            s.phase == Some(MaintenancePhase::Running)
                && blockers(s)
                    == [
                        (names[0].clone(), "VolumeAttached".to_string()),
                        (names[1].clone(), "VolumeAttached".to_string()),
                    ]
        },
    )
    .await;
    let s = held.status.unwrap();
    assert_eq!(s.pending_pods, None, "every pod is gone: {s:?}");
    let pods = pods(&client, &ns, "app").await;
    assert!(pods.is_empty(), "the pod left: {pods:?}");
    let message = s.blockers.as_ref().unwrap()[0].message.clone().unwrap();
    assert!(
        message.contains("pv-a") && message.contains(&node),
        "{message}"
    );
    // Held, not by chance: still Running a few passes (1 s apart) later, the attachments left
    // as created (no attach-detach controller here deletes what it did not create).
    tokio::time::sleep(Duration::from_secs(3)).await;
    let again = Api::<NodeMaintenance>::all(client.clone())
        .get(&name)
        .await
        .unwrap();
    assert_eq!(
        again.status.as_ref().and_then(|s| s.phase),
        Some(MaintenancePhase::Running),
        "{:?}",
        again.status
    );
    assert_eq!(existing(&client, &refs).await, names.to_vec());
    // `kubectl nm why` names each attachment.
    let (code, out, err) = kubectl_nm_why(&name).await;
    for n in &names {
        assert!(
            out.contains(&format!("volumeattachment/{n}")) && out.contains("VolumeAttached"),
            "exit {code}\n{out}\n{err}"
        );
    }

    delete_attachments(&client, &refs).await;
    let gone = Instant::now();
    let done = nm::wait_phase(&client, &name, MaintenancePhase::Succeeded, LIMIT).await;
    let took = gone.elapsed();
    eprintln!("Succeeded {took:?} after the attachments were deleted");
    assert!(
        took < Duration::from_secs(5),
        "Succeeded only {took:?} after the detach"
    );
    let s = done.status.unwrap();
    assert_eq!(s.blockers, None, "{s:?}");
    nm::delete_and_wait_restored(&client, &name, &node).await;
}

/// §12: at the bound (10 s from the drain's start) with `onTimeout: Fail`, attachments still
/// there, the maintenance Fails with `lastError` naming them, and stays Failed (one
/// `FailedMaintenance`, never Running again over 5 s).
#[tokio::test]
async fn at_the_bound_on_timeout_fail_fails_naming_the_attachments() {
    let client = operator_env().cluster.client().await;
    let (node, _ns, names) = node_with_attachments(&client, "vdf").await;
    let refs = [names[0].as_str(), names[1].as_str()];

    let name = unique("nm-vdf");
    create(
        &client,
        &name,
        &node,
        json!({"waitForVolumeDetach": "10s", "onTimeout": "Fail"}),
    )
    .await;
    let failed = nm::wait_phase(&client, &name, MaintenancePhase::Failed, LIMIT).await;
    let s = failed.status.unwrap();
    let error = s.last_error.clone().unwrap_or_default();
    assert!(
        error.contains("waitForVolumeDetach")
            && error.contains(&names[0])
            && error.contains(&names[1]),
        "{s:?}"
    );
    assert_eq!(existing(&client, &refs).await, names.to_vec());
    // Stays Failed, never back to Running, over 5 s of passes, and fails once.
    let api = Api::<NodeMaintenance>::all(client.clone());
    let until = Instant::now() + Duration::from_secs(5);
    while Instant::now() < until {
        let s = api.get(&name).await.unwrap().status;
        assert_eq!(
            s.as_ref().and_then(|s| s.phase),
            Some(MaintenancePhase::Failed),
            "{s:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Once, and a Warning as every FailedMaintenance (docs/compat.md §4).
    let failures: Vec<(String, i32)> = nm::event_summary(&client, &name)
        .await
        .into_iter()
        .filter(|e| e.1 == "FailedMaintenance")
        .map(|e| (e.0, e.3))
        .collect();
    assert_eq!(
        failures,
        [("Warning".to_string(), 1)],
        "{:?}",
        nm::event_summary(&client, &name).await
    );
    nm::delete_and_wait_restored(&client, &name, &node).await;
    delete_attachments(&client, &refs).await;
}

/// §12, the default: without the knob, Succeeded comes once the pods are gone, the
/// attachments still in place (upstream's behaviour).
#[tokio::test]
async fn without_the_knob_succeeded_ignores_the_attachments() {
    let client = operator_env().cluster.client().await;
    let (node, _ns, names) = node_with_attachments(&client, "vdo").await;
    let refs = [names[0].as_str(), names[1].as_str()];

    let name = unique("nm-vdo");
    create(&client, &name, &node, json!({})).await;
    let done = nm::wait_phase(&client, &name, MaintenancePhase::Succeeded, LIMIT).await;
    assert_eq!(done.status.unwrap().blockers, None);
    assert_eq!(existing(&client, &refs).await, names.to_vec());
    nm::delete_and_wait_restored(&client, &name, &node).await;
    delete_attachments(&client, &refs).await;
}

/// §12: a value the knob does not accept is refused by the webhook naming the knob, the value
/// and what is accepted, in the annotation and in the spec field alike; nothing is created.
#[tokio::test]
async fn a_bad_wait_for_volume_detach_is_refused_naming_the_knob() {
    let env = operator_env();
    let client = env.cluster.client().await;
    let group = unique("vdbad");
    let node = worker_nodes(env.cluster, &client, &group, 1)
        .await
        .remove(0);
    let api = Api::<NodeMaintenance>::all(client.clone());
    for (how, value) in [("annotation", "soon"), ("spec", "0s")] {
        let name = unique("nm-vdbad");
        let mut nm = nm::new(&name, &node, "e2e volume detach: refused");
        match how {
            "annotation" => {
                nm.metadata.annotations = Some(
                    [(
                        "nodemaintenance.medik8s.io/waitForVolumeDetach".to_string(),
                        value.to_string(),
                    )]
                    .into(),
                );
            }
            _ => nm.spec.knobs.wait_for_volume_detach = Some(value.into()),
        }
        let refused = api
            .create(&PostParams::default(), &nm)
            .await
            .expect_err("a bad waitForVolumeDetach was admitted");
        let text = refused.to_string();
        assert!(
            text.contains("waitForVolumeDetach")
                && text.contains(&format!("{value:?}"))
                && text.contains("accepted: true, false, or a positive duration bound"),
            "{how}: {text}"
        );
        assert!(api.get_opt(&name).await.unwrap().is_none());
    }
}

/// §12 with `stage`: at `Cordon` nothing waits (no round, no attachment blocker, the pod stays);
/// moved to `Drain`, the pod is evicted and the maintenance waits for the attachments, then
/// Succeeds once they are gone.
#[tokio::test]
async fn the_wait_applies_only_once_the_stage_is_drain() {
    let client = operator_env().cluster.client().await;
    let (node, ns, names) = node_with_attachments(&client, "vds").await;
    let refs = [names[0].as_str(), names[1].as_str()];

    let name = unique("nm-vds");
    create(
        &client,
        &name,
        &node,
        json!({"waitForVolumeDetach": "2m", "stage": "Cordon"}),
    )
    .await;
    let cordoned = nm::wait_status(&client, &name, "Cordoned at stage Cordon", LIMIT, |s| {
        s.conditions
            .iter()
            .flatten()
            .any(|c| c.type_ == "Cordoned" && c.status == "True")
    })
    .await;
    assert_eq!(blockers(cordoned.status.as_ref().unwrap()), []);
    assert_eq!(
        pods(&client, &ns, "app").await.len(),
        1,
        "Cordon evicts nothing"
    );

    Api::<NodeMaintenance>::all(client.clone())
        .patch(
            &name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"spec": {"stage": "Drain"}})),
        )
        .await
        .unwrap();
    nm::wait_status(
        &client,
        &name,
        "Running, two VolumeAttached blockers",
        LIMIT,
        |s| {
            s.phase == Some(MaintenancePhase::Running)
                && blockers(s)
                    .iter()
                    .filter(|b| b.1 == "VolumeAttached")
                    .count()
                    == 2
        },
    )
    .await;
    assert!(pods(&client, &ns, "app").await.is_empty());
    delete_attachments(&client, &refs).await;
    nm::wait_phase(&client, &name, MaintenancePhase::Succeeded, LIMIT).await;
    nm::delete_and_wait_restored(&client, &name, &node).await;
}

/// Patches `spec` of NodeMaintenance `name` with `body`.
async fn patch_spec(client: &kube::Client, name: &str, body: serde_json::Value) {
    Api::<NodeMaintenance>::all(client.clone())
        .patch(
            name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({ "spec": body })),
        )
        .await
        .unwrap_or_else(|e| panic!("patching NodeMaintenance {name}: {e}"));
}

/// §10 (`waitForVolumeDetach` with `paused`, a move back and deletion): held by two attachments,
/// then paused: no round runs, so with the attachments deleted the maintenance stays Running for
/// 5 s and Succeeds once unpaused. A new attachment, then back to `Idle`: the node is restored
/// (the wait ends with the round); on to `Drain`: held by it again. Deleted with it still there:
/// the node is restored and the object gone (the deletion never waits for attachments).
#[tokio::test]
async fn the_wait_holds_across_a_pause_ends_with_a_move_back_and_never_holds_the_deletion() {
    let client = operator_env().cluster.client().await;
    let (node, _ns, names) = node_with_attachments(&client, "vdc").await;
    let refs = [names[0].as_str(), names[1].as_str()];
    let name = unique("nm-vdc");
    create(&client, &name, &node, json!({"waitForVolumeDetach": "2m"})).await;
    let attached = |s: &NodeMaintenanceStatus, n: &[String]| {
        s.phase == Some(MaintenancePhase::Running)
            && blockers(s)
                == n.iter()
                    .map(|n| (n.clone(), "VolumeAttached".to_string()))
                    .collect::<Vec<_>>()
    };
    nm::wait_status(&client, &name, "two VolumeAttached blockers", LIMIT, |s| {
        attached(s, &names)
    })
    .await;

    patch_spec(&client, &name, json!({"paused": true})).await;
    nm::wait_status(&client, &name, "DrainPaused", LIMIT, |s| {
        s.conditions
            .iter()
            .flatten()
            .any(|c| c.type_ == "DrainPaused" && c.status == "True")
    })
    .await;
    delete_attachments(&client, &refs).await;
    let until = Instant::now() + Duration::from_secs(5);
    while Instant::now() < until {
        let nm = Api::<NodeMaintenance>::all(client.clone())
            .get(&name)
            .await
            .unwrap();
        assert_eq!(
            nm.status.as_ref().and_then(|s| s.phase),
            Some(MaintenancePhase::Running),
            "Succeeded while paused: {:?}",
            nm.status
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    patch_spec(&client, &name, json!({"paused": false})).await;
    nm::wait_phase(&client, &name, MaintenancePhase::Succeeded, LIMIT).await;

    let third = unique("vdc-c");
    attachment(&client, &third, &node, "pv-c").await;
    patch_spec(&client, &name, json!({"stage": "Idle"})).await;
    wait_for("node restored", LIMIT, || node::restored(&client, &node)).await;
    patch_spec(&client, &name, json!({"stage": "Drain"})).await;
    nm::wait_status(&client, &name, "held by the new attachment", LIMIT, |s| {
        attached(s, std::slice::from_ref(&third))
    })
    .await;

    nm::delete_and_wait_restored(&client, &name, &node).await;
    assert_eq!(
        existing(&client, &[third.as_str()]).await,
        std::slice::from_ref(&third)
    );
    delete_attachments(&client, &[third.as_str()]).await;
}
