//! One drain pass as two pure decisions around the evictions (the shape of `docs/design.md §2`):
//! [`plan_pass`] turns the classified pods of the node and the retry schedule into the pods to
//! evict now and the ones that wait (with why); the I/O (`act.rs`) sends the evictions; then
//! [`settle`] turns the plan and the answers into the [`DrainReport`] the status is made of and
//! the retry schedule the next round starts from. Neither decision does I/O or reads a clock.

use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, Instant};

use super::pod::DrainPod;
use super::{
    Disposition, EvictionOutcome, RetrySchedule, aggregate_errors, reason, skipped_entry,
    terminating_blocker, waiting_blocker,
};
use crate::api::{PodBlocker, PodReference};
use crate::bounds::MAX_BLOCKERS;

/// Evictions not started within this time of the pass's start (its pod list included) wait for
/// the next pass
/// ([`reason::EVICTION_DEFERRED`]). With `act.rs`'s eviction timeout and a list that answers, a pass ends
/// well inside the reconcile's 60 s.
pub(crate) const EVICTION_BUDGET: Duration = Duration::from_secs(30);

/// Eviction requests of one pass, by result.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct EvictionCounts {
    /// Label -> number of requests.
    pub by_result: BTreeMap<crate::metrics::EvictionResult, u32>,
}

impl EvictionCounts {
    pub(crate) fn record(&mut self, result: crate::metrics::EvictionResult) {
        *self.by_result.entry(result).or_default() += 1;
    }
}

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
            .filter(|(_, d)| d.evicts())
            .map(|(p, _)| p.reference())
            .collect(),
    }
}

/// What one drain pass did and found.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct DrainReport {
    /// Every pod on the node at the start of the pass.
    pub total_pods: usize,
    /// The pods up for eviction at the start of the pass.
    pub evictable: Vec<PodReference>,
    /// The evictable pods still on the node, each with why.
    pub pending: Vec<PodBlocker>,
    /// Pods left on the node on purpose (replacements that arrived after the drain started and
    /// tolerate the maintenance taints), each with why.
    pub skipped: Vec<PodBlocker>,
    /// The part of `skipped` reported for the first time by this process (one event each).
    pub newly_skipped: Vec<PodBlocker>,
    /// Time until the earliest per-pod eviction retry on this node; the next pass is not useful
    /// before then (`None`: no refused eviction waits).
    pub retry_in: Option<Duration>,
    /// Eviction requests sent in this pass, by result.
    pub evictions: EvictionCounts,
    /// Upstream-format error texts of this pass (failed evictions, stuck terminating pods).
    pub errors: Vec<String>,
}

impl DrainReport {
    /// Nothing evictable is left on the node.
    pub(crate) fn done(&self) -> bool {
        self.pending.is_empty()
    }
    /// Some pending pod waits for something other than its own termination or the termination
    /// of the pods evicted before it (a budget, an error), so the next pass should come later
    /// (at the retry) rather than soon (1 s).
    pub(crate) fn blocked(&self) -> bool {
        self.pending.iter().any(|b| !waits_only(&b.reason))
    }
    /// The aggregated lastError of this pass, `None` when nothing failed.
    pub(crate) fn last_error(&self) -> Option<String> {
        aggregate_errors(&self.errors)
    }
}

/// Reasons that only wait for pods to go (their own termination or that of an earlier stage).
pub(crate) fn waits_only(r: &str) -> bool {
    matches!(
        r,
        reason::TERMINATING
            | reason::SYSTEM_CRITICAL
            | reason::OPERATOR_POD
            | reason::EVICTION_DEFERRED
    )
}

/// One eviction the pass sends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct PlannedEviction {
    /// The pod.
    pub pod: PodReference,
    /// Its UID, the eviction's precondition.
    pub uid: Option<String>,
}

/// The pass's decision before any eviction is sent.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct PassPlan {
    /// Every pod listed on the node.
    pub total_pods: usize,
    /// The evictable pods.
    pub evictable: Vec<PodReference>,
    /// Evictable pods not asked in this pass, each with why (terminating, a later stage, a
    /// refusal whose retry is not due).
    pub pending: Vec<PodBlocker>,
    /// Error texts of the pods not asked (stuck terminating, remembered refusals).
    pub errors: Vec<String>,
    /// Kept pods, each with why.
    pub kept: Vec<PodBlocker>,
    /// The UIDs of kept pods, for their one announcement.
    pub kept_uids: Vec<String>,
    /// The evictions to send now.
    pub evict: Vec<PlannedEviction>,
    /// UIDs whose retry entries stay (listed, up for eviction or kept).
    pub listed: HashSet<String>,
    /// Labels of the pods of the stage being evicted, for naming the budgets of a multiple-budget refusal.
    pub labels: BTreeMap<PodReference, BTreeMap<String, String>>,
}

/// Decides a pass over the node's classified pods: evict the evictable pods of the earliest
/// [`super::Stage`] still on the node that are neither terminating nor waiting for their retry
/// (`retries` at `at`); every other evictable pod is pending with its blocker; kept pods are
/// listed once each. `now` is the wall clock, for how long a pod has been terminating.
pub(crate) fn plan_pass(
    pods: Vec<(DrainPod, Disposition)>,
    retries: &RetrySchedule,
    now: jiff::Timestamp,
    at: Instant,
) -> PassPlan {
    let mut plan = PassPlan {
        total_pods: pods.len(),
        ..PassPlan::default()
    };
    let first_stage = pods
        .iter()
        .filter_map(|(_, d)| match d {
            Disposition::Evict { stage, .. } => Some(*stage),
            _ => None,
        })
        .min();
    for (pod, disposition) in pods {
        let r = pod.reference();
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let (warnings, stage) = match disposition {
            Disposition::Evict { warnings, stage } => (warnings, stage),
            Disposition::KeepReplacement => {
                plan.listed.insert(uid.clone());
                plan.kept.push(skipped_entry(&r));
                plan.kept_uids.push(uid);
                continue;
            }
            Disposition::SkipDaemonSet | Disposition::SkipMirror | Disposition::SkipFinished => {
                continue;
            }
        };
        plan.evictable.push(r.clone());
        if let Some(b) = terminating_blocker(&pod, now) {
            if b.reason == reason::STUCK_TERMINATING {
                plan.errors.push(format!(
                    "error when waiting for pod \"{}\" in namespace \"{}\" to terminate: {}",
                    r.name,
                    r.namespace,
                    b.message.as_deref().unwrap_or_default()
                ));
            }
            plan.pending.push(b);
            continue;
        }
        if Some(stage) > first_stage {
            let class = pod.spec.priority_class_name.as_deref();
            plan.pending.extend(waiting_blocker(&r, stage, class));
            continue;
        }
        plan.listed.insert(uid.clone());
        plan.labels.insert(r.clone(), pod.metadata.labels);
        if let Some((b, error)) = retries.held(&uid, at) {
            plan.pending.push(b.clone());
            plan.errors.extend(error.map(str::to_string));
            continue;
        }
        if !warnings.is_empty() {
            tracing::debug!(pod = %format!("{}/{}", r.namespace, r.name), warnings = %warnings.join("; "), "evicting despite kubectl warnings");
        }
        plan.evict.push(PlannedEviction {
            pod: r,
            uid: pod.metadata.uid,
        });
    }
    plan
}

/// The report of a pass: the plan's pending pods and errors, plus what each eviction answered
/// (`outcomes`, in any order) and the evictions not sent (`deferred`, their blockers), with the kept pods announced for the first time
/// (`newly_kept`, UIDs) and the next retry (`retry_in`). Lists are sorted by namespace and name,
/// errors by text, so an unchanged node gives an unchanged report.
/// Settles a round (pure): the answers of its evictions recorded in `schedule` (refusals held
/// for [`super::EVICTION_RETRY_INTERVAL`] from `answered`, pods no longer listed forgotten, kept
/// pods announced once), then the round's report. `answers` pairs each planned eviction with its
/// outcome, `None` when it was not sent before the round's budget ran out. Returns the report
/// and the schedule the next round starts from.
pub(crate) fn settle(
    node: &str,
    plan: PassPlan,
    answers: Vec<(PlannedEviction, Option<EvictionOutcome>)>,
    mut schedule: RetrySchedule,
    answered: Instant,
) -> (DrainReport, RetrySchedule) {
    let mut deferred = Vec::new();
    let mut outcomes = Vec::new();
    for (e, outcome) in answers {
        match outcome {
            Some(o) => {
                schedule.record(e.uid.as_deref().unwrap_or_default(), node, &o, answered);
                outcomes.push(o);
            }
            None => deferred.push(super::deferred(&e.pod, EVICTION_BUDGET)),
        }
    }
    schedule.retain(node, &plan.listed);
    let newly_kept: HashSet<String> = plan
        .kept_uids
        .iter()
        .filter(|uid| schedule.announce(uid, node))
        .cloned()
        .collect();
    let retry_in = schedule.next_due(node, answered);
    let report = report(plan, outcomes, deferred, &newly_kept, retry_in);
    (report, schedule)
}

pub(crate) fn report(
    plan: PassPlan,
    outcomes: Vec<EvictionOutcome>,
    deferred: Vec<PodBlocker>,
    newly_kept: &HashSet<String>,
    retry_in: Option<Duration>,
) -> DrainReport {
    let mut report = DrainReport {
        total_pods: plan.total_pods,
        evictable: plan.evictable,
        pending: plan.pending,
        errors: plan.errors,
        retry_in,
        ..DrainReport::default()
    };
    for (entry, uid) in plan.kept.into_iter().zip(plan.kept_uids) {
        if newly_kept.contains(&uid) {
            report.newly_skipped.push(entry.clone());
        }
        report.skipped.push(entry);
    }
    report.pending.extend(deferred);
    for o in outcomes {
        report.evictions.record(o.result);
        report.pending.extend(o.blocker);
        report.errors.extend(o.error);
    }
    let by_name =
        |a: &PodBlocker, b: &PodBlocker| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name));
    report.pending.sort_by(by_name);
    report.skipped.sort_by(by_name);
    report.newly_skipped.sort_by(by_name);
    report.errors.sort();
    report
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
    use crate::drain::{DrainOptions, Stage, classify_eviction, result};
    use serde_json::json;

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

    fn pod(name: &str, extra: serde_json::Value) -> DrainPod {
        let mut v =
            json!({"metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}")}});
        crate::drain::tests::merge(&mut v, extra);
        serde_json::from_value(v).unwrap()
    }
    fn ordinary() -> Disposition {
        Disposition::Evict {
            warnings: Vec::new(),
            stage: Stage::Ordinary,
        }
    }
    fn t(s: i64) -> jiff::Timestamp {
        jiff::Timestamp::from_second(1_700_000_000 + s).unwrap()
    }

    #[test]
    fn a_pass_evicts_the_first_stage_and_says_why_the_others_wait() {
        let at = Instant::now();
        let mut retries = RetrySchedule::default();
        let refused = crate::drain::tests::pdb_refusal("held");
        retries.record("uid-held", "n", &refused, at);
        let pods = vec![
            (
                pod("a", json!({"metadata": {"labels": {"app": "a"}}})),
                ordinary(),
            ),
            (pod("held", json!({})), ordinary()),
            (
                pod(
                    "gone",
                    json!({"metadata": {"deletionTimestamp": "2023-11-14T22:13:20Z"}}),
                ),
                ordinary(),
            ),
            (
                pod(
                    "dns",
                    json!({"spec": {"priorityClassName": "system-node-critical"}}),
                ),
                Disposition::Evict {
                    warnings: Vec::new(),
                    stage: Stage::Critical,
                },
            ),
            (pod("ds", json!({})), Disposition::SkipDaemonSet),
            (pod("vm2", json!({})), Disposition::KeepReplacement),
        ];
        let plan = plan_pass(pods, &retries, t(0), at);
        assert_eq!(plan.total_pods, 6);
        assert_eq!(plan.evictable.len(), 4);
        assert_eq!(
            plan.evict
                .iter()
                .map(|e| e.pod.name.as_str())
                .collect::<Vec<_>>(),
            ["a"]
        );
        assert_eq!(plan.evict[0].uid.as_deref(), Some("uid-a"));
        let why: Vec<_> = plan
            .pending
            .iter()
            .map(|b| (b.name.as_str(), b.reason.as_str()))
            .collect();
        assert_eq!(
            why,
            [
                ("held", reason::PDB),
                ("gone", reason::TERMINATING),
                ("dns", reason::SYSTEM_CRITICAL)
            ]
        );
        assert_eq!(plan.errors.len(), 1, "the remembered refusal's text");
        assert_eq!(plan.kept_uids, ["uid-vm2"]);
        assert!(plan.listed.contains("uid-held") && plan.listed.contains("uid-vm2"));
        assert!(plan.labels.contains_key(&plan.evict[0].pod) && plan.labels.len() == 2);

        let accepted = classify_eviction(&plan.evict[0].pod, Ok(()));
        let newly: HashSet<String> = ["uid-vm2".to_string()].into();
        let rep = report(
            plan.clone(),
            vec![accepted],
            Vec::new(),
            &newly,
            Some(Duration::from_secs(5)),
        );
        assert_eq!(rep.evictions.by_result.get(&result::EVICTED), Some(&1));
        assert_eq!(rep.pending.len(), 4);
        assert_eq!(rep.pending[0].name, "a", "sorted by name");
        assert_eq!((rep.skipped.len(), rep.newly_skipped.len()), (1, 1));
        assert!(!rep.done() && rep.blocked());
        let again = report(plan, Vec::new(), Vec::new(), &HashSet::new(), None);
        assert!(again.newly_skipped.is_empty(), "announced once");
        let _ = DrainOptions::default();
    }
}
