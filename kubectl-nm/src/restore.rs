//! `stop --wait`: returns once the node's maintenances are gone and the node is as the
//! operator's exit leaves it, which is not always schedulable: the operator restores the state
//! the node had before the maintenance (an admin's cordon stays; `docs/compat.md` §2), recorded
//! on the node while it is in maintenance.
//!
//! The record is the operator's annotations on the Node (`src/node/mod.rs`, whose constants are
//! private to the operator crate and are repeated here): `nodemaintenance.medik8s.io/holder`
//! names the NodeMaintenance holding it, `nodemaintenance.medik8s.io/prior-state` is JSON
//! `{"unschedulable":bool,"taints":[{"key":..,"effect":..}],"excludeLabel":bool,
//! "excludeLabelValue":..}` (the maintenance taints and the exclude label that were there
//! before); the exit removes both in the same write that restores the node. The medik8s lease
//! (`coordination.k8s.io/v1` Lease `node-<node>` in the lease namespace, held by
//! `node-maintenance`) is deleted by the exit too.

use std::io::Write;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, ListParams};
use kube::runtime::{WatchStreamExt, watcher};
use node_maintenance_operator::api::NodeMaintenance;

use crate::EXIT_TIMEOUT;
use crate::failure::Failure;
use crate::preflight::human;

/// The Node annotation naming the NodeMaintenance that holds it (`src/node/mod.rs`).
const HOLDER_ANNOTATION: &str = "nodemaintenance.medik8s.io/holder";
/// The Node annotation with its state before the maintenance (`src/node/mod.rs`, `PriorState`).
const PRIOR_STATE_ANNOTATION: &str = "nodemaintenance.medik8s.io/prior-state";
/// The maintenance taints (key, effect) the operator adds and its exit removes unless they were
/// there before.
const MAINTENANCE_TAINTS: [(&str, &str); 2] = [
    ("node.kubernetes.io/unschedulable", "NoSchedule"),
    ("medik8s.io/drain", "NoSchedule"),
];
/// The label the operator sets to `"true"` and its exit removes unless it was `"true"` before.
const EXCLUDE_LABEL: &str = "remediation.medik8s.io/exclude-from-remediation";
/// `spec.holderIdentity` of the operator's (and upstream's) leases.
const LEASE_HOLDER: &str = "node-maintenance";
/// The operator's lease namespace unless its `--lease-namespace` says otherwise.
pub(crate) const DEFAULT_LEASE_NAMESPACE: &str = "medik8s-leases";

/// What the operator's exit leaves on the node, read before the deletion.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Expected {
    /// Cordoned before the maintenance: the exit keeps the cordon, so it is not waited away.
    pub(crate) cordoned: bool,
    /// The maintenance taints (key, effect) that were there before and stay.
    pub(crate) taints: Vec<(String, String)>,
    /// The exclude label was `"true"` before and stays.
    pub(crate) excluded: bool,
}

impl Expected {
    /// The node's recorded prior state when it carries the operator's record (a holder with no
    /// readable prior state means "nothing was there before", as the exit reads it); else the
    /// node as it is now (never entered, or held by an operator that keeps no record), which the
    /// exit does not make less restored. `None` (no node): nothing to wait for on it.
    pub(crate) fn of(node: &Node) -> Self {
        let annotations = node.metadata.annotations.as_ref();
        let held = annotations.is_some_and(|a| a.contains_key(HOLDER_ANNOTATION));
        if !held {
            return Expected {
                cordoned: cordoned(node),
                taints: maintenance_taints(node),
                excluded: excluded(node),
            };
        }
        let prior: serde_json::Value = annotations
            .and_then(|a| a.get(PRIOR_STATE_ANNOTATION))
            .and_then(|v| serde_json::from_str(v).ok())
            .unwrap_or_default();
        let taints = prior["taints"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|t| Some((t["key"].as_str()?.into(), t["effect"].as_str()?.into())))
            .collect();
        Expected {
            cordoned: prior["unschedulable"].as_bool().unwrap_or(false),
            taints,
            excluded: prior["excludeLabel"].as_bool().unwrap_or(false),
        }
    }
}

fn cordoned(node: &Node) -> bool {
    node.spec
        .as_ref()
        .and_then(|s| s.unschedulable)
        .unwrap_or(false)
}

fn excluded(node: &Node) -> bool {
    node.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(EXCLUDE_LABEL))
        .is_some_and(|v| v == "true")
}

fn maintenance_taints(node: &Node) -> Vec<(String, String)> {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .into_iter()
        .flatten()
        .filter(|t| MAINTENANCE_TAINTS.contains(&(t.key.as_str(), t.effect.as_str())))
        .map(|t| (t.key.clone(), t.effect.clone()))
        .collect()
}

/// What is still to happen before the maintenance of the node is over and the node restored as
/// `expected`, in words; `None` when nothing is. `maintenances`: the NodeMaintenances still
/// naming the node; `node`: as read now (`None`: gone); `lease_holder`: the holder of the node's
/// medik8s lease, if it is there and readable.
pub(crate) fn left(
    expected: &Expected,
    maintenances: &[String],
    node: Option<&Node>,
    lease_holder: Option<&str>,
) -> Option<String> {
    let mut left = Vec::new();
    if !maintenances.is_empty() {
        left.push(format!(
            "nodemaintenance {} still there",
            maintenances.join(", ")
        ));
    }
    if let Some(node) = node {
        if let Some(h) = node
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(HOLDER_ANNOTATION))
        {
            left.push(format!("the node still records holder {h}"));
        }
        if cordoned(node) && !expected.cordoned {
            left.push("the node is still cordoned".into());
        }
        for (key, effect) in maintenance_taints(node) {
            // The node lifecycle controller taints every cordoned node so: on a node the exit
            // left cordoned it is the controller's, whoever added it first.
            let lifecycle = key == MAINTENANCE_TAINTS[0].0 && cordoned(node);
            if !lifecycle && !expected.taints.contains(&(key.clone(), effect.clone())) {
                left.push(format!("the node still has taint {key}:{effect}"));
            }
        }
        if excluded(node) && !expected.excluded {
            left.push(format!("the node still has label {EXCLUDE_LABEL}=true"));
        }
    }
    if lease_holder == Some(LEASE_HOLDER) {
        left.push(format!("the node's lease is still held by {LEASE_HOLDER}"));
    }
    (!left.is_empty()).then(|| left.join("; "))
}

/// Waits at most `timeout` until [`left`] says nothing is left for `node`, re-reading on every
/// change of the node, the NodeMaintenances or the lease (a watch of each). Prints
/// `node/<node> schedulable`, or `node/<node> restored, still cordoned as before the
/// maintenance` for an admin's cordon.
///
/// The lease is read in `lease_namespace`; where the caller may not read leases (Forbidden),
/// its release is not waited for (the NodeMaintenance's finalizer, released after it, still is).
///
/// # Errors
/// [`EXIT_TIMEOUT`] naming what is left; API errors.
pub(crate) async fn wait_restored(
    client: &kube::Client,
    node: &str,
    expected: &Expected,
    lease_namespace: &str,
    timeout: Duration,
    out: &mut dyn Write,
) -> Result<(), Failure> {
    let nodes: Api<Node> = Api::all(client.clone());
    let nms: Api<NodeMaintenance> = Api::all(client.clone());
    let leases: Api<Lease> = Api::namespaced(client.clone(), lease_namespace);
    let lease_name = format!("node-{node}").to_lowercase();
    let by_name = |name: &str| watcher::Config::default().fields(&format!("metadata.name={name}"));
    let changes = futures::stream::select_all([
        watcher(nodes.clone(), by_name(node))
            .default_backoff()
            .map_ok(|_| ())
            .boxed(),
        watcher(nms.clone(), watcher::Config::default())
            .default_backoff()
            .map_ok(|_| ())
            .boxed(),
        // A lease namespace the caller cannot watch only wakes the check: its read decides.
        watcher(leases.clone(), by_name(&lease_name))
            .default_backoff()
            .map(|_| Ok(()))
            .boxed(),
    ]);
    let mut still = String::from("nothing read yet");
    let wait = async {
        let mut changes = std::pin::pin!(changes);
        while changes
            .try_next()
            .await
            .map_err(|e| Failure::error(format!("watching node/{node}: {e}")))?
            .is_some()
        {
            let maintenances: Vec<String> = nms
                .list(&ListParams::default())
                .await?
                .items
                .into_iter()
                .filter(|nm| nm.spec.node_name == node)
                .filter_map(|nm| nm.metadata.name)
                .collect();
            let now = nodes.get_opt(node).await?;
            let holder = match leases.get_opt(&lease_name).await {
                Ok(lease) => lease.and_then(|l| l.spec?.holder_identity),
                Err(kube::Error::Api(s)) if s.code == 403 => None,
                Err(e) => return Err(e.into()),
            };
            match left(expected, &maintenances, now.as_ref(), holder.as_deref()) {
                None => return Ok(()),
                Some(l) => still = l,
            }
        }
        Err(Failure::error("the watch ended"))
    };
    tokio::time::timeout(timeout, wait)
        .await
        .unwrap_or_else(|_| {
            Err(Failure(
                EXIT_TIMEOUT,
                format!(
                    "error: timed out after {} waiting for node/{node} to be restored: {still}",
                    human(timeout)
                ),
            ))
        })?;
    let _ = if expected.cordoned {
        writeln!(
            out,
            "node/{node} restored, still cordoned as before the maintenance"
        )
    } else {
        writeln!(out, "node/{node} schedulable")
    };
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(v: serde_json::Value) -> Node {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn an_admins_cordon_recorded_before_the_maintenance_is_not_waited_away() {
        let held = node(
            serde_json::json!({"metadata": {"name": "n", "annotations": {
            HOLDER_ANNOTATION: "nm-n",
            PRIOR_STATE_ANNOTATION: r#"{"unschedulable":true,"taints":[],"excludeLabel":false}"#},
            "labels": {EXCLUDE_LABEL: "true"}},
            "spec": {"unschedulable": true, "taints": [
                {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"},
                {"key": "medik8s.io/drain", "effect": "NoSchedule"}]}}),
        );
        let expected = Expected::of(&held);
        assert!(expected.cordoned);
        // Still held: the record, the drain taint, the label and the lease are left.
        let left_now = left(&expected, &["nm-n".into()], Some(&held), Some(LEASE_HOLDER)).unwrap();
        for part in ["nm-n", "holder", "medik8s.io/drain", EXCLUDE_LABEL, "lease"] {
            assert!(left_now.contains(part), "{part}: {left_now}");
        }
        // As the exit leaves it: still cordoned (and its cordon taint, the node lifecycle
        // controller's), ours gone: restored.
        let after = node(serde_json::json!({"metadata": {"name": "n"},
            "spec": {"unschedulable": true, "taints": [
                {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}]}}));
        assert_eq!(left(&expected, &[], Some(&after), None), None);
    }

    #[test]
    fn a_node_that_was_schedulable_is_waited_until_it_is_again() {
        let held = node(
            serde_json::json!({"metadata": {"name": "n", "annotations": {
            HOLDER_ANNOTATION: "nm-n"}}, "spec": {"unschedulable": true}}),
        );
        let expected = Expected::of(&held);
        assert_eq!(expected, Expected::default());
        let unheld_but_cordoned =
            node(serde_json::json!({"metadata": {"name": "n"}, "spec": {"unschedulable": true}}));
        assert!(
            left(&expected, &[], Some(&unheld_but_cordoned), None)
                .unwrap()
                .contains("cordoned")
        );
        let back = node(serde_json::json!({"metadata": {"name": "n"}, "spec": {}}));
        assert_eq!(left(&expected, &[], Some(&back), Some("other")), None);
        assert_eq!(left(&expected, &[], None, None), None);
    }
}
