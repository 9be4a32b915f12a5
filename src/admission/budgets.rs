//! The admission warning about PodDisruptionBudgets on CREATE (issue 29): a budget that allows
//! no disruption now and covers pods on the node will hold the drain until it does, so
//! `kubectl create` (and `--dry-run=server`) says so before anything is touched
//! (`docs/compat.md §6`). Pure: the budgets come from the webhook's cache, the pods from one
//! list of the node's pods, read only while some budget of the cluster allows no disruption.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;

use crate::drain::Budget;

/// Pods named per warning; the rest are counted.
const PODS_NAMED: usize = 3;

/// Whether the drain would evict `pod`: not finished, not being deleted already, not a
/// DaemonSet's (the drain leaves those, so their budgets never hold it).
fn evicted_by_drain(pod: &Pod) -> bool {
    let finished = pod
        .status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .is_some_and(|p| p == "Succeeded" || p == "Failed");
    let daemon = pod
        .metadata
        .owner_references
        .as_deref()
        .unwrap_or_default()
        .iter()
        .any(|o| o.kind == "DaemonSet" && o.controller == Some(true));
    !finished && !daemon && pod.metadata.deletion_timestamp.is_none()
}

/// One warning per budget of `blocking` (each allowing no disruption now) that covers a pod of
/// `pods` (the pods on `node`) the drain would evict: the budget, the healthy pods it needs and
/// has, and up to [`PODS_NAMED`] of those pods, in budget order.
pub(crate) fn warnings(node: &str, blocking: &[Budget], pods: &[Pod]) -> Vec<String> {
    let mut held: BTreeMap<(&str, &str), (&Budget, Vec<String>)> = BTreeMap::new();
    for pod in pods.iter().filter(|p| evicted_by_drain(p)) {
        let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
        let labels = pod.metadata.labels.clone().unwrap_or_default();
        for b in blocking.iter().filter(|b| b.covers(ns, &labels)) {
            held.entry((&b.namespace, &b.name))
                .or_insert_with(|| (b, Vec::new()))
                .1
                .push(format!(
                    "{ns}/{}",
                    pod.metadata.name.as_deref().unwrap_or_default()
                ));
        }
    }
    held.into_values()
        .map(|(b, mut pods)| {
            pods.sort();
            let more = pods.len().saturating_sub(PODS_NAMED);
            pods.truncate(PODS_NAMED);
            let count = |v: Option<i32>| v.map_or("?".to_string(), |v| v.to_string());
            format!(
                "PodDisruptionBudget {}/{} allows no disruption now (needs {} healthy pods, has {}): \
                 the drain of node {node} will wait to evict {}{}",
                b.namespace,
                b.name,
                count(b.desired),
                count(b.current),
                pods.join(", "),
                if more > 0 {
                    format!(" and {more} more")
                } else {
                    String::new()
                }
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
    use serde_json::json;

    fn budget(name: &str, app: &str) -> Budget {
        Budget {
            namespace: "ns".into(),
            name: name.into(),
            selector: Some(LabelSelector {
                match_labels: Some([("app".to_string(), app.to_string())].into()),
                ..Default::default()
            }),
            allowed: 0,
            desired: Some(2),
            current: Some(2),
        }
    }

    /// A pod of `ns` labelled `app=<app>`, with `extra`'s `metadata` fields and `status`.
    fn pod(name: &str, app: &str, extra: serde_json::Value) -> Pod {
        let mut v = json!({"metadata": {"name": name, "namespace": "ns", "labels": {"app": app}}});
        if let Some(m) = extra["metadata"].as_object() {
            for (k, val) in m {
                v["metadata"][k] = val.clone();
            }
        }
        if !extra["status"].is_null() {
            v["status"] = extra["status"].clone();
        }
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn names_the_budget_what_it_needs_and_has_and_the_pods_it_holds() {
        let pods: Vec<Pod> = (0..5)
            .map(|i| pod(&format!("db-{i}"), "db", json!({})))
            .chain([pod("web-0", "web", json!({}))])
            .collect();
        assert_eq!(
            warnings("n1", &[budget("db-guard", "db")], &pods),
            [
                "PodDisruptionBudget ns/db-guard allows no disruption now (needs 2 healthy pods, \
              has 2): the drain of node n1 will wait to evict ns/db-0, ns/db-1, ns/db-2 and 2 more"
            ]
        );
    }

    #[test]
    fn pods_the_drain_leaves_or_that_are_going_draw_no_warning() {
        let pods = [
            pod("done", "db", json!({"status": {"phase": "Succeeded"}})),
            pod(
                "ds",
                "db",
                json!({"metadata": {"ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet",
                    "name": "ds", "uid": "u", "controller": true}]}}),
            ),
            pod(
                "going",
                "db",
                json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}}),
            ),
            pod("other", "web", json!({})),
        ];
        assert!(warnings("n1", &[budget("db-guard", "db")], &pods).is_empty());
    }
}
