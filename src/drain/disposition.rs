//! The types every per-pod decision returns: what the drain does with one pod
//! ([`Disposition`]), when relative to the node's other pods ([`Stage`]), the pod's own rule
//! ([`PodRule`]) and the drain's settings ([`DrainOptions`]). A leaf: types only.

use crate::api::{DaemonSets, PodReference};

/// Settings of the drain beyond upstream's fixed ones.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct DrainOptions {
    /// The operator's own pod, evicted last ([`crate::config::Config::own_pod`]); `None` when
    /// `--pod-name`/`--pod-namespace` (`POD_NAME`/`POD_NAMESPACE`) are not both given.
    pub own_pod: Option<PodReference>,
    /// `--honor-opt-out-annotations`: the common opt-out annotations hold a pod ([`opt_out`]).
    pub honor_opt_out: bool,
    /// The maintenance's `daemonSets` knob (`Ignore`: DaemonSet pods stay; `EvictLast`: they
    /// are drained in [`Stage::DaemonSet`], [`super::daemon_sets`]). Per maintenance: the
    /// process's options carry the default, [`DrainOptions::with_daemon_sets`] its own.
    pub daemon_sets: DaemonSets,
}

impl DrainOptions {
    /// These options under a maintenance whose `daemonSets` knob resolved to `daemon_sets`.
    pub(crate) fn with_daemon_sets(&self, daemon_sets: DaemonSets) -> Self {
        Self {
            daemon_sets,
            ..self.clone()
        }
    }
}

/// When a pod is evicted relative to the others on its node: every pod of a stage leaves (is no
/// longer listed on the node) before any pod of a later stage is evicted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Stage {
    /// Everything not below, by its drain order (0 unless its [`DRAIN_LABEL`] gives a number):
    /// every pod of a lower order leaves before one of a higher order is evicted.
    Ordinary(i32),
    /// Pods of an existing DaemonSet, under `daemonSets: EvictLast` ([`super::daemon_sets`]):
    /// the node agents (log shippers, CNI and GPU agents) the ordinary pods may need while they
    /// terminate. A system-critical or the operator's own DaemonSet pod is in its later stage.
    DaemonSet,
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
    /// Managed by an existing DaemonSet: left alone (`IgnoreAllDaemonSets`; `daemonSets:
    /// Ignore`, the default).
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
