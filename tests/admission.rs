//! The validating webhook end to end: the real kube-apiserver calls the operator's TLS service at
//! `https://127.0.0.1:<port>` with a `caBundle`, and kubectl prints what users see.

mod common;

use std::time::Duration;

use common::*;
use kube::api::{Api, Patch, PatchParams, PostParams};
use node_maintenance_operator::api::NodeMaintenance;
use serde_json::json;

const LIMIT: Duration = Duration::from_secs(60);

fn manifest(name: &str, node: &str) -> String {
    json!({
        "apiVersion": "nodemaintenance.medik8s.io/v1beta1",
        "kind": "NodeMaintenance",
        "metadata": {"name": name},
        "spec": {"nodeName": node, "reason": "e2e"}
    })
    .to_string()
}

fn kubectl_create(cluster: &Cluster, name: &str, node: &str) -> Result<String, String> {
    cluster
        .kubectl_run(&["create", "-f", "-"], Some(&manifest(name, node)))
        .map_err(|e| e.to_string())
}

#[tokio::test]
async fn missing_node_is_denied_with_upstreams_message() {
    let env = operator_env();
    let err = kubectl_create(env.cluster, &unique("nm-missing"), "no-such-node").unwrap_err();
    assert!(
        err.contains(
            "admission webhook \"vnodemaintenance.kb.io\" denied the request: invalid nodeName, no node with name no-such-node found"
        ),
        "{err}"
    );
}

#[tokio::test]
async fn duplicate_denied_nodename_immutable_reason_editable() {
    let env = operator_env();
    let client = env.cluster.client().await;
    let group = unique("dup");
    let nodes = worker_nodes(env.cluster, &client, &group, 2).await;
    let first = unique("nm-first");
    kubectl_create(env.cluster, &first, &nodes[0]).unwrap();

    let err = kubectl_create(env.cluster, &unique("nm-second"), &nodes[0]).unwrap_err();
    assert!(
        err.contains(&format!(
            "invalid nodeName, a NodeMaintenance for node {} already exists",
            nodes[0]
        )),
        "{err}"
    );

    let api = Api::<NodeMaintenance>::all(client.clone());
    let err = api
        .patch(
            &first,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"nodeName": nodes[1]}})),
        )
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("updating spec.NodeName isn't allowed"),
        "{err}"
    );
    let kube::Error::Api(status) = &err else {
        panic!("{err:?}")
    };
    // The CRD's own rule refuses the change before the webhook is called (422 Invalid with
    // upstream's message, docs/compat.md §1); the webhook's 403 is left for upstream's CRD.
    assert_eq!(status.code, 422, "refused by the CRD's rule: {status:?}");

    api.patch(
        &first,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"reason": "edited"}})),
    )
    .await
    .unwrap();
    assert_eq!(
        api.get(&first).await.unwrap().spec.reason.as_deref(),
        Some("edited")
    );
    api.delete(&first, &Default::default()).await.unwrap();
    nm::wait_gone(&client, &first, LIMIT).await;
}

/// Dry-run creates get the same answers and leave nothing behind: after an admitted dry run,
/// a real create for the same node is still admitted.
#[tokio::test]
async fn dry_run_has_the_same_answer_and_no_side_effect() {
    let env = operator_env();
    let client = env.cluster.client().await;
    let group = unique("dry");
    let nodes = worker_nodes(env.cluster, &client, &group, 1).await;
    let err = env
        .cluster
        .kubectl_run(
            &["create", "--dry-run=server", "-f", "-"],
            Some(&manifest("dry-missing", "no-such-node")),
        )
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("no node with name no-such-node found"),
        "{err}"
    );
    for _ in 0..3 {
        env.cluster
            .kubectl_run(
                &["create", "--dry-run=server", "-f", "-"],
                Some(&manifest(&unique("dry"), &nodes[0])),
            )
            .unwrap();
    }
    let name = unique("nm-dry");
    kubectl_create(env.cluster, &name, &nodes[0]).unwrap();
    nm::delete(&client, &name).await;
    nm::wait_gone(&client, &name, LIMIT).await;
}

/// Ten concurrent creates for one node: exactly one is admitted.
#[tokio::test]
async fn ten_concurrent_creates_admit_exactly_one() {
    let env = operator_env();
    let client = env.cluster.client().await;
    let group = unique("race");
    let nodes = worker_nodes(env.cluster, &client, &group, 1).await;
    let api = Api::<NodeMaintenance>::all(client.clone());
    let attempts = (0..10).map(|i| {
        let api = api.clone();
        let obj = nm::new(&format!("{group}-{i}"), &nodes[0], "race");
        async move { api.create(&PostParams::default(), &obj).await }
    });
    let results = futures::future::join_all(attempts).await;
    let admitted: Vec<_> = results.iter().filter_map(|r| r.as_ref().ok()).collect();
    let denied: Vec<String> = results
        .iter()
        .filter_map(|r| r.as_ref().err().map(|e| e.to_string()))
        .collect();
    assert_eq!(
        admitted.len(),
        1,
        "admitted {admitted:?}; denied {denied:?}"
    );
    assert!(
        denied.iter().all(|e| e.contains("already exists")),
        "{denied:?}"
    );
    let name = admitted[0].metadata.name.clone().unwrap();
    nm::delete(&client, &name).await;
    nm::wait_gone(&client, &name, LIMIT).await;
}

/// Control-plane quorum on a non-OpenShift cluster: with one control-plane node its maintenance
/// would lose etcd quorum; with three, one may go, a second may not while the first is out.
#[tokio::test]
async fn control_plane_quorum() {
    let env = operator_env();
    let client = env.cluster.client().await;
    let quorum =
        "can not put master/control-plane node into maintenance at this moment, disrupting node";
    let err = kubectl_create(env.cluster, &unique("nm-cp"), "kwok-control-plane-0").unwrap_err();
    assert!(
        err.contains(&format!(
            "{quorum} kwok-control-plane-0 will violate etcd quorum"
        )),
        "{err}"
    );

    for i in 1..3 {
        env.cluster
            .create_node(&format!("kwok-control-plane-{i}"), true)
            .unwrap();
    }
    wait_for("three Ready control-plane nodes", LIMIT, || async {
        let ready = (0..3)
            .filter(|i| env.cluster.node_ready(&format!("kwok-control-plane-{i}")))
            .count();
        if ready == 3 {
            Ok(())
        } else {
            Err(format!("{ready} ready"))
        }
    })
    .await;
    let first = unique("nm-cp0");
    kubectl_create(env.cluster, &first, "kwok-control-plane-0").unwrap();
    let err = kubectl_create(env.cluster, &unique("nm-cp1"), "kwok-control-plane-1").unwrap_err();
    assert!(
        err.contains(&format!(
            "{quorum} kwok-control-plane-1 will violate etcd quorum"
        )),
        "{err}"
    );
    nm::delete(&client, &first).await;
    nm::wait_gone(&client, &first, LIMIT).await;
    let again = unique("nm-cp1");
    kubectl_create(env.cluster, &again, "kwok-control-plane-1").unwrap();
    nm::delete(&client, &again).await;
    nm::wait_gone(&client, &again, LIMIT).await;
}

/// Upstream's own end-to-end input: `doesNotExist` (upper case, so no node can have that name)
/// gets upstream's not-found text verbatim; our reason may follow it.
#[tokio::test]
async fn a_name_no_node_can_have_gets_upstreams_not_found_text() {
    let env = operator_env();
    for name in ["doesNotExist", "no_such.node"] {
        let err = kubectl_create(env.cluster, &unique("nm-dne"), name).unwrap_err();
        assert!(
            err.contains(&format!(
                "admission webhook \"vnodemaintenance.kb.io\" denied the request: invalid nodeName, no node with name {name} found"
            )),
            "{err}"
        );
    }
}

/// Issue 9's input: create, delete (waiting until it is gone), create again for the same node
/// within the old 30 s reservation: admitted at once.
#[tokio::test]
async fn delete_and_recreate_for_the_same_node_is_admitted_at_once() {
    let env = operator_env();
    let client = env.cluster.client().await;
    let group = unique("recreate");
    let nodes = worker_nodes(env.cluster, &client, &group, 1).await;
    let api = Api::<NodeMaintenance>::all(client.clone());
    for round in 0..3 {
        let name = format!("{group}-{round}");
        let started = std::time::Instant::now();
        api.create(&PostParams::default(), &nm::new(&name, &nodes[0], "e2e"))
            .await
            .unwrap_or_else(|e| panic!("round {round}: create {name} refused: {e}"));
        nm::delete(&client, &name).await;
        nm::wait_gone(&client, &name, LIMIT).await;
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "round {round} took {:?}; the input needs the recreate within 30 s",
            started.elapsed()
        );
    }
    wait_for("node restored", LIMIT, || {
        node::restored(&client, &nodes[0])
    })
    .await;
}

/// How soon a reservation of a failed CREATE must be freed: well under the 30 s a reservation
/// lived before it was tied to the CREATE's outcome, and generous for a loaded machine.
const FREED_WITHIN: Duration = Duration::from_secs(20);

/// A CREATE that the API server refuses after the webhook admitted it (here: AlreadyExists, the
/// name is taken by a maintenance of another node) does not keep its node reserved: a create for
/// that node is admitted within seconds, long before the old 30 s.
#[tokio::test]
async fn a_create_that_fails_after_admission_frees_its_node() {
    let env = operator_env();
    let client = env.cluster.client().await;
    let group = unique("failed");
    let nodes = worker_nodes(env.cluster, &client, &group, 2).await;
    let api = Api::<NodeMaintenance>::all(client.clone());
    let taken = format!("{group}-taken");
    api.create(&PostParams::default(), &nm::new(&taken, &nodes[1], "e2e"))
        .await
        .unwrap();
    let err = api
        .create(&PostParams::default(), &nm::new(&taken, &nodes[0], "e2e"))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 409),
        "expected AlreadyExists from the API server after admission: {err}"
    );
    let started = std::time::Instant::now();
    let other = format!("{group}-other");
    wait_for(
        "a create for the node of the failed request to be admitted",
        FREED_WITHIN,
        || async {
            api.create(&PostParams::default(), &nm::new(&other, &nodes[0], "e2e"))
                .await
                .map(|_| ())
                .map_err(|e| e.to_string())
        },
    )
    .await;
    assert!(
        started.elapsed() < FREED_WITHIN,
        "admitted only after {:?}",
        started.elapsed()
    );
    for (name, node) in [(&taken, &nodes[1]), (&other, &nodes[0])] {
        nm::delete_and_wait_restored(&client, name, node).await;
    }
}

/// A node created a moment before its NodeMaintenance is admitted even when the watch cache
/// has not caught up (the webhook looks a node missing from its cache up live once).
#[tokio::test]
async fn a_node_created_a_moment_ago_is_admitted() {
    let env = operator_env();
    let client = env.cluster.client().await;
    let group = unique("fresh");
    let api = Api::<NodeMaintenance>::all(client.clone());
    for (i, gap) in [Duration::from_millis(100), Duration::ZERO]
        .into_iter()
        .enumerate()
    {
        let node = format!("{group}-n{i}");
        create_worker_node(&client, &node, &group).await;
        tokio::time::sleep(gap).await;
        let name = format!("{group}-{i}");
        api.create(&PostParams::default(), &nm::new(&name, &node, "e2e"))
            .await
            .unwrap_or_else(|e| panic!("node created {gap:?} earlier: {e}"));
        nm::delete(&client, &name).await;
        nm::wait_gone(&client, &name, LIMIT).await;
    }
}
