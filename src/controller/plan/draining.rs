//! The drain round ([`PassStep::Drain`](super::maintenance::PassStep)) and what its evictions'
//! answers make of the status ([`drained`], [`drained_plan`]); the node going down
//! (`NodeShutdown`) holds it.

use std::time::Duration;

use super::condition::{self, Stamp, set_condition};
use super::outcome::{DrainRound, Plan, Then};
use super::pass::{Flow, Pass};
use super::status::{
    PlannedEvent, REQUEUE_SUCCEEDED, REQUEUE_TERMINATING, Requeue, Step, count, event, names,
    non_empty, now_time, touch,
};
use super::volume_detach;
use crate::api::{MaintenancePhase, NodeMaintenanceStatus, PodBlocker};
use crate::drain::{self, DrainReport};

/// Next pass while an eviction is refused (upstream's `waitDurationOnDrainError`).
pub(crate) const REQUEUE_BLOCKED: Duration = Duration::from_secs(5);

impl Pass<'_> {
    /// The node going down: no round; the Node watch's change of it starts the pass that resumes.
    pub(super) fn node_shutdown(&mut self) -> Flow {
        use crate::drain::gate::node_shutdown;
        let (status, halt) = node_shutdown::status(&self.status, self.node, self.at());
        self.status = status;
        self.hold_short_of_round(halt)
    }

    pub(super) fn drain(&mut self) -> Flow {
        if self.status.phase == Some(MaintenancePhase::Succeeded) {
            // Drained once is drained: a pod that arrives later (an admin's maintenance job)
            // stays. The node, lease and label are still enforced above. Upstream drains on
            // every reconcile, it just rarely reconciles a Succeeded one
            // (docs/drain-contract.md §3).
            return Flow::Break(self.hold(REQUEUE_SUCCEEDED));
        }
        Flow::Break(self.round(Then::Drain))
    }
}

/// The drain round's writes, from what its evictions answered: the status [`drained`] makes of
/// the report (written when it changed), held by the `waitForVolumeDetach` wait when the round
/// observed the node's VolumeAttachments (`volumes`: only with the knob and no pod left), its
/// events, its requeue.
pub(crate) fn drained_plan(
    round: &DrainRound,
    report: &DrainReport,
    volumes: Option<&crate::drain::volume_detach::Observed>,
    now: jiff::Timestamp,
) -> Plan {
    let at = Stamp {
        generation: round.generation,
        now,
    };
    let mut step = drained(&round.status, report, at);
    // `drainStartTime` is the drain's start on the node (the API server's clock), so a
    // maintenance that waited at Cordon or in the queue does not count that wait as draining.
    if let Some(started) = round.started {
        step.status.drain_start_time = Some(now_time(started));
    }
    if let Some(o) = volumes.filter(|_| report.done()) {
        use crate::drain::volume_detach as vd;
        let verdict = vd::verdict(
            vd::blockers(o, &round.node),
            &round.policy,
            o.at.unwrap_or(now),
        );
        let bound = vd::bound(&round.policy);
        step = volume_detach::hold(step, &round.status, verdict, bound, at);
    }
    let mut writes = round.writes();
    // Events about single pods or migrations first: the round has already recorded them as
    // announced in the drain's memory, so a status write that finds the object changed (a pass
    // woken by an eviction's answer or a migration's change may read the cache before our
    // previous write reached it) must not take them with it. The phase's events follow the
    // status they announce.
    let (about_pods, phase): (Vec<_>, Vec<_>) = std::mem::take(&mut step.events)
        .into_iter()
        .partition(|e| e.pod.is_some() || e.migration.is_some());
    writes.events(about_pods, None);
    writes.status(&step.status);
    writes.events(phase, None);
    Plan::after_round(writes, step)
}

/// `(evictionPods - pending) * 100 / evictionPods`, clamped to 0..=100; 0 when nothing was up
/// for eviction (upstream leaves it unset then and can go negative).
pub(crate) fn drain_progress(eviction_pods: i32, pending: usize) -> i32 {
    if eviction_pods <= 0 {
        return 0;
    }
    let pending = i64::try_from(pending).unwrap_or(i64::MAX);
    ((i64::from(eviction_pods) - pending) * 100 / i64::from(eviction_pods)).clamp(0, 100) as i32
}

fn pending_summary(report: &DrainReport) -> String {
    let mut by_reason: std::collections::BTreeMap<&str, usize> = Default::default();
    for b in &report.pending {
        *by_reason.entry(b.reason.as_str()).or_default() += 1;
    }
    let parts: Vec<String> = by_reason.iter().map(|(r, n)| format!("{n} {r}")).collect();
    format!(
        "{} pods still on the node: {}",
        report.pending.len(),
        parts.join(", ")
    )
}

/// `; not evicted: ns/a (reason), ns/b (reason)` for the pods the drain leaves on the node on
/// purpose, or nothing: at most [`crate::bounds::MAX_NAMED_KEPT`] named, then `and N more`.
/// Names, not counts, so it changes only when the set does.
fn skipped_summary(report: &DrainReport) -> String {
    if report.skipped.is_empty() {
        return String::new();
    }
    let mut names: Vec<String> = report
        .skipped
        .iter()
        .take(crate::bounds::MAX_NAMED_KEPT)
        .map(|b| format!("{}/{} ({})", b.namespace, b.name, b.reason))
        .collect();
    if report.skipped.len() > crate::bounds::MAX_NAMED_KEPT {
        names.push(format!(
            "and {} more",
            report.skipped.len() - crate::bounds::MAX_NAMED_KEPT
        ));
    }
    format!("; not evicted: {}", names.join(", "))
}

/// `; the status lists N of them (blockers: M)` when the lists were capped, or nothing.
fn capped_summary(pending: usize, listed: usize, blockers: usize) -> String {
    if listed == pending && blockers == pending {
        return String::new();
    }
    format!("; the status lists {listed} of them (blockers: {blockers})")
}

/// After a drain pass. Nothing pending: phase Succeeded, drainProgress 100, pending lists and
/// lastError cleared, `SucceedMaintenance` on the transition only, next check in 5 min.
/// Otherwise: phase Running, pending pods with their blockers, drainProgress, the pass's
/// aggregated error as lastError (cleared when the pods are only terminating), next pass in 1 s
/// (only terminating) or 5 s (blocked). Both are logged as upstream's `Reconciling with fixed
/// duration`: upstream logs it whenever a pass ends with pods left (its e2e test greps for it),
/// and a drain whose pods only take long to terminate is such a pass.
pub(crate) fn drained(old: &NodeMaintenanceStatus, report: &DrainReport, at: Stamp) -> Step {
    let mut s = old.clone();
    let mut events = Vec::new();
    // A maintenance initialised while its node was missing counted nothing; count now.
    if s.eviction_pods.unwrap_or(0) == 0 && !report.evictable.is_empty() {
        s.eviction_pods = Some(count(report.evictable.len()));
    }
    if s.total_pods.unwrap_or(0) == 0 && report.total_pods > 0 {
        s.total_pods = Some(count(report.total_pods));
    }
    s.drain_start_time.get_or_insert_with(|| now_time(at.now));
    let requeue;
    let about_pods = [
        (&report.newly_skipped, false, event::POD_SKIPPED),
        (&report.restarted, false, event::WORKLOAD_RESTARTED),
        (&report.forced, true, event::POD_FORCE_DELETED),
        (
            &report.newly_not_migratable,
            true,
            event::POD_NOT_MIGRATABLE,
        ),
    ];
    for (pods, warning, reason) in about_pods {
        for b in pods {
            let note = pod_note(b);
            let e = if warning {
                PlannedEvent::warning(reason, note)
            } else {
                PlannedEvent::normal((reason, &note))
            };
            events.push(e.about(b));
        }
    }
    // About the failed migration, not the pod: an event recorder folds events of one reason
    // about one related object into a series that keeps the first one's note.
    for f in &report.newly_failed_migrations {
        let b = &f.blocker;
        let note = pod_note(b);
        let mut e = PlannedEvent::warning(event::POD_MIGRATION_FAILED, note);
        e.migration = Some(crate::drain::cancel::VmiRef {
            namespace: b.namespace.clone(),
            name: f.migration.clone(),
        });
        events.push(e);
    }
    if report.done() {
        if old.phase != Some(MaintenancePhase::Succeeded) {
            events.push(PlannedEvent::normal(event::SUCCEED));
        }
        s.phase = Some(MaintenancePhase::Succeeded);
        s.drain_progress = Some(100);
        s.pending_pods = None;
        s.pending_pods_refs = None;
        s.blockers = None;
        s.evacuating_pods = None;
        s.last_error = None;
        set_condition(
            &mut s,
            condition::DRAINED,
            true,
            "AllPodsEvicted",
            crate::bounds::truncate(
                &format!("all pods were evicted{}", skipped_summary(report)),
                crate::bounds::MAX_CONDITION_MESSAGE,
            ),
            at,
        );
        requeue = Requeue::After(REQUEUE_SUCCEEDED);
    } else {
        let all: Vec<_> = report.pending.iter().map(PodBlocker::pod).collect();
        let (refs, _) = crate::bounds::cap_pending(&all);
        let (blockers, _) = drain::report::cap_blockers(&report.pending);
        let capped = capped_summary(all.len(), refs.len(), blockers.len());
        s.phase = Some(MaintenancePhase::Running);
        s.drain_progress = Some(drain_progress(s.eviction_pods.unwrap_or(0), all.len()));
        s.pending_pods = non_empty(names(&refs));
        s.pending_pods_refs = non_empty(refs);
        s.blockers = non_empty(blockers);
        let evacuating = report
            .pending
            .iter()
            .filter(|b| drain::responders::moving(&b.reason))
            .count();
        s.evacuating_pods = (evacuating > 0).then(|| count(evacuating));
        s.last_error = report.last_error();
        let blocked = report.blocked();
        set_condition(
            &mut s,
            condition::DRAINED,
            false,
            match (report.overdue, blocked) {
                (Some(_), _) => condition::DEADLINE_EXCEEDED,
                (None, true) if report.only_evacuating() => "PodsEvacuating",
                (None, true) => "EvictionBlocked",
                (None, false) => "PodsTerminating",
            },
            crate::bounds::truncate(
                &format!(
                    "{}{capped}{}",
                    pending_summary(report),
                    skipped_summary(report)
                ),
                crate::bounds::MAX_CONDITION_MESSAGE,
            ),
            at,
        );
        requeue = if blocked {
            // No earlier than the first per-pod eviction retry is due: a pass before it only
            // re-reports (docs/design.md §2).
            Requeue::Fixed(report.retry_in.map_or(REQUEUE_BLOCKED, |d| {
                d.clamp(Duration::from_millis(200), REQUEUE_BLOCKED)
            }))
        } else {
            Requeue::Fixed(REQUEUE_TERMINATING)
        };
    }
    touch(&mut s, at);
    Step {
        status: s,
        events,
        requeue,
    }
}

/// `Pod <ns>/<name> <message, else reason>`, cut to an event note's bound.
fn pod_note(b: &crate::api::PodBlocker) -> String {
    let note = format!(
        "Pod {}/{} {}",
        b.namespace,
        b.name,
        b.message.as_deref().unwrap_or(&b.reason)
    );
    crate::bounds::truncate(&note, crate::bounds::MAX_EVENT_NOTE)
}
