//! `kubectl nm` (the `kubectl-nm` workspace member, run in-process through `kubectl_nm::run`,
//! the binary's whole body) against the real control plane and the operator: `start --wait`
//! times out with exit 2 and a blocker row naming the budget while a budget blocks the drain, and
//! exits 0 once nothing does, printing the webhook's warning about the budget as kubectl
//! would; `stop --wait` returns once the node is schedulable; `why` and
//! `list` describe the maintenance; a NodeMaintenance the webhook refuses exits 3; `preflight`
//! exits 2 with a row naming the blocking budget and its pod, 0 without the budget, and leaves
//! neither a NodeMaintenance nor a write on the Node; `start --stage Cordon` cordons without
//! draining and `stage` moves it back to Idle (node restored) and on to Drain. An empty or blank
//! `--reason` is refused with nothing created; `stop --wait` on a node the admin had cordoned
//! returns 0 with the cordon kept; an unreachable webhook exits 4; `--context` reaches a second
//! context of a kubeconfig and `-o json|yaml` print the objects; a budget-held `start --wait`
//! prints one block until something changes and `watch` follows an existing maintenance; without
//! the CRD one line names it, and without an operator the wait says so after a minute.

mod common;

use std::time::Duration;

use common::*;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, DeleteParams};
use node_maintenance_operator::api::NodeMaintenance;

const LIMIT: Duration = Duration::from_secs(60);

/// Runs `kubectl nm <args>` against the cluster: (exit status, stdout, stderr).
async fn kubectl_nm(cluster: &Cluster, args: &[&str]) -> (u8, String, String) {
    let kubeconfig = cluster.kubeconfig().display().to_string();
    let mut argv = vec!["kubectl-nm", "--kubeconfig", kubeconfig.as_str()];
    argv.extend(args);
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let code = kubectl_nm::run(argv, &mut out, &mut err).await;
    (
        code,
        String::from_utf8(out).unwrap(),
        String::from_utf8(err).unwrap(),
    )
}

async fn schedulable(client: &kube::Client, node: &str) -> bool {
    let node = Api::<Node>::all(client.clone()).get(node).await.unwrap();
    !node.spec.and_then(|s| s.unschedulable).unwrap_or(false)
}

#[tokio::test]
async fn start_wait_times_out_naming_the_budget_and_succeeds_without_it() {
    let env = operator_env();
    let cluster = env.cluster;
    let client = cluster.client().await;
    let group = unique("knm");
    let nodes = worker_nodes(cluster, &client, &group, 2).await;
    let ns = namespace(&client, "knm").await;
    // Both replicas on nodes[0], so the budget (nothing may be unavailable) blocks its drain.
    cluster.kubectl_run(&["cordon", &nodes[1]], None).unwrap();
    deployment(&client, &ns, "db", &group, 2, 0).await;
    wait_running(&client, &ns, "db", 2, LIMIT).await;
    cluster.kubectl_run(&["uncordon", &nodes[1]], None).unwrap();
    let pdbs = budget(&client, &ns, "db-guard", "db", 0, 2).await;
    let node = nodes[0].as_str();
    let name = format!("nm-{node}");
    // The webhook warns of the budget once its cache has it: a server-side dry run (which
    // creates nothing) says when.
    let warning = format!("PodDisruptionBudget {ns}/db-guard allows no disruption now");
    wait_for("the webhook's budget warning", LIMIT, || async {
        let manifest = format!(
            "apiVersion: nodemaintenance.medik8s.io/v1beta1\nkind: NodeMaintenance\n\
             metadata:\n  name: {name}\nspec:\n  nodeName: {node}\n"
        );
        let mut child = cluster
            .kubectl()
            .args(["create", "--dry-run=server", "-f", "-"])
            .stdin(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(manifest.as_bytes())
            .unwrap();
        let stderr = String::from_utf8(child.wait_with_output().unwrap().stderr).unwrap();
        stderr.contains(&warning).then_some(()).ok_or(stderr)
    })
    .await;

    let (code, out, err) = kubectl_nm(
        cluster,
        &[
            "start",
            node,
            "--reason",
            "e2e",
            "--wait",
            "--timeout",
            "25s",
        ],
    )
    .await;
    assert_eq!(code, 2, "exit status of a timed-out wait\n{out}\n{err}");
    assert!(err.contains("timed out"), "{err}");
    assert!(
        out.contains(&format!("nodemaintenance/{name} created")),
        "{out}"
    );
    assert!(
        out.contains(&format!("Warning: {warning}")),
        "start prints the webhook's warnings:\n{out}"
    );
    let row = out
        .lines()
        .find(|l| l.contains("db-guard"))
        .unwrap_or_else(|| panic!("no blocker row names the budget:\n{out}"));
    assert!(
        row.contains("PodDisruptionBudget") && row.contains(&format!("{ns}/db-")),
        "{row}"
    );

    let (code, out, err) = kubectl_nm(cluster, &["why", node]).await;
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("POD") && out.contains("db-guard"), "{out}");
    let (code, out, err) = kubectl_nm(cluster, &["list"]).await;
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.lines()
            .any(|l| l.starts_with(&name) && l.contains(" Drain ") && l.contains("Running")),
        "{out}"
    );

    let (code, out, err) = kubectl_nm(cluster, &["stop", node, "--wait", "--timeout", "60s"]).await;
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        schedulable(&client, node).await,
        "stop --wait returned early"
    );

    pdbs.delete("db-guard", &DeleteParams::default())
        .await
        .unwrap();
    let (code, out, err) = kubectl_nm(
        cluster,
        &[
            "start",
            node,
            "--reason",
            "e2e",
            "--wait",
            "--timeout",
            "60s",
        ],
    )
    .await;
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("Succeeded"), "{out}");
    assert!(!schedulable(&client, node).await);
    let (code, out, err) = kubectl_nm(cluster, &["why", &name]).await;
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("Succeeded") && out.contains("no blockers"),
        "{out}"
    );

    let (code, out, err) = kubectl_nm(cluster, &["stop", node, "--wait", "--timeout", "60s"]).await;
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains(&format!("node/{node} schedulable")), "{out}");
    assert!(
        schedulable(&client, node).await,
        "stop --wait returned early"
    );
}

#[tokio::test]
async fn a_maintenance_the_webhook_refuses_exits_3() {
    let env = operator_env();
    let (code, out, err) = kubectl_nm(
        env.cluster,
        &["start", "knm-no-such-node", "--reason", "e2e"],
    )
    .await;
    assert_eq!(code, 3, "{out}{err}");
    assert!(
        err.starts_with("Error from server")
            && err.contains("no node with name knm-no-such-node found"),
        "{err}"
    );
    let (code, _, err) = kubectl_nm(env.cluster, &["why", "knm-no-such-node"]).await;
    assert_eq!(code, 1);
    assert!(err.starts_with("error: no NodeMaintenance"), "{err}");
}

/// The NodeMaintenances naming `node`.
async fn maintenances_of(client: &kube::Client, node: &str) -> Vec<String> {
    Api::<NodeMaintenance>::all(client.clone())
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|nm| nm.spec.node_name == node)
        .map(|nm| nm.metadata.name.unwrap_or_default())
        .collect()
}

#[tokio::test]
async fn preflight_exits_2_naming_the_budget_and_0_without_it_leaving_nothing_behind() {
    let env = operator_env();
    let cluster = env.cluster;
    let client = cluster.client().await;
    let group = unique("knmpf");
    let node = worker_nodes(cluster, &client, &group, 1).await.remove(0);
    let ns = namespace(&client, "knmpf").await;
    bare_pod(&client, &ns, "guarded", &node, serde_json::json!({})).await;
    wait_running(&client, &ns, "guarded", 1, LIMIT).await;
    let pdbs = budget(&client, &ns, "guard", "guarded", 0, 1).await;
    let nodes = Api::<Node>::all(client.clone());
    let before = nodes.get(&node).await.unwrap().metadata.resource_version;

    let (code, out, err) = kubectl_nm(cluster, &["preflight", &node, "--timeout", "90s"]).await;
    assert_eq!(code, 2, "exit status of a blocked preflight\n{out}\n{err}");
    // The webhook's warnings (printed first) name the pod as well.
    let row = out
        .lines()
        .find(|l| !l.starts_with("Warning:") && l.contains(&format!("{ns}/guarded")))
        .unwrap_or_else(|| panic!("no blocker row names the pod:\n{out}\n{err}"));
    assert!(
        row.contains("PodDisruptionBudget") && row.contains("guard"),
        "{row}"
    );
    assert!(err.contains("would stay"), "{err}");
    assert_eq!(maintenances_of(&client, &node).await, Vec::<String>::new());
    assert_eq!(
        nodes.get(&node).await.unwrap().metadata.resource_version,
        before,
        "the preflight wrote the Node"
    );

    pdbs.delete("guard", &DeleteParams::default())
        .await
        .unwrap();
    let (code, out, err) = kubectl_nm(cluster, &["preflight", &node, "--timeout", "90s"]).await;
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("no blockers"), "{out}");
    assert_eq!(maintenances_of(&client, &node).await, Vec::<String>::new());
    assert_eq!(
        nodes.get(&node).await.unwrap().metadata.resource_version,
        before,
        "the preflight wrote the Node"
    );
}

#[tokio::test]
async fn start_with_a_stage_cordons_only_and_stage_moves_it_back_and_on() {
    let env = operator_env();
    let cluster = env.cluster;
    let client = cluster.client().await;
    let group = unique("knmst");
    let node = worker_nodes(cluster, &client, &group, 1).await.remove(0);
    let name = format!("nm-{node}");
    let (code, out, err) = kubectl_nm(
        cluster,
        &["start", &node, "--reason", "e2e", "--stage", "Cordon"],
    )
    .await;
    assert_eq!(code, 0, "{out}{err}");
    let nms = Api::<NodeMaintenance>::all(client.clone());
    let stage_reason = |nm: &NodeMaintenance| {
        nm.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|cs| cs.iter().find(|c| c.type_ == "Stage"))
            .map(|c| c.reason.clone())
    };
    wait_for("the node cordoned in stage Cordon", LIMIT, || async {
        let nm = nms.get(&name).await.map_err(|e| e.to_string())?;
        let cordoned = !schedulable(&client, &node).await;
        (cordoned && stage_reason(&nm).as_deref() == Some("Cordon"))
            .then_some(())
            .ok_or(format!("cordoned {cordoned}, {:?}", nm.status))
    })
    .await;

    let (code, out, err) = kubectl_nm(cluster, &["stage", &node, "Idle"]).await;
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains(&format!("nodemaintenance/{name} stage Idle")),
        "{out}"
    );
    wait_for("the node restored in stage Idle", LIMIT, || async {
        let nm = nms.get(&name).await.map_err(|e| e.to_string())?;
        let free = schedulable(&client, &node).await;
        (free && stage_reason(&nm).as_deref() == Some("Idle"))
            .then_some(())
            .ok_or(format!("schedulable {free}, {:?}", nm.status))
    })
    .await;

    let (code, out, err) = kubectl_nm(cluster, &["stage", &name, "Drain"]).await;
    assert_eq!(code, 0, "{out}{err}");
    wait_for(
        "the maintenance Succeeded in stage Drain",
        LIMIT,
        || async {
            let nm = nms.get(&name).await.map_err(|e| e.to_string())?;
            let phase = nm.status.as_ref().and_then(|s| s.phase);
            (phase == Some(node_maintenance_operator::api::MaintenancePhase::Succeeded)
                && !schedulable(&client, &node).await)
                .then_some(())
                .ok_or(format!("{:?}", nm.status))
        },
    )
    .await;
    let (code, out, err) =
        kubectl_nm(cluster, &["stop", &node, "--wait", "--timeout", "60s"]).await;
    assert_eq!(code, 0, "{out}{err}");
}

/// Runs `kubectl nm <args>` with no `--kubeconfig` of the cluster's: (exit status, stdout,
/// stderr).
async fn kubectl_nm_raw(args: &[&str]) -> (u8, String, String) {
    let mut argv = vec!["kubectl-nm"];
    argv.extend(args);
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let code = kubectl_nm::run(argv, &mut out, &mut err).await;
    (
        code,
        String::from_utf8(out).unwrap(),
        String::from_utf8(err).unwrap(),
    )
}

/// Issue 46 item 9, issue 48 item 2: an empty or blank `--reason` is a typo, refused naming
/// `--reason` before any request, so nothing is created and the node is untouched.
#[tokio::test]
async fn a_blank_reason_is_refused_naming_it_and_creates_nothing() {
    let env = operator_env();
    let cluster = env.cluster;
    let client = cluster.client().await;
    let group = unique("knmreason");
    let node = worker_nodes(cluster, &client, &group, 1).await.remove(0);
    let before = Api::<Node>::all(client.clone())
        .get(&node)
        .await
        .unwrap()
        .metadata
        .resource_version;
    for reason in ["", "  ", "\t"] {
        let (code, out, err) = kubectl_nm(cluster, &["start", &node, "--reason", reason]).await;
        assert_eq!(code, 1, "{reason:?}: {out}{err}");
        assert!(
            err.starts_with("error:") && err.contains("--reason") && err.contains("empty or blank"),
            "{reason:?}: {err}"
        );
        assert!(!out.contains("created"), "{out}");
    }
    assert_eq!(maintenances_of(&client, &node).await, Vec::<String>::new());
    assert_eq!(
        Api::<Node>::all(client.clone())
            .get(&node)
            .await
            .unwrap()
            .metadata
            .resource_version,
        before,
        "the node was written"
    );
}

/// Issue 46 item 8: `stop --wait` for a node the admin had cordoned before the maintenance
/// returns 0 once the maintenance is gone and the node restored (the admin's cordon kept; our
/// taints, label, record and lease gone), instead of waiting for a schedulable node.
#[tokio::test]
async fn stop_wait_on_a_node_cordoned_before_returns_0_with_the_admins_cordon_kept() {
    use k8s_openapi::api::coordination::v1::Lease;
    let env = operator_env();
    let cluster = env.cluster;
    let client = cluster.client().await;
    let group = unique("knmcord");
    let node = worker_nodes(cluster, &client, &group, 1).await.remove(0);
    cluster.kubectl_run(&["cordon", &node], None).unwrap();
    let (code, out, err) = kubectl_nm(
        cluster,
        &[
            "start",
            &node,
            "--reason",
            "e2e",
            "--wait",
            "--timeout",
            "60s",
        ],
    )
    .await;
    assert_eq!(code, 0, "{out}{err}");
    wait_for("the node in maintenance", LIMIT, || {
        node::in_maintenance(&client, &node)
    })
    .await;

    let (code, out, err) =
        kubectl_nm(cluster, &["stop", &node, "--wait", "--timeout", "60s"]).await;
    assert_eq!(
        code, 0,
        "stop --wait of a node cordoned before\n{out}\n{err}"
    );
    assert!(
        out.contains(&format!(
            "node/{node} restored, still cordoned as before the maintenance"
        )),
        "{out}"
    );
    assert_eq!(maintenances_of(&client, &node).await, Vec::<String>::new());
    let (cordoned, taints, labels) = node::state(&client, &node).await;
    assert!(cordoned, "the admin's cordon was not kept");
    assert!(
        !taints.iter().any(|t| t.starts_with("medik8s.io/drain")),
        "{taints:?}"
    );
    assert!(
        !labels.contains_key("remediation.medik8s.io/exclude-from-remediation"),
        "{labels:?}"
    );
    let annotations = Api::<Node>::all(client.clone())
        .get(&node)
        .await
        .unwrap()
        .metadata
        .annotations
        .unwrap_or_default();
    assert!(
        !annotations.contains_key("nodemaintenance.medik8s.io/holder"),
        "{annotations:?}"
    );
    let lease = Api::<Lease>::namespaced(client.clone(), "medik8s-leases")
        .get_opt(&format!("node-{node}"))
        .await
        .unwrap();
    assert!(
        lease
            .and_then(|l| l.spec?.holder_identity)
            .is_none_or(|h| h != "node-maintenance"),
        "the lease is still ours"
    );
    cluster.kubectl_run(&["uncordon", &node], None).unwrap();
}

/// Issue 48 item 3: a webhook that cannot be reached (the API server answers `InternalError
/// ... failed calling webhook`) exits 4 and creates nothing; once it is gone, the webhook's
/// denial of a second maintenance of the node exits 3 (as `a_maintenance_the_webhook_refuses_
/// exits_3`).
///
/// The unreachable webhook is a ValidatingWebhookConfiguration of its own pointing at a closed
/// loopback port with `failurePolicy: Fail`, matched by CEL to this test's node only, so the
/// tests that share the cluster keep a working admission.
#[tokio::test]
async fn an_unreachable_webhook_exits_4_and_creates_nothing() {
    use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
    let env = operator_env();
    let cluster = env.cluster;
    let client = cluster.client().await;
    let group = unique("knmhook");
    let node = worker_nodes(cluster, &client, &group, 1).await.remove(0);
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let config_name = unique("knm-unreachable");
    let configs = Api::<ValidatingWebhookConfiguration>::all(client.clone());
    let config: ValidatingWebhookConfiguration = serde_json::from_value(serde_json::json!({
        "metadata": {"name": config_name},
        "webhooks": [{
            "name": "unreachable.knm.e2e.nodemaintenance.medik8s.io",
            "clientConfig": {"url": format!("https://127.0.0.1:{port}/validate")},
            "rules": [{"apiGroups": ["nodemaintenance.medik8s.io"], "apiVersions": ["*"],
                       "operations": ["CREATE"], "resources": ["nodemaintenances"]}],
            "failurePolicy": "Fail",
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
            "timeoutSeconds": 5,
            "matchConditions": [{"name": "this-test-node",
                                 "expression": format!("object.spec.nodeName == '{node}'")}],
        }]
    }))
    .unwrap();
    configs
        .create(&kube::api::PostParams::default(), &config)
        .await
        .unwrap();
    // The API server reads webhook configurations from its informer: a dry run says when this
    // one is in force.
    let nms = Api::<NodeMaintenance>::all(client.clone());
    let probe = NodeMaintenance::new(
        &format!("nm-{node}"),
        node_maintenance_operator::api::NodeMaintenanceSpec {
            node_name: node.clone(),
            reason: Some("e2e".into()),
            ..Default::default()
        },
    );
    wait_for("the unreachable webhook in force", LIMIT, || async {
        match nms
            .create(
                &kube::api::PostParams {
                    dry_run: true,
                    ..Default::default()
                },
                &probe,
            )
            .await
        {
            Err(kube::Error::Api(s)) if s.message.contains("failed calling webhook") => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;

    let (code, out, err) = kubectl_nm(cluster, &["start", &node, "--reason", "e2e"]).await;
    assert_eq!(
        code, 4,
        "exit status with the webhook unreachable\n{out}\n{err}"
    );
    assert!(
        err.starts_with("Error from server (InternalError)")
            && err.contains("failed calling webhook"),
        "{err}"
    );
    assert_eq!(maintenances_of(&client, &node).await, Vec::<String>::new());

    configs
        .delete(&config_name, &DeleteParams::default())
        .await
        .unwrap();
    wait_for("the unreachable webhook gone", LIMIT, || async {
        nms.create(
            &kube::api::PostParams {
                dry_run: true,
                ..Default::default()
            },
            &probe,
        )
        .await
        .map(|_| ())
        .map_err(|e| e.to_string())
    })
    .await;
    let (code, out, err) = kubectl_nm(cluster, &["start", &node, "--reason", "e2e"]).await;
    assert_eq!(code, 0, "{out}{err}");
    let (code, out, err) = kubectl_nm(cluster, &["start", &node, "--reason", "e2e"]).await;
    assert_eq!(
        code, 3,
        "a second start is denied by the webhook\n{out}\n{err}"
    );
    assert!(
        err.starts_with("Error from server (Forbidden)") && err.contains("already exists"),
        "{err}"
    );
    let (code, out, err) =
        kubectl_nm(cluster, &["stop", &node, "--wait", "--timeout", "60s"]).await;
    assert_eq!(code, 0, "{out}{err}");
}

/// Issue 48 item 5: `--context` picks a context of the kubeconfig (kube's kubeconfig loading),
/// so another cluster is reached without switching the current context; a context the file
/// does not have is one line naming it; `-o json|yaml` print the objects.
#[tokio::test]
async fn context_reaches_a_second_kubeconfig_context_and_output_prints_the_objects() {
    let env = operator_env();
    let cluster = env.cluster;
    let client = cluster.client().await;
    let group = unique("knmctx");
    let node = worker_nodes(cluster, &client, &group, 1).await.remove(0);
    let name = format!("nm-{node}");

    // Two contexts: the current one points at a closed port, `real` at the test cluster.
    let mut kubeconfig = kube::config::Kubeconfig::read_from(cluster.kubeconfig()).unwrap();
    let real = kubeconfig
        .current_context
        .clone()
        .or_else(|| kubeconfig.contexts.first().map(|c| c.name.clone()))
        .unwrap();
    let mut real_context = kubeconfig
        .contexts
        .iter()
        .find(|c| c.name == real)
        .unwrap()
        .clone();
    real_context.name = "real".into();
    let mut nowhere = real_context.clone();
    nowhere.name = "nowhere".into();
    let mut nowhere_cluster = kubeconfig
        .clusters
        .iter()
        .find(|c| Some(&c.name) == real_context.context.as_ref().map(|c| &c.cluster))
        .unwrap()
        .clone();
    nowhere_cluster.name = "nowhere".into();
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    nowhere_cluster.cluster.as_mut().unwrap().server = Some(format!("https://127.0.0.1:{port}"));
    nowhere.context.as_mut().unwrap().cluster = "nowhere".into();
    kubeconfig.clusters.push(nowhere_cluster);
    kubeconfig.contexts = vec![nowhere, real_context];
    kubeconfig.current_context = Some("nowhere".into());
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kubeconfig");
    std::fs::write(&path, serde_yaml::to_string(&kubeconfig).unwrap()).unwrap();
    let path = path.display().to_string();

    let (code, out, err) = kubectl_nm_raw(&["--kubeconfig", &path, "list"]).await;
    assert_eq!(code, 1, "the current context points nowhere\n{out}\n{err}");
    // One line that says why, not only kube's `client error (Connect)`.
    assert!(
        err.starts_with("error:") && err.contains("onnection refused") && err.lines().count() == 1,
        "{err}"
    );
    let (code, out, err) = kubectl_nm_raw(&[
        "--kubeconfig",
        &path,
        "--context",
        "real",
        "start",
        &node,
        "--reason",
        "e2e",
        "--wait",
        "--timeout",
        "60s",
    ])
    .await;
    assert_eq!(code, 0, "{out}{err}");
    let (code, out, err) =
        kubectl_nm_raw(&["--kubeconfig", &path, "list", "--context", "real"]).await;
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.lines().any(|l| l.starts_with(&name)), "{out}");
    let (code, out, err) =
        kubectl_nm_raw(&["--kubeconfig", &path, "--context", "gone", "list"]).await;
    assert_eq!(code, 1, "{out}{err}");
    assert_eq!(err, "error: context \"gone\" not found in the kubeconfig\n");

    let (code, out, err) = kubectl_nm(cluster, &["list", "-o", "json"]).await;
    assert_eq!(code, 0, "{out}{err}");
    let list: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(list["kind"], "List");
    assert!(
        list["items"]
            .as_array()
            .unwrap()
            .iter()
            .any(|i| i["metadata"]["name"] == name.as_str() && i["kind"] == "NodeMaintenance"),
        "{out}"
    );
    let (code, out, err) = kubectl_nm(cluster, &["why", &node, "-o", "yaml"]).await;
    assert_eq!(code, 0, "{out}{err}");
    let why: serde_json::Value = serde_yaml::from_str(&out).unwrap();
    assert_eq!(why["items"][0]["metadata"]["name"], name.as_str(), "{out}");
    assert_eq!(why["items"][0]["status"]["phase"], "Succeeded", "{out}");

    let (code, out, err) =
        kubectl_nm(cluster, &["stop", &node, "--wait", "--timeout", "60s"]).await;
    assert_eq!(code, 0, "{out}{err}");
}

/// Issue 48 item 4, issue 46 item 10 (the plugin's side): while a budget that allows nothing
/// holds both of a node's pods, `start --wait` prints one block once both pods are shown held
/// by the budget, and none after it while nothing changes (the operator rewrites its status
/// meanwhile); `watch` follows the existing maintenance with `start --wait`'s exit statuses: 2
/// on timeout, 0 once it Succeeds after the budget is gone.
#[tokio::test]
async fn a_budget_held_wait_prints_one_block_until_something_changes_and_watch_follows_it() {
    let env = operator_env();
    let cluster = env.cluster;
    let client = cluster.client().await;
    let group = unique("knmheld");
    let nodes = worker_nodes(cluster, &client, &group, 2).await;
    let ns = namespace(&client, "knmheld").await;
    cluster.kubectl_run(&["cordon", &nodes[1]], None).unwrap();
    deployment(&client, &ns, "db", &group, 2, 0).await;
    wait_running(&client, &ns, "db", 2, LIMIT).await;
    cluster.kubectl_run(&["uncordon", &nodes[1]], None).unwrap();
    let pdbs = budget(&client, &ns, "db-guard", "db", 0, 2).await;
    let node = nodes[0].as_str();
    let name = format!("nm-{node}");

    let (code, out, err) = kubectl_nm(
        cluster,
        &[
            "start",
            node,
            "--reason",
            "e2e",
            "--wait",
            "--timeout",
            "30s",
        ],
    )
    .await;
    assert_eq!(code, 2, "exit status of a timed-out wait\n{out}\n{err}");
    let header = format!("nodemaintenance/{name}: ");
    let blocks: Vec<&str> = out.split(&header).skip(1).collect();
    let held = |block: &str| block.lines().filter(|l| l.contains("db-guard")).count() == 2;
    let first_held = blocks
        .iter()
        .position(|b| held(b))
        .unwrap_or_else(|| panic!("no block shows both pods held by the budget:\n{out}"));
    eprintln!(
        "{} blocks in 30 s, both pods held from block {}",
        blocks.len(),
        first_held + 1
    );
    assert_eq!(
        blocks.len(),
        first_held + 1,
        "blocks printed after both pods were held while nothing changed:\n{out}"
    );

    let (code, out, err) = kubectl_nm(cluster, &["watch", node, "--timeout", "5s"]).await;
    assert_eq!(
        code, 2,
        "watch times out as start --wait does\n{out}\n{err}"
    );
    // A new watch has not seen the budget's answer for a pod being asked again at its start:
    // one more block once it has.
    let blocks: Vec<&str> = out.split(&header).skip(1).collect();
    assert!(
        (1..=2).contains(&blocks.len()) && blocks.last().is_some_and(|b| held(b)),
        "{out}"
    );
    assert!(err.contains("timed out"), "{err}");

    pdbs.delete("db-guard", &DeleteParams::default())
        .await
        .unwrap();
    let (code, out, err) = kubectl_nm(cluster, &["watch", &name, "--timeout", "60s"]).await;
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("Succeeded"), "{out}");
    let (code, out, err) = kubectl_nm(cluster, &["stop", node, "--wait", "--timeout", "60s"]).await;
    assert_eq!(code, 0, "{out}{err}");
    let (code, _, err) = kubectl_nm(cluster, &["watch", node, "--timeout", "5s"]).await;
    assert_eq!(code, 1, "{err}");
    assert!(err.starts_with("error: no NodeMaintenance"), "{err}");
}

/// Issue 48 item 5: on a control plane of its own without the CRD, `list`, `why` and `start`
/// print one line naming the CRD and what to install (not the 404's parse error); once the CRD
/// is installed and no operator runs, `start --wait` says after a minute that no operator seems
/// to be running, and goes on waiting until its timeout (exit 2).
#[tokio::test]
async fn without_the_crd_one_line_names_it_and_without_an_operator_the_wait_says_so() {
    let cluster = tokio::task::spawn_blocking(|| {
        Cluster::start(nmo_devcluster::Options {
            workers: 1,
            control_planes: 0,
            audit_policy: None,
        })
        .unwrap_or_else(|e| panic!("the local control plane did not start: {e}"))
    })
    .await
    .unwrap();
    let crd_line = "error: the NodeMaintenance CRD (nodemaintenances.nodemaintenance.medik8s.io) \
                    is not installed; install manifests/crd.yaml\n";
    for args in [
        &["list"][..],
        &["why", "n1"],
        &["start", "n1", "--reason", "e2e"],
    ] {
        let (code, out, err) = kubectl_nm(&cluster, args).await;
        assert_eq!(code, 1, "{args:?}: {out}{err}");
        assert_eq!(err, crd_line, "{args:?}");
    }

    let crd = manifests_dir().join("crd.yaml").display().to_string();
    cluster.kubectl_run(&["apply", "-f", &crd], None).unwrap();
    cluster
        .kubectl_run(
            &[
                "wait",
                "--for=condition=established",
                "crd/nodemaintenances.nodemaintenance.medik8s.io",
                "--timeout=60s",
            ],
            None,
        )
        .unwrap();
    let node = cluster.nodes()[0].clone();
    let (code, out, err) = kubectl_nm(
        &cluster,
        &[
            "start",
            &node,
            "--reason",
            "e2e",
            "--wait",
            "--timeout",
            "75s",
        ],
    )
    .await;
    assert_eq!(code, 2, "{out}{err}");
    assert!(
        err.contains("has no status after 1m: no operator seems to be running"),
        "{err}"
    );
    assert_eq!(
        out.matches(&format!("nodemaintenance/nm-{node}: ")).count(),
        1,
        "{out}"
    );
}
