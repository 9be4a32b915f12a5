//! The drain's memory of each node between rounds ([`RetrySchedule`], by node in
//! [`DrainMemory`]): what a round reads besides the listing, and what its settlement and the
//! evictions' answers write.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use super::answer::{EvictionOutcome, evicting_error};
use super::budget::{Relief, SharedCause};
use super::consts::{REPLACEMENT_WAIT, reason, result};
use super::deadline;
use crate::api::{PodBlocker, PodReference};

/// The drain's memory of one node: one record per pod of the node, by UID ([`PodState`]), and
/// the node's own facts: the drain's first listing ([`Arrival`](super::decide::Arrival)) and
/// the last refusal of each cause many pods share. After a refused eviction the pod is not asked
/// again before its retry is due ([`EVICTION_RETRY_INTERVAL`](super::consts::EVICTION_RETRY_INTERVAL)),
/// whatever triggered the pass: our own status write, node patch or lease renewal included.
/// Read into each round's observation; the round's pure decisions say what it becomes
/// (`round::settle`), and each eviction's answer is recorded as it arrives
/// ([`RetrySchedule::answered`]). Lost on restart: the first pass of a new process asks each
/// pending pod once more, then the schedule applies again.
#[derive(Clone, Debug, Default)]
pub(crate) struct RetrySchedule {
    /// What the drain remembers of each pod, by UID (a failed migration's one Warning by its
    /// `migration/<namespace>/<name>` key); a pod of which nothing is remembered has no record.
    pods: HashMap<String, PodState>,
    /// The drain's first listing: its start (whole seconds) and the UIDs of the tolerating pods.
    first_listing: Option<(i64, HashSet<String>)>,
    /// The last refusal of each cause many pods share.
    shared: HashMap<SharedCause, SharedEntry>,
}

/// What the drain remembers of one pod; each round reads it once per pod (`round::evictable`).
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct PodState {
    /// Its last refusal; it holds the pod until its retry is due. Boxed, as every blocker here:
    /// a record is then 48 bytes, where the inline `accepted` blocker made it 312 (with its key,
    /// 1.4 MB for a 3,000-pod drain at its peak, heaptrack).
    pub(crate) refused: Option<Box<Refusal>>,
    /// An eviction was sent and not answered yet.
    pub(crate) in_flight: bool,
    /// The API server accepted its eviction (or answered gone), with the answer's blocker: a
    /// listing that still shows it not terminating was taken before that answer, so the pod is
    /// not asked again (`docs/drain-contract.md` §4).
    pub(crate) accepted: Option<Option<Box<PodBlocker>>>,
    /// Deleted after the drain deadline, with its `ForceDeleted` blocker.
    pub(crate) forced: Option<Box<PodBlocker>>,
    /// Evicted and gone; its controller's replacement is awaited ([`REPLACEMENT_WAIT`]).
    pub(crate) awaited: Option<Box<Awaited>>,
    /// Already named in its one event as kept.
    pub(crate) announced: bool,
    /// Already named in its one `NotMigratable` Warning.
    pub(crate) warned: bool,
}

impl PodState {
    /// Forgets what only matters while the pod is listed: all but an unanswered eviction and an
    /// awaited replacement (the pod is gone while its replacement is awaited).
    fn unlisted(&mut self) {
        *self = Self {
            in_flight: self.in_flight,
            awaited: self.awaited.take(),
            ..Self::default()
        };
    }
}

/// The last refusal that named a cause many pods share ([`SharedCause`]): until `due`, the
/// other pods it covers are held by it without a request of their own (`docs/drain-contract.md`
/// §1).
#[derive(Clone, Debug)]
pub(crate) struct SharedEntry {
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
        let blocker = self.blocker.for_pod(pod);
        let error = self.error.as_deref().map(|e| evicting_error(pod, e));
        (blocker, error)
    }
}

/// A pod's last refused eviction (or failed forced DELETE).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Refusal {
    /// When it may be asked again.
    pub(crate) due: Instant,
    pub(crate) blocker: PodBlocker,
    /// Upstream's lastError text.
    pub(crate) error: Option<String>,
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
    /// The record of pod `uid`, made when missing.
    fn pod(&mut self, uid: &str) -> &mut PodState {
        self.pods.entry(uid.to_string()).or_default()
    }
    /// Changes the record of pod `uid`, when there is one, and drops it once it holds nothing.
    fn change(&mut self, uid: &str, f: impl FnOnce(&mut PodState)) {
        if let Some(p) = self.pods.get_mut(uid) {
            f(p);
            if *p == PodState::default() {
                self.pods.remove(uid);
            }
        }
    }
    /// The blocker and lastError text of the last refusal, to keep reporting for pod `uid` while
    /// its retry is not due at `now`; `None` when it may be evicted.
    pub(crate) fn held(&self, uid: &str, now: Instant) -> Option<(&PodBlocker, Option<&str>)> {
        self.refusal(uid)
            .filter(|r| r.due > now)
            .map(|r| (&r.blocker, r.error.as_deref()))
    }
    fn refusal(&self, uid: &str) -> Option<&Refusal> {
        self.pods.get(uid)?.refused.as_deref()
    }
    /// What is remembered of pod `uid`.
    pub(crate) fn state(&self, uid: &str) -> Option<&PodState> {
        self.pods.get(uid)
    }
    /// What status shows for pod `uid` while its eviction is sent and unanswered: its last
    /// refusal (blocker and lastError text) when it was refused before, so a budget's probe,
    /// asked again each retry, stays named with the budget that holds it instead of flipping to
    /// `Evicting` for the milliseconds of each ask (docs/drain-contract.md §1); else
    /// [`evicting`] and no error.
    pub(crate) fn asking(&self, pod: &PodReference, uid: &str) -> (PodBlocker, Option<String>) {
        match self.refusal(uid) {
            Some(r) => (r.blocker.clone(), r.error.clone()),
            None => (evicting(pod), None),
        }
    }
    /// Records the outcome of an eviction of pod `uid`: a refusal (a blocker other than
    /// `Terminating`) schedules the next try one interval after `now`; anything else clears it.
    /// A refusal that names a cause many pods share also holds those pods until the same time
    /// ([`Self::shared`]).
    pub(crate) fn record(&mut self, uid: &str, outcome: &EvictionOutcome, now: Instant) {
        let (Some(b), Some(retry)) = (&outcome.blocker, outcome.retry) else {
            self.change(uid, |p| p.refused = None);
            return;
        };
        self.pod(uid).refused = Some(Box::new(Refusal {
            due: now + retry,
            blocker: b.clone(),
            error: outcome.error.clone(),
            shared: outcome.shared.clone(),
        }));
        if let Some(cause) = &outcome.shared {
            let entry = SharedEntry {
                due: now + retry,
                blocker: b.clone(),
                error: outcome.api_error.clone(),
            };
            self.shared.insert(cause.clone(), entry);
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
    /// a 429). Whether anything was held. Scans the node's pods only when `retries` (a change of
    /// the budget, rare).
    pub(crate) fn release(&mut self, relief: &Relief) -> bool {
        let mut released = false;
        if relief.retries {
            let cause = Some(&relief.cause);
            self.pods.retain(|_, p| {
                if p.refused
                    .as_ref()
                    .is_some_and(|r| r.shared.as_ref() == cause)
                {
                    p.refused = None;
                    released = true;
                }
                *p != PodState::default()
            });
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
    /// The answer to the forced DELETE of `uid`: a failure (`error`, the API server's text) is
    /// held as a refusal is, and the pod is deleted again once the retry is due.
    pub(crate) fn force_answered(&mut self, uid: &str, error: Option<&str>, now: Instant) {
        let Some(error) = error else { return };
        let Some(b) = self.pods.get_mut(uid).and_then(|p| p.forced.take()) else {
            return;
        };
        let pod = b.pod();
        self.pod(uid).refused = Some(Box::new(Refusal {
            due: now + deadline::FORCE_DELETE_RETRY,
            blocker: deadline::force_delete_failed(&pod, error),
            error: Some(format!(
                "error when deleting pod \"{}\" in namespace \"{}\": {error}",
                pod.name, pod.namespace
            )),
            shared: None,
        }));
    }
    /// The forced DELETE of `uid` was not sent (the maintenance was paused, moved back or
    /// deleted meanwhile: `super::gate`): it is forgotten, so a later round decides it again.
    pub(crate) fn force_unsent(&mut self, uid: &str) {
        self.change(uid, |p| p.forced = None);
    }
    /// Whether an eviction of `uid` was sent and not answered yet.
    pub(crate) fn in_flight(&self, uid: &str) -> bool {
        self.pods.get(uid).is_some_and(|p| p.in_flight)
    }
    /// Whether some eviction of this node is in flight.
    pub(crate) fn any_in_flight(&self) -> bool {
        self.pods.values().any(|p| p.in_flight)
    }
    /// Marks the eviction of `uid` as sent.
    pub(crate) fn sent(&mut self, uid: &str) {
        self.pod(uid).in_flight = true;
    }
    /// Marks sent the evictions of `uids` that a round decided, but for those already in flight
    /// or held at `now` by an answer that arrived since the round read the memory: none is sent
    /// twice. Returns the UIDs to send.
    pub(crate) fn send<'a>(
        &mut self,
        uids: impl IntoIterator<Item = &'a str>,
        now: Instant,
    ) -> HashSet<String> {
        let send: HashSet<String> = uids
            .into_iter()
            .filter(|uid| !self.in_flight(uid) && self.held(uid, now).is_none())
            .map(str::to_string)
            .collect();
        for uid in &send {
            self.sent(uid);
        }
        send
    }
    /// The answer to the eviction of `uid` (`None`: it was not sent after all, the maintenance
    /// ended first): no longer in flight, and a refusal held as [`Self::record`] says.
    /// An accepted eviction of a pod that `awaits` a replacement records that wait.
    /// An accepted eviction of a pod the round found covered by a shared `cause` ends that
    /// cause's hold: the cause allowed it, so its other pods are asked as the round decides.
    /// Returns whether the answer wakes the node's next pass: a refusal (its retry is for a
    /// round to schedule), an ended hold (the next round asks what the hold kept back), a pod
    /// that awaits a replacement, or the node's last answer. An acceptance alone changes no
    /// decision until its pod is gone, which the next pass (at most `REQUEUE_TERMINATING` later)
    /// counts: waking a pass per answer had a 3,000-pod node list its pods back to back (and
    /// each accepted eviction of a budget that allows had 2,000 pods' node do the same).
    pub(crate) fn answered(
        &mut self,
        uid: &str,
        outcome: Option<&EvictionOutcome>,
        planned: Option<(&Option<Awaited>, &Option<SharedCause>)>,
        now: Instant,
    ) -> bool {
        let mut ended_hold = false;
        self.change(uid, |p| p.in_flight = false);
        let Some(o) = outcome else {
            return false;
        };
        self.record(uid, o, now);
        if o.result == result::EVICTED || o.result == result::GONE {
            self.pod(uid).accepted = Some(o.blocker.clone().map(Box::new));
        }
        if o.result == result::EVICTED
            && let Some((awaits, cause)) = planned
        {
            if let Some(a) = awaits {
                self.pod(uid).awaited = Some(Box::new(a.clone()));
            }
            if let Some(c) = cause {
                ended_hold = self.shared.remove(c).is_some();
            }
        }
        let awaits = planned.is_some_and(|(awaits, _)| awaits.is_some());
        o.retry.is_some() || ended_hold || awaits || !self.any_in_flight()
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
    /// The replacements awaited, by the UID of the evicted pod.
    pub(crate) fn awaited(&self) -> impl Iterator<Item = (&String, &Awaited)> {
        self.pods
            .iter()
            .filter_map(|(uid, p)| p.awaited.as_deref().map(|a| (uid, a)))
    }
    /// Forgets of the pods not in `listed` (gone, or no longer up for eviction) all but an
    /// unanswered eviction and an awaited replacement.
    pub(crate) fn retain(&mut self, listed: &HashSet<String>) {
        self.pods.retain(|uid, p| {
            if !listed.contains(uid) {
                p.unlisted();
            }
            *p != PodState::default()
        });
    }
    /// Time until the earliest retry due, `None` when none is scheduled.
    /// Retries already due are not counted: their pods are asked by the round that reads them,
    /// and their answers wake the next one.
    pub(crate) fn next_due(&self, now: Instant) -> Option<Duration> {
        let pods = self
            .pods
            .values()
            .filter_map(|p| p.refused.as_ref())
            .map(|r| r.due);
        let shared = self.shared.values().map(|e| e.due);
        pods.chain(shared)
            .filter(|due| *due > now)
            .map(|due| due - now)
            .min()
    }
    /// Whether nothing is remembered.
    pub(crate) fn is_empty(&self) -> bool {
        self.pods.is_empty() && self.first_listing.is_none() && self.shared.is_empty()
    }
    /// Applies what a round settled ([`Settled`]), keeping the answers that arrived since the
    /// round read the memory: pods no longer listed forgotten, the kept pods announced, the
    /// first listing and the awaited replacements replaced (forgotten once the drain is done).
    pub(crate) fn apply(&mut self, settled: Settled) {
        self.retain(&settled.listed);
        for uid in &settled.kept {
            self.announce(uid);
        }
        for uid in &settled.warned {
            self.warn(uid);
        }
        for (uid, b) in settled.forced {
            let p = self.pod(&uid);
            p.refused = None;
            p.forced = Some(Box::new(b));
        }
        if settled.first_listing.is_some() {
            self.first_listing = settled.first_listing;
        }
        for uid in &settled.read_awaited {
            self.change(uid, |p| p.awaited = None);
        }
        for (uid, a) in settled.awaited {
            self.pod(&uid).awaited = Some(Box::new(a));
        }
        if settled.done {
            self.first_listing = None;
            self.pods.retain(|_, p| {
                p.awaited = None;
                *p != PodState::default()
            });
            self.shared.clear();
        }
    }
    /// Whether skipped pod `uid` is reported for the first time (for its one event).
    pub(crate) fn announce(&mut self, uid: &str) -> bool {
        !std::mem::replace(&mut self.pod(uid).announced, true)
    }
    /// Whether not-migratable pod `uid` is reported for the first time (for its one Warning).
    pub(crate) fn warn(&mut self, uid: &str) -> bool {
        !std::mem::replace(&mut self.pod(uid).warned, true)
    }
}

/// The blocker of a pod whose eviction was sent and not yet answered ([`reason::EVICTING`]).
/// No time in the text: the status is rewritten only when it changes.
pub(crate) fn evicting(pod: &PodReference) -> PodBlocker {
    PodBlocker::of(
        pod,
        reason::EVICTING,
        "eviction requested; waiting for the API server's answer (an admission webhook on \
             pods/eviction may be slow)"
            .to_string(),
    )
}

/// What a round leaves in the node's memory, applied by the executor under the memory's lock
/// (answers that arrive meanwhile are kept): the UIDs still listed, the evictions sent, the kept
/// pods announced, the first listing and the awaited replacements.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Settled {
    /// UIDs whose retry entries stay.
    pub listed: HashSet<String>,
    /// UIDs of the kept pods (announced from now on).
    pub kept: Vec<String>,
    /// UIDs of the `NotMigratable` pods (warned about from now on).
    pub warned: Vec<String>,
    /// The first listing to record, if any.
    pub first_listing: Option<(i64, HashSet<String>)>,
    /// The replacements awaited.
    pub awaited: HashMap<String, Awaited>,
    /// The UIDs of the replacements awaited in the memory the round read (an entry recorded by
    /// an answer since is kept).
    pub read_awaited: HashSet<String>,
    /// Whether the drain is done: the first listing and the awaited replacements are forgotten.
    pub done: bool,
    /// The pods deleted by this round, by UID, with their blockers.
    pub forced: Vec<(String, PodBlocker)>,
}

/// The drain's memory of every node, by node name ([`RetrySchedule`]); owned by the
/// controller's memory (`crate::controller::memory::Memories`), read and written by the drain.
pub(crate) type DrainMemory = std::sync::Arc<std::sync::Mutex<HashMap<String, RetrySchedule>>>;

/// The blocker of an evicted pod, gone from the node, whose controller's replacement is awaited
/// ([`reason::AWAITING_REPLACEMENT`]).
pub(crate) fn awaiting_replacement(pod: &PodReference) -> PodBlocker {
    PodBlocker::of(
        pod,
        reason::AWAITING_REPLACEMENT,
        format!(
            "evicted and gone; it tolerates the maintenance taints, so its controller's \
             replacement may be scheduled back onto this node: waiting up to {}s for it, to name \
             it as kept",
            REPLACEMENT_WAIT.as_secs()
        ),
    )
}
