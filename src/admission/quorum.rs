//! The etcd quorum rules: upstream's OpenShift guard-PDB rule and our etcd member majority rule
//! for other clusters, over observed members, nodes and pods.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::core::{Selector, SelectorExt};

/// Node labels that mark a control-plane node; presence is enough, any value (upstream).
pub(crate) const CONTROL_PLANE_LABELS: [&str; 2] = [
    "node-role.kubernetes.io/control-plane",
    "node-role.kubernetes.io/master",
];
/// Namespace of the etcd guard PodDisruptionBudget and guard pods on OpenShift.
pub(crate) const OPENSHIFT_ETCD_NAMESPACE: &str = "openshift-etcd";
/// Namespace of kubeadm's etcd static pods.
pub(crate) const ETCD_POD_NAMESPACE: &str = "kube-system";
/// Label selector of kubeadm's etcd static pods.
pub(crate) const ETCD_POD_SELECTOR: &str = "component=etcd";
/// The group version whose presence marks an OpenShift cluster (upstream's detection).
pub(crate) const OPENSHIFT_CONFIG_GROUP_VERSION: &str = "config.openshift.io/v1";

/// One etcd member as seen for the quorum rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct EtcdMember {
    /// Node hosting the member.
    pub node: String,
    /// The member is up: its node is Ready (and its etcd pod Ready, when pods were found).
    pub ready: bool,
    /// Its node already has a NodeMaintenance, so the member is (or will be) disrupted.
    pub in_maintenance: bool,
}

/// The quorum rule for clusters without OpenShift's etcd guard: a node that hosts a member may
/// enter maintenance only if a majority (`n/2 + 1` of the `n` members) stays Ready and out of
/// maintenance without it. Nodes that host no member are always allowed.
pub(crate) fn etcd_quorum_allows(node: &str, members: &[EtcdMember]) -> bool {
    if !members.iter().any(|m| m.node == node) {
        return true;
    }
    let majority = members.len() / 2 + 1;
    let remaining = members
        .iter()
        .filter(|m| m.node != node && m.ready && !m.in_maintenance)
        .count();
    remaining >= majority
}

/// Readiness of the OpenShift etcd guard pod on the node, if there is one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum GuardPod {
    /// No guard pod runs on the node.
    Absent,
    /// The guard pod's `Ready` condition status (`True`, `False`, `Unknown`), `None` without one.
    Present(Option<String>),
}

/// Upstream's OpenShift rule (medik8s/common `IsEtcdDisruptionAllowed`, `docs/compat.md §6`):
/// non-control-plane nodes are allowed; otherwise exactly one PDB must exist in `openshift-etcd`
/// (none or several: deny); `disruptionsAllowed >= 1` allows; else the guard pod on the node
/// denies when its Ready is `True` or `Unknown` and allows when `False`, missing, or when there is
/// no guard pod on the node (the node is already disrupted).
pub(crate) fn openshift_quorum_allows(
    is_control_plane: bool,
    pdb_disruptions_allowed: &[i32],
    guard: &GuardPod,
) -> bool {
    if !is_control_plane {
        return true;
    }
    let [disruptions_allowed] = pdb_disruptions_allowed else {
        return false;
    };
    if *disruptions_allowed >= 1 {
        return true;
    }
    match guard {
        GuardPod::Absent => true,
        GuardPod::Present(ready) => !matches!(ready.as_deref(), Some("True") | Some("Unknown")),
    }
}

/// Whether the node carries a control-plane role label (any value).
pub(crate) fn is_control_plane(node: &Node) -> bool {
    node.metadata
        .labels
        .as_ref()
        .is_some_and(|l| CONTROL_PLANE_LABELS.iter().any(|k| l.contains_key(*k)))
}

/// Whether the node's `Ready` condition is `True`.
pub(crate) fn node_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// The status of the pod's `Ready` condition, if it has one.
pub(crate) fn pod_ready_status(pod: &Pod) -> Option<String> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| c.status.clone())
}

/// Builds the etcd member list from etcd static pods (members by `spec.nodeName`, Ready when both
/// the pod and its node are Ready) or, when there are none, from control-plane labelled nodes
/// (Ready when the node is Ready). `node_ready` answers for a node by name (false when unknown);
/// `maintained` says whether a node has a NodeMaintenance (cached or reserved).
pub(crate) fn etcd_members(
    etcd_pods: &[Arc<Pod>],
    control_plane_nodes: &[Arc<Node>],
    node_ready_by_name: impl Fn(&str) -> bool,
    maintained: impl Fn(&str) -> bool,
) -> Vec<EtcdMember> {
    let mut members: Vec<EtcdMember> = Vec::new();
    if etcd_pods.is_empty() {
        for n in control_plane_nodes {
            let name = n.metadata.name.clone().unwrap_or_default();
            if members.iter().any(|m| m.node == name) {
                continue;
            }
            members.push(EtcdMember {
                in_maintenance: maintained(&name),
                ready: node_ready(n),
                node: name,
            });
        }
    } else {
        for p in etcd_pods {
            let Some(node) = p.spec.as_ref().and_then(|s| s.node_name.clone()) else {
                continue;
            };
            if members.iter().any(|m| m.node == node) {
                continue;
            }
            let ready = pod_ready_status(p).as_deref() == Some("True") && node_ready_by_name(&node);
            members.push(EtcdMember {
                in_maintenance: maintained(&node),
                ready,
                node,
            });
        }
    }
    members
}

/// The guard pod on `node` among `pods`: the first pod bound to the node whose labels match the
/// guard budget's `selector` (an absent selector matches every pod, as upstream's
/// `LabelSelectorAsMap(nil)` does).
///
/// # Errors
/// The selector cannot be evaluated (an unknown operator); upstream returns such errors raw.
pub(crate) fn guard_pod(
    node: &str,
    selector: Option<&LabelSelector>,
    pods: &[Arc<Pod>],
) -> Result<GuardPod, String> {
    let selector = match selector {
        Some(s) => Selector::try_from(s.clone()).map_err(|e| e.to_string())?,
        None => Selector::default(),
    };
    let empty = BTreeMap::new();
    Ok(pods
        .iter()
        .find(|p| {
            p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node)
                && selector.matches(p.metadata.labels.as_ref().unwrap_or(&empty))
        })
        .map_or(GuardPod::Absent, |p| GuardPod::Present(pod_ready_status(p))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{NodeCondition, NodeStatus, PodCondition, PodSpec, PodStatus};
    use kube::api::ObjectMeta;

    fn member(node: &str, ready: bool, in_maintenance: bool) -> EtcdMember {
        EtcdMember {
            node: node.into(),
            ready,
            in_maintenance,
        }
    }

    #[test]
    fn single_member_is_never_disrupted() {
        assert!(!etcd_quorum_allows("cp-0", &[member("cp-0", true, false)]));
    }

    #[test]
    fn three_members_allow_one_at_a_time() {
        let mut members = vec![
            member("cp-0", true, false),
            member("cp-1", true, false),
            member("cp-2", true, false),
        ];
        assert!(etcd_quorum_allows("cp-0", &members));
        // cp-0 now has a NodeMaintenance.
        members[0].in_maintenance = true;
        assert!(!etcd_quorum_allows("cp-1", &members));
        assert!(!etcd_quorum_allows("cp-2", &members));
    }

    #[test]
    fn a_not_ready_member_counts_as_lost() {
        let members = vec![
            member("cp-0", true, false),
            member("cp-1", false, false),
            member("cp-2", true, false),
        ];
        assert!(!etcd_quorum_allows("cp-0", &members));
        // Taking down the NotReady member itself leaves the two healthy ones: allowed.
        assert!(etcd_quorum_allows("cp-1", &members));
    }

    #[test]
    fn five_members_tolerate_two_losses() {
        let mut members: Vec<_> = (0..5)
            .map(|i| member(&format!("cp-{i}"), true, false))
            .collect();
        members[0].in_maintenance = true;
        assert!(etcd_quorum_allows("cp-1", &members));
        members[1].in_maintenance = true;
        assert!(!etcd_quorum_allows("cp-2", &members));
    }

    #[test]
    fn non_members_are_always_allowed() {
        assert!(etcd_quorum_allows(
            "worker-0",
            &[member("cp-0", true, false)]
        ));
        assert!(etcd_quorum_allows("worker-0", &[]));
    }

    fn node(name: &str, labels: &[&str], ready: Option<&str>) -> Node {
        Node {
            metadata: ObjectMeta {
                name: Some(name.into()),
                labels: Some(
                    labels
                        .iter()
                        .map(|l| (l.to_string(), String::new()))
                        .collect(),
                ),
                ..Default::default()
            },
            status: ready.map(|r| NodeStatus {
                conditions: Some(vec![NodeCondition {
                    type_: "Ready".into(),
                    status: r.into(),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn pod(node: &str, ready: Option<&str>) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some(format!("etcd-{node}")),
                ..Default::default()
            },
            spec: Some(PodSpec {
                node_name: Some(node.into()),
                ..Default::default()
            }),
            status: Some(PodStatus {
                conditions: ready.map(|r| {
                    vec![PodCondition {
                        type_: "Ready".into(),
                        status: r.into(),
                        ..Default::default()
                    }]
                }),
                ..Default::default()
            }),
        }
    }

    #[test]
    fn members_come_from_etcd_pods_when_present() {
        let pods = vec![
            Arc::new(pod("cp-0", Some("True"))),
            Arc::new(pod("cp-1", Some("True"))),
            Arc::new(pod("cp-2", Some("False"))),
        ];
        let members = etcd_members(
            &pods,
            &[Arc::new(node("ignored", &[], Some("True")))],
            |n| n != "cp-1",
            |n| n == "cp-0",
        );
        assert_eq!(
            members,
            vec![
                member("cp-0", true, true),
                // Pod Ready but node NotReady: lost.
                member("cp-1", false, false),
                // Node Ready but pod not Ready: lost.
                member("cp-2", false, false),
            ]
        );
    }

    #[test]
    fn members_fall_back_to_control_plane_labelled_nodes() {
        let nodes = vec![
            Arc::new(node(
                "cp-0",
                &["node-role.kubernetes.io/control-plane"],
                Some("True"),
            )),
            Arc::new(node("cp-1", &["node-role.kubernetes.io/master"], None)),
            Arc::new(node(
                "cp-0",
                &["node-role.kubernetes.io/master"],
                Some("True"),
            )),
        ];
        let members = etcd_members(&[], &nodes, |_| true, |_| false);
        assert_eq!(
            members,
            vec![member("cp-0", true, false), member("cp-1", false, false)]
        );
        assert!(is_control_plane(&nodes[1]));
        assert!(!is_control_plane(&node(
            "w",
            &["node-role.kubernetes.io/worker"],
            None
        )));
    }

    #[test]
    fn openshift_rule_matches_upstream() {
        let ready = |s: &str| GuardPod::Present(Some(s.into()));
        // Not control-plane: allowed whatever the PDBs say.
        assert!(openshift_quorum_allows(false, &[], &GuardPod::Absent));
        // No PDB, or several: denied.
        assert!(!openshift_quorum_allows(true, &[], &GuardPod::Absent));
        assert!(!openshift_quorum_allows(true, &[1, 1], &GuardPod::Absent));
        // disruptionsAllowed >= 1: allowed.
        assert!(openshift_quorum_allows(true, &[1], &ready("True")));
        // disruptionsAllowed 0: the guard pod decides.
        assert!(!openshift_quorum_allows(true, &[0], &ready("True")));
        assert!(!openshift_quorum_allows(true, &[0], &ready("Unknown")));
        assert!(openshift_quorum_allows(true, &[0], &ready("False")));
        assert!(openshift_quorum_allows(
            true,
            &[0],
            &GuardPod::Present(None)
        ));
        assert!(openshift_quorum_allows(true, &[0], &GuardPod::Absent));
    }

    #[test]
    fn the_guard_pod_is_the_one_on_the_node_matching_the_budget_selector() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;
        let labelled = |node: &str, ready: Option<&str>, app: &str| {
            let mut p = pod(node, ready);
            p.metadata.labels = Some([("app".to_string(), app.to_string())].into());
            Arc::new(p)
        };
        let pods = vec![
            labelled("cp-0", Some("True"), "installer"),
            labelled("cp-0", Some("False"), "guard"),
            labelled("cp-1", Some("True"), "guard"),
        ];
        let sel = LabelSelector {
            match_labels: Some([("app".to_string(), "guard".to_string())].into()),
            match_expressions: None,
        };
        assert_eq!(
            guard_pod("cp-0", Some(&sel), &pods),
            Ok(GuardPod::Present(Some("False".into())))
        );
        assert_eq!(guard_pod("cp-2", Some(&sel), &pods), Ok(GuardPod::Absent));
        // No selector: every pod on the node counts, the first one found decides.
        assert_eq!(
            guard_pod("cp-0", None, &pods),
            Ok(GuardPod::Present(Some("True".into())))
        );
        let bad = LabelSelector {
            match_labels: None,
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "app".into(),
                operator: "Near".into(),
                values: None,
            }]),
        };
        assert!(guard_pod("cp-0", Some(&bad), &pods).is_err());
    }
}
