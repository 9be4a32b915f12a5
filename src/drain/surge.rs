//! The `surge` knob (`docs/drain-contract.md` §15; issue 47 item 1): with
//! `surge: RolloutRestart`, a pod of a Deployment that cannot lose it (the budget covering it
//! allows no disruption or refused its eviction with 429, or the Deployment has one replica) is
//! not evicted. The drain restarts the Deployment's rollout instead, exactly as `kubectl rollout
//! restart` does (the template annotation `kubectl.kubernetes.io/restartedAt`), so the
//! Deployment controller creates the replacement first (it schedules elsewhere: the node is
//! cordoned), waits for it Ready and removes the old pod itself; the drain goes on once the old
//! pod is gone, or evicts it as usual once its budget allows. Never twice for one workload in
//! one drain: the restart's patch records the maintenance's UID and its drain's start on the
//! Deployment ([`RESTARTED_FOR`], [`record`]), a fact of the API server that a restart of the
//! operator reads back. A new drain of the same maintenance (Drain → Idle → Drain, whose node
//! was released meanwhile, so the replacement may have been scheduled back onto it) restarts
//! again; within one drain the node stays cordoned, so a replacement there tolerates the
//! maintenance taints and a second restart would only bring it back.
//!
//! A Deployment whose rollout cannot surge (`strategy.type: Recreate`, `rollingUpdate.maxSurge`
//! of 0, `spec.paused`) is not restarted: its pod is held with a blocker naming the workload and
//! why; so is a restarted one whose rollout cannot progress (its replacement unschedulable, or
//! its `Progressing` condition False). Pods of any other controller (a StatefulSet: one pod per
//! identity) cannot surge: they stay held by their budget as before, and the blocker says so.
//! At the deadline with `onTimeout: ForceDelete` nothing is held by this rule any more.
//!
//! Pure: what it reads of the workloads is observed by `surge_io.rs` ([`Facts`]), the restarts
//! it decides are sent there too, each only while the maintenance may still send
//! (`super::gate`).

use std::collections::{HashMap, HashSet};

use super::budget::{Budget, Budgets};
use super::consts::reason;
use super::disposition::Disposition;
use super::memory::RetrySchedule;
use super::pod::DrainPod;
use crate::api::{OnTimeout, PodBlocker, PodReference};
use crate::knobs::Surge;
use crate::policy::DrainPolicy;

/// The annotation on a restarted Deployment's metadata naming the drain that restarted it
/// ([`record`]): the record that it is restarted once per drain.
pub(crate) const RESTARTED_FOR: &str = "nodemaintenance.medik8s.io/restarted-for";

/// The template annotation `kubectl rollout restart` sets (to an RFC 3339 time).
pub(crate) const RESTARTED_AT: &str = "kubectl.kubernetes.io/restartedAt";

/// The maintenance UID part of a [`record`].
fn maintenance_of(record: &str) -> &str {
    record.split_once('@').map_or(record, |(uid, _)| uid)
}

/// Whether `d` was restarted by maintenance of the drain `drain` (any of its drains).
pub(crate) fn restarted_by(d: &Deployment, drain: &str) -> bool {
    d.restarted_for
        .as_deref()
        .is_some_and(|r| maintenance_of(r) == maintenance_of(drain))
}

/// `d` (as read for one pod) with its record as the drain `drain` reads it: a restart by an
/// earlier drain of the same maintenance counts as this drain's while the pod is of an older
/// revision (its rollout is replacing the pod: restarting again would only start another), and
/// not at all for a pod of the newest revision, one the restart created (scheduled back onto
/// the node while it was released: this drain restarts again, once).
fn as_read_by(d: &Deployment, drain: &str) -> Deployment {
    let mut d = d.clone();
    if d.restarted_for.as_deref() != Some(drain) && restarted_by(&d, drain) {
        d.restarted_for = (!d.current).then(|| drain.to_string());
    }
    d
}

/// The `restartedAt` a restart at `now` writes: `now`, or a second after the last restart's
/// when that is not earlier (whole seconds: the same value would leave the template unchanged
/// and start no rollout). A last value at the end of time (anyone who edits the Deployment can
/// write one) has no second after it: `now`, which differs from it all the same.
fn stamp(now: jiff::Timestamp, last: Option<jiff::Timestamp>) -> jiff::Timestamp {
    match last {
        Some(last) if last.as_second() >= now.as_second() => last
            .checked_add(jiff::SignedDuration::from_secs(1))
            .unwrap_or(now),
        _ => now,
    }
}

/// The value of [`RESTARTED_FOR`] for the drain of maintenance `uid` that started at `started`
/// (the round's start: the start recorded on the node, or the moment a waiting maintenance got
/// its slot when later, both by the API server's clock): `<uid>@<start, RFC 3339 seconds>`,
/// or the bare UID when no start is known (a node entered by an older version).
pub(crate) fn record(uid: &str, started: Option<jiff::Timestamp>) -> String {
    match started {
        Some(t) => format!("{uid}@{}", t.strftime("%Y-%m-%dT%H:%M:%SZ")),
        None => uid.to_string(),
    }
}

/// What a round observed of the workloads of the node's pods (`surge_io::observe`).
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Facts {
    /// This drain's record ([`record`]: what [`RESTARTED_FOR`] holds once restarted by it).
    pub maintenance: Option<String>,
    /// The workload of each pod up for eviction, by the pod's namespace and name (as listed in
    /// the same round); pods without a controller, or whose controller was not found, have none.
    pub workloads: HashMap<(String, String), Workload>,
}

/// The workload that owns a pod.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Workload {
    /// A Deployment, through its ReplicaSet.
    Deployment(Deployment),
    /// Any other controller (a StatefulSet, a ReplicaSet of no Deployment, a Job…).
    Other {
        /// Its kind.
        kind: String,
        /// Its name.
        name: String,
    },
}

/// What the decision reads of a Deployment.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Deployment {
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// Its `metadata.resourceVersion`, the restart's precondition.
    pub resource_version: Option<String>,
    /// `spec.replicas` (1 when unset).
    pub replicas: i32,
    /// `spec.strategy.type` is `Recreate`.
    pub recreate: bool,
    /// `spec.strategy.rollingUpdate.maxSurge` is 0 (or 0%).
    pub max_surge_zero: bool,
    /// `spec.paused`.
    pub paused: bool,
    /// Its [`RESTARTED_FOR`] annotation.
    pub restarted_for: Option<String>,
    /// Its template's [`RESTARTED_AT`] (the last restart's time), when it parses.
    pub restarted_at: Option<jiff::Timestamp>,
    /// The pod's ReplicaSet is the Deployment's newest (their revision annotations agree): after
    /// a restart, the pod is one the restart created.
    pub current: bool,
    /// Why its rollout cannot progress (read once it was restarted): a replacement's
    /// `PodScheduled=False` message, or its `Progressing=False` condition.
    pub stuck: Option<String>,
}

impl Deployment {
    fn named(&self) -> String {
        format!("Deployment {}/{}", self.namespace, self.name)
    }
}

/// One restart the round sends: the Deployment and the pods it replaces.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct PlannedRestart {
    /// The Deployment's namespace.
    pub namespace: String,
    /// The Deployment's name.
    pub name: String,
    /// Its `resourceVersion` as observed (a conflict ends the restart: the next round decides
    /// again from what the API server holds).
    pub resource_version: Option<String>,
    /// This drain's record ([`record`]), written as [`RESTARTED_FOR`].
    pub maintenance: String,
    /// The API server's time the restart is stamped with (`restartedAt`, RFC 3339).
    pub at: jiff::Timestamp,
    /// The blocker of the pod it replaces (its one event's subject).
    pub blocker: PodBlocker,
}

impl PlannedRestart {
    /// The merge patch `kubectl rollout restart` sends, with the record of the maintenance and
    /// the observed `resourceVersion` as its precondition.
    pub(crate) fn patch(&self) -> serde_json::Value {
        let at = self.at.strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
        serde_json::json!({
            "metadata": {
                "resourceVersion": self.resource_version,
                "annotations": {RESTARTED_FOR: self.maintenance},
            },
            "spec": {"template": {"metadata": {"annotations": {RESTARTED_AT: at}}}},
        })
    }
}

/// What the rule decided for a round.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Surging {
    /// The pods held (not evicted), by UID, each with its blocker.
    pub held: HashMap<String, PodBlocker>,
    /// The restarts to send.
    pub restart: Vec<PlannedRestart>,
}

/// What the rule does with one pod.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Verdict {
    /// Nothing: the drain decides as without it.
    Evict,
    /// Held, with its blocker.
    Hold(PodBlocker),
    /// Held, with its blocker, and its Deployment restarted.
    Restart(PodBlocker),
}

/// The rule for one pod (reference `r`) of Deployment `d`, covered by `budget` (`None`: none
/// decides it), whose eviction a budget refused (`refused`), in the maintenance `maintenance`.
pub(crate) fn verdict(
    r: &PodReference,
    d: &Deployment,
    budget: Option<&Budget>,
    refused: bool,
    maintenance: &str,
) -> Verdict {
    let allows = budget.is_some_and(|b| b.allowed > 0);
    if d.restarted_for.as_deref() == Some(maintenance) {
        if allows && !refused {
            return Verdict::Evict;
        }
        // Paused after the restart, its rollout goes no further (`Progressing` is then
        // Unknown, `DeploymentPaused`, never False): stuck until someone resumes it.
        let paused = d
            .paused
            .then(|| "it is paused (spec.paused), so the rollout does not go on".to_string());
        let (why, text) = match d.stuck.clone().or(paused) {
            Some(stuck) => (
                reason::SURGE_STUCK,
                format!(
                    "{} was restarted for this maintenance (surge RolloutRestart) and its rollout \
                     cannot progress: {stuck}",
                    d.named()
                ),
            ),
            None => (reason::SURGING, waiting(d)),
        };
        return Verdict::Hold(PodBlocker::of(r, why, text));
    }
    let held_by_budget = budget.is_some_and(|b| b.allowed <= 0) || refused;
    if !held_by_budget && d.replicas > 1 {
        return Verdict::Evict;
    }
    let why = if held_by_budget {
        "its budget allows no disruption"
    } else {
        "it is the Deployment's only replica"
    };
    let cannot = if d.recreate {
        Some("its strategy is Recreate, which deletes the pod before its replacement exists")
    } else if d.max_surge_zero {
        Some(
            "its rollingUpdate.maxSurge is 0, so a rollout deletes the pod before its replacement exists",
        )
    } else if d.paused {
        Some("it is paused (spec.paused), so a rollout would not start")
    } else {
        None
    };
    match cannot {
        Some(cannot) => Verdict::Hold(PodBlocker::of(
            r,
            reason::CANNOT_SURGE,
            format!(
                "not evicted ({why}; surge RolloutRestart) and not restarted: {} cannot surge: \
                 {cannot}",
                d.named()
            ),
        )),
        None => Verdict::Restart(PodBlocker::of(
            r,
            reason::SURGING,
            format!(
                "not evicted ({why}): {} restarted for this maintenance (surge RolloutRestart); {}",
                d.named(),
                WAITING
            ),
        )),
    }
}

const WAITING: &str = "waiting until the Deployment has its replacement Ready on another node \
                       and removes this pod";

fn waiting(d: &Deployment) -> String {
    format!(
        "{} was restarted for this maintenance (surge RolloutRestart): {WAITING}",
        d.named()
    )
}

/// The rule over a round's `pods` (`policy.surge`; nothing unless `RolloutRestart`, nor once the
/// deadline has passed with `ForceDelete`): each pod up for eviction in the earliest stage
/// still on the node, not terminating and with no eviction sent or accepted (`memory`), whose
/// workload (`facts`) is a Deployment, gets its [`verdict`]; a Deployment is restarted at most
/// once per round. `now` is the API server's time of the pod list (the restart's stamp).
pub(crate) fn decide(
    pods: &[(DrainPod, Disposition)],
    facts: &Facts,
    budgets: &Budgets,
    memory: &RetrySchedule,
    policy: &DrainPolicy,
    now: jiff::Timestamp,
) -> Surging {
    let mut out = Surging::default();
    let overdue = policy.overdue(policy.deadline_start, now);
    let (Surge::RolloutRestart, Some(maintenance)) = (policy.surge, &facts.maintenance) else {
        return out;
    };
    if overdue == Some(OnTimeout::ForceDelete) {
        return out;
    }
    let first = pods
        .iter()
        .filter_map(|(_, d)| match d {
            Disposition::Evict { stage, .. } => Some(*stage),
            _ => None,
        })
        .min();
    let mut restarted = HashSet::new();
    for (pod, disposition) in pods {
        let Disposition::Evict { stage, .. } = disposition else {
            continue;
        };
        let Some(uid) = pod.metadata.uid.as_deref() else {
            continue;
        };
        let state = memory.state(uid);
        let sent = state.is_some_and(|s| s.in_flight || s.accepted.is_some() || s.forced.is_some());
        if Some(*stage) != first || pod.metadata.deletion_timestamp.is_some() || sent {
            continue;
        }
        let r = pod.reference();
        let Some(Workload::Deployment(d)) =
            facts.workloads.get(&(r.namespace.clone(), r.name.clone()))
        else {
            continue;
        };
        let budget = budgets
            .covering(&pod.metadata.namespace, &pod.metadata.labels)
            .filter(|b| b.decides(pod));
        let refused = state
            .and_then(|s| s.refused.as_deref())
            .is_some_and(|f| f.blocker.reason == reason::PDB);
        let d = &as_read_by(d, maintenance);
        match verdict(&r, d, budget, refused, maintenance) {
            Verdict::Evict => {}
            Verdict::Hold(b) => {
                out.held.insert(uid.to_string(), b);
            }
            Verdict::Restart(b) => {
                let key = (d.namespace.clone(), d.name.clone());
                if restarted.insert(key) {
                    out.restart.push(PlannedRestart {
                        namespace: d.namespace.clone(),
                        name: d.name.clone(),
                        resource_version: d.resource_version.clone(),
                        maintenance: maintenance.clone(),
                        at: stamp(now, d.restarted_at),
                        blocker: b.clone(),
                    });
                }
                out.held.insert(uid.to_string(), b);
            }
        }
    }
    out
}

/// Says, on the blocker of each pending pod its budget holds whose workload cannot surge (any
/// controller but a Deployment: a StatefulSet has one pod per identity), that it cannot; with
/// `surge: RolloutRestart` only.
pub(crate) fn explain(pending: &mut [PodBlocker], facts: &Facts, policy: &DrainPolicy) {
    if policy.surge != Surge::RolloutRestart {
        return;
    }
    for b in pending.iter_mut().filter(|b| b.reason == reason::PDB) {
        let Some(Workload::Other { kind, name }) =
            facts.workloads.get(&(b.namespace.clone(), b.name.clone()))
        else {
            continue;
        };
        let budget = b.pod_disruption_budget.as_deref().unwrap_or("<unknown>");
        let why = if kind == "StatefulSet" {
            "one pod per identity"
        } else {
            "only a Deployment's rollout replaces a pod before it goes"
        };
        let prefix =
            format!("{kind} pods cannot surge ({kind} {name}: {why}); held by budget {budget}: ");
        let message = b.message.take().unwrap_or_default();
        if !message.starts_with(&prefix) {
            b.message = Some(format!("{prefix}{message}"));
        } else {
            b.message = Some(message);
        }
    }
}

#[cfg(test)]
mod tests;
