//! One drain round as one pure function (the shape of `docs/design.md §2`): [`round`] turns
//! what a round observed of a node ([`Observed`]: its classified pods, the API server's time of
//! their list, the migrations and responders at work), the drain's memory of the node
//! ([`RetrySchedule`]), the budgets and the policy into a [`Round`]: the evictions and forced
//! deletions to send, the [`DrainReport`] the status is made of, and the node's memory delta
//! ([`Settled`]). Inside, [`plan`] decides each pod, and [`settle`] turns that plan into the
//! report and the delta. The executor (`send.rs`) sends what the round decided, each on its own,
//! and records each answer when it arrives. Nothing here does I/O or reads a clock.
use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};

use super::answer::evicting_error;
use super::budget::{Budget, Budgets, SharedCause};
use super::consts::{REPLACEMENT_WAIT, reason};
use super::deadline::{self, PlannedDeletion};
use super::decide::{skipped_entry, tolerates_maintenance, waiting_blocker};
use super::disposition::{Disposition, Stage};
use super::memory::{Awaited, RetrySchedule, Settled, awaiting_replacement, evicting};
use super::migration::Migrations;
use super::pod::DrainPod;
use super::report::{DrainReport, FailedMigration};
use super::responders::ActiveResponder;
use super::rules::{skipped_by_rule, waiting_for_completion};
use crate::api::{OnTimeout, PodBlocker, PodReference};
use crate::policy::DrainPolicy;

/// What a round observed of one node, besides its memory.
pub(crate) struct Observed {
    /// Every pod listed on the node, each with its decision (`decide.rs`).
    pub pods: Vec<(DrainPod, Disposition)>,
    /// The drain's start, by the API server's clock.
    pub started: Option<jiff::Timestamp>,
    /// The API server's time of the pod list.
    pub listed_at: jiff::Timestamp,
    /// When the observation began (the retries due by then are due in this round).
    pub at: Instant,
    /// KubeVirt's migrations.
    pub migrations: Migrations,
    /// The Evictions' active responders, by the namespace and name of their pod.
    pub responders: HashMap<(String, String), ActiveResponder>,
    /// The workloads of the pods, for `surge` (`super::surge`).
    pub surge: super::surge::Facts,
}

/// What one round decided: what to send, what to report, and what the node's memory becomes.
pub(crate) struct Round {
    /// The evictions to send, namespaces taking turns.
    pub evict: Vec<PlannedEviction>,
    /// The forced DELETEs to send.
    pub delete: Vec<PlannedDeletion>,
    /// The status's view of the round.
    pub report: DrainReport,
    /// The node's memory delta, applied before anything is sent.
    pub memory: Settled,
    /// The Deployments to restart (`super::surge`).
    pub restart: Vec<super::surge::PlannedRestart>,
}

/// One drain round (pure): each pod decided once ([`plan`]), settled against `memory` at `now` ([`settle`]), and
/// the responders at work shown over their pods' blockers (`responders::show`).
pub(crate) fn round(
    mut observed: Observed,
    memory: &RetrySchedule,
    budgets: &Budgets,
    policy: &DrainPolicy,
    now: Instant,
) -> Round {
    let responders = std::mem::take(&mut observed.responders);
    let facts = std::mem::take(&mut observed.surge);
    let at = observed.listed_at;
    let surging = super::surge::decide(&observed.pods, &facts, budgets, memory, policy, at);
    let plan = plan(observed, memory, budgets, policy, &surging.held);
    let evict = plan.evict.clone();
    let delete = plan.delete.clone();
    let (mut report, memory) = settle(plan, memory, now);
    super::responders::show(&mut report.pending, &mut report.errors, &responders);
    super::surge::explain(&mut report.pending, &facts, policy);
    Round {
        evict,
        delete,
        report,
        memory,
        restart: surging.restart,
    }
}

/// One eviction the round sends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct PlannedEviction {
    /// The pod.
    pub pod: PodReference,
    /// Its UID, the eviction's precondition and the schedule's key.
    pub uid: Option<String>,
    /// The budgets covering it when more than one does, to name in the API server's refusal
    /// (which names none; [`super::answer::EvictionOutcome::name_budgets`]).
    pub overlapping: Vec<String>,
    /// The replacement to await once the eviction is accepted: the pod tolerates both
    /// maintenance taints and has a controller (recorded from the answer, since a pod with no
    /// grace period may be gone before any listing shows it terminating).
    pub awaits: Option<Awaited>,
    /// The budget that covers the pod, whose hold an accepted eviction ends.
    pub cause: Option<SharedCause>,
    /// The pod carried the eviction-in-progress annotation when listed (its answer's row).
    pub in_progress: bool,
}

/// The round's decision before any eviction is sent.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct PassPlan {
    /// The report as far as the pods' outcomes make it: the pods counted, the evictable ones,
    /// those not asked in this round with why (and the awaited replacements), their errors,
    /// what applies past the deadline; [`settle`] adds what the memory and the evictions add.
    pub report: DrainReport,
    /// Kept pods by UID (for their one announcement), each with why.
    pub kept: Vec<(String, PodBlocker)>,
    /// The pods held by a `NotMigratable` refusal, by UID, for their one Warning.
    pub not_migratable: Vec<(String, PodBlocker)>,
    /// The launcher pods whose VMI's migration failed, keyed by the failed migration
    /// (`migration/<namespace>/<name>`), for its one Warning.
    pub failed_migrations: Vec<(String, FailedMigration)>,
    /// The evictions to send now, namespaces taking turns ([`fair_order`]).
    pub evict: Vec<PlannedEviction>,
    /// UIDs whose retry entries stay (listed, up for eviction or kept).
    pub listed: HashSet<String>,
    /// The drain's first listing (the UIDs of the tolerating pods listed) with the start's
    /// second, when the node's memory has none for this start yet.
    pub first_listing: Option<(i64, HashSet<String>)>,
    /// The replacements awaited after this round.
    pub awaited: HashMap<String, Awaited>,
    /// The DELETEs to send now (`onTimeout: ForceDelete`).
    pub delete: Vec<PlannedDeletion>,
    /// The time until the next pod's forced DELETE is due ([`deadline::force_due`]).
    pub force_in: Option<Duration>,
    /// The UIDs of the pods deleted now, each with its blocker (remembered until gone).
    pub forced: Vec<(String, PodBlocker)>,
}

/// Decides a round over the node's classified pods, each pod once ([`outcome`], its one
/// [`Outcome`]), the outcomes collected in the buckets of [`PassPlan`]: evict the evictable
/// pods of the earliest [`super::Stage`] still on the node that are neither terminating, nor in
/// flight, nor waiting for their retry (the memory at `observed.at`); every other evictable pod
/// is pending with its blocker; kept pods are listed once each; an evicted pod that tolerates
/// both maintenance taints keeps the drain open until its controller's replacement is listed,
/// for at most [`REPLACEMENT_WAIT`]. `observed.listed_at` is the API server's time of the pod
/// list (how long a pod has been terminating, how long a replacement has been awaited).
///
/// Causes many pods share ([`Gate`]): a pod whose budget allows no disruption, or whose
/// namespace refused recently, is held by that cause without a request, and only one pod per
/// cause is asked per retry interval; a budget that allows `k` has at most `k` pods asked.
///
/// Once `policy`'s deadline has passed (its `deadline_start` plus `drainTimeout`, by the list's
/// time), `SkipStuck` keeps a terminating pod whose deletion is overdue; `ForceDelete` deletes
/// each evictable pod once, whatever its stage or budget, its own grace period ahead of the
/// deadline ([`deadline::force_due`]); pods labelled `wait-completed` are still waited for.
fn plan(
    observed: Observed,
    memory: &RetrySchedule,
    budgets: &Budgets,
    policy: &DrainPolicy,
    surging: &HashMap<String, PodBlocker>,
) -> PassPlan {
    let now = observed.listed_at;
    let overdue = policy.overdue(policy.deadline_start, now);
    let pods = super::opt_out::at_deadline(observed.pods, overdue);
    let mut gate = Gate::new(budgets, memory, observed.at);
    for (pod, _) in &pods {
        if pod
            .metadata
            .uid
            .as_deref()
            .is_some_and(|uid| memory.in_flight(uid))
        {
            gate.in_flight(pod);
        }
    }
    let mut cx = Context {
        memory,
        gate,
        migrations: &observed.migrations,
        started: observed.started,
        overdue,
        force_by: deadline::force_by(policy),
        first_stage: pods
            .iter()
            .filter_map(|(_, d)| match d {
                Disposition::Evict { stage, .. } => Some(*stage),
                _ => None,
            })
            .min(),
        now,
        at: observed.at,
        force_in: None,
    };
    let mut plan = PassPlan::default();
    plan.report.total_pods = pods.len();
    plan.report.overdue = overdue;
    let mut tolerating = HashSet::new();
    // Pods of each controller that run on (are listed and not terminating): replacements.
    let mut live: HashMap<String, usize> = HashMap::new();
    for (pod, disposition) in pods {
        let r = pod.reference();
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        if tolerates_maintenance(&pod) {
            tolerating.extend(pod.metadata.uid.clone());
        }
        if let Some(c) = pod.controller_ref()
            && pod.metadata.deletion_timestamp.is_none()
            && !matches!(disposition, Disposition::SkipFinished)
        {
            *live.entry(c.uid.clone()).or_default() += 1;
        }
        // Held by `surge` (`super::surge`): neither asked nor counted against its budget.
        if let Some(b) = surging.get(&uid) {
            plan.listed.insert(uid);
            plan.report.pending.push(b.clone());
            plan.report.evictable.push(r);
            continue;
        }
        match outcome(pod, disposition, &r, &uid, &mut cx) {
            Outcome::Ignored => continue,
            Outcome::Kept(b, evictable) => {
                plan.listed.insert(uid.clone());
                plan.kept.push((uid, b));
                if !evictable {
                    continue;
                }
            }
            Outcome::Wait(w) => {
                if w.remembered {
                    plan.listed.insert(uid.clone());
                }
                plan.report.errors.extend(w.errors);
                if w.not_migratable {
                    plan.not_migratable.push((uid.clone(), w.blocker.clone()));
                }
                if let Some(migration) = w.failed_migration {
                    let key = format!("migration/{}/{migration}", r.namespace);
                    plan.listed.insert(key.clone());
                    let blocker = w.blocker.clone();
                    plan.failed_migrations
                        .push((key, FailedMigration { blocker, migration }));
                }
                if let Some(a) = w.awaits {
                    plan.awaited.insert(uid, a);
                }
                plan.report.pending.push(w.blocker);
            }
            Outcome::Evict(e) => {
                plan.listed.insert(uid);
                plan.evict.push(e);
            }
            Outcome::Delete(d, b) => {
                plan.listed.insert(uid.clone());
                plan.delete.push(d);
                plan.forced.push((uid, b.clone()));
                plan.report.pending.push(b);
            }
        }
        plan.report.evictable.push(r);
    }
    if memory.first_listing(observed.started).is_none()
        && let Some(start) = observed.started
    {
        plan.first_listing = Some((start.as_second(), tolerating));
    }
    plan.force_in = cx.force_in;
    plan.evict = fair_order(std::mem::take(&mut plan.evict));
    await_replacements(&mut plan, memory, &live, now);
    plan
}

/// What each pod's outcome in a round reads, and what the pods share as the round spends it.
struct Context<'a> {
    memory: &'a RetrySchedule,
    gate: Gate<'a>,
    migrations: &'a Migrations,
    /// The drain's start (a failed migration holds a launcher pod when it failed since).
    started: Option<jiff::Timestamp>,
    overdue: Option<OnTimeout>,
    /// The deadline of `onTimeout: ForceDelete` ([`deadline::force_by`]).
    force_by: Option<jiff::Timestamp>,
    /// The earliest stage still on the node.
    first_stage: Option<Stage>,
    /// The API server's time of the pod list.
    now: jiff::Timestamp,
    /// When the round's observation began.
    at: Instant,
    /// The time until the next pod's forced DELETE is due ([`deadline::force_due`]).
    force_in: Option<Duration>,
}

/// One pod's one outcome in a round (Cluster API's drain package is the model: an ordered
/// chain of filters gives each pod one status, and the statuses go in buckets).
enum Outcome {
    /// Not the drain's: DaemonSet, mirror and finished pods.
    Ignored,
    /// Left on the node on purpose, with why (announced once), and whether it was up for
    /// eviction (a stuck terminating pod kept past the deadline).
    Kept(PodBlocker, bool),
    /// Up for eviction, not asked now.
    Wait(Wait),
    /// Evicted now.
    Evict(PlannedEviction),
    /// Deleted now, past the deadline, with its `ForceDeleted` blocker.
    Delete(PlannedDeletion, PodBlocker),
}

/// A pod that waits: its blocker, and what comes with it.
#[derive(Default)]
struct Wait {
    blocker: PodBlocker,
    /// Its lastError texts.
    errors: Vec<String>,
    /// Its memory stays (else all but an unanswered eviction and an awaited replacement goes).
    remembered: bool,
    /// Held by a `NotMigratable` refusal (its one Warning).
    not_migratable: bool,
    /// The failed migration of its VMI that holds it (its one Warning).
    failed_migration: Option<String>,
    /// Terminating, it tolerates both maintenance taints and has a controller: the
    /// replacement to await.
    awaits: Option<Awaited>,
}

impl Wait {
    fn new(blocker: PodBlocker, remembered: bool) -> Self {
        Self {
            blocker,
            remembered,
            ..Self::default()
        }
    }
    /// The pod's memory stays, with the blocker and lastError text it holds.
    fn remembered(blocker: PodBlocker, error: Option<String>) -> Outcome {
        Outcome::Wait(Self {
            errors: error.into_iter().collect(),
            ..Self::new(blocker, true)
        })
    }
}

/// The one outcome of `pod` (reference `r`, UID `uid`) of `disposition`: the decision chain's
/// verdict first, then, for a pod up for eviction, [`evictable`]; a launcher pod's
/// `Evacuating` blocker shows its VMI's migration ([`super::migration::show`]).
fn outcome(
    pod: DrainPod,
    disposition: Disposition,
    r: &PodReference,
    uid: &str,
    cx: &mut Context,
) -> Outcome {
    let (warnings, stage) = match disposition {
        Disposition::Evict { warnings, stage } => (warnings, stage),
        Disposition::KeepReplacement => return Outcome::Kept(skipped_entry(r), false),
        Disposition::SkipByRule { label } => {
            return Outcome::Kept(skipped_by_rule(r, label), false);
        }
        Disposition::WaitCompleted { label } => {
            return Outcome::Wait(Wait::new(waiting_for_completion(r, label), false));
        }
        Disposition::OptedOut { annotation, .. } => {
            return Outcome::Wait(Wait::new(super::opt_out::held(r, annotation), false));
        }
        Disposition::SkipDaemonSet | Disposition::SkipMirror | Disposition::SkipFinished => {
            return Outcome::Ignored;
        }
    };
    let vmi = super::migration::launcher_of(&pod).map(str::to_string);
    let mut out = evictable(pod, warnings, stage, r, uid, cx);
    if let (Outcome::Wait(w), Some(vmi)) = (&mut out, vmi)
        && let Some((migration, text)) =
            super::migration::show(&mut w.blocker, &vmi, cx.migrations, cx.started)
    {
        w.errors.push(evicting_error(r, &text));
        w.failed_migration = Some(migration);
    }
    out
}

/// The outcome of a pod up for eviction, in order: deleted past the deadline, terminating,
/// accepted, a later stage, in flight, held by its refusal, evacuating, held by a shared cause,
/// else evicted.
fn evictable(
    pod: DrainPod,
    warnings: Vec<String>,
    stage: Stage,
    r: &PodReference,
    uid: &str,
    cx: &mut Context,
) -> Outcome {
    // What the memory holds of the pod: read once.
    let state = cx.memory.state(uid);
    let refused = state.and_then(|s| s.refused.as_deref());
    let held = refused.filter(|r| r.due > cx.at);
    let now = cx.now;
    // The operator's own pod stays last even then: deleted once it is all that is left.
    let own_pod_first = stage == Stage::OwnPod && cx.first_stage != Some(stage);
    let by = cx.force_by.filter(|_| !own_pod_first);
    let due = by.and_then(|by| deadline::due(&pod, by, now, &mut cx.force_in));
    if let Some((by, grace)) = due {
        if let Some(b) = state.and_then(|s| s.forced.as_deref()) {
            return Wait::remembered(b.clone(), None);
        }
        if let Some(h) = held.filter(|h| h.blocker.reason == reason::FORCE_DELETE_FAILED) {
            return Wait::remembered(h.blocker.clone(), h.error.clone());
        }
        if deadline::force_shortens(&pod, grace, now) {
            let b = deadline::force_deleted(r, (now, by), grace);
            let d = PlannedDeletion {
                pod: r.clone(),
                uid: pod.metadata.uid,
                grace_seconds: grace,
            };
            return Outcome::Delete(d, b);
        }
    }
    // A pod due for its forced DELETE is remembered whatever else holds it.
    let remembered = due.is_some();
    if let Some(b) = deadline::terminating_blocker(&pod, now) {
        if cx.overdue == Some(OnTimeout::SkipStuck) && deadline::deletion_overdue(&pod, now) {
            return Outcome::Kept(deadline::overdue_skipped(&pod), true);
        }
        let mut w = Wait::new(b, remembered);
        if w.blocker.reason == reason::STUCK_TERMINATING {
            w.errors.push(format!(
                "error when waiting for pod \"{}\" in namespace \"{}\" to terminate: {}",
                r.name,
                r.namespace,
                w.blocker.message.as_deref().unwrap_or_default()
            ));
        }
        w.awaits = awaits(&pod, r, now);
        return Outcome::Wait(w);
    }
    if let Some(answer) = state.and_then(|s| s.accepted.as_ref()) {
        // Listed before the API server accepted its eviction: terminating since that answer.
        let b = answer.as_deref().cloned().unwrap_or_else(|| evicting(r));
        return Wait::remembered(b, None);
    }
    if Some(stage) > cx.first_stage {
        let class = pod.spec.priority_class_name.as_deref();
        return Outcome::Wait(Wait::new(waiting_blocker(r, stage, class), remembered));
    }
    if state.is_some_and(|s| s.in_flight) {
        // Asked again: its last refusal stays shown (`RetrySchedule::asking`).
        return match refused {
            Some(f) => Wait::remembered(f.blocker.clone(), f.error.clone()),
            None => Wait::remembered(evicting(r), None),
        };
    }
    if let Some(h) = held {
        return Outcome::Wait(Wait {
            not_migratable: h.blocker.reason == reason::NOT_MIGRATABLE,
            errors: h.error.clone().into_iter().collect(),
            ..Wait::new(h.blocker.clone(), true)
        });
    }
    // Its responder still says the evacuation is in progress (the annotation, the
    // descheduler's contract): not asked again, whatever the retry says; 50 migrating VMs
    // then cost the node's listing, not 50 refusals per retry.
    if pod.metadata.marks.eviction_in_progress
        && let Some(f) = refused.filter(|f| f.blocker.reason == reason::EVACUATING)
    {
        return Wait::remembered(f.blocker.clone(), None);
    }
    let cause = match cx.gate.admit(&pod) {
        Admit::Ask(cause) => cause,
        Admit::Hold(b, error) => return Wait::remembered(*b, error),
    };
    if !warnings.is_empty() {
        tracing::debug!(pod = %format!("{}/{}", r.namespace, r.name), warnings = %warnings.join("; "), "evicting despite kubectl warnings");
    }
    Outcome::Evict(PlannedEviction {
        pod: r.clone(),
        awaits: awaits(&pod, r, now),
        uid: pod.metadata.uid,
        // Only a pod that no single budget covers can be refused for several; where one does,
        // `Gate::admit` has already matched the selectors, so they are not matched again.
        overlapping: if cause.is_none() {
            (cx.gate.budgets).overlapping(&pod.metadata.namespace, &pod.metadata.labels)
        } else {
            Vec::new()
        },
        cause,
        in_progress: pod.metadata.marks.eviction_in_progress,
    })
}

/// The replacement to await once `pod` is gone: it tolerates both maintenance taints and has a
/// controller (recorded from the answer, since a pod with no grace period may be gone before
/// any listing shows it terminating).
fn awaits(pod: &DrainPod, r: &PodReference, now: jiff::Timestamp) -> Option<Awaited> {
    pod.controller_ref()
        .filter(|_| tolerates_maintenance(pod))
        .map(|c| Awaited {
            pod: r.clone(),
            owner: c.uid.clone(),
            last_seen: now,
        })
}

/// Whether a pod that is up for eviction is asked in this round.
#[derive(Debug)]
enum Admit {
    /// Ask it; the budget that covers it, if one does.
    Ask(Option<SharedCause>),
    /// Hold it without a request: its blocker and lastError text.
    Hold(Box<PodBlocker>, Option<String>),
}

/// The causes many pods share, as one round spends them: each budget's evictions it would
/// accept now (less those in flight), at most one probe per cause whose last refusal is no
/// longer due, and the refusals still due that hold every pod of their cause.
struct Gate<'a> {
    budgets: &'a Budgets,
    schedule: &'a RetrySchedule,
    at: Instant,
    /// Requests left per budget in this round (its `allowed` less those in flight), once seen.
    left: HashMap<SharedCause, i32>,
    /// Causes whose one probe this round has been spent.
    probed: HashSet<SharedCause>,
}

impl<'a> Gate<'a> {
    fn new(budgets: &'a Budgets, schedule: &'a RetrySchedule, at: Instant) -> Self {
        Self {
            budgets,
            schedule,
            at,
            left: HashMap::new(),
            probed: HashSet::new(),
        }
    }

    /// The one budget covering `pod`.
    fn budget(&self, pod: &DrainPod) -> Option<&'a Budget> {
        self.budgets
            .covering(&pod.metadata.namespace, &pod.metadata.labels)
    }

    fn left(&mut self, budget: &Budget) -> &mut i32 {
        self.left.entry(budget.cause()).or_insert(budget.allowed)
    }

    /// An eviction of `pod` is in flight: it spends one of its budget's disruptions, and stands
    /// as the probe of its budget and namespace.
    fn in_flight(&mut self, pod: &DrainPod) {
        self.probed.insert(SharedCause::NamespaceTerminating {
            namespace: pod.metadata.namespace.clone(),
        });
        if let Some(b) = self.budget(pod) {
            *self.left(b) -= 1;
            self.probed.insert(b.cause());
        }
    }

    fn admit(&mut self, pod: &DrainPod) -> Admit {
        let r = pod.reference();
        let namespace = SharedCause::NamespaceTerminating {
            namespace: r.namespace.clone(),
        };
        // A namespace refused for being deleted: one probe per retry interval, as a budget.
        if let Some(e) = self.schedule.last_shared(&namespace)
            && (e.due > self.at || !self.probed.insert(namespace))
        {
            let (b, error) = e.for_pod(&r);
            return Admit::Hold(Box::new(b), error);
        }
        // A pod the API server evicts whatever its budget allows is asked on its own.
        let Some(budget) = self.budget(pod).filter(|b| b.decides(pod)) else {
            return Admit::Ask(None);
        };
        let cause = budget.cause();
        let refused = self.schedule.shared(&cause, self.at);
        if refused.is_none() {
            let left = self.left(budget);
            if *left > 0 {
                *left -= 1;
                // A budget asked within what it allows needs no probe besides.
                self.probed.insert(cause.clone());
                return Admit::Ask(Some(cause));
            }
            if self.probed.insert(cause.clone()) {
                return Admit::Ask(Some(cause));
            }
        }
        match self.schedule.last_shared(&cause) {
            Some(e) => {
                let (b, error) = e.for_pod(&r);
                Admit::Hold(Box::new(b), error)
            }
            None => Admit::Hold(Box::new(held_by(budget, &r)), None),
        }
    }
}

/// The blocker of a pod held by `budget` before any of its pods was refused (the budget's
/// status allows no disruption): its name and healthy counts, as a refusal's cause gives them.
fn held_by(budget: &Budget, pod: &PodReference) -> PodBlocker {
    let message = format!(
        "not asked: the disruption budget {} allows no disruption now (it needs {} healthy pods \
         and has {}); one of its pods is asked at a time",
        budget.name,
        budget.desired.map_or("?".to_string(), |d| d.to_string()),
        budget.current.map_or("?".to_string(), |c| c.to_string()),
    );
    PodBlocker {
        pod_disruption_budget: Some(budget.name.clone()),
        desired_healthy: budget.desired,
        current_healthy: budget.current,
        ..PodBlocker::of(pod, reason::PDB, message)
    }
}

/// The awaited replacements that stay after a round: an evicted tolerating pod no longer listed
/// is awaited until as many of its controller's pods run on the node as are awaited for it
/// (they are its replacements, kept), or [`REPLACEMENT_WAIT`] after a listing last showed
/// it. Each one still awaited is pending as [`reason::AWAITING_REPLACEMENT`].
fn await_replacements(
    plan: &mut PassPlan,
    schedule: &RetrySchedule,
    live: &HashMap<String, usize>,
    now: jiff::Timestamp,
) {
    let wait = REPLACEMENT_WAIT.as_secs() as i64;
    let mut gone: BTreeMap<&str, Vec<(&String, &Awaited)>> = BTreeMap::new();
    for (uid, a) in schedule.awaited() {
        if plan.awaited.contains_key(uid) || now.as_second() - a.last_seen.as_second() > wait {
            continue;
        }
        gone.entry(a.owner.as_str()).or_default().push((uid, a));
    }
    for (owner, mut waiting) in gone {
        waiting.sort_by_key(|(uid, a)| (a.last_seen, uid.as_str()));
        let replaced = live.get(owner).copied().unwrap_or(0);
        for (uid, a) in waiting.into_iter().skip(replaced) {
            plan.report.pending.push(awaiting_replacement(&a.pod));
            plan.awaited.insert(uid.clone(), a.clone());
        }
    }
}

/// The evictions in the order they are sent: namespaces take turns, each in listing order, so
/// that pods whose evictions hang (an admission webhook on one namespace) never queue ahead of
/// all the others. Ours; kubectl and upstream start every eviction at once.
pub(crate) fn fair_order(evict: Vec<PlannedEviction>) -> Vec<PlannedEviction> {
    // The k-th eviction of a namespace goes in turn k; within a turn, namespaces in the order
    // the listing first showed them (a stable sort keeps each namespace's listing order).
    let mut namespaces: HashMap<String, (usize, usize)> = HashMap::new();
    let mut turns: Vec<((usize, usize), PlannedEviction)> = evict
        .into_iter()
        .map(|e| {
            let first = namespaces.len();
            let (rank, count) = namespaces
                .entry(e.pod.namespace.clone())
                .or_insert((first, 0));
            *count += 1;
            ((*count, *rank), e)
        })
        .collect();
    turns.sort_by_key(|(turn, _)| *turn);
    turns.into_iter().map(|(_, e)| e).collect()
}

/// Settles a round (pure): its report, with the evictions it sends pending as `Evicting` (or as
/// their last refusal, for a pod asked again: [`RetrySchedule::asking`]), the kept pods not in
/// `schedule`'s announcements newly announced, and the next retry (`retry_in`, from
/// `answered`); and what the node's memory becomes ([`Settled`]). Lists are sorted by namespace
/// and name, errors by text, so an unchanged node gives an unchanged report.
pub(crate) fn settle(
    plan: PassPlan,
    schedule: &RetrySchedule,
    answered: Instant,
) -> (DrainReport, Settled) {
    let mut probe = schedule.clone();
    probe.retain(&plan.listed);
    let mut report = DrainReport {
        forced: plan.forced.iter().map(|(_, b)| b.clone()).collect(),
        ..plan.report
    };
    for (uid, b) in &plan.kept {
        if probe.announce(uid) {
            report.newly_skipped.push(b.clone());
        }
        report.skipped.push(b.clone());
    }
    for (uid, b) in &plan.not_migratable {
        if probe.warn(uid) {
            report.newly_not_migratable.push(b.clone());
        }
    }
    for (key, f) in &plan.failed_migrations {
        if probe.warn(key) {
            report.newly_failed_migrations.push(f.clone());
        }
    }
    report.retry_in = deadline::sooner(probe.next_due(answered), plan.force_in);
    for e in &plan.evict {
        let (b, error) = schedule.asking(&e.pod, e.uid.as_deref().unwrap_or_default());
        report.pending.push(b);
        report.errors.extend(error);
    }
    let by_name =
        |a: &PodBlocker, b: &PodBlocker| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name));
    report.pending.sort_by(by_name);
    report.skipped.sort_by(by_name);
    report.newly_skipped.sort_by(by_name);
    report.errors.sort();
    let warned = plan.not_migratable.into_iter().map(|(uid, _)| uid);
    let settled = Settled {
        listed: plan.listed,
        kept: plan.kept.into_iter().map(|(uid, _)| uid).collect(),
        warned: warned
            .chain(plan.failed_migrations.into_iter().map(|(key, _)| key))
            .collect(),
        first_listing: plan.first_listing,
        awaited: plan.awaited,
        read_awaited: schedule.awaited().map(|(uid, _)| uid.clone()).collect(),
        done: report.done(),
        forced: plan.forced,
    };
    (report, settled)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::drain::Stage;
    use crate::drain::answer::classify_eviction;
    use serde_json::json;

    fn pod(name: &str, extra: serde_json::Value) -> DrainPod {
        let mut v =
            json!({"metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}")}});
        crate::drain::tests::merge(&mut v, extra);
        serde_json::from_value(v).unwrap()
    }
    fn ordinary() -> Disposition {
        Disposition::Evict {
            warnings: Vec::new(),
            stage: Stage::Ordinary(0),
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
        retries.record("uid-held", &refused, at);
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
        let plan = plan_pass(
            pods,
            &retries,
            &Budgets::default(),
            &DrainPolicy::default(),
            Some(t(-10)),
            t(0),
            at,
        );
        assert_eq!(plan.report.total_pods, 6);
        assert_eq!(plan.report.evictable.len(), 4);
        assert_eq!(
            plan.evict
                .iter()
                .map(|e| e.pod.name.as_str())
                .collect::<Vec<_>>(),
            ["a"]
        );
        assert_eq!(plan.evict[0].uid.as_deref(), Some("uid-a"));
        let why: Vec<_> = plan
            .report
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
        assert_eq!(plan.report.errors.len(), 1, "the remembered refusal's text");
        assert_eq!(plan.kept[0].0, "uid-vm2");
        assert!(plan.listed.contains("uid-held") && plan.listed.contains("uid-vm2"));
        assert!(plan.evict[0].overlapping.is_empty(), "no budgets");

        let (rep, settled) = settle(plan.clone(), &retries, at);
        assert_eq!(rep.pending.len(), 4);
        assert_eq!(
            (rep.pending[0].name.as_str(), rep.pending[0].reason.as_str()),
            ("a", reason::EVICTING),
            "sorted by name; the eviction sent is pending until answered"
        );
        assert_eq!((rep.skipped.len(), rep.newly_skipped.len()), (1, 1));
        assert!(!rep.done() && rep.blocked() && !settled.done);
        retries.apply(settled);
        let (again, _) = settle(plan, &retries, at);
        assert!(again.newly_skipped.is_empty(), "announced once");
    }

    fn tolerating_owned(name: &str, owner: &str, extra: serde_json::Value) -> DrainPod {
        let mut base = json!({
            "metadata": {"ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                "name": owner, "uid": format!("rs-{owner}"), "controller": true}]},
            "spec": {"tolerations": [{"operator": "Exists"}]}
        });
        crate::drain::tests::merge(&mut base, extra);
        pod(name, base)
    }

    #[test]
    fn only_terminating_pods_with_no_answer_due_are_awaited_by_the_pods_going_watch() {
        let b = |name: &str, reason: &str| PodBlocker {
            namespace: "ns".into(),
            name: name.into(),
            reason: reason.into(),
            ..PodBlocker::default()
        };
        let report = |pending| DrainReport {
            pending,
            ..DrainReport::default()
        };
        assert_eq!(report(vec![]).awaiting_deletion(), None);
        let waiting = report(vec![
            b("a", reason::TERMINATING),
            b("db", reason::DRAIN_ORDER),
        ]);
        assert_eq!(
            waiting.awaiting_deletion(),
            Some(HashSet::from(["ns/a".to_string()]))
        );
        let answering = report(vec![b("a", reason::TERMINATING), b("b", reason::EVICTING)]);
        assert_eq!(answering.awaiting_deletion(), None);
        assert_eq!(report(vec![b("p", reason::PDB)]).awaiting_deletion(), None);
    }

    #[test]
    fn a_listing_taken_before_an_accepted_eviction_does_not_ask_the_pod_again() {
        let at = Instant::now();
        let mut memory = RetrySchedule::default();
        let running = || vec![(pod("p", json!({})), ordinary())];
        let round = |memory: &RetrySchedule, pods| {
            plan_pass(
                pods,
                memory,
                &Budgets::default(),
                &DrainPolicy::default(),
                None,
                t(0),
                at,
            )
        };
        let plan = round(&memory, running());
        assert_eq!(plan.evict.len(), 1);
        memory.sent("uid-p");
        // The answer arrives while the next round lists: its listing still shows the pod
        // running, but the API server has already marked it for deletion.
        let accepted = classify_eviction(&plan.evict[0].pod, false, Ok(()));
        memory.answered("uid-p", Some(&accepted), None, at);
        let plan = round(&memory, running());
        assert!(plan.evict.is_empty(), "asked again: {:?}", plan.evict);
        assert_eq!(plan.report.pending[0].reason, reason::TERMINATING);
        // Gone answers the same way.
        let mut gone_memory = RetrySchedule::default();
        let gone = crate::drain::tests::api_err(404, "pods \"p\" not found", &[]);
        let first = round(&RetrySchedule::default(), running());
        let gone = classify_eviction(&first.evict[0].pod, false, Err(&gone));
        gone_memory.answered("uid-p", Some(&gone), None, at);
        assert!(round(&gone_memory, running()).evict.is_empty());
        // Once a listing shows it terminating, or no more, the memory of the answer goes.
        let terminating = || {
            vec![(
                pod(
                    "p",
                    json!({"metadata": {"deletionTimestamp": "2026-01-01T00:01:00Z"}}),
                ),
                ordinary(),
            )]
        };
        let (_, settled) = settle(round(&memory, terminating()), &memory, at);
        memory.apply(settled);
        assert!(memory.state("uid-p").is_none_or(|s| s.accepted.is_none()));
        assert!(memory.is_empty());
    }

    #[test]
    fn a_pod_asked_again_stays_named_with_the_budget_that_refused_it() {
        // Issue 46 item 10: the probe of a budget, asked again at each retry, flipped to
        // `Evicting` for the milliseconds of each ask, and dropped its lastError meanwhile.
        let at = Instant::now();
        let mut memory = RetrySchedule::default();
        let pods = || vec![(pod("probe", json!({})), ordinary())];
        let policy = DrainPolicy::default();
        let none = Budgets::default();
        let refused = crate::drain::tests::pdb_refusal("probe");
        memory.sent("uid-probe");
        memory.answered("uid-probe", Some(&refused), None, at);
        // Due again: asked, and the report of the round that sends it names the budget.
        let later = at + Duration::from_secs(6);
        let plan = plan_pass(pods(), &memory, &none, &policy, None, t(6), later);
        assert_eq!(plan.evict.len(), 1, "asked again once due");
        let (rep, _) = settle(plan, &memory, later);
        assert_eq!(rep.pending.len(), 1);
        assert_eq!(rep.pending[0].reason, reason::PDB, "{:?}", rep.pending);
        assert_eq!(rep.pending[0].pod_disruption_budget.as_deref(), Some("b"));
        assert!(rep.last_error().is_some(), "the refusal's error stays");
        // While that ask is unanswered, the next round names the budget too.
        memory.sent("uid-probe");
        let plan = plan_pass(pods(), &memory, &none, &policy, None, t(7), later);
        assert!(plan.evict.is_empty());
        assert_eq!(plan.report.pending[0].reason, reason::PDB);
        // A pod never refused before still shows `Evicting` while its first ask is out.
        let fresh = RetrySchedule::default();
        let plan = plan_pass(pods(), &fresh, &none, &policy, None, t(0), at);
        let (rep, _) = settle(plan, &fresh, at);
        assert_eq!(rep.pending[0].reason, reason::EVICTING);
    }

    #[test]
    fn an_eviction_in_flight_is_not_sent_again_and_its_answer_decides_the_next_round() {
        let at = Instant::now();
        let mut memory = RetrySchedule::default();
        let pods = || vec![(pod("slow", json!({})), ordinary())];
        let plan = plan_pass(
            pods(),
            &memory,
            &Budgets::default(),
            &DrainPolicy::default(),
            None,
            t(0),
            at,
        );
        assert_eq!(plan.evict.len(), 1);
        memory.sent("uid-slow");
        // Not answered yet, however long that takes: pending, waits only, not sent again.
        let plan = plan_pass(
            pods(),
            &memory,
            &Budgets::default(),
            &DrainPolicy::default(),
            None,
            t(600),
            at + Duration::from_secs(600),
        );
        assert!(plan.evict.is_empty());
        assert_eq!(plan.report.pending[0].reason, reason::EVICTING);
        let (rep, _) = settle(plan, &memory, at);
        assert!(!rep.blocked() && rep.last_error().is_none());
        // The API server's answer (a webhook's refusal, after 20 s): held, named, retried later.
        let e = crate::drain::tests::api_err(
            500,
            "Internal error occurred: failed calling webhook \"slow.example.com\": context deadline exceeded",
            &[],
        );
        let refused = classify_eviction(
            &plan_pass(
                pods(),
                &RetrySchedule::default(),
                &Budgets::default(),
                &DrainPolicy::default(),
                None,
                t(0),
                at,
            )
            .evict[0]
                .pod,
            false,
            Err(&e),
        );
        memory.answered("uid-slow", Some(&refused), None, at);
        let plan = plan_pass(
            pods(),
            &memory,
            &Budgets::default(),
            &DrainPolicy::default(),
            None,
            t(1),
            at + Duration::from_secs(1),
        );
        assert!(plan.evict.is_empty());
        assert_eq!(plan.report.pending[0].reason, reason::EVICTION_ERROR);
        assert!(plan.report.errors[0].contains("failed calling webhook \"slow.example.com\""));
        let plan = plan_pass(
            pods(),
            &memory,
            &Budgets::default(),
            &DrainPolicy::default(),
            None,
            t(6),
            at + Duration::from_secs(6),
        );
        assert_eq!(plan.evict.len(), 1, "asked again once the retry is due");
        // Not sent after all (the maintenance ended first): neither in flight nor held.
        memory.sent("uid-slow");
        memory.answered("uid-slow", None, None, at);
        assert!(!memory.in_flight("uid-slow"));
    }

    #[test]
    fn namespaces_take_turns_so_hung_evictions_do_not_queue_ahead_of_the_others() {
        let mut pods: Vec<(DrainPod, Disposition)> = (0..160)
            .map(|i| {
                let mut p = pod(&format!("hung-{i:03}"), json!({}));
                p.metadata.namespace = "hung".into();
                (p, ordinary())
            })
            .collect();
        pods.extend((0..4).map(|i| (pod(&format!("free-{i}"), json!({})), ordinary())));
        let plan = plan_pass(
            pods,
            &RetrySchedule::default(),
            &Budgets::default(),
            &DrainPolicy::default(),
            None,
            t(0),
            Instant::now(),
        );
        let order: Vec<&str> = plan.evict.iter().map(|e| e.pod.name.as_str()).collect();
        assert_eq!(order.len(), 164);
        assert_eq!(
            &order[..8],
            [
                "hung-000", "free-0", "hung-001", "free-1", "hung-002", "free-2", "hung-003",
                "free-3"
            ]
        );
    }

    #[test]
    fn an_evicted_tolerating_pod_keeps_the_drain_open_until_its_replacement_is_listed() {
        let at = Instant::now();
        let start = t(0);
        let mut memory = RetrySchedule::default();
        let terminating = json!({"metadata": {"deletionTimestamp": "2023-11-14T22:13:30Z"}});
        // Evicted, terminating: pending as Terminating, and awaited.
        let plan = plan_pass(
            vec![(tolerating_owned("orig", "web", terminating), ordinary())],
            &memory,
            &Budgets::default(),
            &DrainPolicy::default(),
            Some(start),
            t(1),
            at,
        );
        assert_eq!(plan.awaited.len(), 1);
        let (_, settled) = settle(plan, &memory, at);
        memory.apply(settled);
        // Gone, no replacement listed yet: the drain is not done.
        let plan = plan_pass(
            Vec::new(),
            &memory,
            &Budgets::default(),
            &DrainPolicy::default(),
            Some(start),
            t(3),
            at,
        );
        assert_eq!(
            plan.report
                .pending
                .iter()
                .map(|b| (b.name.as_str(), b.reason.as_str()))
                .collect::<Vec<_>>(),
            [("orig", reason::AWAITING_REPLACEMENT)]
        );
        let (rep, settled) = settle(plan, &memory, at);
        assert!(!rep.done() && !rep.blocked());
        memory.apply(settled);
        // The replacement is listed, kept: done, and it is named.
        let repl = tolerating_owned("repl", "web", json!({}));
        let plan = plan_pass(
            vec![(repl, Disposition::KeepReplacement)],
            &memory,
            &Budgets::default(),
            &DrainPolicy::default(),
            Some(start),
            t(4),
            at,
        );
        let (rep, settled) = settle(plan, &memory, at);
        assert!(rep.done(), "{:?}", rep.pending);
        assert_eq!(rep.skipped[0].name, "repl");
        assert!(settled.done);
        // A pod gone at once (no grace period), never listed terminating: the accepted answer
        // records the wait.
        let mut memory = RetrySchedule::default();
        let orig = tolerating_owned("quick", "api", json!({}));
        let plan = plan_pass(
            vec![(orig, ordinary())],
            &memory,
            &Budgets::default(),
            &DrainPolicy::default(),
            Some(start),
            t(1),
            at,
        );
        let e = plan.evict[0].clone();
        assert!(e.awaits.is_some());
        let (_, settled) = settle(plan, &memory, at);
        memory.apply(settled);
        memory.sent("uid-quick");
        let accepted = classify_eviction(&e.pod, false, Ok(()));
        memory.answered(
            "uid-quick",
            Some(&accepted),
            Some((&e.awaits, &e.cause)),
            at,
        );
        let plan = plan_pass(
            Vec::new(),
            &memory,
            &Budgets::default(),
            &DrainPolicy::default(),
            Some(start),
            t(2),
            at,
        );
        assert_eq!(plan.report.pending[0].reason, reason::AWAITING_REPLACEMENT);
        // A replacement that never comes is awaited no longer than REPLACEMENT_WAIT.
        let mut memory = RetrySchedule::default();
        let plan = plan_pass(
            vec![(
                tolerating_owned(
                    "orig",
                    "db",
                    json!({"metadata": {"deletionTimestamp": "2023-11-14T22:13:30Z"}}),
                ),
                ordinary(),
            )],
            &memory,
            &Budgets::default(),
            &DrainPolicy::default(),
            Some(start),
            t(1),
            at,
        );
        let (_, settled) = settle(plan, &memory, at);
        memory.apply(settled);
        let wait = crate::drain::REPLACEMENT_WAIT.as_secs() as i64;
        assert!(
            !plan_pass(
                Vec::new(),
                &memory,
                &Budgets::default(),
                &DrainPolicy::default(),
                Some(start),
                t(1 + wait),
                at
            )
            .report
            .pending
            .is_empty()
        );
        assert!(
            plan_pass(
                Vec::new(),
                &memory,
                &Budgets::default(),
                &DrainPolicy::default(),
                Some(start),
                t(2 + wait),
                at
            )
            .report
            .pending
            .is_empty()
        );
    }

    fn budget(name: &str, app: &str, allowed: i32) -> Budget {
        Budget::over_app("ns", name, app, allowed, 2)
    }

    fn app_pods(app: &str, n: usize) -> Vec<(DrainPod, Disposition)> {
        (0..n)
            .map(|i| {
                let labels = json!({
                    "metadata": {"labels": {"app": app}},
                    "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
                });
                (pod(&format!("{app}-{i}"), labels), ordinary())
            })
            .collect()
    }

    fn asked(plan: &PassPlan) -> Vec<&str> {
        let mut names: Vec<&str> = plan.evict.iter().map(|e| e.pod.name.as_str()).collect();
        names.sort_unstable();
        names
    }

    /// A budget refusal of `pod` by budget `b` in namespace `ns`, recorded as its answer.
    fn refuse(memory: &mut RetrySchedule, pod: &str, at: Instant) {
        let refused = crate::drain::tests::pdb_refusal(pod);
        memory.sent(&format!("uid-{pod}"));
        memory.answered(&format!("uid-{pod}"), Some(&refused), None, at);
    }

    #[test]
    fn a_budget_is_asked_through_one_pod_and_holds_the_others_without_a_request() {
        let at = Instant::now();
        let secs = |n| at + Duration::from_secs(n);
        let budgets = Budgets::known([budget("b", "web", 0), budget("other", "api", 0)]);
        let pods = || {
            let mut p = app_pods("web", 10);
            p.extend(app_pods("free", 2));
            p
        };
        let mut memory = RetrySchedule::default();

        // (budget allows, memory, time) -> pods asked, pods held by the budget, errors.
        // 1. The budget's status allows none, nothing refused yet: one probe, the rest held.
        let plan = plan_pass(
            pods(),
            &memory,
            &budgets,
            &DrainPolicy::default(),
            None,
            t(0),
            at,
        );
        assert_eq!(asked(&plan), ["free-0", "free-1", "web-0"]);
        let cause = |name: &str| {
            let e = plan.evict.iter().find(|e| e.pod.name == name).unwrap();
            e.cause.clone()
        };
        assert_eq!(cause("free-0"), None);
        assert_eq!(
            cause("web-0"),
            Some(
                budgets
                    .covering("ns", &[("app".to_string(), "web".to_string())].into())
                    .unwrap()
                    .cause()
            )
        );
        let held: Vec<&PodBlocker> = plan
            .report
            .pending
            .iter()
            .filter(|b| b.reason == reason::PDB)
            .collect();
        assert_eq!(held.len(), 9, "held by the budget without a request");
        assert_eq!(held[0].pod_disruption_budget.as_deref(), Some("b"));
        assert_eq!(
            (held[0].desired_healthy, held[0].current_healthy),
            (Some(2), Some(2))
        );
        assert!(
            plan.report.errors.is_empty(),
            "no error before the API server refused"
        );

        // 2. The probe in flight: no second probe, whatever wakes the round.
        memory.sent("uid-web-0");
        let plan = plan_pass(
            pods(),
            &memory,
            &budgets,
            &DrainPolicy::default(),
            None,
            t(1),
            secs(1),
        );
        assert_eq!(asked(&plan), ["free-0", "free-1"]);

        // 3. The probe refused: every pod of the budget is held with the refusal's texts, and
        // the budget is asked again only once the retry is due.
        memory.answered(
            "uid-web-0",
            Some(&crate::drain::tests::pdb_refusal("web-0")),
            None,
            secs(1),
        );
        let plan = plan_pass(
            pods(),
            &memory,
            &budgets,
            &DrainPolicy::default(),
            None,
            t(2),
            secs(2),
        );
        assert_eq!(asked(&plan), ["free-0", "free-1"]);
        assert_eq!(
            plan.report.errors.len(),
            10,
            "each held pod says why, as if refused itself"
        );
        assert!(
            plan.report
                .errors
                .iter()
                .any(|e| e.contains("pods/\"web-7\""))
        );
        let (rep, _) = settle(plan, &memory, secs(2));
        assert_eq!(
            rep.retry_in,
            Some(Duration::from_secs(4)),
            "the budget's retry"
        );
        let plan = plan_pass(
            pods(),
            &memory,
            &budgets,
            &DrainPolicy::default(),
            None,
            t(7),
            secs(7),
        );
        assert_eq!(
            asked(&plan).len(),
            3,
            "one probe once due: {:?}",
            asked(&plan)
        );
        assert!(asked(&plan).iter().filter(|n| n.starts_with("web")).count() == 1);

        // 4. The budget allows 3 (its status after the refusal's retry): three asked at once,
        // fewer while some are in flight.
        let budgets = Budgets::known([budget("b", "web", 3)]);
        let plan = plan_pass(
            pods(),
            &RetrySchedule::default(),
            &budgets,
            &DrainPolicy::default(),
            None,
            t(8),
            secs(8),
        );
        assert_eq!(
            asked(&plan),
            ["free-0", "free-1", "web-0", "web-1", "web-2"]
        );
        let mut flying = RetrySchedule::default();
        flying.sent("uid-web-5");
        let plan = plan_pass(
            pods(),
            &flying,
            &budgets,
            &DrainPolicy::default(),
            None,
            t(8),
            secs(8),
        );
        assert_eq!(
            asked(&plan).iter().filter(|n| n.starts_with("web")).count(),
            2
        );

        // 5. An accepted eviction of a pod the budget covers ends the budget's hold.
        refuse(&mut memory, "web-3", secs(8));
        let e = &plan_pass(
            pods(),
            &RetrySchedule::default(),
            &budgets,
            &DrainPolicy::default(),
            None,
            t(8),
            secs(8),
        )
        .evict[2];
        assert_eq!(
            e.cause,
            Some(
                budgets
                    .covering("ns", &[("app".into(), "web".into())].into())
                    .unwrap()
                    .cause()
            )
        );
        let uid = e.uid.as_deref().unwrap();
        memory.sent(uid);
        let accepted = classify_eviction(&e.pod, false, Ok(()));
        memory.answered(uid, Some(&accepted), Some((&e.awaits, &e.cause)), secs(9));
        assert!(memory.shared(&e.cause.clone().unwrap(), secs(9)).is_none());
    }

    #[test]
    fn a_pod_its_budget_does_not_decide_for_is_asked_on_its_own_not_held() {
        let at = Instant::now();
        let budgets = Budgets::known([budget("b", "web", 0)]);
        let mut pods = app_pods("web", 3);
        // Not Ready, and Pending: the API server evicts them whatever the budget allows.
        for (name, status) in [
            (
                "web-unready",
                json!({"phase": "Running", "conditions": [{"type": "Ready", "status": "False"}]}),
            ),
            ("web-pending", json!({"phase": "Pending"})),
        ] {
            let extra = json!({"metadata": {"labels": {"app": "web"}}, "status": status});
            pods.push((pod(name, extra), ordinary()));
        }
        let mut memory = RetrySchedule::default();
        refuse(&mut memory, "web-0", at);
        let plan = plan_pass(
            pods,
            &memory,
            &budgets,
            &DrainPolicy::default(),
            None,
            t(0),
            at,
        );
        // web-0's refusal holds the budget's Ready pods until its retry; not the other two.
        assert_eq!(asked(&plan), ["web-pending", "web-unready"]);
        assert!(plan.evict.iter().all(|e| e.cause.is_none()));
        let held: Vec<&str> = plan
            .report
            .pending
            .iter()
            .filter(|b| b.reason == reason::PDB)
            .map(|b| b.name.as_str())
            .collect();
        assert_eq!(held, ["web-0", "web-1", "web-2"]);

        // Below its healthy count the budget refuses a pod that is not Ready too: held with the
        // rest; with `unhealthyPodEvictionPolicy: AlwaysAllow` it goes whatever the counts.
        let unready = || {
            let mut pods = app_pods("web", 2);
            let status =
                json!({"phase": "Running", "conditions": [{"type": "Ready", "status": "False"}]});
            let extra = json!({"metadata": {"labels": {"app": "web"}}, "status": status});
            pods.push((pod("web-unready", extra), ordinary()));
            pods
        };
        let unhealthy = Budget {
            current: Some(1),
            ..budget("b", "web", 0)
        };
        for (budget, asked_pods) in [
            (unhealthy.clone(), vec![]),
            (
                Budget {
                    always_allow_unhealthy: true,
                    ..unhealthy
                },
                vec!["web-unready"],
            ),
        ] {
            let plan = plan_pass(
                unready(),
                &memory,
                &Budgets::known([budget.clone()]),
                &DrainPolicy::default(),
                None,
                t(0),
                at,
            );
            assert_eq!(asked(&plan), asked_pods, "{budget:?}");
        }
    }

    #[test]
    fn pods_under_several_budgets_or_none_or_unknown_budgets_are_each_asked() {
        let at = Instant::now();
        let pods = || app_pods("web", 3);
        let memory = RetrySchedule::default();
        for (budgets, why) in [
            (Budgets::default(), "budgets not listed yet"),
            (Budgets::known([]), "no budget"),
            (
                Budgets::known([budget("b1", "web", 0), budget("b2", "web", 0)]),
                "two budgets: the API server refuses with 500 whatever they allow",
            ),
            (
                Budgets::known([Budget {
                    selector: None,
                    ..budget("nil", "web", 0)
                }]),
                "a budget without a selector selects no pod",
            ),
            (
                Budgets::known([Budget {
                    namespace: "elsewhere".into(),
                    ..budget("b", "web", 0)
                }]),
                "a budget of another namespace",
            ),
        ] {
            let plan = plan_pass(
                pods(),
                &memory,
                &budgets,
                &DrainPolicy::default(),
                None,
                t(0),
                at,
            );
            assert_eq!(asked(&plan).len(), 3, "{why}");
            // Only where several cover a pod are they named, for the API server's 500.
            let overlapping: Vec<&[String]> =
                plan.evict.iter().map(|e| &e.overlapping[..]).collect();
            let two = why.starts_with("two");
            let named = ["b1".to_string(), "b2".to_string()];
            assert!(
                overlapping
                    .iter()
                    .all(|o| if two { *o == named } else { o.is_empty() }),
                "{why}: {overlapping:?}"
            );
        }
        let mut refused = crate::drain::tests::pdb_refusal("x");
        let b = refused.blocker.as_mut().unwrap();
        b.reason = reason::MULTIPLE_PDBS.into();
        b.message = Some("This pod has more than one PodDisruptionBudget".into());
        refused.name_budgets(&["b1".into(), "b2".into()]);
        let b = refused.blocker.unwrap();
        assert_eq!(
            b.message.as_deref(),
            Some(
                "This pod has more than one PodDisruptionBudget (budgets selecting the pod: b1, b2)"
            )
        );
        assert_eq!(b.pod_disruption_budget.as_deref(), Some("b1,b2"));
    }

    #[test]
    fn an_evacuation_is_progress_asked_at_its_own_pace_and_a_vm_that_cannot_migrate_is_warned_once()
    {
        let at = Instant::now();
        let marked = json!({"metadata": {"annotations": {
            (crate::drain::EVICTION_IN_PROGRESS_ANNOTATION): "kubevirt"}}});
        let pods = |in_progress: bool| {
            let extra = if in_progress {
                marked.clone()
            } else {
                json!({})
            };
            vec![
                (pod("migrating", extra), ordinary()),
                (pod("pinned", json!({})), ordinary()),
            ]
        };
        let run = |memory: &RetrySchedule, in_progress: bool, secs: u64| {
            let plan = plan_pass(
                pods(in_progress),
                memory,
                &Budgets::default(),
                &DrainPolicy::default(),
                None,
                t(secs as i64),
                at + Duration::from_secs(secs),
            );
            let asked: Vec<(String, bool)> = plan
                .evict
                .iter()
                .map(|e| (e.pod.name.clone(), e.in_progress))
                .collect();
            let (rep, settled) = settle(plan, memory, at + Duration::from_secs(secs));
            (asked, rep, settled)
        };
        let mut memory = RetrySchedule::default();
        let (asked, ..) = run(&memory, false, 0);
        assert_eq!(
            asked,
            vec![("migrating".into(), false), ("pinned".into(), false)]
        );
        let evacuating = crate::drain::tests::api_err(
            429,
            "admission webhook \"virt-launcher-eviction-interceptor.kubevirt.io\" denied the request: Eviction triggered evacuation of VMI \"ns/vm-a\"",
            &[],
        );
        let pinned = crate::drain::tests::api_err(
            429,
            "admission webhook \"virt-launcher-eviction-interceptor.kubevirt.io\" denied the request: VMI vm-b is configured with an eviction strategy but is not live-migratable",
            &[],
        );
        for (uid, name, e) in [
            ("uid-migrating", "migrating", &evacuating),
            ("uid-pinned", "pinned", &pinned),
        ] {
            memory.sent(uid);
            let o = classify_eviction(&pod(name, json!({})).reference(), false, Err(e));
            memory.answered(uid, Some(&o), None, at);
        }
        let reasons = |rep: &DrainReport| -> Vec<(String, String)> {
            rep.pending
                .iter()
                .map(|b| (b.name.clone(), b.reason.clone()))
                .collect()
        };
        // The next round: both held; the VM that cannot migrate is warned about, once, and is
        // the only error; the condition is not "only evacuating".
        let (asked, rep, settled) = run(&memory, true, 1);
        assert!(asked.is_empty());
        assert_eq!(
            reasons(&rep),
            vec![
                ("migrating".into(), reason::EVACUATING.into()),
                ("pinned".into(), reason::NOT_MIGRATABLE.into())
            ]
        );
        assert_eq!(rep.newly_not_migratable.len(), 1);
        assert!(
            rep.newly_not_migratable[0]
                .message
                .as_deref()
                .unwrap()
                .contains("VMI vm-b")
        );
        let error = rep.last_error().unwrap();
        assert!(
            error.contains("pods/\"pinned\"") && !error.contains("migrating"),
            "{error}"
        );
        assert!(rep.blocked() && !rep.only_evacuating());
        memory.apply(settled);
        // Past the upstream interval: only the VM that cannot migrate is asked again; no second
        // Warning while it stays refused.
        let (asked, rep, settled) = run(&memory, true, 6);
        assert_eq!(asked, vec![("pinned".into(), false)]);
        assert_eq!(
            rep.retry_in,
            Some(Duration::from_secs(24)),
            "the evacuation's retry"
        );
        memory.apply(settled);
        memory.sent("uid-pinned");
        let o = classify_eviction(&pod("pinned", json!({})).reference(), false, Err(&pinned));
        memory.answered("uid-pinned", Some(&o), None, at + Duration::from_secs(6));
        let (_, rep, settled) = run(&memory, true, 7);
        assert!(rep.newly_not_migratable.is_empty(), "one Warning per pod");
        memory.apply(settled);
        // Past the evacuation's retry: while the pod carries the responder's in-progress
        // annotation, it is not asked again (still Evacuating); without it, it is.
        let (asked, rep30, _) = run(&memory, true, 30);
        assert!(
            asked.iter().all(|(name, _)| name != "migrating"),
            "{asked:?}"
        );
        assert_eq!(
            reasons(&rep30)[0],
            ("migrating".into(), reason::EVACUATING.into())
        );
        let (asked, ..) = run(&memory, false, 30);
        assert!(asked.contains(&("migrating".into(), false)), "{asked:?}");
        // Once only evacuations are left, the condition says so.
        let only = DrainReport {
            pending: vec![rep.pending[0].clone()],
            ..DrainReport::default()
        };
        assert!(only.blocked() && only.only_evacuating());
    }

    #[test]
    fn a_terminating_namespace_is_asked_through_one_pod_per_retry() {
        let at = Instant::now();
        let pods = || app_pods("web", 4);
        let mut memory = RetrySchedule::default();
        let e = crate::drain::tests::api_err(
            403,
            "pods \"web-0\" is forbidden: unable to create new content in namespace ns because it is being terminated",
            &[("NamespaceTerminating", "namespace ns is being terminated")],
        );
        let refused = classify_eviction(&pods()[0].0.reference(), false, Err(&e));
        assert_eq!(
            refused.shared,
            Some(SharedCause::NamespaceTerminating {
                namespace: "ns".into()
            })
        );
        memory.sent("uid-web-0");
        memory.answered("uid-web-0", Some(&refused), None, at);
        let plan = plan_pass(
            pods(),
            &memory,
            &Budgets::default(),
            &DrainPolicy::default(),
            None,
            t(1),
            at + Duration::from_secs(1),
        );
        assert!(plan.evict.is_empty());
        assert!(
            plan.report
                .pending
                .iter()
                .all(|b| b.reason == reason::NAMESPACE_TERMINATING)
        );
        assert_eq!(plan.report.errors.len(), 4);
        let plan = plan_pass(
            pods(),
            &memory,
            &Budgets::default(),
            &DrainPolicy::default(),
            None,
            t(6),
            at + Duration::from_secs(6),
        );
        assert_eq!(plan.evict.len(), 1, "one probe once due");
    }

    #[test]
    fn a_higher_drain_order_waits_for_the_lower_and_wait_completed_pods_are_waited_for() {
        let at = Instant::now();
        let memory = RetrySchedule::default();
        let evict = |order| Disposition::Evict {
            warnings: Vec::new(),
            stage: Stage::Ordinary(order),
        };
        let label = crate::drain::DRAIN_LABEL;
        let job = || (pod("job", json!({})), Disposition::WaitCompleted { label });
        let skip = || (pod("cache", json!({})), Disposition::SkipByRule { label });
        // (pods on the node) -> asked, and why the others wait.
        let plan = plan_pass(
            vec![
                (pod("app", json!({})), evict(0)),
                (pod("db", json!({})), evict(2)),
                job(),
                skip(),
            ],
            &memory,
            &Budgets::default(),
            &DrainPolicy::default(),
            None,
            t(0),
            at,
        );
        assert_eq!(asked(&plan), ["app"]);
        let why: Vec<(&str, &str)> = plan
            .report
            .pending
            .iter()
            .map(|b| (b.name.as_str(), b.reason.as_str()))
            .collect();
        assert_eq!(
            why,
            [
                ("db", reason::DRAIN_ORDER),
                ("job", reason::WAITING_FOR_COMPLETION)
            ]
        );
        assert_eq!(plan.kept[0].1.reason, reason::SKIPPED);
        assert_eq!(
            plan.report.evictable.len(),
            3,
            "the waited-for pod counts, the kept one not"
        );
        // `app` terminating: `db` still waits.
        let terminating = pod(
            "app",
            json!({"metadata": {"deletionTimestamp": "2023-11-14T22:13:20Z"}}),
        );
        let plan = plan_pass(
            vec![
                (terminating, evict(0)),
                (pod("db", json!({})), evict(2)),
                job(),
            ],
            &memory,
            &Budgets::default(),
            &DrainPolicy::default(),
            None,
            t(0),
            at,
        );
        assert!(plan.evict.is_empty());
        // `app` gone: `db` goes; the job is still waited for, and blocks Succeeded.
        let plan = plan_pass(
            vec![(pod("db", json!({})), evict(2)), job(), skip()],
            &memory,
            &Budgets::default(),
            &DrainPolicy::default(),
            None,
            t(1),
            at,
        );
        assert_eq!(asked(&plan), ["db"]);
        let plan = plan_pass(
            vec![job(), skip()],
            &memory,
            &Budgets::default(),
            &DrainPolicy::default(),
            None,
            t(2),
            at,
        );
        let (rep, _) = settle(plan, &memory, at);
        assert!(
            !rep.done() && rep.blocked(),
            "waits for the job, polling at the blocked pace"
        );
        // The job finished: done, the kept pod still named.
        let plan = plan_pass(
            vec![(pod("job", json!({})), Disposition::SkipFinished), skip()],
            &memory,
            &Budgets::default(),
            &DrainPolicy::default(),
            None,
            t(3),
            at,
        );
        let (rep, _) = settle(plan, &memory, at);
        assert!(rep.done());
        assert_eq!(rep.skipped.len(), 1);
    }

    #[test]
    fn past_the_deadline_force_delete_deletes_each_pod_once_and_skip_stuck_stops_waiting() {
        let at = Instant::now();
        let policy = |on_timeout| DrainPolicy {
            drain_timeout: Some(Duration::from_secs(90)),
            on_timeout,
            deadline_start: Some(t(0)),
            ..DrainPolicy::default()
        };
        let budgets = Budgets::known([budget("pdb", "db", 0)]);
        // Started at t(0): the deadline is t(90). `stuck` was due at t(50) (a finalizer holds
        // it); `db` is held by its budget; `job` must complete; `dns` is of a later stage. `db`
        // and `dns` have no grace period, so ForceDelete deletes them a second before the
        // deadline (`deadline::force_due`; a pod's own grace is `deadline::tests`').
        let pods = || {
            vec![
                (
                    pod(
                        "db",
                        json!({
                            "metadata": {"labels": {"app": "db"}},
                            "spec": {"terminationGracePeriodSeconds": 0},
                            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
                        }),
                    ),
                    ordinary(),
                ),
                (
                    pod(
                        "stuck",
                        json!({"metadata": {"deletionTimestamp": t(50).to_string(), "finalizers": ["x/y"]}}),
                    ),
                    ordinary(),
                ),
                (
                    pod("job", json!({})),
                    Disposition::WaitCompleted {
                        label: crate::drain::DRAIN_LABEL,
                    },
                ),
                (
                    pod("dns", json!({"spec": {"terminationGracePeriodSeconds": 0}})),
                    Disposition::Evict {
                        warnings: Vec::new(),
                        stage: Stage::Critical,
                    },
                ),
            ]
        };
        let memory = RetrySchedule::default();
        let run = |on_timeout, now, memory: &RetrySchedule| {
            plan_pass(
                pods(),
                memory,
                &budgets,
                &policy(on_timeout),
                Some(t(0)),
                t(now),
                at,
            )
        };
        let reasons = |plan: &PassPlan| {
            let mut r: Vec<(String, String)> = plan
                .report
                .pending
                .iter()
                .chain(plan.kept.iter().map(|(_, b)| b))
                .map(|b| (b.name.clone(), b.reason.clone()))
                .collect();
            r.sort();
            r
        };
        // Before the deadline every policy is today's drain.
        for on_timeout in [
            OnTimeout::Wait,
            OnTimeout::Fail,
            OnTimeout::SkipStuck,
            OnTimeout::ForceDelete,
        ] {
            let plan = run(on_timeout, 88, &memory);
            assert_eq!(plan.report.overdue, None);
            assert!(
                plan.delete.is_empty() && plan.kept.is_empty(),
                "{on_timeout}"
            );
        }
        // ForceDelete: every evictable pod but the one that must complete, whatever its stage or
        // budget, with the floor of 1 s; a pod past its deletion (a finalizer holds it) gains
        // nothing from another DELETE and is left as it is.
        let plan = run(OnTimeout::ForceDelete, 90, &memory);
        assert_eq!(plan.report.overdue, Some(OnTimeout::ForceDelete));
        let deleted: Vec<(&str, i64)> = plan
            .delete
            .iter()
            .map(|d| (d.pod.name.as_str(), d.grace_seconds))
            .collect();
        assert_eq!(deleted, [("db", 1), ("dns", 1)]);
        assert!(plan.evict.is_empty());
        assert_eq!(
            reasons(&plan),
            [
                ("db".into(), reason::FORCE_DELETED.into()),
                ("dns".into(), reason::FORCE_DELETED.into()),
                ("job".into(), reason::WAITING_FOR_COMPLETION.into()),
                ("stuck".into(), reason::TERMINATING.into()),
            ]
        );
        // Remembered: the next round deletes nothing again and still says why the pods stay.
        let (report, settled) = settle(plan, &memory, at);
        assert_eq!(report.forced.len(), 2);
        let mut memory = memory.clone();
        memory.apply(settled);
        let again = run(OnTimeout::ForceDelete, 95, &memory);
        assert!(again.delete.is_empty());
        assert_eq!(
            reasons(&again)
                .iter()
                .filter(|(_, r)| r == reason::FORCE_DELETED)
                .count(),
            2
        );
        // A failed DELETE holds the pod for a minute, then deletes it again.
        memory.force_answered("uid-db", Some("forbidden"), at);
        let held = run(OnTimeout::ForceDelete, 96, &memory);
        assert!(held.delete.is_empty());
        assert!(held.report.errors.iter().any(|e| e.contains("forbidden")));
        let later = plan_pass(
            pods(),
            &memory,
            &budgets,
            &policy(OnTimeout::ForceDelete),
            Some(t(0)),
            t(160),
            at + Duration::from_secs(61),
        );
        assert_eq!(later.delete.len(), 1);
        // SkipStuck: the overdue deletion is kept; the budget-held pod is still asked (its probe).
        let plan = run(OnTimeout::SkipStuck, 90, &RetrySchedule::default());
        assert!(plan.delete.is_empty());
        assert_eq!(plan.evict[0].pod.name, "db");
        assert_eq!(
            reasons(&plan),
            [
                ("dns".into(), reason::SYSTEM_CRITICAL.into()),
                ("job".into(), reason::WAITING_FOR_COMPLETION.into()),
                ("stuck".into(), reason::DELETION_OVERDUE.into()),
            ]
        );
        // Wait and Fail change nothing per pod.
        for on_timeout in [OnTimeout::Wait, OnTimeout::Fail] {
            let plan = run(on_timeout, 200, &RetrySchedule::default());
            assert_eq!(plan.report.overdue, Some(on_timeout));
            assert!(plan.delete.is_empty() && plan.kept.is_empty());
        }
    }

    /// [`plan`] without migrations, as the table tests call it.
    pub(crate) fn plan_pass(
        pods: Vec<(DrainPod, Disposition)>,
        schedule: &RetrySchedule,
        budgets: &Budgets,
        policy: &DrainPolicy,
        started: Option<jiff::Timestamp>,
        now: jiff::Timestamp,
        at: Instant,
    ) -> PassPlan {
        let observed = Observed {
            pods,
            started,
            listed_at: now,
            at,
            surge: Default::default(),
            migrations: Migrations::default(),
            responders: HashMap::new(),
        };
        plan(observed, schedule, budgets, policy, &HashMap::new())
    }
}
