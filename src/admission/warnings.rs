//! The admission warnings on CREATE (issue 29, `docs/compat.md §6`): what the maintenance of a
//! node will do that its author may not expect, said before anything is touched (kubectl prints
//! each as `Warning: <text>`, `--dry-run=server` included). Never a refusal.
//!
//! - a PodDisruptionBudget that allows no disruption now and covers pods the drain evicts: one
//!   warning per budget (what it needs and has);
//! - pods that stay on the node (the drain leaves DaemonSet pods, mirror pods and pods a drain
//!   rule or label skips): one warning counting them;
//! - with `--honor-opt-out-annotations`, pods an opt-out annotation holds until the drain
//!   deadline (`crate::drain::opt_out`): one warning counting them;
//! - pods whose data is lost: with an emptyDir volume (deleted with the pod), without a
//!   controller (not recreated anywhere): one warning each;
//! - a Deployment or StatefulSet whose every ready replica is on the node: one per workload
//!   (with `surge: RolloutRestart`, a Deployment's says its rollout is restarted instead,
//!   `crate::drain::surge`);
//! - this maintenance bringing the share of nodes under maintenance over
//!   `--maintenance-share-warning`.
//!
//! Which pods the drain evicts is the drain's own decision, the one chain of
//! [`crate::drain::decide()`] that the drain and Preflight use too, asked through [`disposition`]. Pure: the webhook gathers
//! the facts from its caches (`super::cache`, `super::pods`).

use std::collections::BTreeMap;

use crate::api::DrainRule;
use crate::drain::pod::DrainPod;
use crate::drain::{Arrival, Budget, Disposition, DrainOptions, decide, rules};

use super::pods::Workload;

/// Pods named per warning; the rest are counted.
const PODS_NAMED: usize = 3;

/// What the drain does with `pod` under the maintenance's drain `rules`, as it would decide
/// when it starts. The webhook watches no DaemonSet, so a DaemonSet pod's DaemonSet is taken to
/// exist (the garbage collector deletes the pods of a deleted one); and no namespace, so a rule
/// with a namespace selector selects nothing here.
pub(crate) fn disposition(
    pod: &DrainPod,
    rules: &[DrainRule],
    options: &DrainOptions,
) -> Disposition {
    let daemonset = pod.daemon_set_owner().map(|o| o.uid.as_str());
    let rule = rules::matching(rules, pod, None);
    decide(pod, daemonset, options, &Arrival::default(), rule)
}

/// A pod on the node with what the warnings need of it.
#[derive(Clone, Debug)]
pub(crate) struct NodePod<'a> {
    /// The pod.
    pub pod: &'a DrainPod,
    /// What the drain does with it ([`disposition`]).
    pub disposition: Disposition,
    /// Its Deployment or StatefulSet when the pod is a ready replica and the workload has no
    /// ready replica on another node.
    pub last_of: Option<Workload>,
    /// The maintenance's `surge` is `RolloutRestart` (`crate::drain::surge`).
    pub surge: bool,
}

impl NodePod<'_> {
    /// Evicted by the drain, and not already going.
    fn evicted(&self) -> bool {
        matches!(self.disposition, Disposition::Evict { .. })
            && self.pod.metadata.deletion_timestamp.is_none()
    }

    fn kept(&self) -> bool {
        matches!(
            self.disposition,
            Disposition::SkipDaemonSet | Disposition::SkipMirror | Disposition::SkipByRule { .. }
        )
    }

    fn name(&self) -> String {
        format!("{}/{}", self.pod.metadata.namespace, self.pod.metadata.name)
    }
}

/// The share of nodes under maintenance this CREATE would bring.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Share {
    /// NodeMaintenances that exist already.
    pub maintenances: usize,
    /// Nodes of the cluster.
    pub nodes: usize,
    /// `--maintenance-share-warning`, percent; 0: no warning.
    pub threshold: u8,
}

/// The warnings for a maintenance of `node` whose pods are `pods` (sorted by namespace and
/// name), with `blocking` the cluster's budgets that allow no disruption now (`None` for `share`:
/// not known), in the order of the module's list.
pub(crate) fn warnings(
    node: &str,
    pods: &[NodePod],
    blocking: &[Budget],
    share: Option<Share>,
) -> Vec<String> {
    let mut out = budget_warnings(node, pods, blocking);
    let named = |filter: &dyn Fn(&NodePod) -> bool| -> Vec<String> {
        pods.iter()
            .filter(|p| filter(p))
            .map(NodePod::name)
            .collect()
    };
    let kept = named(&|p| p.kept());
    if !kept.is_empty() {
        out.push(format!(
            "{} will stay on node {node} (the drain leaves DaemonSet pods, mirror pods and pods \
             a drain rule or label skips): {}",
            count(kept.len(), "pod"),
            list(kept)
        ));
    }
    let opted_out = named(&|p| matches!(p.disposition, Disposition::OptedOut { .. }));
    if !opted_out.is_empty() {
        out.push(format!(
            "{} on node {node} {} out of eviction ({} or {}, honoured by \
             --honor-opt-out-annotations): not evicted until the drain deadline, and the \
             maintenance does not succeed while {} on the node: {}",
            count(opted_out.len(), "pod"),
            plural(opted_out.len(), "opts", "opt"),
            crate::drain::opt_out::DO_NOT_DISRUPT,
            crate::drain::opt_out::SAFE_TO_EVICT,
            plural(opted_out.len(), "it is", "they are"),
            list(opted_out)
        ));
    }
    let empty_dir = named(&|p| p.evicted() && p.pod.spec.empty_dir);
    if !empty_dir.is_empty() {
        out.push(format!(
            "{} on node {node} {} emptyDir volumes, whose data is deleted when the drain evicts \
             them: {}",
            count(empty_dir.len(), "pod"),
            plural(empty_dir.len(), "uses", "use"),
            list(empty_dir)
        ));
    }
    let bare = named(&|p| p.evicted() && p.pod.controller_ref().is_none());
    if !bare.is_empty() {
        out.push(format!(
            "{} on node {node} {} no controller, so once evicted {} recreated anywhere: {}",
            count(bare.len(), "pod"),
            plural(bare.len(), "has", "have"),
            plural(bare.len(), "it is not", "they are not"),
            list(bare)
        ));
    }
    let mut last: BTreeMap<&Workload, (Vec<String>, bool)> = BTreeMap::new();
    for p in pods.iter().filter(|p| p.evicted()) {
        if let Some(w) = &p.last_of {
            let entry = last.entry(w).or_default();
            entry.0.push(p.name());
            entry.1 = p.surge && w.kind == "Deployment";
        }
    }
    for (w, (replicas, surged)) in last {
        let what = if surged {
            "with surge RolloutRestart the drain does not evict them: it restarts the \
             Deployment's rollout once, and they go once it has a replacement ready on another \
             node"
        } else {
            "it has none ready from their eviction until a replacement is ready on another node"
        };
        out.push(format!(
            "{} {}/{} has every ready replica on node {node} ({}): {what}",
            w.kind,
            w.namespace,
            w.name,
            list(replicas)
        ));
    }
    if let Some(s) = share
        && s.threshold > 0
        && s.nodes > 0
        && (s.maintenances + 1) * 100 > usize::from(s.threshold) * s.nodes
    {
        let under = (s.maintenances + 1).min(s.nodes);
        out.push(format!(
            "this maintenance brings {under} of {} nodes ({}%) under maintenance, more than the \
             {}% of --maintenance-share-warning",
            s.nodes,
            under * 100 / s.nodes,
            s.threshold
        ));
    }
    out
}

/// One warning per budget of `blocking` that covers a pod the drain evicts: the budget, the
/// healthy pods it needs and has, and the pods, in budget order.
fn budget_warnings(node: &str, pods: &[NodePod], blocking: &[Budget]) -> Vec<String> {
    let mut held: BTreeMap<(&str, &str), (&Budget, Vec<String>)> = BTreeMap::new();
    for p in pods.iter().filter(|p| p.evicted()) {
        let meta = &p.pod.metadata;
        // A pod the API server lets go whatever the budget allows is not waited for.
        for b in blocking
            .iter()
            .filter(|b| b.covers(&meta.namespace, &meta.labels) && b.decides(p.pod))
        {
            held.entry((&b.namespace, &b.name))
                .or_insert_with(|| (b, Vec::new()))
                .1
                .push(p.name());
        }
    }
    held.into_values()
        .map(|(b, pods)| {
            let n = |v: Option<i32>| v.map_or("?".to_string(), |v| v.to_string());
            format!(
                "PodDisruptionBudget {}/{} allows no disruption now (needs {} healthy pods, has {}): \
                 the drain of node {node} will wait to evict {}",
                b.namespace,
                b.name,
                n(b.desired),
                n(b.current),
                list(pods)
            )
        })
        .collect()
}

fn count(n: usize, what: &str) -> String {
    format!("{n} {what}{}", plural(n, "", "s"))
}

/// `one` for one, else `many`.
fn plural<'a>(n: usize, one: &'a str, many: &'a str) -> &'a str {
    if n == 1 { one } else { many }
}

/// Up to [`PODS_NAMED`] of `names`, then how many more.
fn list(mut names: Vec<String>) -> String {
    names.sort();
    let more = names.len().saturating_sub(PODS_NAMED);
    names.truncate(PODS_NAMED);
    let named = names.join(", ");
    if more > 0 {
        format!("{named} and {more} more")
    } else {
        named
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::DrainBehavior;
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
            always_allow_unhealthy: false,
        }
    }

    /// A pod of `ns` labelled `app=<app>`, owned by a ReplicaSet, with `extra` merged into it.
    fn pod(name: &str, app: &str, extra: serde_json::Value) -> DrainPod {
        let mut v = json!({"metadata": {"name": name, "namespace": "ns", "labels": {"app": app},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs",
                                 "uid": "rs", "controller": true}]},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}});
        for part in ["metadata", "spec", "status"] {
            if let Some(m) = extra[part].as_object() {
                for (k, val) in m {
                    v[part][k] = val.clone();
                }
            }
        }
        serde_json::from_value(v).unwrap()
    }

    fn facts<'a>(pods: &'a [DrainPod], rules: &[DrainRule]) -> Vec<NodePod<'a>> {
        pods.iter()
            .map(|pod| NodePod {
                pod,
                disposition: disposition(pod, rules, &DrainOptions::default()),
                last_of: None,
                surge: false,
            })
            .collect()
    }

    fn daemon() -> serde_json::Value {
        json!({"metadata": {"ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet",
            "name": "ds", "uid": "u", "controller": true}]}})
    }

    #[test]
    fn names_the_budget_what_it_needs_and_has_and_the_pods_it_holds() {
        let pods: Vec<DrainPod> = (0..5)
            .map(|i| pod(&format!("db-{i}"), "db", json!({})))
            .chain([pod("web-0", "web", json!({}))])
            .collect();
        assert_eq!(
            warnings("n1", &facts(&pods, &[]), &[budget("db-guard", "db")], None),
            [
                "PodDisruptionBudget ns/db-guard allows no disruption now (needs 2 healthy pods, \
              has 2): the drain of node n1 will wait to evict ns/db-0, ns/db-1, ns/db-2 and 2 more"
            ]
        );
    }

    #[test]
    fn pods_the_drain_leaves_or_that_are_going_draw_no_budget_warning() {
        let pods = [
            pod("ds", "db", daemon()),
            pod(
                "going",
                "db",
                json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}}),
            ),
            pod("other", "web", json!({})),
            // Not Ready while the budget has its healthy pods: the API server lets it go.
            pod(
                "unready",
                "db",
                json!({"status": {"conditions": [{"type": "Ready", "status": "False"}]}}),
            ),
        ];
        let w = warnings("n1", &facts(&pods, &[]), &[budget("db-guard", "db")], None);
        assert!(
            !w.iter().any(|w| w.contains("PodDisruptionBudget")),
            "{w:?}"
        );
    }

    #[test]
    fn kept_pods_are_counted_by_the_drains_own_decision() {
        let mirror = json!({"metadata": {"annotations": {"kubernetes.io/config.mirror": "x"}}});
        let labelled =
            json!({"metadata": {"labels": {"nodemaintenance.medik8s.io/drain": "skip"}}});
        let pods = [
            pod("a-ds", "x", daemon()),
            pod("b-mirror", "x", mirror),
            pod("c-labelled", "x", labelled),
            pod("d-ruled", "cache", json!({})),
            pod("e-evicted", "web", json!({})),
        ];
        let skip_cache = [DrainRule {
            pod_selector: Some(LabelSelector {
                match_labels: Some([("app".to_string(), "cache".to_string())].into()),
                ..Default::default()
            }),
            behavior: DrainBehavior::Skip,
            ..DrainRule::default()
        }];
        assert_eq!(
            warnings("n1", &facts(&pods, &skip_cache), &[], None),
            [
                "4 pods will stay on node n1 (the drain leaves DaemonSet pods, mirror pods and pods \
                 a drain rule or label skips): ns/a-ds, ns/b-mirror, ns/c-labelled and 1 more"
            ]
        );
        assert_eq!(
            warnings("n1", &facts(&pods[..1], &[]), &[], None),
            [
                "1 pod will stay on node n1 (the drain leaves DaemonSet pods, mirror pods and pods \
                 a drain rule or label skips): ns/a-ds"
            ]
        );
    }

    #[test]
    fn pods_an_opt_out_holds_are_named_only_when_the_flag_honours_them() {
        let dnd = json!({"metadata": {"annotations": {"karpenter.sh/do-not-disrupt": "true"}}});
        let pods = [pod("dnd", "x", dnd), pod("other", "y", json!({}))];
        let on = DrainOptions {
            honor_opt_out: true,
            ..DrainOptions::default()
        };
        let with = |options: &DrainOptions| -> Vec<String> {
            let facts: Vec<NodePod> = pods
                .iter()
                .map(|pod| NodePod {
                    pod,
                    disposition: disposition(pod, &[], options),
                    last_of: None,
                    surge: false,
                })
                .collect();
            warnings("n1", &facts, &[], None)
        };
        assert_eq!(
            with(&on),
            [
                "1 pod on node n1 opts out of eviction (karpenter.sh/do-not-disrupt or \
              cluster-autoscaler.kubernetes.io/safe-to-evict, honoured by \
              --honor-opt-out-annotations): not evicted until the drain deadline, and the \
              maintenance does not succeed while it is on the node: ns/dnd"
            ]
        );
        assert!(with(&DrainOptions::default()).is_empty());
    }

    #[test]
    fn daemon_set_pods_stay_in_the_warning_unless_the_maintenance_evicts_them_last() {
        // The drain's own decision with the maintenance's `daemonSets` (the webhook passes its
        // resolved value): under EvictLast the DaemonSet pod is evicted, so it does not stay.
        let pods = [pod("a-ds", "a", daemon())];
        let with = |daemon_sets| -> Vec<String> {
            let options = DrainOptions::default().with_daemon_sets(daemon_sets);
            let facts: Vec<NodePod> = pods
                .iter()
                .map(|pod| NodePod {
                    pod,
                    disposition: disposition(pod, &[], &options),
                    last_of: None,
                    surge: false,
                })
                .collect();
            warnings("n1", &facts, &[], None)
        };
        assert_eq!(
            with(crate::api::DaemonSets::Ignore),
            [
                "1 pod will stay on node n1 (the drain leaves DaemonSet pods, mirror pods and pods \
                 a drain rule or label skips): ns/a-ds"
            ]
        );
        assert!(with(crate::api::DaemonSets::EvictLast).is_empty());
    }

    #[test]
    fn data_loss_is_said_per_kind_for_evicted_pods_only() {
        let empty_dir = json!({"spec": {"volumes": [{"name": "v", "emptyDir": {}}]}});
        let mut bare = pod("bare", "x", json!({}));
        bare.metadata.owner_references.clear();
        let mut bare_ds = pod(
            "bare-skipped",
            "x",
            json!({"metadata": {"labels":
            {"nodemaintenance.medik8s.io/drain": "skip"}}}),
        );
        bare_ds.metadata.owner_references.clear();
        let pods = [
            bare,
            bare_ds,
            pod("scratch", "x", empty_dir.clone()),
            pod("scratch-2", "x", empty_dir),
        ];
        let w = warnings("n1", &facts(&pods, &[]), &[], None);
        assert_eq!(
            &w[1..],
            [
                "2 pods on node n1 use emptyDir volumes, whose data is deleted when the drain \
                 evicts them: ns/scratch, ns/scratch-2",
                "1 pod on node n1 has no controller, so once evicted it is not recreated \
                 anywhere: ns/bare"
            ]
        );
    }

    #[test]
    fn the_last_ready_replicas_name_their_workload() {
        let pods = [
            pod("web-0", "web", json!({})),
            pod("web-1", "web", json!({})),
        ];
        let web = Workload {
            kind: "Deployment",
            namespace: "ns".into(),
            name: "web".into(),
            uid: "d".into(),
        };
        let mut f = facts(&pods, &[]);
        for p in &mut f {
            p.last_of = Some(web.clone());
        }
        assert_eq!(
            warnings("n1", &f, &[], None),
            [
                "Deployment ns/web has every ready replica on node n1 (ns/web-0, ns/web-1): it \
                 has none ready from their eviction until a replacement is ready on another node"
            ]
        );
        // With surge RolloutRestart a Deployment's is surged; a StatefulSet cannot surge.
        let db = Workload {
            kind: "StatefulSet",
            name: "db".into(),
            uid: "s".into(),
            ..web.clone()
        };
        for p in &mut f {
            p.surge = true;
        }
        f[1].last_of = Some(db);
        assert_eq!(
            warnings("n1", &f, &[], None),
            [
                "Deployment ns/web has every ready replica on node n1 (ns/web-0): with surge \
                 RolloutRestart the drain does not evict them: it restarts the Deployment's \
                 rollout once, and they go once it has a replacement ready on another node",
                "StatefulSet ns/db has every ready replica on node n1 (ns/web-1): it has none \
                 ready from their eviction until a replacement is ready on another node"
            ]
        );
    }

    #[test]
    fn the_share_warns_only_above_its_threshold() {
        let share = |maintenances, nodes, threshold| {
            warnings(
                "n1",
                &[],
                &[],
                Some(Share {
                    maintenances,
                    nodes,
                    threshold,
                }),
            )
        };
        assert_eq!(
            share(2, 10, 30),
            Vec::<String>::new(),
            "3 of 10 is not over 30%"
        );
        assert_eq!(
            share(3, 10, 30),
            [
                "this maintenance brings 4 of 10 nodes (40%) under maintenance, more than the 30% \
                 of --maintenance-share-warning"
            ]
        );
        assert!(share(9, 10, 0).is_empty(), "0 turns it off");
        assert!(share(0, 0, 30).is_empty(), "no node known");
    }
}
