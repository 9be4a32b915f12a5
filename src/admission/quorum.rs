//! The etcd quorum rules (`docs/drain-contract.md` §9): upstream's OpenShift guard-PDB rule, and
//! for other clusters the same guard budget when one exists, the etcd member majority rule over
//! visible etcd pods, and an admission warning when neither can judge.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::core::{Selector, SelectorExt};

use crate::watch::nodes::CONTROL_PLANE_LABELS;

/// Namespace of the etcd guard PodDisruptionBudget and guard pods on OpenShift.
pub(crate) const OPENSHIFT_ETCD_NAMESPACE: &str = "openshift-etcd";
/// Namespace of kubeadm's etcd static pods.
pub(crate) const ETCD_POD_NAMESPACE: &str = "kube-system";
/// Label selector of kubeadm's etcd static pods.
pub(crate) const ETCD_POD_SELECTOR: &str = "component=etcd";
/// The group version whose presence marks an OpenShift cluster (upstream's detection).
pub(crate) const OPENSHIFT_CONFIG_GROUP_VERSION: &str = "config.openshift.io/v1";

/// Names of the etcd quorum guard PodDisruptionBudget in [`OPENSHIFT_ETCD_NAMESPACE`]:
/// `etcd-guard-pdb` (OpenShift 4.11 and later) and `etcd-quorum-guard` (earlier, and upstream's
/// fake guard in its end-to-end suite for plain Kubernetes). Off OpenShift only a budget of one
/// of these names is a guard; on OpenShift, as upstream, every budget in the namespace is.
pub(crate) const GUARD_BUDGET_NAMES: [&str; 2] = ["etcd-guard-pdb", "etcd-quorum-guard"];

/// Admission warning when a control-plane node is admitted with no quorum input at all.
pub(crate) const WARN_NO_QUORUM_INPUT: &str = "etcd quorum was not checked: no etcd quorum guard \
     PodDisruptionBudget in openshift-etcd and no etcd pods in kube-system found";
/// Admission warning when the node hosts the only etcd member.
pub(crate) const WARN_SINGLE_MEMBER: &str = "etcd quorum was not checked: the only etcd member \
     runs on this node, so etcd is unavailable while the node is down";

/// The answer of a quorum rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Quorum {
    /// Disrupting the node keeps quorum (or the node hosts no member).
    Kept,
    /// Disrupting the node would lose quorum: denied with upstream's text.
    Violated,
    /// Nothing could judge it: admitted with this warning, which says why.
    NotChecked(&'static str),
}

/// What the quorum rule knows of one etcd guard budget.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct GuardBudget {
    /// `status.disruptionsAllowed`.
    pub disruptions_allowed: i32,
    /// The guard pod on the node, among the pods the budget selects.
    pub guard: GuardPod,
    /// The budget selects at least one pod on some node.
    pub selects_pods: bool,
}

/// The quorum rule for clusters that are not OpenShift, in order:
/// 1. a control-plane node under an etcd guard budget ([`GUARD_BUDGET_NAMES`]) is judged by
///    upstream's rule ([`openshift_quorum_allows`]), except that a budget that allows no
///    disruption and selects no pod at all (upstream's fake guard) gives no sign that the node
///    is already disrupted, so it refuses (upstream allows the node then, having found no guard
///    pod on it; its own end-to-end suite expects the refusal);
/// 2. a node hosting a member of the visible etcd pods is judged by the majority rule
///    ([`etcd_quorum_allows`]); a single member, on this node, is not judged by it (it could
///    never be maintained): admitted, with [`WARN_SINGLE_MEMBER`] unless a guard budget judged
///    the node;
/// 3. a control-plane node with no guard budget and no etcd pod visible anywhere (an external
///    or hidden etcd, or no control-plane pods registered) is not checked
///    ([`WARN_NO_QUORUM_INPUT`]): refusing it would make it impossible to maintain, which upstream
///    does not do off OpenShift either.
///
/// Every other node is [`Quorum::Kept`]. Both checks must keep quorum when both apply.
pub(crate) fn kubernetes_quorum(
    node: &str,
    is_control_plane: bool,
    budgets: &[GuardBudget],
    members: &[EtcdMember],
) -> Quorum {
    let budget_checked = is_control_plane && !budgets.is_empty();
    if budget_checked {
        let refused = match budgets {
            [b] if b.disruptions_allowed < 1 && !b.selects_pods => true,
            [b] => !openshift_quorum_allows(true, &[b.disruptions_allowed], &b.guard),
            // Both names present: upstream refuses when it finds more than one budget.
            _ => true,
        };
        if refused {
            return Quorum::Violated;
        }
    }
    if members.iter().any(|m| m.node == node) {
        // A single member can never keep quorum by the majority rule: not judged by it.
        if members.len() == 1 {
            return if budget_checked {
                Quorum::Kept
            } else {
                Quorum::NotChecked(WARN_SINGLE_MEMBER)
            };
        }
        if !etcd_quorum_allows(node, members) {
            return Quorum::Violated;
        }
        return Quorum::Kept;
    }
    if is_control_plane && !budget_checked && members.is_empty() {
        return Quorum::NotChecked(WARN_NO_QUORUM_INPUT);
    }
    Quorum::Kept
}

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
/// the pod and its node are Ready). `node_ready_by_name` answers for a node by name (false when
/// unknown); `maintained` says whether a node has a NodeMaintenance (cached or reserved).
/// Control-plane nodes without a visible etcd pod are no members: an earlier rule counted every
/// control-plane node as one when no etcd pod was visible, which refused what it could not judge
/// (`docs/drain-contract.md` §9).
pub(crate) fn etcd_members(
    etcd_pods: &[Arc<Pod>],
    node_ready_by_name: impl Fn(&str) -> bool,
    maintained: impl Fn(&str) -> bool,
) -> Vec<EtcdMember> {
    let mut members: Vec<EtcdMember> = Vec::new();
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
    Ok(bound_and_selected(selector, pods)?
        .find(|(on, _)| *on == node)
        .map_or(GuardPod::Absent, |(_, p)| {
            GuardPod::Present(pod_ready_status(p))
        }))
}

/// Whether the guard budget's `selector` matches any pod bound to a node.
///
/// # Errors
/// As [`guard_pod`].
pub(crate) fn budget_selects_pods(
    selector: Option<&LabelSelector>,
    pods: &[Arc<Pod>],
) -> Result<bool, String> {
    Ok(bound_and_selected(selector, pods)?.next().is_some())
}

/// The pods of `pods` bound to a node whose labels match `selector`, with their node's name.
fn bound_and_selected<'a>(
    selector: Option<&LabelSelector>,
    pods: &'a [Arc<Pod>],
) -> Result<impl Iterator<Item = (&'a str, &'a Arc<Pod>)>, String> {
    static NO_LABELS: BTreeMap<String, String> = BTreeMap::new();
    let selector = budget_selector(selector)?;
    Ok(pods.iter().filter_map(move |p| {
        let node = p.spec.as_ref()?.node_name.as_deref()?;
        selector
            .matches(p.metadata.labels.as_ref().unwrap_or(&NO_LABELS))
            .then_some((node, p))
    }))
}

fn budget_selector(selector: Option<&LabelSelector>) -> Result<Selector, String> {
    match selector {
        Some(s) => Selector::try_from(s.clone()).map_err(|e| e.to_string()),
        None => Ok(Selector::default()),
    }
}

/// A budget's `status.disruptionsAllowed`; 0 while the disruption controller has not reported
/// it.
pub(crate) fn disruptions_allowed(pdb: &PodDisruptionBudget) -> i32 {
    pdb.status
        .as_ref()
        .and_then(|s| s.disruptions_allowed)
        .unwrap_or(0)
}

/// A budget's `spec.selector`.
pub(crate) fn pdb_selector(pdb: &PodDisruptionBudget) -> Option<&LabelSelector> {
    pdb.spec.as_ref().and_then(|s| s.selector.as_ref())
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
    fn single_member_cannot_keep_quorum_by_the_majority_rule() {
        assert!(!etcd_quorum_allows("cp-0", &[member("cp-0", true, false)]));
    }

    fn budget(allowed: i32, guard: GuardPod, selects_pods: bool) -> GuardBudget {
        GuardBudget {
            disruptions_allowed: allowed,
            guard,
            selects_pods,
        }
    }

    /// `docs/drain-contract.md` §9: what cannot be judged is admitted with a warning saying why; a guard
    /// budget is honoured off OpenShift too; visible members give the majority rule.
    #[test]
    fn kubernetes_rule_refuses_only_what_it_can_judge() {
        let q = |cp: bool, budgets: &[GuardBudget], members: &[EtcdMember]| {
            kubernetes_quorum("cp-0", cp, budgets, members)
        };
        // Neither a guard budget nor etcd pods: a control-plane node is admitted with a warning,
        // a worker without one.
        assert_eq!(q(true, &[], &[]), Quorum::NotChecked(WARN_NO_QUORUM_INPUT));
        assert_eq!(q(false, &[], &[]), Quorum::Kept);
        // Etcd pods on other nodes only: this control-plane node hosts no member.
        let others = [member("cp-1", true, false), member("cp-2", true, false)];
        assert_eq!(q(true, &[], &others), Quorum::Kept);
        // A single member, on this node: not checked, with the reason.
        let single = [member("cp-0", true, false)];
        assert_eq!(
            q(true, &[], &single),
            Quorum::NotChecked(WARN_SINGLE_MEMBER)
        );
        // Three members: one may go, not a second.
        let mut three = vec![
            member("cp-0", true, false),
            member("cp-1", true, false),
            member("cp-2", true, false),
        ];
        assert_eq!(q(true, &[], &three), Quorum::Kept);
        three[1].in_maintenance = true;
        assert_eq!(q(true, &[], &three), Quorum::Violated);
        // Etcd on a node that is not control-plane labelled is still a member.
        assert_eq!(q(false, &[], &three), Quorum::Violated);

        // Upstream's fake guard (maxUnavailable 0, selecting no pod): refused.
        let fake = [budget(0, GuardPod::Absent, false)];
        assert_eq!(q(true, &fake, &[]), Quorum::Violated);
        assert_eq!(q(true, &fake, &single), Quorum::Violated);
        assert_eq!(
            q(false, &fake, &[]),
            Quorum::Kept,
            "workers are not guarded"
        );
        // A real guard: upstream's rule.
        let ready = |s: &str| GuardPod::Present(Some(s.into()));
        assert_eq!(
            q(true, &[budget(1, ready("True"), true)], &[]),
            Quorum::Kept
        );
        assert_eq!(
            q(true, &[budget(0, ready("True"), true)], &[]),
            Quorum::Violated
        );
        assert_eq!(
            q(true, &[budget(0, ready("False"), true)], &[]),
            Quorum::Kept
        );
        assert_eq!(
            q(true, &[budget(0, GuardPod::Absent, true)], &[]),
            Quorum::Kept,
            "guard pods elsewhere, none here: this node is the disrupted one"
        );
        // A guard budget that allows judges a single member: no warning.
        assert_eq!(
            q(true, &[budget(1, ready("True"), true)], &single),
            Quorum::Kept
        );
        // Both checks apply when both inputs exist.
        assert_eq!(
            q(true, &[budget(1, ready("True"), true)], &three),
            Quorum::Violated
        );
        // Both guard names at once: refused, as upstream refuses several budgets.
        let two = [
            budget(1, ready("True"), true),
            budget(1, ready("True"), true),
        ];
        assert_eq!(q(true, &two, &[]), Quorum::Violated);
    }

    #[test]
    fn warnings_are_short_enough_to_be_shown_whole() {
        // The API server may truncate a warning over 256 characters; 120 is its advice.
        for w in [WARN_NO_QUORUM_INPUT, WARN_SINGLE_MEMBER] {
            assert!(w.len() <= 130, "{} characters: {w}", w.len());
            assert!(w.starts_with("etcd quorum was not checked: "), "{w}");
        }
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
    fn members_come_from_etcd_pods_only() {
        let pods = vec![
            Arc::new(pod("cp-0", Some("True"))),
            Arc::new(pod("cp-1", Some("True"))),
            Arc::new(pod("cp-2", Some("False"))),
            Arc::new(pod("cp-0", Some("True"))),
        ];
        let members = etcd_members(&pods, |n| n != "cp-1", |n| n == "cp-0");
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
        // No etcd pod: no member, whatever the control-plane labels say.
        assert_eq!(etcd_members(&[], |_| true, |_| false), vec![]);
    }

    #[test]
    fn control_plane_labels_any_value() {
        let cp = node("cp-1", &["node-role.kubernetes.io/master"], None);
        assert!(is_control_plane(&cp));
        assert!(is_control_plane(&node(
            "cp-0",
            &["node-role.kubernetes.io/control-plane"],
            Some("True")
        )));
        assert!(!is_control_plane(&node(
            "w",
            &["node-role.kubernetes.io/worker"],
            None
        )));
        assert!(!node_ready(&cp));
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
        assert_eq!(budget_selects_pods(Some(&sel), &pods), Ok(true));
        let fake = LabelSelector {
            match_labels: Some([("app".to_string(), "fake-etcd-quorum-guard".to_string())].into()),
            match_expressions: None,
        };
        assert_eq!(budget_selects_pods(Some(&fake), &pods), Ok(false));
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
