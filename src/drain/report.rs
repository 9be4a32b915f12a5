//! What a drain round reports: the [`DrainReport`] the status is made of, the survey of a node
//! before its drain ([`Survey`]), and the blockers the status lists ([`cap_blockers`]). A leaf:
//! `round.rs` makes the report, the controller reads it.

use std::collections::HashSet;
use std::time::Duration;

use super::answer::aggregate_errors;
use super::consts::reason;
use super::disposition::Disposition;
use super::pod::DrainPod;
use crate::api::{OnTimeout, PodBlocker, PodReference};
use crate::bounds::MAX_BLOCKERS;

/// The pods on a node as the drain sees them.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Survey {
    /// Every pod on the node, DaemonSet, mirror and finished ones included (upstream `totalpods`).
    pub total_pods: usize,
    /// The pods up for eviction (upstream's `GetPodsForDeletion` list).
    pub evictable: Vec<PodReference>,
}

/// The survey of classified pods.
pub(crate) fn survey(pods: &[(DrainPod, Disposition)]) -> Survey {
    Survey {
        total_pods: pods.len(),
        evictable: pods
            .iter()
            .filter(|(_, d)| d.drains())
            .map(|(p, _)| p.reference())
            .collect(),
    }
}

/// What one drain round did and found.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct DrainReport {
    /// Every pod on the node at the start of the round.
    pub total_pods: usize,
    /// The pods up for eviction at the start of the round.
    pub evictable: Vec<PodReference>,
    /// The evictable pods still on the node, each with why (a pod whose eviction this round
    /// sends is `Evicting`), and the evicted pods whose replacement is awaited.
    pub pending: Vec<PodBlocker>,
    /// Pods left on the node on purpose (replacements that arrived after the drain started and
    /// tolerate the maintenance taints), each with why.
    pub skipped: Vec<PodBlocker>,
    /// The part of `skipped` reported for the first time by this process (one event each).
    pub newly_skipped: Vec<PodBlocker>,
    /// The `NotMigratable` pods of `pending` reported for the first time by this process (one
    /// Warning event each, not one per retry).
    pub newly_not_migratable: Vec<PodBlocker>,
    /// Launcher pods whose VMI's migration failed, reported for the first time (one Warning per
    /// failed migration).
    pub newly_failed_migrations: Vec<FailedMigration>,
    /// Time until the earliest per-pod eviction retry or forced deletion on this node; the next
    /// round is not useful before then (`None`: none waits).
    pub retry_in: Option<Duration>,
    /// Upstream-format error texts of this round (refused evictions, stuck terminating pods).
    pub errors: Vec<String>,
    /// What applies now that the drain's deadline has passed (`None`: it has not, or there is
    /// none), by the API server's time of the pod list.
    pub overdue: Option<OnTimeout>,
    /// The pods this round deletes after the deadline, each with its `ForceDeleted` blocker
    /// (one Warning event each).
    pub forced: Vec<PodBlocker>,
    /// The pods whose Deployment this round restarted (`surge`), each with its `Surging`
    /// blocker naming the Deployment (one event each).
    pub restarted: Vec<PodBlocker>,
}

impl DrainReport {
    /// Nothing evictable is left on the node.
    pub(crate) fn done(&self) -> bool {
        self.pending.is_empty()
    }
    /// Some pending pod waits for something other than its own termination or the termination
    /// of the pods evicted before it (a budget, an error), so the next round should come later
    /// (at the retry) rather than soon (1 s).
    pub(crate) fn blocked(&self) -> bool {
        self.pending.iter().any(|b| !waits_only(&b.reason))
    }
    /// Every pending pod that blocks is `Evacuating` or `EvictionResponder`: the drain waits
    /// for responders moving the workloads, nothing refuses it.
    pub(crate) fn only_evacuating(&self) -> bool {
        self.pending
            .iter()
            .filter(|b| !waits_only(&b.reason))
            .all(|b| reason::moving(&b.reason))
    }
    /// The pods (`namespace/name`) whose deletion should wake the next round (`drain::gone`):
    /// the terminating ones, when there are some and no eviction's answer is due (each answer
    /// wakes a pass itself); also when other pods wait for them (a later drain order) or for a
    /// retry. `None`: no such watch.
    pub(crate) fn awaiting_deletion(&self) -> Option<HashSet<String>> {
        if self.pending.iter().any(|b| b.reason == reason::EVICTING) {
            return None;
        }
        let pods: HashSet<String> = self
            .pending
            .iter()
            .filter(|b| b.reason == reason::TERMINATING)
            .map(|b| format!("{}/{}", b.namespace, b.name))
            .collect();
        (!pods.is_empty()).then_some(pods)
    }
    /// The aggregated lastError of this round, `None` when nothing failed.
    pub(crate) fn last_error(&self) -> Option<String> {
        aggregate_errors(&self.errors)
    }
}

/// Reasons that only wait for pods to go (their own termination, an answer, that of an earlier
/// stage, a replacement's arrival).
pub(crate) fn waits_only(r: &str) -> bool {
    matches!(
        r,
        reason::TERMINATING
            | reason::DAEMON_SET
            | reason::SYSTEM_CRITICAL
            | reason::OPERATOR_POD
            | reason::EVICTING
            | reason::AWAITING_REPLACEMENT
    )
}

/// A launcher pod held by its VMI's failed migration: its blocker, and the failed migration's
/// name (in the pod's namespace), the related object of its one Warning.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct FailedMigration {
    /// The pod's `MigrationFailed` blocker.
    pub blocker: PodBlocker,
    /// The failed `VirtualMachineInstanceMigration`.
    pub migration: String,
}

/// The blockers the status lists: at most [`MAX_BLOCKERS`], those that block (a budget, an
/// error) before those that only wait for pods to go, each kind by namespace and name, each
/// message cut to [`MAX_BLOCKER_MESSAGE`]; then sorted by namespace and name. Returns them and
/// how many were left out.
pub(crate) fn cap_blockers(blockers: &[PodBlocker]) -> (Vec<PodBlocker>, usize) {
    let mut order: Vec<&PodBlocker> = blockers.iter().collect();
    if order.len() > MAX_BLOCKERS {
        order.sort_by_key(|b| (waits_only(&b.reason), &b.namespace, &b.name));
    }
    let mut kept: Vec<PodBlocker> = order
        .into_iter()
        .take(MAX_BLOCKERS)
        .map(|b| PodBlocker {
            message: crate::bounds::truncate_opt(
                b.message.as_deref(),
                crate::bounds::MAX_BLOCKER_MESSAGE,
            ),
            ..b.clone()
        })
        .collect();
    kept.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    (kept, blockers.len().saturating_sub(MAX_BLOCKERS))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bounds::{MAX_BLOCKER_MESSAGE, MAX_PENDING, cap_pending};

    fn blocker(name: &str, reason: &str, message_len: usize) -> PodBlocker {
        PodBlocker {
            namespace: "ns".into(),
            name: name.into(),
            reason: reason.into(),
            message: Some("m".repeat(message_len)),
            ..PodBlocker::default()
        }
    }

    #[test]
    fn blockers_are_capped_with_those_that_block_first() {
        let mut all: Vec<PodBlocker> = (0..2000)
            .map(|i| blocker(&format!("t{i:04}"), "Terminating", 100))
            .collect();
        all.push(blocker("z-budget", "PodDisruptionBudget", 100_000));
        let (kept, rest) = cap_blockers(&all);
        assert_eq!((kept.len(), rest), (MAX_BLOCKERS, 2001 - MAX_BLOCKERS));
        assert!(
            kept.iter().any(|b| b.name == "z-budget"),
            "the blocking one is listed"
        );
        assert!(
            kept.iter()
                .all(|b| b.message.as_ref().unwrap().len() <= MAX_BLOCKER_MESSAGE)
        );
        assert!(
            kept.windows(2).all(|w| w[0].name < w[1].name),
            "sorted by name"
        );
        let few = vec![blocker("a", "Terminating", 10)];
        assert_eq!(cap_blockers(&few), (few.clone(), 0));
        let (p, rest) = cap_pending(&(0..300).collect::<Vec<_>>());
        assert_eq!((p.len(), rest, p[0]), (MAX_PENDING, 100, 0));
    }
}
