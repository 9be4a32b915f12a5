//! The uncordon warning (`manifests/base/uncordon-warning.yaml`, a ValidatingAdmissionPolicy with
//! `validationActions: [Warn, Audit]`) on the real API server: `kubectl uncordon` of a node in
//! maintenance, and removing its `medik8s.io/drain` taint, print the warning naming the
//! NodeMaintenance; the same on a node not in maintenance prints nothing; and the operator's own
//! restore, sent as its ServiceAccount, draws no warning (the API server's audit log records the
//! policy's failed validations, and has none for the restore).
//! Its own cluster: the API server writes an audit log of node writes.

mod common;

use std::sync::OnceLock;
use std::time::Duration;

use common::*;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, DeleteParams};
use nmo_devcluster::audit::{AuditCursor, AuditEvent};
use node_maintenance_operator::api::{MaintenancePhase, NodeMaintenance};

const LIMIT: Duration = Duration::from_secs(90);
/// Where the API server records a failed validation of a policy bound with the Audit action.
const VALIDATION_FAILURE: &str = "validation.policy.admission.k8s.io/validation_failure";
const HOLDER: &str = "nodemaintenance.medik8s.io/holder";

/// Every write to a Node (its status included), at level Metadata, which carries the event's
/// annotations.
const NODE_WRITES_POLICY: &str = r#"apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived", "ResponseStarted"]
rules:
- level: Metadata
  verbs: ["update", "patch"]
  resources:
  - group: ""
    resources: ["nodes"]
- level: None
"#;

struct Env {
    cluster: Cluster,
    _operator: nmo_devcluster::operator::Operator,
    operator_user: String,
}

fn env() -> &'static Env {
    static ENV: OnceLock<Env> = OnceLock::new();
    ENV.get_or_init(|| {
        let cluster = audited_cluster(NODE_WRITES_POLICY);
        let installed = installed(&cluster);
        // The policy and its binding, as `kubectl apply -k manifests/` creates them.
        let rendered = cluster
            .kubectl_run(&["kustomize", &manifests_dir().display().to_string()], None)
            .unwrap();
        let policy: Vec<&str> = rendered
            .split("\n---\n")
            .filter(|d| {
                d.contains("kind: ValidatingAdmissionPolicy\n")
                    || d.contains("kind: ValidatingAdmissionPolicyBinding\n")
            })
            .collect();
        assert_eq!(policy.len(), 2, "manifests/ has the policy and its binding");
        cluster
            .kubectl_run(&["apply", "-f", "-"], Some(&policy.join("\n---\n")))
            .unwrap_or_else(|e| panic!("the API server refused the policy: {e}"));
        let operator = fixtures::start_registered(&cluster, &installed.options("operator"))
            .unwrap_or_else(|e| panic!("the operator did not start: {e}"));
        let operator_user = format!(
            "system:serviceaccount:{}:{}",
            installed.account.namespace, installed.account.name
        );
        Env {
            cluster,
            _operator: operator,
            operator_user,
        }
    })
}

/// Runs kubectl; returns (success, stdout, stderr).
fn kubectl(cluster: &Cluster, args: &[&str]) -> (bool, String, String) {
    let out = cluster.kubectl().args(args).output().expect("kubectl runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn cordoned(node: &Node) -> bool {
    node.spec
        .as_ref()
        .and_then(|s| s.unschedulable)
        .unwrap_or(false)
}

fn has_taint(node: &Node, key: &str) -> bool {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|t| t.iter().any(|t| t.key == key))
}

fn warned(events: &[AuditEvent]) -> Vec<&AuditEvent> {
    events
        .iter()
        .filter(|e| e.annotations.contains_key(VALIDATION_FAILURE))
        .collect()
}

#[tokio::test]
async fn uncordoning_a_node_in_maintenance_warns_and_the_operators_restore_does_not() {
    let env = env();
    let cluster = &env.cluster;
    let client = cluster.client().await;
    let nodes = Api::<Node>::all(client.clone());
    let [held, free]: [String; 2] = worker_nodes(cluster, &client, "uncordon", 2)
        .await
        .try_into()
        .unwrap();
    let nm = unique("uncordon");
    nm::create(&client, &nm, &held).await;
    nm::wait_phase(&client, &nm, MaintenancePhase::Succeeded, LIMIT).await;

    // The API server loads a new policy within a few seconds: until then an uncordon passes
    // silently and the operator cordons the node again, so uncordon until the warning shows.
    let want = format!(
        "node {held} is in maintenance (NodeMaintenance {nm}); the cordon will be re-applied"
    );
    wait_for("kubectl uncordon to print the warning", LIMIT, || async {
        let node = nodes.get(&held).await.map_err(|e| e.to_string())?;
        if !cordoned(&node) {
            return Err("waiting for the operator to cordon the node again".into());
        }
        let (ok, out, err) = kubectl(cluster, &["uncordon", &held]);
        if ok && err.contains(&want) {
            Ok(())
        } else {
            Err(format!("ok={ok} stdout={out} stderr={err}"))
        }
    })
    .await;

    let want = format!(
        "node {held} is in maintenance (NodeMaintenance {nm}); the medik8s.io/drain taint will be re-applied"
    );
    wait_for("the drain taint back on the node", LIMIT, || async {
        let node = nodes.get(&held).await.map_err(|e| e.to_string())?;
        (cordoned(&node) && has_taint(&node, "medik8s.io/drain"))
            .then_some(())
            .ok_or_else(|| format!("{:?}", node.spec))
    })
    .await;
    let (ok, _, err) = kubectl(
        cluster,
        &["taint", "nodes", &held, "medik8s.io/drain:NoSchedule-"],
    );
    assert!(ok && err.contains(&want), "taint removal: ok={ok} {err}");

    // A node not in maintenance: cordon, uncordon, a drain taint on and off: no warning.
    for args in [
        vec!["cordon", free.as_str()],
        vec!["uncordon", free.as_str()],
        vec![
            "taint",
            "nodes",
            free.as_str(),
            "medik8s.io/drain=x:NoSchedule",
        ],
        vec![
            "taint",
            "nodes",
            free.as_str(),
            "medik8s.io/drain:NoSchedule-",
        ],
    ] {
        let (ok, out, err) = kubectl(cluster, &args);
        assert!(ok, "kubectl {args:?}: {out}{err}");
        assert!(!err.contains("Warning"), "kubectl {args:?} warned: {err}");
    }

    // The operator's restore: no failed validation recorded for any write to the node from the
    // delete on, while the log shows the operator's restore patch itself.
    wait_for("the node back in maintenance", LIMIT, || async {
        let node = nodes.get(&held).await.map_err(|e| e.to_string())?;
        (cordoned(&node) && has_taint(&node, "medik8s.io/drain"))
            .then_some(())
            .ok_or_else(|| format!("{:?}", node.spec))
    })
    .await;
    let log = cluster.audit_log_path();
    let warnings_so_far = warned(&AuditCursor::new(&log).read().unwrap())
        .iter()
        .filter(|e| e.name == held)
        .count();
    assert!(
        warnings_so_far >= 2,
        "the audit log records the warnings kubectl printed ({warnings_so_far})"
    );
    let mut cursor = AuditCursor::at_end(&log);
    Api::<NodeMaintenance>::all(client.clone())
        .delete(&nm, &DeleteParams::default())
        .await
        .unwrap();
    let mut seen: Vec<AuditEvent> = Vec::new();
    let deadline = std::time::Instant::now() + LIMIT;
    loop {
        seen.extend(cursor.read().unwrap());
        let node = nodes.get(&held).await.unwrap();
        let restored = !cordoned(&node)
            && !node
                .metadata
                .annotations
                .as_ref()
                .is_some_and(|a| a.contains_key(HOLDER));
        let patched = seen
            .iter()
            .any(|e| e.name == held && e.user == env.operator_user && e.verb == "patch");
        if restored && patched {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "timed out after {LIMIT:?} waiting for the operator's restore in the audit log: \
             restored={restored} operator patch seen={patched}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let during_restore = warned(&seen);
    assert!(
        during_restore.is_empty(),
        "the restore drew a warning: {:?}",
        during_restore
            .iter()
            .map(|e| (&e.user, &e.annotations))
            .collect::<Vec<_>>()
    );
}
