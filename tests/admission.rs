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

/// `kubectl create -f -` of a NodeMaintenance (with `extra` flags): `Ok(stderr)` (where kubectl
/// prints the webhook's warnings as `Warning: <text>`) or `Err(stderr)`.
/// Waits until `kubectl create --dry-run=server` of NodeMaintenance `name` for `node` prints
/// every one of `want` (the webhook's caches catch up with the cluster), then checks that the
/// dry run created nothing.
async fn dry_run_warns(
    cluster: &Cluster,
    client: &kube::Client,
    name: &str,
    node: &str,
    want: &[String],
) {
    wait_for("the CREATE warnings", LIMIT, || async {
        let stderr = kubectl_create_warned(cluster, name, node, &["--dry-run=server"])?;
        if want.iter().all(|w| stderr.contains(w.as_str())) {
            Ok(())
        } else {
            Err(stderr)
        }
    })
    .await;
    let nms = Api::<NodeMaintenance>::all(client.clone());
    assert!(
        nms.get_opt(name).await.unwrap().is_none(),
        "a dry run created the NodeMaintenance"
    );
}

fn kubectl_create_warned(
    cluster: &Cluster,
    name: &str,
    node: &str,
    extra: &[&str],
) -> Result<String, String> {
    use std::io::Write;
    let mut child = cluster
        .kubectl()
        .args(["create", "-f", "-"])
        .args(extra)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(manifest(name, node).as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    if out.status.success() {
        Ok(stderr)
    } else {
        Err(stderr)
    }
}

/// A kwok-run etcd static pod (`kube-system`, `component=etcd`, a mirror pod as the kubelet
/// registers it, so the drain leaves it) on `node`; waits until it is Ready.
async fn etcd_member(client: &kube::Client, node: &str) {
    use k8s_openapi::api::core::v1::Pod;
    let pods = Api::<Pod>::namespaced(client.clone(), "kube-system");
    let name = format!("etcd-{node}");
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {
            "name": name,
            "labels": {"component": "etcd", "tier": "control-plane"},
            "annotations": {"kubernetes.io/config.mirror": "e2e", "kubernetes.io/config.source": "file"},
        },
        "spec": {
            "nodeName": node,
            "tolerations": [{"operator": "Exists"}],
            "containers": [{"name": "etcd", "image": "registry.k8s.io/etcd:3.6.0-0"}],
        }
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    wait_for(&format!("etcd pod on {node} Ready"), LIMIT, || async {
        let p = pods.get(&name).await.map_err(|e| e.to_string())?;
        let ready = p
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
        if ready {
            Ok(())
        } else {
            Err(format!("{:?}", p.status))
        }
    })
    .await;
}

/// `docs/drain-contract.md` §9: control-plane quorum on a cluster that is not OpenShift. The quorum rule
/// refuses only what it can judge (`docs/drain-contract.md` §9):
/// - no etcd quorum guard budget and no etcd pod visible (as in this test cluster): the only
///   control-plane node is admitted with a warning that says why quorum was not checked (an
///   earlier rule counted every control-plane node as a member and refused it for ever);
/// - upstream's fake guard for plain Kubernetes (`openshift-etcd/etcd-quorum-guard`,
///   maxUnavailable 0): refused with upstream's text; workers are not guarded;
/// - one visible etcd member, on the node: admitted with a warning;
/// - three members: one may go, a second may not while the first is out, then may.
#[tokio::test]
async fn control_plane_quorum() {
    let env = operator_env();
    let client = env.cluster.client().await;
    let quorum =
        "can not put master/control-plane node into maintenance at this moment, disrupting node";
    let dry = ["--dry-run=server"];
    let warned = kubectl_create_warned(env.cluster, &unique("nm-cp"), "kwok-control-plane-0", &dry)
        .unwrap_or_else(|e| panic!("refused what it cannot judge: {e}"));
    assert!(
        warned.contains(
            "Warning: etcd quorum was not checked: no etcd quorum guard PodDisruptionBudget in openshift-etcd and no etcd pods in kube-system found"
        ),
        "{warned}"
    );

    // Upstream's fake guard (test/manifests/fake-etcd-quorum-guard.yaml).
    env.cluster
        .kubectl_run(
            &["apply", "-f", "-"],
            Some(
                r#"apiVersion: v1
kind: Namespace
metadata:
  name: openshift-etcd
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  namespace: openshift-etcd
  name: etcd-quorum-guard
spec:
  maxUnavailable: 0
  selector:
    matchLabels:
      app: fake-etcd-quorum-guard
"#,
            ),
        )
        .unwrap();
    let err = wait_for("the fake guard to refuse", LIMIT, || async {
        match kubectl_create_warned(env.cluster, &unique("nm-cp"), "kwok-control-plane-0", &dry) {
            Err(e) => Ok(e),
            Ok(w) => Err(format!("admitted: {w}")),
        }
    })
    .await;
    assert!(
        err.contains(&format!(
            "admission webhook \"vnodemaintenance.kb.io\" denied the request: {quorum} kwok-control-plane-0 will violate etcd quorum"
        )),
        "{err}"
    );
    let group = unique("guarded");
    let workers = worker_nodes(env.cluster, &client, &group, 1).await;
    let w = kubectl_create_warned(env.cluster, &unique("nm-w"), &workers[0], &dry)
        .unwrap_or_else(|e| panic!("a worker is not guarded: {e}"));
    assert!(!w.contains("etcd quorum"), "{w}");
    env.cluster
        .kubectl_run(
            &["delete", "pdb", "-n", "openshift-etcd", "etcd-quorum-guard"],
            None,
        )
        .unwrap();

    etcd_member(&client, "kwok-control-plane-0").await;
    let warned = wait_for("a single etcd member to be seen", LIMIT, || async {
        let w = kubectl_create_warned(env.cluster, &unique("nm-cp"), "kwok-control-plane-0", &dry)
            .map_err(|e| format!("refused: {e}"))?;
        if w.contains("the only etcd member") {
            Ok(w)
        } else {
            Err(w)
        }
    })
    .await;
    assert!(
        warned.contains(
            "Warning: etcd quorum was not checked: the only etcd member runs on this node, so etcd is unavailable while the node is down"
        ),
        "{warned}"
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
    for i in 1..3 {
        etcd_member(&client, &format!("kwok-control-plane-{i}")).await;
    }
    let first = unique("nm-cp0");
    let w = wait_for("three etcd members to be seen", LIMIT, || async {
        let w = kubectl_create_warned(env.cluster, &unique("nm-cp"), "kwok-control-plane-0", &dry)
            .map_err(|e| format!("refused: {e}"))?;
        // The etcd mirror pod draws the warning about pods that stay on the node.
        if w.contains("etcd quorum") {
            Err(w)
        } else {
            Ok(w)
        }
    })
    .await;
    assert!(!w.contains("etcd quorum"), "{w}");
    kubectl_create_warned(env.cluster, &first, "kwok-control-plane-0", &[]).unwrap();
    let err = kubectl_create_warned(env.cluster, &unique("nm-cp1"), "kwok-control-plane-1", &[])
        .unwrap_err();
    assert!(
        err.contains(&format!(
            "{quorum} kwok-control-plane-1 will violate etcd quorum"
        )),
        "{err}"
    );
    nm::delete(&client, &first).await;
    nm::wait_gone(&client, &first, LIMIT).await;
    let again = unique("nm-cp1");
    kubectl_create_warned(env.cluster, &again, "kwok-control-plane-1", &[]).unwrap();
    nm::delete(&client, &again).await;
    nm::wait_gone(&client, &again, LIMIT).await;
}

/// `docs/drain-contract.md` §7, at admission: a valid node name whose lease name would be too long is
/// admitted (the controller then fails it, touching nothing) with a warning that says so.
#[tokio::test]
async fn a_node_name_too_long_for_its_lease_is_admitted_with_a_warning() {
    let env = operator_env();
    let client = env.cluster.client().await;
    let long = format!("{}.{}", "l".repeat(200), "x".repeat(50));
    assert_eq!(long.len(), 251);
    let node: k8s_openapi::api::core::v1::Node =
        serde_json::from_value(json!({"metadata": {"name": long}})).unwrap();
    Api::<k8s_openapi::api::core::v1::Node>::all(client.clone())
        .create(&PostParams::default(), &node)
        .await
        .unwrap();
    let warned = wait_for("the long-named node to be admitted", LIMIT, || async {
        kubectl_create_warned(
            env.cluster,
            &unique("nm-long"),
            &long,
            &["--dry-run=server"],
        )
    })
    .await;
    assert!(
        warned.contains(
            "Warning: this maintenance will fail without changing the node: its medik8s lease name node-<nodeName> would have 256 characters, more than the 253 a Lease name may have"
        ),
        "{warned}"
    );
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

/// A budget that allows no disruption over pods on the node: `kubectl create --dry-run=server`
/// prints a warning naming the budget, the healthy pods it needs and has, and the pods, and
/// creates nothing; a node whose pods no such budget covers gets no such warning.
#[tokio::test]
async fn create_warns_of_a_budget_that_will_hold_the_drain() {
    let env = operator_env();
    let client = env.cluster.client().await;
    let group = unique("pdbwarn");
    let nodes = worker_nodes(env.cluster, &client, &group, 2).await;
    let ns = namespace(&client, "pdbwarn").await;
    env.cluster
        .kubectl_run(&["cordon", &nodes[1]], None)
        .unwrap();
    deployment(&client, &ns, "db", &group, 2, 0).await;
    wait_running(&client, &ns, "db", 2, LIMIT).await;
    env.cluster
        .kubectl_run(&["uncordon", &nodes[1]], None)
        .unwrap();
    budget(&client, &ns, "db-guard", "db", 0, 2).await;

    let name = unique("nm-pdbwarn");
    let want = format!(
        "PodDisruptionBudget {ns}/db-guard allows no disruption now (needs 2 healthy pods, has 2): \
         the drain of node {} will wait to evict {ns}/db-",
        nodes[0]
    );
    // The webhook's budget cache follows the API server's watch: retry the dry run until it
    // shows the budget.
    let budget_warning = format!("Warning: {want}");
    dry_run_warns(env.cluster, &client, &name, &nodes[0], &[budget_warning]).await;
    let stderr =
        kubectl_create_warned(env.cluster, &name, &nodes[1], &["--dry-run=server"]).unwrap();
    assert!(!stderr.contains("PodDisruptionBudget"), "{stderr}");
}

/// Every knob the webhook checks (`docs/compat.md §6`), by annotation and, where the spec field
/// is free text, by spec field: a refused value is denied naming where it was set and the value;
/// an accepted one is admitted. All by `--dry-run=server`, so nothing is created; then an UPDATE
/// that sets a refused value on an existing NodeMaintenance is denied too.
#[tokio::test]
async fn refused_knob_values_are_denied_naming_the_knob_and_the_value() {
    let env = operator_env();
    let client = env.cluster.client().await;
    let nodes = worker_nodes(env.cluster, &client, &unique("knobs"), 1).await;
    let node = &nodes[0];
    let rules_ok = r#"[{"podSelector":{"matchLabels":{"app":"db"}},"behavior":"Skip"}]"#;
    // (where, refused value, accepted value): `where` is an annotation or a `spec.` field.
    let knobs: &[(&str, &str, &str)] = &[
        ("nodemaintenance.medik8s.io/paused", "yes", "true"),
        ("nodemaintenance.medik8s.io/drainTimeout", "later", "15m"),
        (
            "nodemaintenance.medik8s.io/onTimeout",
            "forcedelete",
            "Fail",
        ),
        (
            "nodemaintenance.medik8s.io/drainRules",
            "[{\"behavior\":\"Maybe\"}]",
            rules_ok,
        ),
        ("nodemaintenance.medik8s.io/stage", "Later", "Cordon"),
        ("nodemaintenance.medik8s.io/nodeConditions", "on", "false"),
        (
            "nodemaintenance.medik8s.io/startAt",
            "tomorrow",
            "2030-01-02T03:00:00Z",
        ),
        ("nodemaintenance.medik8s.io/expireAfter", "-5m", "1h30m"),
        ("spec.drainTimeout", "soon", "90s"),
        ("spec.startAt", "at dawn", "2030-01-02T03:00:00Z"),
        ("spec.expireAfter", "0s", "30s"),
    ];
    let object = |name: &str, at: &str, value: &str| {
        let mut o = serde_json::from_str::<serde_json::Value>(&manifest(name, node)).unwrap();
        match at.strip_prefix("spec.") {
            Some(field) => o["spec"][field] = json!(value),
            None => o["metadata"]["annotations"] = json!({ at: value }),
        }
        o.to_string()
    };
    let dry_create = |body: String| {
        env.cluster
            .kubectl_run(&["create", "--dry-run=server", "-f", "-"], Some(&body))
            .map_err(|e| e.to_string())
    };
    for &(at, refused, accepted) in knobs {
        let err = dry_create(object(&unique("knob"), at, refused))
            .expect_err(&format!("{at}={refused:?} was admitted"));
        assert!(
            err.contains("denied the request")
                && err.contains(at)
                && err.contains(&format!("{refused:?}")),
            "{at}={refused:?}: {err}"
        );
        if let Err(err) = dry_create(object(&unique("knob"), at, accepted)) {
            panic!("{at}={accepted:?} was refused: {err}");
        }
    }
    let api: Api<NodeMaintenance> = Api::all(client.clone());
    assert!(
        api.list(&Default::default())
            .await
            .unwrap()
            .items
            .iter()
            .all(|o| o.spec.node_name != *node),
        "a dry run created an object"
    );

    let name = unique("nm-knob");
    kubectl_create(env.cluster, &name, node).unwrap();
    let patch = json!({"metadata": {"annotations": {"nodemaintenance.medik8s.io/stage": "Later"}}});
    let err = api
        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect_err("an UPDATE to a refused stage was admitted")
        .to_string();
    assert!(
        err.contains("nodemaintenance.medik8s.io/stage") && err.contains("\"Later\""),
        "{err}"
    );
    nm::delete(&client, &name).await;
    nm::wait_gone(&client, &name, LIMIT).await;
}

fn right_rules() -> serde_json::Value {
    json!([{"podSelector": {"matchLabels": {"app": "db"}}, "behavior": "Skip"}])
}

/// Issue 46 item 6: drain rules meant to keep the database (`behavior: Skip`) written as Cluster
/// API's MachineDrainRule (`selector:`) or with a label map as `podSelector` are refused naming
/// the key, in every way a user can write them, and nothing is created (all dry runs):
/// - the annotation (JSON text, which the webhook reads strictly): the webhook names the path and
///   the unknown key;
/// - `spec.drainRules` with kubectl's default `--validate=strict`: the API server itself refuses
///   the unknown field, naming it;
/// - `spec.drainRules` from a client that leaves field validation at the server's default (kube's
///   client: `Warn`) or turns it off (`kubectl --validate=false`): the API server prunes the key
///   before the webhook sees the object, and the webhook refuses what is left, a rule with no
///   selector or a selector with no entry (both would select every pod), naming the path.
#[tokio::test]
async fn drain_rules_with_an_unknown_key_are_refused_naming_it() {
    use kube::api::DynamicObject;
    use kube::discovery::ApiResource;
    use node_maintenance_operator::policy::DRAIN_RULES_ANNOTATION;
    let env = operator_env();
    let client = env.cluster.client().await;
    let node = worker_nodes(env.cluster, &client, &unique("strict"), 1)
        .await
        .remove(0);
    let object = |rules: &serde_json::Value, annotation: bool| {
        let mut o: serde_json::Value =
            serde_json::from_str(&manifest(&unique("strict"), &node)).unwrap();
        if annotation {
            o["metadata"]["annotations"] = json!({ DRAIN_RULES_ANNOTATION: rules.to_string() });
        } else {
            o["spec"]["drainRules"] = rules.clone();
        }
        o
    };
    let kubectl = |args: &[&str], o: &serde_json::Value| {
        env.cluster
            .kubectl_run(args, Some(&o.to_string()))
            .map_err(|e| e.to_string())
    };
    let dynamic: Api<DynamicObject> =
        Api::all_with(client.clone(), &ApiResource::erase::<NodeMaintenance>(&()));
    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    // (rules, what the webhook names in the annotation, what the API server names in the spec,
    //  what the webhook names once the API server pruned the spec)
    let inputs = [
        (
            json!([{"selector": {"matchLabels": {"app": "db"}}, "behavior": "Skip"}]),
            r#"nodemaintenance.medik8s.io/drainRules[0].selector: unknown field "selector""#,
            r#"unknown field "spec.drainRules[0].selector""#,
            "spec.drainRules[0]: the rule has neither podSelector nor namespaceSelector",
        ),
        (
            json!([{"podSelector": {"app": "db"}, "behavior": "Skip"}]),
            r#"nodemaintenance.medik8s.io/drainRules[0].podSelector.app: unknown field "app""#,
            r#"unknown field "spec.drainRules[0].podSelector.app""#,
            "spec.drainRules[0].podSelector: the selector has no matchLabels or matchExpressions",
        ),
    ];
    for (rules, annotation, strict, pruned) in &inputs {
        let err = kubectl(
            &["create", "--dry-run=server", "-f", "-"],
            &object(rules, true),
        )
        .expect_err("the annotation was admitted");
        assert!(
            err.contains("denied the request") && err.contains(annotation),
            "{rules}: {err}"
        );
        let err = kubectl(
            &["create", "--dry-run=server", "-f", "-"],
            &object(rules, false),
        )
        .expect_err("the spec was admitted under strict field validation");
        assert!(err.contains(strict), "{rules}: {err}");
        let err = kubectl(
            &["create", "--dry-run=server", "--validate=false", "-f", "-"],
            &object(rules, false),
        )
        .expect_err("the pruned spec was admitted (kubectl --validate=false)");
        assert!(
            err.contains("denied the request") && err.contains(pruned),
            "{rules}: {err}"
        );
        let o: DynamicObject = serde_json::from_value(object(rules, false)).unwrap();
        let err = dynamic
            .create(&dry, &o)
            .await
            .expect_err("the pruned spec was admitted (kube's client)")
            .to_string();
        assert!(err.contains(pruned), "{rules}: {err}");
    }
    // An unknown behavior, a wrong type or a missing behavior in the spec: the CRD's schema
    // refuses them whatever the field validation.
    for (rules, said) in [
        (
            json!([{"podSelector": {"matchLabels": {"app": "db"}}, "behavior": "Keep"}]),
            "spec.drainRules[0].behavior: Unsupported value: \"Keep\"",
        ),
        (
            json!([{"podSelector": {"matchLabels": {"app": "db"}}, "behavior": "Drain", "order": "2"}]),
            "spec.drainRules[0].order: Invalid value: \"string\"",
        ),
        (
            json!([{"podSelector": {"matchLabels": {"app": "db"}}}]),
            "spec.drainRules[0].behavior: Required value",
        ),
    ] {
        let err = kubectl(
            &["create", "--dry-run=server", "--validate=false", "-f", "-"],
            &object(&rules, false),
        )
        .expect_err("the schema admitted it");
        assert!(err.contains(said), "{rules}: {err}");
    }
    // A knob annotation's name with a typo is an unknown key too.
    let mut typo = object(&right_rules(), true);
    typo["metadata"]["annotations"] = json!({"nodemaintenance.medik8s.io/pause": "true"});
    let err = kubectl(&["create", "--dry-run=server", "-f", "-"], &typo)
        .expect_err("an unknown knob annotation was admitted");
    assert!(
        err.contains("denied the request")
            && err.contains("nodemaintenance.medik8s.io/pause: unknown annotation"),
        "{err}"
    );
    // The same rule, written right, is admitted in both forms.
    let right = right_rules();
    for annotation in [true, false] {
        if let Err(err) = kubectl(
            &["create", "--dry-run=server", "-f", "-"],
            &object(&right, annotation),
        ) {
            panic!("{right} (annotation: {annotation}) was refused: {err}");
        }
    }
    let api: Api<NodeMaintenance> = Api::all(client.clone());
    assert!(
        api.list(&Default::default())
            .await
            .unwrap()
            .items
            .iter()
            .all(|o| o.spec.node_name != node),
        "a dry run created an object"
    );
}

/// The other CREATE warnings, from the webhook's pod cache: on a node with a DaemonSet pod, a
/// pod with an emptyDir volume, a bare pod and the only ready replica of a Deployment,
/// `kubectl create --dry-run=server` prints a warning for the pods that stay, one for the
/// emptyDir data, one for the pods no controller recreates and one naming the Deployment, and
/// creates nothing; a node with none of those draws none of them.
#[tokio::test]
async fn create_warns_of_pods_that_stay_lose_data_or_are_the_last_ready_replica() {
    let env = operator_env();
    let client = env.cluster.client().await;
    let group = unique("podwarn");
    let node = worker_nodes(env.cluster, &client, &group, 1)
        .await
        .remove(0);
    let quiet = worker_nodes(env.cluster, &client, &unique("podquiet"), 1)
        .await
        .remove(0);
    let ns = namespace(&client, "podwarn").await;
    daemonset(&client, &ns, "agent", &group).await;
    deployment(&client, &ns, "web", &group, 1, 0).await;
    bare_pod(&client, &ns, "bare", &node, json!({})).await;
    bare_pod(
        &client,
        &ns,
        "scratch",
        &node,
        json!({"spec": {"volumes": [{"name": "tmp", "emptyDir": {}}],
                        "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                                        "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}]}]}}),
    )
    .await;
    let web = wait_running(&client, &ns, "web", 1, LIMIT).await;
    let agent = wait_running(&client, &ns, "agent", 1, LIMIT).await;
    for app in ["bare", "scratch"] {
        wait_running(&client, &ns, app, 1, LIMIT).await;
    }
    let name_of = |p: &[k8s_openapi::api::core::v1::Pod]| {
        format!("{ns}/{}", p[0].metadata.name.as_deref().unwrap_or_default())
    };
    let want = [
        format!(
            "Warning: 1 pod will stay on node {node} (the drain leaves DaemonSet pods, mirror pods \
             and pods a drain rule or label skips): {}",
            name_of(&agent)
        ),
        format!(
            "Warning: 1 pod on node {node} uses emptyDir volumes, whose data is deleted when the \
             drain evicts them: {ns}/scratch"
        ),
        format!(
            "Warning: 2 pods on node {node} have no controller, so once evicted they are not \
             recreated anywhere: {ns}/bare, {ns}/scratch"
        ),
        format!(
            "Warning: Deployment {ns}/web has every ready replica on node {node} ({}): it has \
             none ready from their eviction until a replacement is ready on another node",
            name_of(&web)
        ),
    ];
    let name = unique("nm-podwarn");
    // The webhook's pod cache follows the API server's watch: retry until it shows the pods as
    // Ready.
    dry_run_warns(env.cluster, &client, &name, &node, &want).await;
    let stderr = kubectl_create_warned(env.cluster, &name, &quiet, &["--dry-run=server"]).unwrap();
    // The share of nodes under maintenance depends on what the other tests of this binary
    // maintain at the moment; every other warning is about the node's pods.
    let about_pods: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("Warning:") && !l.contains("under maintenance, more than"))
        .collect();
    assert!(about_pods.is_empty(), "{stderr}");
}
