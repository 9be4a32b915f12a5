//! What a drain does with a pod as its deadline comes (`docs/drain-contract.md` §10):
//! `SkipStuck` stops waiting for a pod whose deletion is overdue once the deadline has passed;
//! `ForceDelete` deletes each remaining evictable pod early enough that it gets its own grace
//! period before the deadline (its grace `g` before it: [`force_due`]), as Karpenter's
//! `terminationGracePeriod` does. `Wait` and `Fail` change nothing per pod (the status and the
//! maintenance pass carry them). Also the blocker of a pod already terminating, stuck once its
//! deletion is overdue ([`terminating_blocker`]). Pure: the round (`super::round`) asks these
//! per pod; the executor sends the deletions.

use super::consts::{STUCK_TERMINATING_MARGIN, reason};
use super::pod::DrainPod;
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

/// The pod's own grace period in seconds: `terminationGracePeriodSeconds`, 30 when unset (as the
/// API server defaults it), never negative.
fn own_grace(pod: &DrainPod) -> i64 {
    pod.spec
        .termination_grace_period_seconds
        .unwrap_or(30)
        .max(0)
}

/// The grace period of a forced deletion, in seconds: the pod's own, cut to the whole seconds
/// left before `deadline`, and never below [`FORCE_GRACE_FLOOR_SECONDS`]. After the deadline
/// that is the floor.
pub(crate) fn force_grace(pod: &DrainPod, deadline: jiff::Timestamp, now: jiff::Timestamp) -> i64 {
    let left = deadline.as_second() - now.as_second();
    own_grace(pod).min(left).max(FORCE_GRACE_FLOOR_SECONDS)
}

/// Whether `pod`'s forced deletion (`onTimeout: ForceDelete`, the drain's deadline `deadline`)
/// is due at `now` (the API server's time of the round's pod list, whole seconds): `Ok` with the
/// DELETE's `gracePeriodSeconds` ([`force_grace`]) once `now` has reached `deadline` minus the
/// pod's own grace `g` minus one second, so that the pod gets all of `g` before the deadline
/// (the second ahead absorbs the `Date` header's whole seconds and the round's own latency: a
/// round due at `deadline - g - 1` that lists a second late still gives `g`); `Err` with the
/// time until it is due (the next round is useful then). A pod whose grace is longer than the
/// time left is due at once, with the time left. Source: Karpenter's `terminationGracePeriod`
/// (pods are deleted `terminationGracePeriodSeconds` ahead of it); the issue 46 item 5.
///
/// # Errors
/// `Err(wait)`: not due yet, for `wait` (at least one second).
pub(crate) fn force_due(
    pod: &DrainPod,
    deadline: jiff::Timestamp,
    now: jiff::Timestamp,
) -> Result<i64, std::time::Duration> {
    let due = deadline.as_second() - own_grace(pod) - 1;
    let wait = due - now.as_second();
    if wait <= 0 {
        Ok(force_grace(pod, deadline, now))
    } else {
        Err(std::time::Duration::from_secs(wait.unsigned_abs()))
    }
}

/// The deadline forced deletions are timed against: `policy`'s, when its `onTimeout` is
/// `ForceDelete` (`None`: no deadline, or another `onTimeout`).
pub(crate) fn force_by(policy: &crate::policy::DrainPolicy) -> Option<jiff::Timestamp> {
    (policy.on_timeout == crate::api::OnTimeout::ForceDelete)
        .then(|| policy.deadline(policy.deadline_start))
        .flatten()
}

/// [`force_due`] for a round: the deadline `by` and the grace when due, else `None` with the
/// wait folded into the round's `force_in` (the earliest).
pub(crate) fn due(
    pod: &DrainPod,
    by: jiff::Timestamp,
    now: jiff::Timestamp,
    force_in: &mut Option<std::time::Duration>,
) -> Option<(jiff::Timestamp, i64)> {
    match force_due(pod, by, now) {
        Ok(grace) => Some((by, grace)),
        Err(wait) => {
            *force_in = sooner(*force_in, Some(wait));
            None
        }
    }
}

/// The earlier of two waits (`None`: no wait).
pub(crate) fn sooner(
    a: Option<std::time::Duration>,
    b: Option<std::time::Duration>,
) -> Option<std::time::Duration> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
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
    let mut b = PodBlocker::of(
        &pod.reference(),
        reason::TERMINATING,
        format!("terminating (grace period {grace}s, due at {due})"),
    );
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
    PodBlocker::of(&pod.reference(), reason::DELETION_OVERDUE, message)
}

/// The blocker of a pod deleted at `at` (the API server's time of the round that decided it)
/// with `grace` seconds ahead of the drain's `deadline`, kept until the pod is gone.
pub(crate) fn force_deleted(
    pod: &PodReference,
    (at, deadline): (jiff::Timestamp, jiff::Timestamp),
    grace: i64,
) -> PodBlocker {
    let why = if at >= deadline {
        format!("the drain deadline {deadline} passed")
    } else {
        format!("its grace period ends by the drain deadline {deadline}")
    };
    PodBlocker::of(
        pod,
        reason::FORCE_DELETED,
        format!(
            "deleting since {at} with a grace period of {grace}s: {why} (onTimeout ForceDelete)"
        ),
    )
}

/// The blocker of a pod whose forced DELETE failed with `error` (the API server's text).
pub(crate) fn force_delete_failed(pod: &PodReference, error: &str) -> PodBlocker {
    PodBlocker::of(
        pod,
        reason::FORCE_DELETE_FAILED,
        format!(
            "the DELETE after the drain deadline failed: {error}; retried in {}s",
            FORCE_DELETE_RETRY.as_secs()
        ),
    )
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
    fn a_forced_deletion_is_due_its_own_grace_ahead_of_the_deadline() {
        // (own grace, now) -> due with this grace, or the wait; the deadline is t(100).
        for (own, now, due) in [
            (Some(30), 0, Err(69)),
            (Some(30), 68, Err(1)),
            (Some(30), 69, Ok(30)),
            // A round that lists a second late still gives the whole grace.
            (Some(30), 70, Ok(30)),
            (Some(30), 75, Ok(25)),
            (None, 69, Ok(30)),
            // A grace longer than the drain: due at once, with the time left.
            (Some(300), 0, Ok(100)),
            (Some(0), 98, Err(1)),
            (Some(0), 99, Ok(1)),
            (Some(30), 130, Ok(1)),
        ] {
            let got = force_due(&pod(own, None), t(100), t(now)).map_err(|w| w.as_secs());
            assert_eq!(got, due, "{own:?} at {now}");
        }
    }

    /// The round's plan (`round::plan_pass`): each pod deleted its own grace ahead of the
    /// deadline, and the round comes back when the next one is due.
    #[test]
    fn force_delete_deletes_each_pod_its_grace_ahead_of_the_deadline() {
        use super::super::round::settle;
        use super::super::round::tests::plan_pass;
        use super::super::{Disposition, RetrySchedule, Stage};
        use std::time::{Duration, Instant};
        let policy = crate::policy::DrainPolicy {
            drain_timeout: Some(Duration::from_secs(100)),
            on_timeout: crate::api::OnTimeout::ForceDelete,
            deadline_start: Some(t(0)),
            ..Default::default()
        };
        let pods = || {
            [("db", Some(30)), ("web", Some(5)), ("slow", Some(300))]
                .into_iter()
                .map(|(name, grace)| {
                    let mut p = pod(grace, None);
                    p.metadata.name = name.into();
                    p.metadata.uid = Some(format!("uid-{name}"));
                    let evict = Disposition::Evict {
                        warnings: Vec::new(),
                        stage: Stage::Ordinary(0),
                    };
                    (p, evict)
                })
                .collect::<Vec<_>>()
        };
        let at = Instant::now();
        let run = |now: i64| {
            let memory = RetrySchedule::default();
            let budgets = super::super::budget::Budgets::default();
            plan_pass(pods(), &memory, &budgets, &policy, Some(t(0)), t(now), at)
        };
        let deleted = |plan: &super::super::round::PassPlan| {
            plan.delete
                .iter()
                .map(|d| (d.pod.name.clone(), d.grace_seconds))
                .collect::<Vec<_>>()
        };
        // At the start only the pod whose grace is longer than the drain is due, with the time
        // left; the round comes back when `db` is due (t(69)).
        let start = run(0);
        assert_eq!(deleted(&start), [("slow".to_string(), 100)]);
        assert_eq!(start.report.overdue, None);
        let (report, _) = settle(start, &RetrySchedule::default(), at);
        assert_eq!(report.retry_in, Some(Duration::from_secs(69)));
        assert_eq!(report.forced.len(), 1);
        assert!(
            report.forced[0]
                .message
                .as_deref()
                .unwrap_or_default()
                .contains("ends by the drain deadline"),
            "{:?}",
            report.forced[0]
        );
        // `db` with its 30 s at t(69), `web` with its 5 s at t(94).
        let db = run(69);
        assert!(
            deleted(&db).contains(&("db".to_string(), 30)),
            "{:?}",
            deleted(&db)
        );
        assert!(!deleted(&db).iter().any(|(n, _)| n == "web"));
        assert!(
            db.evict.iter().any(|e| e.pod.name == "web"),
            "web is still evicted"
        );
        let web = run(94);
        assert!(
            deleted(&web).contains(&("web".to_string(), 5)),
            "{:?}",
            deleted(&web)
        );
        // Without ForceDelete nothing is deleted before the deadline.
        let wait = crate::policy::DrainPolicy {
            on_timeout: crate::api::OnTimeout::Wait,
            ..policy.clone()
        };
        let memory = RetrySchedule::default();
        let budgets = super::super::budget::Budgets::default();
        let plan = plan_pass(pods(), &memory, &budgets, &wait, Some(t(0)), t(99), at);
        assert!(plan.delete.is_empty());
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
