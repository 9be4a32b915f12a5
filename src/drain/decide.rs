//! The decision for one pod ([`decide`]): kubectl's filters with upstream's flags, the pod's
//! own drain label ([`pod_rule`]), whether it is a replacement that arrived after the drain
//! started ([`Arrival`]), its [`Stage`] ([`classify`]), then the maintenance's drain rule
//! ([`apply_rule`]), then the opt-outs (`opt_out.rs`); and the blockers of the pods it holds
//! back or keeps. Pure, unit-tested in `tests.rs`.

use std::collections::HashSet;

use k8s_openapi::api::core::v1::Toleration;

use super::consts::{
    CAPI_DRAIN_LABEL, DRAIN_LABEL, DRAIN_RULES, SYSTEM_CRITICAL_CLASSES, SYSTEM_CRITICAL_PRIORITY,
    reason,
};
use super::daemon_sets;
use super::disposition::{Disposition, DrainOptions, PodRule, Stage};
use super::opt_out;
use super::pod::DrainPod;
use crate::api::{DrainBehavior, DrainRule, PodBlocker, PodReference};
use crate::node::{DRAIN_TAINT_KEY, NO_SCHEDULE, UNSCHEDULABLE_TAINT_KEY};

/// The rule of a pod with `labels`: [`DRAIN_LABEL`] (`skip`, `wait-completed`, an integer order),
/// else [`CAPI_DRAIN_LABEL`] (`skip`, `wait-completed`), else `Drain(0)`. Returns with it the
/// warning for a value neither knows (the pod is then drained as without the label).
pub(crate) fn pod_rule(
    labels: &std::collections::BTreeMap<String, String>,
) -> (PodRule, Option<String>) {
    for label in [DRAIN_LABEL, CAPI_DRAIN_LABEL] {
        let Some(value) = labels.get(label) else {
            continue;
        };
        match value.as_str() {
            "skip" => return (PodRule::Skip(label), None),
            "wait-completed" => return (PodRule::WaitCompleted(label), None),
            v if label == DRAIN_LABEL => {
                if let Ok(order) = v.parse() {
                    return (PodRule::Drain(order), None);
                }
            }
            _ => {}
        }
        let accepted = if label == DRAIN_LABEL {
            "skip, wait-completed or an integer order"
        } else {
            "skip or wait-completed"
        };
        let warning = format!("label {label}={value} ignored (accepted: {accepted})");
        return (PodRule::Drain(0), Some(warning));
    }
    (PodRule::Drain(0), None)
}

/// Whether `toleration` tolerates the taint `key`=`""`:`effect` (the scheduler's rule: an empty
/// key with `Exists` matches every key, an empty effect every effect, `Equal` (the default
/// operator) needs the same value).
pub(crate) fn tolerates(toleration: &Toleration, key: &str, effect: &str) -> bool {
    let effect_ok = toleration
        .effect
        .as_deref()
        .is_none_or(|e| e.is_empty() || e == effect);
    let operator = toleration.operator.as_deref().unwrap_or("Equal");
    let tkey = toleration.key.as_deref().unwrap_or("");
    let key_ok = if tkey.is_empty() {
        operator == "Exists"
    } else {
        tkey == key
    };
    let value_ok = match operator {
        "Exists" => true,
        "Equal" | "" => toleration.value.as_deref().unwrap_or("").is_empty(),
        _ => false,
    };
    effect_ok && key_ok && value_ok
}

/// Whether the pod tolerates both `node.kubernetes.io/unschedulable:NoSchedule` (the cordon, which
/// the scheduler's NodeUnschedulable plugin waives for such pods) and `medik8s.io/drain:NoSchedule`.
/// The pod's own tolerations stand for its owner's template: admission only adds NoExecute
/// tolerations, so whatever the owner creates next tolerates at least what this pod does and
/// would be scheduled onto this node again.
pub(crate) fn tolerates_maintenance(pod: &DrainPod) -> bool {
    let tolerations = &pod.spec.tolerations;
    [UNSCHEDULABLE_TAINT_KEY, DRAIN_TAINT_KEY]
        .iter()
        .all(|key| tolerations.iter().any(|t| tolerates(t, key, NO_SCHEDULE)))
}

/// Whether the pod is system-critical: `spec.priority` at least [`SYSTEM_CRITICAL_PRIORITY`]
/// (the kubelet's rule), or, when the priority was not resolved, one of
/// [`SYSTEM_CRITICAL_CLASSES`] as its `priorityClassName`.
pub(crate) fn is_system_critical(pod: &DrainPod) -> bool {
    let spec = &pod.spec;
    match spec.priority {
        Some(p) => p >= SYSTEM_CRITICAL_PRIORITY,
        None => spec
            .priority_class_name
            .as_deref()
            .is_some_and(|c| SYSTEM_CRITICAL_CLASSES.contains(&c)),
    }
}

fn is_own_pod(pod: &DrainPod, options: &DrainOptions) -> bool {
    options
        .own_pod
        .as_ref()
        .is_some_and(|own| pod.metadata.namespace == own.namespace && pod.metadata.name == own.name)
}

/// The [`Stage`] of an evictable pod: the operator's own pod last, running system-critical pods
/// before it (a CNI agent's DaemonSet pod with `system-node-critical` among them), then the pods
/// of an existing DaemonSet drained last (`daemon_set`, [`daemon_sets`]; a drain order ranks
/// only ordinary pods among themselves), everything else first, by `order` (its drain label's,
/// [`pod_rule`], or its drain rule's).
pub(crate) fn stage(pod: &DrainPod, options: &DrainOptions, order: i32, daemon_set: bool) -> Stage {
    if is_own_pod(pod, options) {
        Stage::OwnPod
    } else if !pod.is_terminal() && is_system_critical(pod) {
        Stage::Critical
    } else if daemon_set {
        Stage::DaemonSet
    } else {
        Stage::Ordinary(order)
    }
}

/// What decides whether a pod arrived on the node after the drain started: the start, by the
/// API server's clock (`crate::controller::plan::drain_started`), and the UIDs of the pods that
/// tolerate both maintenance taints as the drain's first listing of the node found them (this
/// process's first round of this drain, which lists before it evicts anything; `None` until
/// then, and after a restart until the new process lists).
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Arrival {
    /// When the drain started, whole seconds of the API server's clock; `None`: unknown.
    pub started: Option<jiff::Timestamp>,
    /// The tolerating pods of the drain's first listing, by UID.
    pub first_listing: Option<HashSet<String>>,
}

impl Arrival {
    /// Whether `pod` arrived after the drain started. Both times are the API server's (its
    /// creation stamp, and the start taken from its `Date` header), so they compare exactly up
    /// to their whole seconds: created in a later second than the start is after it, in an
    /// earlier one before it. Created in the start's own second, the pod's identity decides:
    /// after, when the first listing is known and does not hold its UID (the drain evicts only
    /// after that listing, so a replacement of an evicted pod is never in it); before otherwise.
    /// No start or no creation time: `false` (treated as there before; it errs towards
    /// evicting, at most once more per workload: the next replacement is created later).
    pub(crate) fn arrived_after(&self, pod: &DrainPod) -> bool {
        let (Some(start), Some(created)) = (self.started, pod.metadata.creation_timestamp.as_ref())
        else {
            return false;
        };
        let (start, created) = (start.as_second(), created.0.as_second());
        match created.cmp(&start) {
            std::cmp::Ordering::Greater => true,
            std::cmp::Ordering::Less => false,
            std::cmp::Ordering::Equal => match (&self.first_listing, &pod.metadata.uid) {
                (Some(seen), Some(uid)) => !seen.contains(uid),
                _ => false,
            },
        }
    }
}

/// Decides what the drain does with `pod`, in kubectl's filter order (DaemonSet, mirror, local
/// storage, unreplicated) with upstream NMO's flags (force, delete emptyDir data, ignore all
/// DaemonSets), then our exceptions: a finished pod is left ([`Disposition::SkipFinished`]; kubectl
/// and upstream delete it), and a running pod that tolerates both maintenance taints and
/// [arrived after](Arrival::arrived_after) the drain started is a replacement that can
/// only come back to this node, so it is kept ([`Disposition::KeepReplacement`]). A pod is never
/// kept for its tolerations alone (upstream evicts every such pod; so do we, once).
/// `daemonset_uid` is the UID of the DaemonSet named by [`DrainPod::daemon_set_owner`] (`None`: not found);
/// it is ignored for other pods, and a UID other than the owner reference's counts as not found.
pub(crate) fn classify(
    pod: &DrainPod,
    daemonset_uid: Option<&str>,
    options: &DrainOptions,
    arrival: &Arrival,
) -> Disposition {
    let mut warnings = Vec::new();
    // Managed by an existing DaemonSet: left alone, or drained last ([`daemon_sets`]).
    let mut daemon_set = false;
    if let Some(ds) = pod.daemon_set_owner() {
        if daemonset_uid == Some(ds.uid.as_str()) {
            if !daemon_sets::drained(options) {
                return Disposition::SkipDaemonSet;
            }
            daemon_set = true;
        } else {
            // kubectl with --force evicts the orphan and warns with the NotFound error text.
            warnings.push(format!("daemonsets.apps \"{}\" not found", ds.name));
        }
    }
    if pod.metadata.marks.mirror {
        return Disposition::SkipMirror;
    }
    if pod.is_terminal() {
        return Disposition::SkipFinished;
    }
    let (rule, warning) = pod_rule(&pod.metadata.labels);
    let order = match rule {
        PodRule::Skip(label) => return Disposition::SkipByRule { label },
        PodRule::WaitCompleted(label) => return Disposition::WaitCompleted { label },
        PodRule::Drain(order) => order,
    };
    warnings.extend(warning);
    if tolerates_maintenance(pod) && arrival.arrived_after(pod) {
        return Disposition::KeepReplacement;
    }
    if pod.spec.empty_dir {
        warnings.push("deleting Pods with local storage".to_string());
    }
    if pod.controller_ref().is_none() {
        warnings.push("deleting Pods that declare no controller".to_string());
    }
    let stage = stage(pod, options, order, daemon_set);
    Disposition::Evict { warnings, stage }
}

/// What the drain does with `pod`: one ordered chain, kubectl's filters with upstream's flags,
/// the pod's own drain label, the replacement rule ([`classify`]), the maintenance's drain
/// `rule` that selects it, if one does ([`apply_rule`]), then the opt-outs
/// ([`opt_out::apply`]: they hold only a pod still up for eviction, in the stage the rule
/// gave it). `daemonset_uid` as for [`classify`].
pub(crate) fn decide(
    pod: &DrainPod,
    daemonset_uid: Option<&str>,
    options: &DrainOptions,
    arrival: &Arrival,
    rule: Option<&DrainRule>,
) -> Disposition {
    let decided = apply_rule(
        classify(pod, daemonset_uid, options, arrival),
        rule,
        pod,
        options,
    );
    opt_out::apply(decided, pod, options.honor_opt_out)
}

/// `disposition` (what [`classify`] decided for `pod`) with the maintenance's drain `rule`
/// (`spec.drainRules`, `super::rules::matching`) applied: a pod
/// without a drain label of its own that is up for eviction (or a replacement, which `Skip` and
/// `WaitCompleted` concern as well) is kept, waited for or given the rule's order. Anything else
/// (DaemonSet, mirror, finished pods, a pod's own label) stays as decided.
pub(crate) fn apply_rule(
    disposition: Disposition,
    rule: Option<&DrainRule>,
    pod: &DrainPod,
    options: &DrainOptions,
) -> Disposition {
    let Some(rule) = rule else {
        return disposition;
    };
    let own_label = pod_rule(&pod.metadata.labels).0 != PodRule::Drain(0)
        || pod.metadata.labels.contains_key(DRAIN_LABEL);
    if own_label {
        return disposition;
    }
    // The opt-outs come after the rule (`decide`): a rule that skips or waits for a pod an
    // annotation would hold decides (neither evicts it), a rule's order is its stage at the
    // deadline.
    match (disposition, rule.behavior) {
        (Disposition::Evict { .. } | Disposition::KeepReplacement, DrainBehavior::Skip) => {
            Disposition::SkipByRule { label: DRAIN_RULES }
        }
        (
            Disposition::Evict { .. } | Disposition::KeepReplacement,
            DrainBehavior::WaitCompleted,
        ) => Disposition::WaitCompleted { label: DRAIN_RULES },
        (
            Disposition::Evict {
                warnings,
                stage: was,
            },
            DrainBehavior::Drain,
        ) => Disposition::Evict {
            warnings,
            stage: stage(
                pod,
                options,
                rule.order.unwrap_or(0),
                was == Stage::DaemonSet,
            ),
        },
        (other, _) => other,
    }
}

/// The blocker of an evictable pod held back because pods of an earlier stage are still on the
/// node. The text has no counts, so it does not change from pass to pass (every status change is
/// a write).
pub(crate) fn waiting_blocker(
    pod: &PodReference,
    stage: Stage,
    priority_class: Option<&str>,
) -> PodBlocker {
    let (reason, message) = match stage {
        Stage::Ordinary(order) => (
            reason::DRAIN_ORDER,
            format!(
                "drain order {order} ({DRAIN_LABEL}): evicted once every pod of a lower order has \
                 left the node"
            ),
        ),
        Stage::DaemonSet => daemon_sets::waiting(),
        Stage::Critical => (
            reason::SYSTEM_CRITICAL,
            format!(
                "system-critical pod (priorityClassName {}): evicted once every other evictable \
                 pod has left the node",
                priority_class.unwrap_or("<none>, priority >= 2000000000")
            ),
        ),
        Stage::OwnPod => (
            reason::OPERATOR_POD,
            "the operator's own pod: evicted last, once every other evictable pod has left the \
             node"
                .to_string(),
        ),
    };
    PodBlocker::of(pod, reason, message)
}

/// The status entry of a pod left on the node on purpose ([`Disposition::KeepReplacement`]).
pub(crate) fn skipped_entry(pod: &PodReference) -> PodBlocker {
    PodBlocker::of(
        pod,
        reason::TOLERATES_MAINTENANCE,
        format!(
            "not evicted: the pod arrived after the drain started and tolerates \
             {UNSCHEDULABLE_TAINT_KEY}:{NO_SCHEDULE} and {DRAIN_TAINT_KEY}:{NO_SCHEDULE}, so it is \
             a replacement that would be scheduled onto this node again however often it is \
             evicted"
        ),
    )
}
