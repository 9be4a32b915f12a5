//! The drain's vocabulary: its time limits, the annotations and labels it reads, the blocker
//! reasons it writes (`status.blockers[].reason`) and the result labels of its evictions. A leaf:
//! every drain file may use it; it uses no other.

use std::time::Duration;

/// Deadline of one read (a pod-list page, a DaemonSet or namespace GET, a workload read of
/// `surge`, a discovery request).
pub(crate) const READ_TIMEOUT: Duration = Duration::from_secs(15);
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
    /// A DaemonSet pod (`daemonSets: EvictLast`), not evicted while an ordinary pod is still
    /// on the node.
    pub(crate) const DAEMON_SET: &str = "DaemonSetLast";
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
    /// `surge: RolloutRestart`: the pod's Deployment was restarted for this maintenance; the
    /// drain waits until the Deployment replaces the pod (`super::super::surge`).
    pub(crate) const SURGING: &str = "Surging";
    /// `surge: RolloutRestart`: the pod's Deployment cannot surge (Recreate, maxSurge 0,
    /// paused), so it is neither evicted nor restarted.
    pub(crate) const CANNOT_SURGE: &str = "CannotSurge";
    /// `surge: RolloutRestart`: the restarted Deployment's rollout cannot progress.
    pub(crate) const SURGE_STUCK: &str = "SurgeStuck";
    /// An Eviction's `Active` responder is at work on the pod (`drain::responders`): progress,
    /// not an error, like [`EVACUATING`].
    pub(crate) const EVICTION_RESPONDER: &str = "EvictionResponder";
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

    /// Whether a blocker `reason` is a responder moving the pod away ([`EVACUATING`] or
    /// [`EVICTION_RESPONDER`]): counted in `status.evacuatingPods`, and a drain held only by
    /// such pods is `PodsEvacuating`, not `EvictionBlocked`.
    pub(crate) fn moving(reason: &str) -> bool {
        reason == EVACUATING || reason == EVICTION_RESPONDER
    }
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

/// Pod label of a pod's own drain rule (ours): `skip`, `wait-completed`, or a drain order (an
/// integer; 0 without the label).
pub(crate) const DRAIN_LABEL: &str = "nodemaintenance.medik8s.io/drain";
/// Cluster API's pod label of the same meaning for `skip` and `wait-completed`
/// (`cluster.x-k8s.io/drain`, honoured by its Machine drain); [`DRAIN_LABEL`] wins when both
/// are set.
pub(crate) const CAPI_DRAIN_LABEL: &str = "cluster.x-k8s.io/drain";
/// The label name the status shows for a pod a rule keeps or waits for (in place of the pod's
/// own drain label).
pub(crate) const DRAIN_RULES: &str = "spec.drainRules";
