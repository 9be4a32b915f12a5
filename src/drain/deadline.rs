//! What a drain does with a pod once its deadline has passed (`docs/drain-contract.md` §10):
//! `SkipStuck` stops waiting for a pod whose deletion is overdue, `ForceDelete` deletes the
//! remaining evictable pods with a short grace period. `Wait` and `Fail` change nothing per pod
//! (the status and the maintenance pass carry them). Pure: [`super::pass::plan_pass`] asks
//! these per pod; the executor sends the deletions.

use super::pod::DrainPod;
use super::reason;
use crate::api::{PodBlocker, PodReference};

/// The shortest grace period a forced deletion gives: 0 would remove the pod from the API at
/// once while its containers may still run (kubectl's `--force`), which this knob never does.
pub(crate) const FORCE_GRACE_FLOOR_SECONDS: i64 = 1;

/// The wait before a failed forced DELETE is sent again (and announced again): a refusal such as
/// a missing permission does not go away within a refusal's usual 5 s.
pub(crate) const FORCE_DELETE_RETRY: std::time::Duration = std::time::Duration::from_secs(60);

/// A DELETE the round sends (`onTimeout: ForceDelete`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct PlannedDeletion {
    /// The pod.
    pub pod: PodReference,
    /// Its UID, the DELETE's precondition (a same-named successor is never deleted).
    pub uid: Option<String>,
    /// `gracePeriodSeconds` of the DELETE ([`force_grace`]).
    pub grace_seconds: i64,
}

/// Whether the deletion of a terminating pod is overdue at `now` (the API server's time): the
/// API server sets `deletionTimestamp` to the time of the delete request plus the pod's grace
/// period, so once `now` reaches it the grace period has ended and the pod is still there (held
/// by a finalizer, or a kubelet that does not answer). kubectl's
/// `--skip-wait-for-delete-timeout` compares the same timestamp.
pub(crate) fn deletion_overdue(pod: &DrainPod, now: jiff::Timestamp) -> bool {
    pod.metadata
        .deletion_timestamp
        .as_ref()
        .is_some_and(|t| now >= t.0)
}

/// The grace period of a forced deletion, in seconds: the pod's own
/// (`terminationGracePeriodSeconds`, 30 when unset, as the API server defaults it), cut to the
/// whole seconds left before `deadline`, and never below [`FORCE_GRACE_FLOOR_SECONDS`]. After
/// the deadline that is the floor.
pub(crate) fn force_grace(pod: &DrainPod, deadline: jiff::Timestamp, now: jiff::Timestamp) -> i64 {
    let own = pod.spec.termination_grace_period_seconds.unwrap_or(30);
    let left = deadline.as_second() - now.as_second();
    own.min(left).max(FORCE_GRACE_FLOOR_SECONDS)
}

/// Whether a DELETE with `grace` seconds at `now` would end `pod` sooner than it ends anyway: it
/// is not terminating, or its deletion is due later than `now + grace`.
pub(crate) fn force_shortens(pod: &DrainPod, grace: i64, now: jiff::Timestamp) -> bool {
    pod.metadata
        .deletion_timestamp
        .as_ref()
        .is_none_or(|t| t.0.as_second() > now.as_second() + grace)
}

/// The status entry of a pod no longer waited for (`SkipStuck`).
pub(crate) fn overdue_skipped(pod: &DrainPod) -> PodBlocker {
    let due = pod
        .metadata
        .deletion_timestamp
        .as_ref()
        .map(|t| t.0.to_string())
        .unwrap_or_default();
    let mut message = format!(
        "not waited for: the drain deadline passed (onTimeout SkipStuck) and its deletion was due \
         at {due}"
    );
    if !pod.metadata.finalizers.is_empty() {
        message.push_str(&format!(
            "; finalizers: {}",
            pod.metadata.finalizers.join(", ")
        ));
    }
    PodBlocker {
        namespace: pod.metadata.namespace.clone(),
        name: pod.metadata.name.clone(),
        reason: reason::DELETION_OVERDUE.to_string(),
        message: Some(message),
        ..PodBlocker::default()
    }
}

/// The blocker of a pod deleted at `at` (the API server's time of the round that decided it)
/// with `grace` seconds, kept until the pod is gone.
pub(crate) fn force_deleted(pod: &PodReference, at: jiff::Timestamp, grace: i64) -> PodBlocker {
    PodBlocker {
        namespace: pod.namespace.clone(),
        name: pod.name.clone(),
        reason: reason::FORCE_DELETED.to_string(),
        message: Some(format!(
            "deleting since {at} with a grace period of {grace}s: the drain deadline passed \
             (onTimeout ForceDelete)"
        )),
        ..PodBlocker::default()
    }
}

/// The blocker of a pod whose forced DELETE failed with `error` (the API server's text).
pub(crate) fn force_delete_failed(pod: &PodReference, error: &str) -> PodBlocker {
    PodBlocker {
        namespace: pod.namespace.clone(),
        name: pod.name.clone(),
        reason: reason::FORCE_DELETE_FAILED.to_string(),
        message: Some(format!(
            "the DELETE after the drain deadline failed: {error}; retried in {}s",
            FORCE_DELETE_RETRY.as_secs()
        )),
        ..PodBlocker::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn t(s: i64) -> jiff::Timestamp {
        jiff::Timestamp::from_second(1_800_000_000 + s).unwrap()
    }

    fn pod(grace: Option<i64>, deletion: Option<i64>) -> DrainPod {
        let mut p = DrainPod::default();
        p.metadata.name = "p".into();
        p.metadata.namespace = "ns".into();
        p.spec.termination_grace_period_seconds = grace;
        p.metadata.deletion_timestamp = deletion.map(|s| Time(t(s)));
        p
    }

    #[test]
    fn a_forced_deletion_gives_the_pods_grace_cut_to_the_time_left_and_at_least_one_second() {
        // (own grace, deadline, now) -> grace
        for (own, deadline, now, grace) in [
            (Some(30), 100, 40, 30),
            (Some(30), 100, 90, 10),
            (Some(30), 100, 100, 1),
            (Some(30), 100, 160, 1),
            (None, 100, 0, 30),
            (Some(0), 100, 0, 1),
        ] {
            assert_eq!(
                force_grace(&pod(own, None), t(deadline), t(now)),
                grace,
                "{own:?} {deadline} {now}"
            );
        }
    }

    #[test]
    fn a_deletion_is_overdue_once_its_deletion_timestamp_is_reached() {
        assert!(!deletion_overdue(&pod(None, None), t(0)));
        assert!(!deletion_overdue(&pod(None, Some(10)), t(9)));
        assert!(deletion_overdue(&pod(None, Some(10)), t(10)));
        // A pod due within the forced grace is left to end on its own.
        assert!(force_shortens(&pod(None, None), 1, t(0)));
        assert!(force_shortens(&pod(None, Some(30)), 1, t(0)));
        assert!(!force_shortens(&pod(None, Some(1)), 1, t(0)));
    }
}
