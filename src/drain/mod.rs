//! The drain: which pods leave a node in maintenance, in which order, and one non-blocking
//! eviction pass (the rules for cluster admins: `docs/drain-contract.md`).
//!
//! The pod selection mirrors upstream NMO's settings of the kubectl drain library
//! (`k8s.io/kubectl/pkg/drain`: `Force`, `DeleteEmptyDirData`, `IgnoreAllDaemonSets`, grace period
//! -1, eviction API only), applied in kubectl's filter order. What differs is the shape: upstream
//! blocks its only worker for up to 30 s per pass, retrying 429s in a tight loop; a pass here
//! evicts what it can, records why every other pod is still on the node, and returns. The
//! controller requeues and runs the next pass.
//!
//! Modules by concern: this one classifies pods and eviction answers and holds the retry
//! schedule's type (pure, unit-tested in `tests.rs`); `pod.rs` is the slim pod the list is read
//! into; `pass.rs` plans a round and settles its answers into a report and the next schedule
//! (pure); `act.rs` ([`Drainer`]) observes the pods, sends the evictions, each under a deadline,
//! and keeps each node's schedule between rounds. The size bounds of everything written are
//! `crate::bounds`.
//!
//! Defaults, documented because kubectl's own defaults are different (each would abort the drain),
//! and our deliberate differences from upstream (`docs/compat.md §7`, `docs/design.md §2`):
//! - DaemonSet-managed pods stay (the DaemonSet would recreate them anyway). A pod counts as
//!   DaemonSet-managed only when its controller reference is of group `apps`, kind `DaemonSet`,
//!   and the DaemonSet of that name has the reference's UID; a pod whose DaemonSet is gone (or
//!   replaced by a same-named one) is evicted.
//! - Mirror (static) pods stay, since the API server cannot delete them.
//! - Every other pod that was on the node before the drain started is evicted, whatever it
//!   tolerates (upstream's rule). Only a pod that arrived after the drain started and tolerates
//!   both maintenance taints is kept: it is a replacement that can only come back
//!   ([`Arrival::arrived_after`]).
//! - Finished pods stay (kubectl and upstream delete them): they run nothing, and their record
//!   is kept for the Job or admin that reads it.
//! - Pods using emptyDir and pods without a controller are evicted.
//! - Eviction goes in [`Stage`] order: ordinary pods first, system-critical pods once no ordinary
//!   pod is left, the operator's own pod (`POD_NAME`/`POD_NAMESPACE`) last, so the drain never
//!   stops half-way and the webhook is not left without a running pod after the node reboots.
//! - A refused eviction is retried per pod, no sooner than [`EVICTION_RETRY_INTERVAL`] later,
//!   whatever triggers the next pass, unless the PodDisruptionBudget that refused it changed
//!   since, as its watch saw ([`Budget::relief_after`]).

mod act;
pub(crate) mod budget;
pub(crate) mod cancel;
pub(crate) mod deadline;
pub(crate) mod gate;
mod gone;
mod lanes;
pub(crate) mod migration;
pub(crate) mod opt_out;
pub(crate) mod pass;
pub(crate) mod pod;
mod preview;
pub(crate) mod requester;
pub(crate) mod responders;
pub(crate) mod rules;
pub(crate) mod volume_detach;

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Toleration;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::core::Status;

pub(crate) use act::{DrainError, Drainer};
pub(crate) use budget::{Budget, BudgetWatch, Budgets, Relief, SharedCause};
pub(crate) use pass::{DrainReport, Survey};
use pod::{DrainPod, OwnerRef};

use crate::api::{PodBlocker, PodReference};
use crate::node::{DRAIN_TAINT_KEY, NO_SCHEDULE, UNSCHEDULABLE_TAINT_KEY};

/// How long the drain waits, after a pod it evicted that tolerates both maintenance taints has
/// left, for its controller's replacement to be listed on the node (and named as kept) before
/// the maintenance may succeed: 10 s by the API server's clock (the pod lists' `Date`). The
/// replacement controller creates it within a second of the eviction and the scheduler binds it
/// within seconds; the timer only bounds a replacement that never comes (a scaled-down or deleted
/// owner, one scheduled elsewhere). At its edge the maintenance succeeds without it, and a
/// replacement landing later stays as any pod arriving after `Succeeded` does
/// (`docs/drain-contract.md` §2). Ours.
pub(crate) const REPLACEMENT_WAIT: Duration = Duration::from_secs(10);
/// Annotation that marks a mirror pod: the API server's copy of a kubelet static pod, which an
/// eviction cannot remove (kubectl's `mirror` filter).
pub(crate) const MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";
/// How long a pod may stay after its deletion was due (`metadata.deletionTimestamp`, which the
/// API server sets to the eviction time plus the pod's grace period) before it is reported as
/// `StuckTerminating`: 60 s, Karpenter's threshold for the same situation.
pub(crate) const STUCK_TERMINATING_MARGIN: Duration = Duration::from_secs(60);
/// Shortest time between two eviction requests for the same pod after one was refused
/// (upstream's `waitDurationOnDrainError`), unless the budget that refused it changed since
/// ([`RetrySchedule::release`]). Kept per pod UID in memory, not in the status.
pub(crate) const EVICTION_RETRY_INTERVAL: Duration = Duration::from_secs(5);
/// Shortest time between two eviction requests for a pod whose responder is evacuating it
/// ([`Answer::Evacuating`]): 30 s. Asking again only confirms what the first answer said
/// (KubeVirt answers `Evacuation in progress: ...` while `status.evacuationNodeName` is set, and
/// its evacuation controller retries a failed migration by itself); the pod leaving is noticed
/// by the round's listing, not by asking. The retry only bounds how long an evacuation someone
/// else withdrew goes unnoticed; while the pod carries [`EVICTION_IN_PROGRESS_ANNOTATION`] (its
/// responder's word that the evacuation goes on; KubeVirt derives it from the VMI's evacuation)
/// it is not asked again at all, as the descheduler does. Ours.
pub(crate) const EVACUATION_RETRY_INTERVAL: Duration = Duration::from_secs(30);
/// Pod annotation a responder sets once it has taken over a pod's eviction (the descheduler's
/// `EvictionsInBackground` contract; KubeVirt sets it on an evacuating virt-launcher pod).
pub(crate) const EVICTION_IN_PROGRESS_ANNOTATION: &str =
    "descheduler.alpha.kubernetes.io/eviction-in-progress";
/// Pod annotation of a pod whose eviction a responder intercepts and carries out in the
/// background (the descheduler's contract; informational here: the answer decides).
pub(crate) const REQUEST_EVICT_ONLY_ANNOTATION: &str =
    "descheduler.alpha.kubernetes.io/request-evict-only";
/// What a 429 says when its responder has started an evacuation: the descheduler's test for
/// an eviction in background, and the stem of KubeVirt's virt-api answers
/// (`Eviction triggered evacuation of VMI "<ns>/<vmi>"`, then
/// `Evacuation in progress: Eviction triggered evacuation of VMI "<ns>/<vmi>"`; KubeVirt's
/// `pod-eviction-admitter.go`).
pub(crate) const EVACUATION_TRIGGERED: &str = "Eviction triggered evacuation";
/// What KubeVirt's virt-api answers (429) for the launcher pod of a VMI whose eviction strategy
/// is `LiveMigrate` and that cannot migrate:
/// `VMI <vmi> is configured with an eviction strategy but is not live-migratable`.
pub(crate) const NOT_LIVE_MIGRATABLE: &str =
    "is configured with an eviction strategy but is not live-migratable";
/// Priority from which a pod is system-critical: the value of `system-cluster-critical`
/// (`system-node-critical` is 2 000 001 000). Only the two built-in classes and other `system-`
/// classes can reach it (user PriorityClasses are capped at 1 000 000 000); the kubelet's graceful
/// node shutdown keys its critical pods on the same value.
pub(crate) const SYSTEM_CRITICAL_PRIORITY: i32 = 2_000_000_000;
/// The built-in system-critical PriorityClasses, for pods whose `spec.priority` was not resolved
/// (the Priority admission plugin disabled).
pub(crate) const SYSTEM_CRITICAL_CLASSES: [&str; 2] =
    ["system-node-critical", "system-cluster-critical"];

/// Reasons a pod can still be on the node, as written to `status.blockers[].reason`.
pub(crate) mod reason {
    /// A PodDisruptionBudget refused the eviction (429 with a `DisruptionBudget` cause).
    pub(crate) const PDB: &str = "PodDisruptionBudget";
    /// More than one PodDisruptionBudget selects the pod; the API server refuses with 500.
    pub(crate) const MULTIPLE_PDBS: &str = "MultiplePodDisruptionBudgets";
    /// The pod's namespace is being deleted (403 with a `NamespaceTerminating` cause).
    pub(crate) const NAMESPACE_TERMINATING: &str = "NamespaceTerminating";
    /// Evicted (now or earlier); waiting for the kubelet to stop it.
    pub(crate) const TERMINATING: &str = "Terminating";
    /// Still on the node more than [`super::STUCK_TERMINATING_MARGIN`] after its deletion was due.
    pub(crate) const STUCK_TERMINATING: &str = "StuckTerminating";
    /// Another 429 (a webhook's rate limit, a responder's refusal of its own).
    pub(crate) const TOO_MANY_REQUESTS: &str = "TooManyRequests";
    /// A responder is moving the pod's workload away (a 429 saying
    /// [`super::EVACUATION_TRIGGERED`], or a 429 for a pod carrying
    /// [`super::EVICTION_IN_PROGRESS_ANNOTATION`]): progress, not an error; the pod goes once
    /// its workload has left (KubeVirt: once the VM has live-migrated).
    pub(crate) const EVACUATING: &str = "Evacuating";
    /// KubeVirt refuses: the VMI must live-migrate to leave and cannot
    /// ([`super::NOT_LIVE_MIGRATABLE`]). A hard blocker until the VM is stopped or changed.
    pub(crate) const NOT_MIGRATABLE: &str = "NotMigratable";
    /// The launcher pod's VMI: its live migration failed and the next has not started
    /// (KubeVirt's back-off; `drain::migration::show`).
    pub(crate) const MIGRATION_FAILED: &str = "MigrationFailed";
    /// Any other eviction failure.
    pub(crate) const EVICTION_ERROR: &str = "EvictionError";
    /// The eviction was sent and the API server has not answered yet (an admission webhook on
    /// `pods/eviction` may take up to 30 s, several in a row longer): waits for the answer,
    /// however long the API server takes, and is not asked again meanwhile.
    pub(crate) const EVICTING: &str = "Evicting";
    /// Evicted, gone, and its controller's replacement, which tolerates the maintenance taints,
    /// not listed yet: waits up to [`super::REPLACEMENT_WAIT`] for it to be named as kept.
    pub(crate) const AWAITING_REPLACEMENT: &str = "AwaitingReplacement";
    /// A system-critical pod, not evicted while an ordinary pod is still on the node.
    pub(crate) const SYSTEM_CRITICAL: &str = "SystemCritical";
    /// The operator's own pod, not evicted while any other evictable pod is still on the node.
    pub(crate) const OPERATOR_POD: &str = "OperatorPod";
    /// A pod of a higher drain order (`nodemaintenance.medik8s.io/drain`), not evicted while a
    /// pod of a lower order is still on the node.
    pub(crate) const DRAIN_ORDER: &str = "DrainOrder";
    /// Labelled `wait-completed`: never evicted; the drain waits until it finishes.
    pub(crate) const WAITING_FOR_COMPLETION: &str = "WaitingForCompletion";
    /// Not evicted until the drain deadline: an opt-out annotation holds it (`opt_out`).
    pub(crate) const OPTED_OUT: &str = "OptedOut";
    /// Kept (not evicted): labelled `skip`.
    pub(crate) const SKIPPED: &str = "Skipped";
    /// Kept (not evicted): the pod arrived after the drain started and tolerates both
    /// maintenance taints, so it is a replacement that would come back to the same node.
    pub(crate) const TOLERATES_MAINTENANCE: &str = "ToleratesMaintenanceTaints";
    /// Kept (no longer waited for): the drain deadline passed with `onTimeout: SkipStuck` and
    /// the pod's deletion is overdue.
    pub(crate) const DELETION_OVERDUE: &str = "DeletionOverdue";
    /// Deleted by the operator after the drain deadline (`onTimeout: ForceDelete`); waits for
    /// the pod to go.
    pub(crate) const FORCE_DELETED: &str = "ForceDeleted";
    /// The operator's DELETE after the drain deadline failed; retried after the retry interval.
    pub(crate) const FORCE_DELETE_FAILED: &str = "ForceDeleteFailed";
}

/// Result labels of an eviction request, as counted by `Metrics::eviction`.
pub(crate) mod result {
    use crate::metrics::EvictionResult;
    /// 2xx: the API server accepted the eviction.
    pub(crate) const EVICTED: EvictionResult = EvictionResult::evicted;
    /// 404, or the pod was replaced by a same-named one (UID precondition failed).
    pub(crate) const GONE: EvictionResult = EvictionResult::gone;
    /// 429 from a PodDisruptionBudget.
    pub(crate) const BLOCKED_PDB: EvictionResult = EvictionResult::blocked_pdb;
    /// 429 for another reason.
    pub(crate) const TOO_MANY_REQUESTS: EvictionResult = EvictionResult::too_many_requests;
    /// Anything else.
    pub(crate) const ERROR: EvictionResult = EvictionResult::error;
}

/// Settings of the drain beyond upstream's fixed ones.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct DrainOptions {
    /// The operator's own pod, evicted last ([`crate::config::Config::own_pod`]); `None` when
    /// `--pod-name`/`--pod-namespace` (`POD_NAME`/`POD_NAMESPACE`) are not both given.
    pub own_pod: Option<PodReference>,
    /// `--honor-opt-out-annotations`: the common opt-out annotations hold a pod ([`opt_out`]).
    pub honor_opt_out: bool,
}

/// When a pod is evicted relative to the others on its node: every pod of a stage leaves (is no
/// longer listed on the node) before any pod of a later stage is evicted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Stage {
    /// Everything not below, by its drain order (0 unless its [`DRAIN_LABEL`] gives a number):
    /// every pod of a lower order leaves before one of a higher order is evicted.
    Ordinary(i32),
    /// Running system-critical pods (DNS, network agents that are not DaemonSets), which the
    /// ordinary pods may need while they terminate; the kubelet's graceful node shutdown and
    /// Karpenter also stop them last.
    Critical,
    /// The operator's own pod: once it goes, the next instance on another node finishes.
    OwnPod,
}

/// What the drain does with one pod on the node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Disposition {
    /// Evict it, in `stage` order. `warnings` are kubectl's warning texts for pods it deletes only
    /// under `--force` / `--delete-emptydir-data` (logged, not an error).
    Evict {
        /// kubectl's warnings: `deleting Pods with local storage`,
        /// `deleting Pods that declare no controller`, or the DaemonSet NotFound text for an
        /// orphaned DaemonSet pod; and ours for a drain label of an unknown value.
        warnings: Vec<String>,
        /// When, relative to the node's other pods.
        stage: Stage,
    },
    /// Managed by an existing DaemonSet: left alone (`IgnoreAllDaemonSets`).
    SkipDaemonSet,
    /// A mirror pod of a static pod: left alone, silently.
    SkipMirror,
    /// Finished (`Succeeded` or `Failed`): it runs nothing the maintenance needs gone, and its
    /// record (exit status, logs) stays for whoever reads it. Left alone, silently.
    SkipFinished,
    /// Arrived after the drain started and tolerates both maintenance taints: a replacement that
    /// would land on this node again however often it is evicted, so it is left alone and
    /// reported once.
    KeepReplacement,
    /// Its drain label says `skip` ([`PodRule::Skip`]): left alone and reported once as kept.
    SkipByRule {
        /// The label that says so.
        label: &'static str,
    },
    /// Its drain label says `wait-completed` ([`PodRule::WaitCompleted`]): never evicted; the
    /// drain waits until it finishes.
    WaitCompleted {
        /// The label that says so.
        label: &'static str,
    },
    /// An opt-out annotation holds it ([`opt_out`]): not evicted until the drain deadline,
    /// then evicted in `stage` as `onTimeout` says.
    OptedOut {
        /// The annotation that holds it.
        annotation: &'static str,
        /// Its stage once the deadline releases it.
        stage: Stage,
    },
}

impl Disposition {
    /// Whether the pod is up for eviction.
    #[cfg(test)]
    pub(crate) fn evicts(&self) -> bool {
        matches!(self, Self::Evict { .. })
    }
    /// Whether the drain waits for the pod to leave the node (evicted, or finishing on its own):
    /// it counts in `evictionPods`.
    pub(crate) fn drains(&self) -> bool {
        matches!(
            self,
            Self::Evict { .. } | Self::WaitCompleted { .. } | Self::OptedOut { .. }
        )
    }
}

/// Pod label of a pod's own drain rule (ours): `skip`, `wait-completed`, or a drain order (an
/// integer; 0 without the label).
pub(crate) const DRAIN_LABEL: &str = "nodemaintenance.medik8s.io/drain";
/// Cluster API's pod label of the same meaning for `skip` and `wait-completed`
/// (`cluster.x-k8s.io/drain`, honoured by its Machine drain); [`DRAIN_LABEL`] wins when both
/// are set.
pub(crate) const CAPI_DRAIN_LABEL: &str = "cluster.x-k8s.io/drain";

/// A pod's own drain rule, from its labels ([`pod_rule`]). Mirrors Cluster API's
/// MachineDrainRule behaviours `Drain` (with `order`), `Skip` and `WaitCompleted`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PodRule {
    /// Evicted, in this drain order among the ordinary pods.
    Drain(i32),
    /// Never evicted, reported as kept.
    Skip(&'static str),
    /// Never evicted; the drain waits until it finishes (`Succeeded` or `Failed`).
    WaitCompleted(&'static str),
}

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

/// The API group of an `apiVersion` (`apps/v1` -> `apps`, `v1` -> the core group `""`).
pub(crate) fn api_group(api_version: &str) -> &str {
    api_version.rsplit_once('/').map_or("", |(group, _)| group)
}

/// The controller reference that makes a pod DaemonSet-managed, for a pod that is not finished:
/// group `apps` (any version) and kind `DaemonSet`. A `DaemonSet` kind of another group (a custom
/// resource) does not count: such a pod is drained like any other controlled pod. The caller
/// GETs the DaemonSet of that name in the pod's namespace and passes its UID to [`classify`],
/// which also requires it to equal the reference's UID (kubectl's drain checks kind and
/// apiVersion, but not the UID).
pub(crate) fn daemonset_owner(pod: &DrainPod) -> Option<&OwnerRef> {
    if pod.is_terminal() {
        return None;
    }
    pod.controller_ref()
        .filter(|o| o.kind == "DaemonSet" && api_group(&o.api_version) == "apps")
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
/// before it, everything else first, by `order` (its drain label's, [`pod_rule`]).
pub(crate) fn stage(pod: &DrainPod, options: &DrainOptions, order: i32) -> Stage {
    if is_own_pod(pod, options) {
        Stage::OwnPod
    } else if !pod.is_terminal() && is_system_critical(pod) {
        Stage::Critical
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
/// `daemonset_uid` is the UID of the DaemonSet named by [`daemonset_owner`] (`None`: not found);
/// it is ignored for other pods, and a UID other than the owner reference's counts as not found.
pub(crate) fn classify(
    pod: &DrainPod,
    daemonset_uid: Option<&str>,
    options: &DrainOptions,
    arrival: &Arrival,
) -> Disposition {
    let mut warnings = Vec::new();
    if let Some(ds) = daemonset_owner(pod) {
        if daemonset_uid == Some(ds.uid.as_str()) {
            return Disposition::SkipDaemonSet;
        }
        // kubectl with --force evicts the orphan and warns with the NotFound error text.
        warnings.push(format!("daemonsets.apps \"{}\" not found", ds.name));
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
    let stage = stage(pod, options, order);
    opt_out::apply(
        Disposition::Evict { warnings, stage },
        pod,
        options.honor_opt_out,
    )
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
                "drain order {order} ({DRAIN_LABEL}): evicted once every pod of a lower order has                  left the node"
            ),
        ),
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
    PodBlocker {
        namespace: pod.namespace.clone(),
        name: pod.name.clone(),
        reason: reason.to_string(),
        message: Some(message),
        ..PodBlocker::default()
    }
}

/// The status entry of a pod its drain label keeps ([`Disposition::SkipByRule`]).
pub(crate) fn skipped_by_rule(pod: &PodReference, label: &str) -> PodBlocker {
    PodBlocker {
        namespace: pod.namespace.clone(),
        name: pod.name.clone(),
        reason: reason::SKIPPED.to_string(),
        message: Some(format!("not evicted: {}", rules::says(label, "skip"))),
        ..PodBlocker::default()
    }
}

/// The blocker of a pod its drain label says to wait for ([`Disposition::WaitCompleted`]).
pub(crate) fn waiting_for_completion(pod: &PodReference, label: &str) -> PodBlocker {
    PodBlocker {
        namespace: pod.namespace.clone(),
        name: pod.name.clone(),
        reason: reason::WAITING_FOR_COMPLETION.to_string(),
        message: Some(format!(
            "{}: not evicted; the drain waits until it finishes",
            rules::says(label, "wait-completed")
        )),
        ..PodBlocker::default()
    }
}

/// The status entry of a pod left on the node on purpose ([`Disposition::KeepReplacement`]).
pub(crate) fn skipped_entry(pod: &PodReference) -> PodBlocker {
    PodBlocker {
        namespace: pod.namespace.clone(),
        name: pod.name.clone(),
        reason: reason::TOLERATES_MAINTENANCE.to_string(),
        message: Some(format!(
            "not evicted: the pod arrived after the drain started and tolerates \
             {UNSCHEDULABLE_TAINT_KEY}:{NO_SCHEDULE} and {DRAIN_TAINT_KEY}:{NO_SCHEDULE}, so it is \
             a replacement that would be scheduled onto this node again however often it is \
             evicted"
        )),
        ..PodBlocker::default()
    }
}

/// The drain's memory of one node, by pod UID: the retry schedule (after a refused eviction the
/// pod is not asked again before [`EVICTION_RETRY_INTERVAL`] has passed, whatever triggered the
/// pass: our own status write, node patch or lease renewal included), the evictions sent and not
/// yet answered, the kept pods already announced, the drain's first listing ([`Arrival`]), and
/// the replacements awaited ([`REPLACEMENT_WAIT`]). Read into each round's observation; the
/// round's pure decisions say what it becomes ([`pass::settle`]), and each eviction's answer is
/// recorded as it arrives ([`RetrySchedule::answered`]). Lost on restart: the first pass of a new
/// process asks each pending pod once more, then the schedule applies again.
#[derive(Clone, Debug, Default)]
pub(crate) struct RetrySchedule {
    entries: HashMap<String, RetryEntry>,
    announced: HashMap<String, String>,
    /// Pods already named in a `NotMigratable` Warning, with their node, by UID.
    warned: HashMap<String, String>,
    in_flight: HashSet<String>,
    first_listing: Option<(i64, HashSet<String>)>,
    awaited: HashMap<String, Awaited>,
    shared: HashMap<SharedCause, SharedEntry>,
    /// Pods deleted after the drain deadline, with their `ForceDeleted` blocker, by UID.
    forced: HashMap<String, (String, PodBlocker)>,
    /// Pods whose eviction the API server accepted (or answered gone), with their node and the
    /// answer's blocker, by UID: a listing that still shows one of them not terminating was taken
    /// before that answer, so the pod is not asked again (`docs/drain-contract.md` §4).
    accepted: HashMap<String, (String, Option<PodBlocker>)>,
}

/// The last refusal that named a cause many pods share ([`SharedCause`]): until `due`, the
/// other pods it covers are held by it without a request of their own (`docs/drain-contract.md`
/// §1).
#[derive(Clone, Debug)]
pub(crate) struct SharedEntry {
    /// The node whose drain was refused.
    pub node: String,
    /// When one of its pods may be asked again.
    pub due: Instant,
    /// The refusal's blocker (of the pod that was asked).
    pub blocker: PodBlocker,
    /// The API server's error text of the refusal (`error_text`), for each held pod's lastError.
    pub error: Option<String>,
}

impl SharedEntry {
    /// The refusal as it stands for `pod`: its blocker and upstream-format error text.
    pub(crate) fn for_pod(&self, pod: &PodReference) -> (PodBlocker, Option<String>) {
        let blocker = PodBlocker {
            namespace: pod.namespace.clone(),
            name: pod.name.clone(),
            ..self.blocker.clone()
        };
        let error = self.error.as_deref().map(|e| evicting_error(pod, e));
        (blocker, error)
    }
}

#[derive(Clone, Debug)]
struct RetryEntry {
    node: String,
    due: Instant,
    blocker: PodBlocker,
    error: Option<String>,
    /// The cause many pods share that the refusal named.
    shared: Option<SharedCause>,
}

/// A pod evicted from the node that tolerates both maintenance taints, whose controller's
/// replacement is awaited on the node (kept by the pod's UID).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Awaited {
    /// The evicted pod.
    pub pod: PodReference,
    /// The UID of its controller (the replacement has the same).
    pub owner: String,
    /// The last time a listing showed it, by the API server's clock.
    pub last_seen: jiff::Timestamp,
}

impl RetrySchedule {
    /// The blocker and lastError text of the last refusal, to keep reporting for pod `uid` while
    /// its retry is not due at `now`; `None` when it may be evicted.
    pub(crate) fn held(&self, uid: &str, now: Instant) -> Option<(&PodBlocker, Option<&str>)> {
        self.entries
            .get(uid)
            .filter(|e| e.due > now)
            .map(|e| (&e.blocker, e.error.as_deref()))
    }
    /// The blocker of the last refusal of pod `uid`, due or not.
    pub(crate) fn last_refusal(&self, uid: &str) -> Option<&PodBlocker> {
        self.entries.get(uid).map(|e| &e.blocker)
    }
    /// What status shows for pod `uid` while its eviction is sent and unanswered: its last
    /// refusal (blocker and lastError text) when it was refused before, so a budget's probe,
    /// asked again each retry, stays named with the budget that holds it instead of flipping to
    /// `Evicting` for the milliseconds of each ask (docs/drain-contract.md §1); else
    /// [`evicting`] and no error.
    pub(crate) fn asking(&self, pod: &PodReference, uid: &str) -> (PodBlocker, Option<String>) {
        match self.entries.get(uid) {
            Some(e) => (e.blocker.clone(), e.error.clone()),
            None => (evicting(pod), None),
        }
    }
    /// Records the outcome of an eviction of pod `uid` on `node`: a refusal (a blocker other than
    /// `Terminating`) schedules the next try one interval after `now`; anything else clears it.
    /// A refusal that names a cause many pods share also holds those pods until the same time
    /// ([`Self::shared`]).
    pub(crate) fn record(
        &mut self,
        uid: &str,
        node: &str,
        outcome: &EvictionOutcome,
        now: Instant,
    ) {
        match (&outcome.blocker, outcome.retry) {
            (Some(b), Some(retry)) => {
                self.entries.insert(
                    uid.to_string(),
                    RetryEntry {
                        node: node.to_string(),
                        due: now + retry,
                        blocker: b.clone(),
                        error: outcome.error.clone(),
                        shared: outcome.shared.clone(),
                    },
                );
                if let Some(cause) = &outcome.shared {
                    let entry = SharedEntry {
                        node: node.to_string(),
                        due: now + retry,
                        blocker: b.clone(),
                        error: outcome.api_error.clone(),
                    };
                    self.shared.insert(cause.clone(), entry);
                }
            }
            _ => {
                self.entries.remove(uid);
            }
        }
    }
    /// The last refusal that named `cause`, while it still holds the pods it covers at `now`.
    pub(crate) fn shared(&self, cause: &SharedCause, now: Instant) -> Option<&SharedEntry> {
        self.shared.get(cause).filter(|e| e.due > now)
    }
    /// Ends what `relief` says of the refusals naming its budget: the hold on the pods no
    /// request was sent for (`hold`), the retries of the pods it refused (`retries`: the probe's
    /// included, often the only pod of its budget on a node; Ready pods refused too, which only
    /// a hold still due keeps from being asked: where none is left, one may be asked early into
    /// a 429). Whether anything was held. Scans the node's
    /// retries only when `retries` (a change of the budget, rare).
    pub(crate) fn release(&mut self, relief: &Relief) -> bool {
        let mut released = false;
        if relief.retries {
            let before = self.entries.len();
            self.entries
                .retain(|_, e| e.shared.as_ref() != Some(&relief.cause));
            released = self.entries.len() != before;
        }
        if relief.hold {
            released |= self.shared.remove(&relief.cause).is_some();
        }
        released
    }
    /// The last refusal that named `cause`, due or not (its texts, for pods held by it).
    pub(crate) fn last_shared(&self, cause: &SharedCause) -> Option<&SharedEntry> {
        self.shared.get(cause)
    }
    /// The `ForceDeleted` blocker of pod `uid`, when the drain deleted it after its deadline.
    pub(crate) fn forced(&self, uid: &str) -> Option<&PodBlocker> {
        self.forced.get(uid).map(|(_, b)| b)
    }
    /// The answer to the forced DELETE of `uid` on `node`: a failure (`error`, the API server's
    /// text) is held as a refusal is, and the pod is deleted again once the retry is due.
    pub(crate) fn force_answered(
        &mut self,
        uid: &str,
        node: &str,
        error: Option<&str>,
        now: Instant,
    ) {
        let Some(error) = error else { return };
        let Some((_, b)) = self.forced.remove(uid) else {
            return;
        };
        let pod = PodReference {
            namespace: b.namespace.clone(),
            name: b.name.clone(),
        };
        self.entries.insert(
            uid.to_string(),
            RetryEntry {
                node: node.to_string(),
                due: now + deadline::FORCE_DELETE_RETRY,
                blocker: deadline::force_delete_failed(&pod, error),
                error: Some(format!(
                    "error when deleting pod \"{}\" in namespace \"{}\": {error}",
                    pod.name, pod.namespace
                )),
                shared: None,
            },
        );
    }
    /// Whether an eviction of `uid` was sent and not answered yet.
    pub(crate) fn in_flight(&self, uid: &str) -> bool {
        self.in_flight.contains(uid)
    }
    /// Whether some eviction of this node is in flight.
    pub(crate) fn any_in_flight(&self) -> bool {
        !self.in_flight.is_empty()
    }
    /// Marks the eviction of `uid` as sent.
    pub(crate) fn sent(&mut self, uid: &str) {
        self.in_flight.insert(uid.to_string());
    }
    /// The answer to the eviction of `uid` (`None`: it was not sent after all, the maintenance
    /// ended first): no longer in flight, and a refusal held as [`Self::record`] says.
    /// An accepted eviction of a pod that `awaits` a replacement records that wait.
    /// An accepted eviction of a pod the round found covered by a shared `cause` ends that
    /// cause's hold: the cause allowed it, so its other pods are asked as the round decides.
    /// Returns whether it ended a hold (the next round then asks what the hold kept back).
    pub(crate) fn answered(
        &mut self,
        uid: &str,
        node: &str,
        outcome: Option<&EvictionOutcome>,
        planned: Option<(&Option<Awaited>, &Option<SharedCause>)>,
        now: Instant,
    ) -> bool {
        let mut ended_hold = false;
        self.in_flight.remove(uid);
        if let Some(o) = outcome {
            self.record(uid, node, o, now);
            if o.result == result::EVICTED || o.result == result::GONE {
                self.accepted
                    .insert(uid.to_string(), (node.to_string(), o.blocker.clone()));
            }
            if o.result == result::EVICTED
                && let Some((awaits, cause)) = planned
            {
                if let Some(a) = awaits {
                    self.awaited.insert(uid.to_string(), a.clone());
                }
                if let Some(c) = cause {
                    ended_hold = self.shared.remove(c).is_some();
                }
            }
        }
        ended_hold
    }
    /// The drain's first listing of tolerating pods, when it was taken for the drain that started
    /// at `started` (whole seconds).
    pub(crate) fn first_listing(
        &self,
        started: Option<jiff::Timestamp>,
    ) -> Option<&HashSet<String>> {
        let (at, seen) = self.first_listing.as_ref()?;
        (Some(*at) == started.map(|s| s.as_second())).then_some(seen)
    }
    /// The replacements awaited, by the controller UID of the evicted pod.
    pub(crate) fn awaited(&self) -> &HashMap<String, Awaited> {
        &self.awaited
    }
    /// Forgets the pods of `node` that are not in `listed` (gone, or no longer up for eviction).
    pub(crate) fn retain(&mut self, node: &str, listed: &HashSet<String>) {
        self.entries
            .retain(|uid, e| e.node != node || listed.contains(uid));
        self.announced
            .retain(|uid, n| n != node || listed.contains(uid));
        self.warned
            .retain(|uid, n| n != node || listed.contains(uid));
        self.forced
            .retain(|uid, (n, _)| n != node || listed.contains(uid));
        self.accepted
            .retain(|uid, (n, _)| n != node || listed.contains(uid));
    }
    /// Whether the eviction of `uid` was accepted (or answered gone), with the answer's blocker:
    /// a listing that shows the pod not terminating predates the answer.
    pub(crate) fn accepted(&self, uid: &str) -> Option<Option<&PodBlocker>> {
        self.accepted.get(uid).map(|(_, b)| b.as_ref())
    }
    /// Time until the earliest retry due on `node`, `None` when none is scheduled.
    /// Retries already due are not counted: their pods are asked by the round that reads them,
    /// and their answers wake the next one.
    pub(crate) fn next_due(&self, node: &str, now: Instant) -> Option<Duration> {
        let pods = self
            .entries
            .values()
            .filter(|e| e.node == node)
            .map(|e| e.due);
        let shared = self
            .shared
            .values()
            .filter(|e| e.node == node)
            .map(|e| e.due);
        pods.chain(shared)
            .filter(|due| *due > now)
            .map(|due| due - now)
            .min()
    }
    /// Whether nothing is remembered.
    pub(crate) fn is_empty(&self) -> bool {
        self.entries.is_empty()
            && self.announced.is_empty()
            && self.warned.is_empty()
            && self.in_flight.is_empty()
            && self.accepted.is_empty()
            && self.first_listing.is_none()
            && self.awaited.is_empty()
            && self.shared.is_empty()
            && self.forced.is_empty()
    }
    /// Applies what a round settled ([`pass::Settled`]), keeping the answers that arrived
    /// since the round read the memory: entries of pods no longer listed forgotten, the kept
    /// pods announced, the first listing and the awaited replacements replaced (forgotten once
    /// the drain is done).
    pub(crate) fn apply(&mut self, node: &str, settled: pass::Settled) {
        self.retain(node, &settled.listed);
        for uid in &settled.kept {
            self.announce(uid, node);
        }
        for uid in &settled.warned {
            self.warn(uid, node);
        }
        for (uid, b) in settled.forced {
            self.entries.remove(&uid);
            self.forced.insert(uid, (node.to_string(), b));
        }
        if settled.first_listing.is_some() {
            self.first_listing = settled.first_listing;
        }
        self.awaited
            .retain(|uid, _| !settled.read_awaited.contains(uid));
        self.awaited.extend(settled.awaited);
        if settled.done {
            self.first_listing = None;
            self.awaited.clear();
            self.shared.clear();
        }
    }
    /// Whether skipped pod `uid` is reported for the first time (for its one event).
    pub(crate) fn announce(&mut self, uid: &str, node: &str) -> bool {
        self.announced
            .insert(uid.to_string(), node.to_string())
            .is_none()
    }
    /// Whether not-migratable pod `uid` is reported for the first time (for its one Warning).
    pub(crate) fn warn(&mut self, uid: &str, node: &str) -> bool {
        self.warned
            .insert(uid.to_string(), node.to_string())
            .is_none()
    }
}

/// The drain's memory of every node, by node name ([`RetrySchedule`]); owned by the
/// controller's memory (`crate::controller::memory::Memories`), read and written by the drain.
pub(crate) type DrainMemory = std::sync::Arc<std::sync::Mutex<HashMap<String, RetrySchedule>>>;

/// How one eviction request ended, decided from the API server's answer alone.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct EvictionOutcome {
    /// Metrics label, one of [`result`]'s constants.
    pub result: crate::metrics::EvictionResult,
    /// Why the pod stays, when it does (namespace and name filled from the pod). For an accepted
    /// eviction this is a `Terminating` blocker: the pod is gone only once it is no longer listed.
    pub blocker: Option<PodBlocker>,
    /// Upstream's lastError text for a failed eviction:
    /// `error when evicting pods/"<pod>" -n "<ns>": <err>`.
    pub error: Option<String>,
    /// The API server's part of `error` (`<err>`), for the other pods a shared refusal holds.
    pub api_error: Option<String>,
    /// Shortest time before the pod is asked again; `None`: it is not (accepted, or gone).
    pub retry: Option<Duration>,
    /// The cause many pods share that the refusal names, if any: one request stands for all
    /// of them until the retry is due.
    pub shared: Option<SharedCause>,
}

/// The kinds of answer to an eviction request, as [`classify_eviction`] reads them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Answer {
    /// 2xx: accepted.
    Evicted,
    /// 404, or 409 from the UID precondition (a same-named pod replaced it).
    Gone,
    /// 429 with a `DisruptionBudget` cause.
    Budget,
    /// A 429 that says its responder is evacuating the pod ([`EVACUATION_TRIGGERED`]), or any
    /// other 429 for a pod carrying [`EVICTION_IN_PROGRESS_ANNOTATION`].
    Evacuating,
    /// KubeVirt's 429 for a VMI that must live-migrate and cannot ([`NOT_LIVE_MIGRATABLE`]).
    NotMigratable,
    /// Another 429 (a webhook's rate limit).
    TooManyRequests,
    /// 500 "This pod has more than one PodDisruptionBudget".
    MultipleBudgets,
    /// 403 with a `NamespaceTerminating` cause.
    NamespaceTerminating,
    /// Anything else (a webhook's denial, a transport error).
    Error,
}

/// One row of the answer table: what an answer means for the pod and the round after it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Meaning {
    /// Metrics label.
    pub result: crate::metrics::EvictionResult,
    /// `status.blockers[].reason` while the pod stays; `None`: it is gone.
    pub reason: Option<&'static str>,
    /// Shortest time before the pod is asked again; `None`: never (accepted, or gone).
    pub retry: Option<Duration>,
    /// Whether it is an error (`lastError`, upstream's text).
    pub error: bool,
    /// Whether the refusal names a cause many pods share ([`SharedCause`]).
    pub shared: bool,
}

/// The answer table (`docs/drain-contract.md` §4): answer → blocker reason, retry interval,
/// error or not, shared or not. Every decision about an answer reads it; the retry interval is
/// upstream's `waitDurationOnDrainError` (5 s) for every refusal but an evacuation's
/// ([`EVACUATION_RETRY_INTERVAL`]), which is progress, not an error (§4a).
pub(crate) const fn meaning(answer: Answer) -> Meaning {
    const fn refused(
        result: crate::metrics::EvictionResult,
        reason: &'static str,
        shared: bool,
    ) -> Meaning {
        Meaning {
            result,
            reason: Some(reason),
            retry: Some(EVICTION_RETRY_INTERVAL),
            error: true,
            shared,
        }
    }
    match answer {
        Answer::Evicted => Meaning {
            result: result::EVICTED,
            reason: Some(reason::TERMINATING),
            retry: None,
            error: false,
            shared: false,
        },
        Answer::Gone => Meaning {
            result: result::GONE,
            reason: None,
            retry: None,
            error: false,
            shared: false,
        },
        Answer::Budget => refused(result::BLOCKED_PDB, reason::PDB, true),
        Answer::Evacuating => Meaning {
            result: result::TOO_MANY_REQUESTS,
            reason: Some(reason::EVACUATING),
            retry: Some(EVACUATION_RETRY_INTERVAL),
            error: false,
            shared: false,
        },
        Answer::NotMigratable => refused(result::TOO_MANY_REQUESTS, reason::NOT_MIGRATABLE, false),
        Answer::TooManyRequests => {
            refused(result::TOO_MANY_REQUESTS, reason::TOO_MANY_REQUESTS, false)
        }
        Answer::MultipleBudgets => refused(result::ERROR, reason::MULTIPLE_PDBS, false),
        Answer::NamespaceTerminating => refused(result::ERROR, reason::NAMESPACE_TERMINATING, true),
        Answer::Error => refused(result::ERROR, reason::EVICTION_ERROR, false),
    }
}

/// Go's `err.Error()` for an API error is the Status message; other errors print as kube prints
/// them.
pub(crate) fn error_text(err: &kube::Error) -> String {
    match err {
        kube::Error::Api(s) if !s.message.is_empty() => s.message.clone(),
        kube::Error::Api(s) => format!("{} ({})", s.reason, s.code),
        other => other.to_string(),
    }
}

/// Upstream's lastError text of a refused eviction of `pod` (kubectl's drain library).
pub(crate) fn evicting_error(pod: &PodReference, error: &str) -> String {
    format!(
        "error when evicting pods/\"{}\" -n \"{}\": {error}",
        pod.name, pod.namespace
    )
}

fn cause<'a>(status: &'a Status, kind: &str) -> Option<&'a str> {
    status
        .details
        .as_ref()?
        .causes
        .iter()
        .find(|c| c.reason == kind)
        .map(|c| c.message.as_str())
}

/// Parsed `DisruptionBudget` cause of a 429: the budget's name and, in the
/// `The disruption budget <pdb> needs <desired> healthy pods and has <current> currently` form,
/// the healthy pods it needs and has. Also accepts `… is still being processed by the server.`
/// and `… does not allow evicting pods currently …` (no counts).
pub(crate) fn parse_pdb_cause(message: &str) -> Option<(String, Option<i32>, Option<i32>)> {
    let rest = message.strip_prefix("The disruption budget ")?;
    let (name, rest) = rest.split_once(' ')?;
    let counts = rest
        .strip_prefix("needs ")
        .and_then(|r| r.split_once(" healthy pods and has "))
        .and_then(|(desired, r)| {
            let current = r.split_whitespace().next()?;
            Some((desired.parse().ok()?, current.parse().ok()?))
        });
    Some((name.to_string(), counts.map(|c| c.0), counts.map(|c| c.1)))
}

/// Which row of the answer table an answer is: 2xx evicted, 404 gone, 409 from the UID
/// precondition gone, 429 with a `DisruptionBudget` cause a budget, a 429 saying
/// [`EVACUATION_TRIGGERED`] evacuating, one saying [`NOT_LIVE_MIGRATABLE`] not migratable, any
/// other 429 evacuating when the pod carries the in-progress annotation (`in_progress`: its
/// responder has taken over) and too many requests otherwise, 500 "more than one
/// PodDisruptionBudget" multiple budgets, 403 with a `NamespaceTerminating` cause namespace
/// terminating, anything else an error.
pub(crate) fn answer_of(answer: Result<(), &kube::Error>, in_progress: bool) -> Answer {
    let Err(err) = answer else {
        return Answer::Evicted;
    };
    let kube::Error::Api(status) = err else {
        return Answer::Error;
    };
    match status.code {
        _ if status.is_not_found() => Answer::Gone,
        _ if status.is_conflict() && status.message.contains("Precondition failed") => Answer::Gone,
        429 if cause(status, "DisruptionBudget").is_some() => Answer::Budget,
        429 if status.message.contains(EVACUATION_TRIGGERED) => Answer::Evacuating,
        429 if status.message.contains(NOT_LIVE_MIGRATABLE) => Answer::NotMigratable,
        429 if in_progress => Answer::Evacuating,
        429 => Answer::TooManyRequests,
        500 if status.message.contains("more than one PodDisruptionBudget") => {
            Answer::MultipleBudgets
        }
        403 if cause(status, "NamespaceTerminating").is_some() => Answer::NamespaceTerminating,
        _ => Answer::Error,
    }
}

/// Classifies the answer to an eviction of `pod` through the answer table ([`meaning`]): the
/// blocker with the API server's text (a budget's name and healthy counts parsed from its
/// cause), upstream's lastError text (none for an evacuation), the retry and the shared cause.
/// `in_progress`: the pod carried [`EVICTION_IN_PROGRESS_ANNOTATION`] when the round listed it.
/// Never retries: the next pass does.
pub(crate) fn classify_eviction(
    pod: &PodReference,
    in_progress: bool,
    answer: Result<(), &kube::Error>,
) -> EvictionOutcome {
    let kind = answer_of(answer, in_progress);
    let row = meaning(kind);
    let api_error = answer.err().map(error_text);
    let status = match answer {
        Err(kube::Error::Api(s)) => Some(s),
        _ => None,
    };
    let message = match (kind, status) {
        (Answer::Evicted, _) => "evicted; waiting for the pod to terminate".to_string(),
        (Answer::Budget, Some(s)) => format!(
            "{}: {}",
            s.message,
            cause(s, "DisruptionBudget").unwrap_or_default()
        ),
        (
            Answer::TooManyRequests
            | Answer::Evacuating
            | Answer::NotMigratable
            | Answer::MultipleBudgets
            | Answer::NamespaceTerminating,
            Some(s),
        ) => s.message.clone(),
        _ => api_error.clone().unwrap_or_default(),
    };
    let mut blocker = row.reason.map(|reason| PodBlocker {
        namespace: pod.namespace.clone(),
        name: pod.name.clone(),
        reason: reason.to_string(),
        message: Some(message),
        ..PodBlocker::default()
    });
    let mut shared = None;
    if kind == Answer::Budget
        && let Some((pdb, desired, current)) = status
            .and_then(|s| cause(s, "DisruptionBudget"))
            .and_then(parse_pdb_cause)
        && let Some(b) = blocker.as_mut()
    {
        b.desired_healthy = desired;
        b.current_healthy = current;
        shared = Some(SharedCause::Budget {
            namespace: pod.namespace.clone(),
            name: pdb.clone(),
        });
        b.pod_disruption_budget = Some(pdb);
    }
    if kind == Answer::NamespaceTerminating {
        shared = Some(SharedCause::NamespaceTerminating {
            namespace: pod.namespace.clone(),
        });
    }
    EvictionOutcome {
        result: row.result,
        blocker,
        error: row
            .error
            .then(|| evicting_error(pod, api_error.as_deref().unwrap_or_default())),
        api_error: api_error.filter(|_| row.error),
        retry: row.retry,
        shared: shared.filter(|_| row.shared),
    }
}

/// The blocker of a pod whose eviction was sent and not yet answered ([`reason::EVICTING`]).
/// No time in the text: the status is rewritten only when it changes.
pub(crate) fn evicting(pod: &PodReference) -> PodBlocker {
    PodBlocker {
        namespace: pod.namespace.clone(),
        name: pod.name.clone(),
        reason: reason::EVICTING.to_string(),
        message: Some(
            "eviction requested; waiting for the API server's answer (an admission webhook on \
             pods/eviction may be slow)"
                .to_string(),
        ),
        ..PodBlocker::default()
    }
}

/// The blocker of an evicted pod, gone from the node, whose controller's replacement is awaited
/// ([`reason::AWAITING_REPLACEMENT`]).
pub(crate) fn awaiting_replacement(pod: &PodReference) -> PodBlocker {
    PodBlocker {
        namespace: pod.namespace.clone(),
        name: pod.name.clone(),
        reason: reason::AWAITING_REPLACEMENT.to_string(),
        message: Some(format!(
            "evicted and gone; it tolerates the maintenance taints, so its controller's \
             replacement may be scheduled back onto this node: waiting up to {}s for it, to name \
             it as kept",
            REPLACEMENT_WAIT.as_secs()
        )),
        ..PodBlocker::default()
    }
}

/// The blocker of a pod that is already terminating (deletionTimestamp set): `Terminating`, or
/// `StuckTerminating` once `now` is more than [`STUCK_TERMINATING_MARGIN`] past its
/// deletionTimestamp. The API server sets deletionTimestamp to the deletion time plus the grace
/// period, so this is "terminating for longer than its grace period plus 60 s". `None` when the
/// pod is not terminating.
pub(crate) fn terminating_blocker(pod: &DrainPod, now: jiff::Timestamp) -> Option<PodBlocker> {
    let due = pod.metadata.deletion_timestamp.as_ref()?.0;
    let grace = pod
        .metadata
        .deletion_grace_period_seconds
        .or(pod.spec.termination_grace_period_seconds)
        .unwrap_or(30);
    let overdue = now.duration_since(due).as_secs();
    let mut b = PodBlocker {
        namespace: pod.metadata.namespace.clone(),
        name: pod.metadata.name.clone(),
        reason: reason::TERMINATING.to_string(),
        message: Some(format!("terminating (grace period {grace}s, due at {due})")),
        ..PodBlocker::default()
    };
    if overdue > STUCK_TERMINATING_MARGIN.as_secs() as i64 {
        let finalizers = &pod.metadata.finalizers;
        // No live counter in the text: the status is rewritten only when it changes, and every
        // write triggers another reconcile.
        let mut msg = format!(
            "stuck terminating: still on the node more than {}s after its grace period of \
             {grace}s ended at {due}; is the node's kubelet running?",
            STUCK_TERMINATING_MARGIN.as_secs()
        );
        if !finalizers.is_empty() {
            msg.push_str(&format!(" finalizers: {}", finalizers.join(", ")));
        }
        b.reason = reason::STUCK_TERMINATING.to_string();
        b.message = Some(msg);
    }
    Some(b)
}

/// Whether a label selector selects a pod with `labels` (policy/v1 semantics: an empty selector
/// selects everything, an absent one nothing; the caller handles the absent case). A selector
/// kube cannot evaluate (an unknown operator, `In` without values) selects nothing.
pub(crate) fn selector_matches(
    selector: &LabelSelector,
    labels: &std::collections::BTreeMap<String, String>,
) -> bool {
    use kube::core::{Selector, SelectorExt};
    Selector::try_from(selector.clone()).is_ok_and(|s| s.matches(labels))
}

/// `utilerrors.NewAggregate(errs).Error()`: `None` for none, the text itself for one,
/// `[e1, e2]` for several (duplicates dropped, order kept). Bounded (ours): at most
/// [`crate::bounds::MAX_ERRORS`] texts, each cut to [`bounds::MAX_ERROR`] bytes, then
/// `and N more errors` inside the brackets.
pub(crate) fn aggregate_errors(errors: &[String]) -> Option<String> {
    let mut seen = std::collections::HashSet::new();
    let unique: Vec<&str> = errors
        .iter()
        .filter(|e| seen.insert(e.as_str()))
        .map(String::as_str)
        .collect();
    let mut shown: Vec<String> = unique
        .iter()
        .take(crate::bounds::MAX_ERRORS)
        .map(|e| crate::bounds::truncate(e, crate::bounds::MAX_ERROR))
        .collect();
    if unique.len() > crate::bounds::MAX_ERRORS {
        shown.push(format!(
            "and {} more errors",
            unique.len() - crate::bounds::MAX_ERRORS
        ));
    }
    match shown.as_slice() {
        [] => None,
        [one] => Some(one.clone()),
        many => Some(format!("[{}]", many.join(", "))),
    }
}

/// Convenience for callers that only need the pod references of blockers.
pub(crate) fn refs(blockers: &[PodBlocker]) -> Vec<PodReference> {
    blockers
        .iter()
        .map(|b| PodReference {
            namespace: b.namespace.clone(),
            name: b.name.clone(),
        })
        .collect()
}

#[cfg(test)]
pub(crate) mod tests;
