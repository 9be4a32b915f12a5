//! Node changes for maintenance: cordon, the two maintenance taints, the exclude-from-remediation
//! label, and the annotations that record who holds the node and what it looked like before.
//!
//! Upstream NMO makes these changes in three separate writes (label merge patch, taint JSON patch
//! with a `test` op on the whole taint list, cordon strategic-merge patch) and on stop removes them
//! unconditionally (docs/compat.md §2). We instead make every change in ONE JSON merge patch
//! that carries `metadata.resourceVersion`, which the API server enforces as a precondition (409 on
//! a concurrent change ends the pass; the next one reads the node again), and we record the prior
//! state on the node so that stopping restores exactly what was there before (docs/compat.md §2,
//! §13).
//!
//! Everything here is pure: it reads a Node and returns the patch to send. The controller's
//! executor sends it.

pub(crate) mod conditions;

use k8s_openapi::api::core::v1::{Node, Taint};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Annotation naming the `NodeMaintenance` that holds the node (value: its name).
pub(crate) const HOLDER_ANNOTATION: &str = "nodemaintenance.medik8s.io/holder";
/// Annotation with the holder's `metadata.uid`, so a record left by a vanished holder is not
/// taken for a later NodeMaintenance of the same name (docs/design.md §3).
pub(crate) const HOLDER_UID_ANNOTATION: &str = "nodemaintenance.medik8s.io/holder-uid";
/// Annotation with the node's state before the first entry, as JSON [`PriorState`].
pub(crate) const PRIOR_STATE_ANNOTATION: &str = "nodemaintenance.medik8s.io/prior-state";
/// Annotation with the time the holder's drain started (RFC 3339, whole seconds), in the API
/// server's clock: written when the holder's drain starts (stage Drain with a drain slot,
/// `controller::plan::timeline`), removed on exit with the rest of the record
/// ([`crate::api::DRAIN_STARTED_ANNOTATION`], the same key the NodeMaintenance carried before;
/// docs/drain-contract.md §2).
pub(crate) const DRAIN_STARTED_ANNOTATION: &str = crate::api::DRAIN_STARTED_ANNOTATION;
/// Annotation surfacing the `NodeMaintenance`'s `spec.reason` on the node (docs/compat.md §2).
pub(crate) const REASON_ANNOTATION: &str = "nodemaintenance.medik8s.io/reason";
/// Every annotation of our record on a node, removed on exit and by the orphan sweep.
pub(crate) const RECORD_ANNOTATIONS: [&str; 5] = [
    HOLDER_ANNOTATION,
    HOLDER_UID_ANNOTATION,
    PRIOR_STATE_ANNOTATION,
    REASON_ANNOTATION,
    DRAIN_STARTED_ANNOTATION,
];
/// Label read by NHC and SNR: a node labelled `"true"` is not remediated (docs/compat.md §2).
pub(crate) const EXCLUDE_LABEL: &str = "remediation.medik8s.io/exclude-from-remediation";
/// Key of NMO's own taint, `medik8s.io/drain:NoSchedule`.
pub(crate) const DRAIN_TAINT_KEY: &str = "medik8s.io/drain";
/// Key of the cordon taint, `node.kubernetes.io/unschedulable:NoSchedule` (also added by the node
/// lifecycle controller for a cordoned node).
pub(crate) const UNSCHEDULABLE_TAINT_KEY: &str = "node.kubernetes.io/unschedulable";
/// Effect of both maintenance taints.
pub(crate) const NO_SCHEDULE: &str = "NoSchedule";

/// `repaired` entry: `spec.unschedulable` had been reset while we held the node.
pub(crate) const REPAIRED_CORDON: &str = "cordon";
/// `repaired` entry: the `medik8s.io/drain:NoSchedule` taint had been removed.
pub(crate) const REPAIRED_DRAIN_TAINT: &str = "medik8s.io/drain taint";
/// `repaired` entry: the `node.kubernetes.io/unschedulable:NoSchedule` taint had been removed.
pub(crate) const REPAIRED_UNSCHEDULABLE_TAINT: &str = "node.kubernetes.io/unschedulable taint";
/// `repaired` entry: the exclude-from-remediation label was missing or not `"true"`.
pub(crate) const REPAIRED_EXCLUDE_LABEL: &str = "exclude-from-remediation label";

/// The maintenance taints in upstream's order: they go first in `spec.taints`, in this order.
const MAINTENANCE_TAINT_KEYS: [&str; 2] = [UNSCHEDULABLE_TAINT_KEY, DRAIN_TAINT_KEY];

/// A taint identified the way upstream and its tests compare taints: key and effect only.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct TaintRef {
    /// Taint key, e.g. `node.kubernetes.io/unschedulable`.
    pub key: String,
    /// Taint effect, e.g. `NoSchedule`.
    pub effect: String,
}

/// What the node looked like before our first entry, stored as JSON in
/// [`PRIOR_STATE_ANNOTATION`]: `{"unschedulable":bool,"taints":[{"key":..,"effect":..}],"excludeLabel":bool}`.
///
/// `taints` lists only the maintenance taints that were already there (so exit keeps them);
/// `excludeLabel` is true when the label was already `"true"`. `excludeLabelValue` is our
/// addition, written only when the label existed with another value, so exit can put that value
/// back. Every field defaults when absent, so a hand-edited annotation still parses.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct PriorState {
    /// `spec.unschedulable` before entry (an admin cordon).
    #[serde(default)]
    pub unschedulable: bool,
    /// Maintenance taints present before entry (key and effect).
    #[serde(default)]
    pub taints: Vec<TaintRef>,
    /// Whether the exclude-from-remediation label was already `"true"`.
    #[serde(default)]
    pub exclude_label: bool,
    /// The exclude-from-remediation label's earlier value when it existed and was not `"true"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exclude_label_value: Option<String>,
}

impl PriorState {
    /// Whether the node carried this taint (key and effect) before the maintenance.
    pub(crate) fn had_taint(&self, key: &str, effect: &str) -> bool {
        self.taints
            .iter()
            .any(|t| t.key == key && t.effect == effect)
    }
}

/// The maintenance-relevant state of a node, read from the object alone.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct NodeMaintenanceState {
    /// Value of [`HOLDER_ANNOTATION`]: the `NodeMaintenance` holding the node, if any.
    pub holder: Option<String>,
    /// Value of [`HOLDER_UID_ANNOTATION`]: that holder's uid, when recorded.
    pub holder_uid: Option<String>,
    /// `spec.unschedulable == true`.
    pub cordoned: bool,
    /// Carries `medik8s.io/drain:NoSchedule` (key and effect).
    pub drain_taint: bool,
    /// Carries `node.kubernetes.io/unschedulable:NoSchedule` (key and effect).
    pub unschedulable_taint: bool,
    /// Label `remediation.medik8s.io/exclude-from-remediation` is `"true"`.
    pub excluded: bool,
}

impl NodeMaintenanceState {
    /// True when the node carries every mark of maintenance (cordon, both maintenance taints,
    /// exclude label), whoever put them there.
    pub(crate) fn carries_marks(&self) -> bool {
        self.cordoned && self.drain_taint && self.unschedulable_taint && self.excluded
    }
}

/// Whether the maintenance that `node`'s record describes is still in place, whoever recorded
/// it: the node carries every maintenance mark, or the `medik8s.io/drain` taint that the
/// record's prior state says was not there before. Only a node maintenance operator (ours or
/// upstream's) puts that taint, and ending a maintenance (our exit, upstream's stop after a
/// rollback) removes it; a cordon or label alone may be an admin's newer state. Such a record's
/// prior state is still true (`docs/drain-contract.md` §6).
pub(crate) fn record_in_place(node: &Node) -> bool {
    let state = observe(node);
    let prior = prior_state(node).unwrap_or_default();
    state.carries_marks() || (state.drain_taint && !prior.had_taint(DRAIN_TAINT_KEY, NO_SCHEDULE))
}

/// Reads the maintenance-relevant state of `node` (no I/O).
pub(crate) fn observe(node: &Node) -> NodeMaintenanceState {
    NodeMaintenanceState {
        holder: annotation(node, HOLDER_ANNOTATION).map(str::to_owned),
        holder_uid: annotation(node, HOLDER_UID_ANNOTATION).map(str::to_owned),
        cordoned: is_cordoned(node),
        drain_taint: has_taint(node, DRAIN_TAINT_KEY, NO_SCHEDULE),
        unschedulable_taint: has_taint(node, UNSCHEDULABLE_TAINT_KEY, NO_SCHEDULE),
        excluded: label(node, EXCLUDE_LABEL) == Some("true"),
    }
}

/// Parses [`PRIOR_STATE_ANNOTATION`]; `None` when it is absent or not valid JSON.
pub(crate) fn prior_state(node: &Node) -> Option<PriorState> {
    let raw = annotation(node, PRIOR_STATE_ANNOTATION)?;
    match serde_json::from_str(raw) {
        Ok(prior) => Some(prior),
        Err(error) => {
            tracing::warn!(node = node_name(node), %error, "ignoring unparseable prior-state annotation");
            None
        }
    }
}

/// True when `taint` is one of the two maintenance taints (key and effect, like upstream's
/// `MatchTaint`).
pub(crate) fn is_maintenance_taint(taint: &Taint) -> bool {
    taint.effect == NO_SCHEDULE && MAINTENANCE_TAINT_KEYS.contains(&taint.key.as_str())
}

/// What [`plan_enter`] decided.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum EnterPlan {
    /// The node is already in maintenance for this holder with the wanted reason: no write.
    Unchanged,
    /// Send `patch` as a JSON merge patch. It always carries `metadata.resourceVersion`.
    Apply {
        /// The merge patch.
        patch: Value,
        /// What had drifted while we held the node ([`REPAIRED_CORDON`],
        /// [`REPAIRED_DRAIN_TAINT`], [`REPAIRED_UNSCHEDULABLE_TAINT`], [`REPAIRED_EXCLUDE_LABEL`],
        /// in that order). Empty on first entry and when only the reason annotation changes.
        repaired: Vec<&'static str>,
    },
    /// Another `NodeMaintenance` (named here) holds the node: nothing is written.
    HeldBy(String),
}

/// The `NodeMaintenance` asking to hold a node: its name and, when known, its `metadata.uid`
/// (recorded in [`HOLDER_UID_ANNOTATION`] so a later object of the same name is not mistaken for
/// it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Claimant<'a> {
    /// `metadata.name` of the NodeMaintenance.
    pub name: &'a str,
    /// `metadata.uid` of the NodeMaintenance; `None` only in tests and for objects not yet stored.
    pub uid: Option<&'a str>,
}

impl<'a> Claimant<'a> {
    /// Whether the record `holder`/`uid` on a node is this claimant's: same name, and the same
    /// uid when both are known (a record written before uids were recorded matches by name).
    pub(crate) fn owns(&self, holder: &str, uid: Option<&str>) -> bool {
        holder == self.name
            && match (uid, self.uid) {
                (Some(recorded), Some(mine)) => recorded == mine,
                _ => true,
            }
    }
}

/// Whether the NodeMaintenance named by a node's record (name, and uid when recorded) still
/// exists. Callers that cannot know yet (cache not synced) answer `true`, which keeps the record.
pub(crate) type HolderLive<'f> = &'f (dyn Fn(&str, Option<&str>) -> bool + Sync);

/// What [`plan_enter`] found recorded on the node.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Record {
    /// No holder annotation.
    None,
    /// The claimant's own record.
    Ours,
    /// The record of a holder that no longer exists, on a node where the maintenance it
    /// describes is still in place ([`record_in_place`]), so its prior state is still true and
    /// is taken over.
    Reused(String),
    /// The record of a holder that no longer exists, on a node that lost some maintenance mark
    /// (someone, e.g. upstream NMO after a rollback, ended that maintenance): its prior state
    /// describes a node that is gone, so it is dropped and recorded afresh.
    Discarded(String),
}

#[cfg(test)]
/// Plans entering (or re-asserting) maintenance on `node` for the `NodeMaintenance` `holder`,
/// known by name only, with any other holder recorded on the node taken to be alive. See
/// [`plan_enter_for`].
pub(crate) fn plan_enter(node: &Node, holder: &str, reason: Option<&str>) -> EnterPlan {
    decide_enter(node, Claimant::named(holder), reason, &|_, _| true).plan
}

/// Plans entering (or re-asserting) maintenance on `node` for `me`.
///
/// The patch sets `spec.unschedulable: true`; when a maintenance taint is missing it rewrites
/// `spec.taints` as both maintenance taints first (`node.kubernetes.io/unschedulable`, then
/// `medik8s.io/drain`, effect `NoSchedule`, no value, no timeAdded) followed by every other
/// existing taint in its order (upstream's `AddOrRemoveTaint`; when both are present the list is
/// left alone, as upstream does); sets the exclude label to `"true"`; sets the holder and
/// holder-uid annotations; sets the reason annotation to `reason` (removed when `None` or empty).
///
/// The prior state is recorded on first entry (no holder record, or a discarded one). On
/// re-entry whatever had drifted is re-applied and listed in `repaired`; a drift that removed a
/// mark the prior state records as pre-existing (an admin cordon released, a maintenance taint or
/// exclude label that was there before removed) means its owner no longer wants it, so the prior
/// state is updated and the end restores what the owners want now (docs/design.md §3).
///
/// A record naming another holder: when `is_live` says that holder exists, [`EnterPlan::HeldBy`];
/// otherwise the record is reused while its maintenance is still in place ([`record_in_place`]),
/// and discarded (prior state recorded afresh from the node as it is) when it is not
/// (docs/compat.md §12).
///
/// Adoption: a node that carries `medik8s.io/drain:NoSchedule` but no usable record was put
/// into maintenance by upstream NMO (we never write the taint without the holder). Its true
/// prior state is unknown, so we record "nothing was there before", which makes exit behave like
/// upstream's stop (uncordon, untaint, unlabel) instead of freezing the maintenance state in.
///
/// The drain's start ([`DRAIN_STARTED_ANNOTATION`]) is not written here: the maintenance pass
/// decides when the drain starts (`controller::plan::timeline::start_record`), which is not
/// always when the node is entered (stage Cordon, the drain queue).
pub(crate) fn plan_enter_for(
    node: &Node,
    me: Claimant<'_>,
    reason: Option<&str>,
    is_live: HolderLive<'_>,
) -> (EnterPlan, EnterOutcome) {
    let decision = decide_enter(node, me, reason, is_live);
    let outcome = decision.outcome();
    (decision.plan, outcome)
}

/// Whether entering with `outcome` enters the node afresh for its holder: a first entry or a
/// takeover (a drain that starts then records its start anew).
pub(crate) fn records_start(outcome: &EnterOutcome) -> bool {
    matches!(
        outcome,
        EnterOutcome::Entered { .. } | EnterOutcome::TookOver { .. }
    )
}

/// `t` cut to whole seconds, the precision of creation timestamps it is compared with.
pub(crate) fn whole_seconds(t: jiff::Timestamp) -> jiff::Timestamp {
    jiff::Timestamp::from_second(t.as_second()).unwrap_or(t)
}

/// The drain's start recorded on `node` ([`DRAIN_STARTED_ANNOTATION`]); `None` when absent or
/// not RFC 3339.
pub(crate) fn drain_started(node: &Node) -> Option<jiff::Timestamp> {
    annotation(node, DRAIN_STARTED_ANNOTATION).and_then(|v| v.parse().ok())
}

/// `node` as it would be once adopted by `me` ([`plan_enter_for`] with every other holder taken
/// as alive): `Some` only when that is a first entry, i.e. the node carries no live record. Pure:
/// the adoption patch applied to a copy, so that the exit planned on it restores what the
/// adoption would have recorded.
pub(crate) fn adopted(node: &Node, me: Claimant<'_>) -> Option<Node> {
    let decision = decide_enter(node, me, None, &|_, _| true);
    let EnterPlan::Apply { patch, .. } = &decision.plan else {
        return None;
    };
    if !matches!(decision.outcome(), EnterOutcome::Entered { .. }) {
        return None;
    }
    let mut value = serde_json::to_value(node).ok()?;
    json_patch::merge(&mut value, patch);
    serde_json::from_value(value).ok()
}

struct EnterDecision {
    plan: EnterPlan,
    first: bool,
    adopted: bool,
    cordons: bool,
    record: Record,
}

/// Item-2 rule: a mark recorded as pre-existing that is gone now was released by its owner.
/// Returns the prior state with those marks forgotten, or `None` when nothing changed.
fn released_prior(
    prior: &PriorState,
    node: &Node,
    state: &NodeMaintenanceState,
) -> Option<PriorState> {
    let mut next = prior.clone();
    if next.unschedulable && !state.cordoned {
        next.unschedulable = false;
    }
    next.taints.retain(|t| has_taint(node, &t.key, &t.effect));
    if next.exclude_label && !state.excluded {
        next.exclude_label = false;
        next.exclude_label_value = label(node, EXCLUDE_LABEL).map(str::to_owned);
    }
    (next != *prior).then_some(next)
}

fn fresh_prior(node: &Node, state: &NodeMaintenanceState) -> PriorState {
    PriorState {
        unschedulable: state.cordoned,
        taints: MAINTENANCE_TAINT_KEYS
            .iter()
            .filter(|key| has_taint(node, key, NO_SCHEDULE))
            .map(|key| TaintRef {
                key: (*key).to_owned(),
                effect: NO_SCHEDULE.to_owned(),
            })
            .collect(),
        exclude_label: state.excluded,
        exclude_label_value: label(node, EXCLUDE_LABEL)
            .filter(|v| *v != "true")
            .map(str::to_owned),
    }
}

fn decide_enter(
    node: &Node,
    me: Claimant<'_>,
    reason: Option<&str>,
    is_live: HolderLive<'_>,
) -> EnterDecision {
    let state = observe(node);
    let record = match state.holder.as_deref() {
        None => Record::None,
        Some(h) if me.owns(h, state.holder_uid.as_deref()) => Record::Ours,
        Some(h) if is_live(h, state.holder_uid.as_deref()) => {
            return EnterDecision {
                plan: EnterPlan::HeldBy(h.to_owned()),
                first: false,
                adopted: false,
                cordons: false,
                record: Record::None,
            };
        }
        Some(h) if record_in_place(node) => Record::Reused(h.to_owned()),
        Some(h) => Record::Discarded(h.to_owned()),
    };
    let first = matches!(record, Record::None | Record::Discarded(_));
    let adopted = first && state.drain_taint;
    let mut spec = Map::new();
    let mut labels = Map::new();
    let mut annotations = Map::new();
    let mut repaired = Vec::new();

    if !state.cordoned {
        spec.insert("unschedulable".into(), Value::Bool(true));
        repaired.push(REPAIRED_CORDON);
    }
    if !state.drain_taint || !state.unschedulable_taint {
        spec.insert("taints".into(), taints_value(&entered_taints(node)));
        if !state.drain_taint {
            repaired.push(REPAIRED_DRAIN_TAINT);
        }
        if !state.unschedulable_taint {
            repaired.push(REPAIRED_UNSCHEDULABLE_TAINT);
        }
    }
    if !state.excluded {
        labels.insert(EXCLUDE_LABEL.into(), Value::from("true"));
        repaired.push(REPAIRED_EXCLUDE_LABEL);
    }
    let prior = if first {
        repaired.clear();
        Some(if adopted {
            PriorState::default()
        } else {
            fresh_prior(node, &state)
        })
    } else {
        prior_state(node).and_then(|p| released_prior(&p, node, &state))
    };
    if let Some(prior) = prior {
        annotations.insert(
            PRIOR_STATE_ANNOTATION.into(),
            Value::from(serde_json::to_string(&prior).unwrap_or_default()),
        );
    }
    if state.holder.as_deref() != Some(me.name) {
        annotations.insert(HOLDER_ANNOTATION.into(), Value::from(me.name));
    }
    if let Some(uid) = me.uid
        && state.holder_uid.as_deref() != Some(uid)
    {
        annotations.insert(HOLDER_UID_ANNOTATION.into(), Value::from(uid));
    } else if me.uid.is_none() && state.holder_uid.is_some() && !matches!(record, Record::Ours) {
        annotations.insert(HOLDER_UID_ANNOTATION.into(), Value::Null);
    }
    // Bounded where copied (docs/drain-contract.md §5): `spec.reason` has no length limit, the
    // node's annotations together 256 KiB.
    let wanted_reason = reason
        .filter(|r| !r.is_empty())
        .map(|r| crate::bounds::truncate(r, crate::bounds::MAX_REASON_ANNOTATION));
    if annotation(node, REASON_ANNOTATION) != wanted_reason.as_deref() {
        annotations.insert(
            REASON_ANNOTATION.into(),
            wanted_reason.map_or(Value::Null, Value::from),
        );
    }

    let cordons = spec.contains_key("unschedulable");
    let plan = if spec.is_empty() && labels.is_empty() && annotations.is_empty() {
        EnterPlan::Unchanged
    } else {
        EnterPlan::Apply {
            patch: build_patch(node, labels, annotations, spec),
            repaired,
        }
    };
    EnterDecision {
        plan,
        first,
        adopted,
        cordons,
        record,
    }
}

/// What [`plan_exit`] decided.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum ExitPlan {
    /// The node is not held by the caller: `Some(other)` when another `NodeMaintenance` holds
    /// it, `None` when no holder is recorded. Nothing is written, because we can't prove what we
    /// added.
    NotHeld(Option<String>),
    /// Send `patch` as a JSON merge patch (it always carries `metadata.resourceVersion`).
    Apply {
        /// The merge patch.
        patch: Value,
        /// True only when the patch sets `spec.unschedulable` back to false, i.e. we had
        /// cordoned the node (upstream emits `UncordonNode` for this).
        uncordon: bool,
    },
}

#[cfg(test)]
/// Plans leaving maintenance on `node` held by `holder`, restoring only what we added.
///
/// From the prior state: maintenance taints not recorded there are removed (key and effect;
/// other taints keep their order and content); the node is uncordoned only if it was not cordoned
/// before (an admin's cordon stays; exit never cordons); the exclude label is removed only if it
/// was not `"true"` before and is `"true"` now (upstream's rule), or set back to its earlier other
/// value; our record annotations ([`RECORD_ANNOTATIONS`]) are deleted. A node that still carries our holder annotation but
/// no usable prior state is treated as "nothing was there before". Upstream always uncordons and
/// removes both taints and the label (docs/compat.md §2); we restore the prior state instead.
pub(crate) fn plan_exit(node: &Node, holder: &str) -> ExitPlan {
    plan_exit_for(node, Claimant::named(holder))
}

/// As [`plan_exit`], for `me`: a record of the same name but another uid is not ours.
pub(crate) fn plan_exit_for(node: &Node, me: Claimant<'_>) -> ExitPlan {
    let state = observe(node);
    match state.holder.as_deref() {
        None => return ExitPlan::NotHeld(None),
        Some(other) if !me.owns(other, state.holder_uid.as_deref()) => {
            return ExitPlan::NotHeld(Some(other.to_owned()));
        }
        Some(_) => {}
    }
    let prior = prior_state(node).unwrap_or_default();
    let mut spec = Map::new();
    let mut labels = Map::new();
    let mut annotations = Map::new();

    let taints = node_taints(node);
    let kept: Vec<Taint> = taints
        .iter()
        .filter(|t| !is_maintenance_taint(t) || prior.had_taint(&t.key, &t.effect))
        .cloned()
        .collect();
    if kept.len() != taints.len() {
        let value = if kept.is_empty() {
            Value::Null
        } else {
            taints_value(&kept)
        };
        spec.insert("taints".into(), value);
    }
    let uncordon = state.cordoned && !prior.unschedulable;
    if uncordon {
        spec.insert("unschedulable".into(), Value::Bool(false));
    }
    if !prior.exclude_label && state.excluded {
        labels.insert(
            EXCLUDE_LABEL.into(),
            prior
                .exclude_label_value
                .clone()
                .map_or(Value::Null, Value::from),
        );
    }
    for key in RECORD_ANNOTATIONS {
        if annotation(node, key).is_some() {
            annotations.insert(key.into(), Value::Null);
        }
    }
    ExitPlan::Apply {
        patch: build_patch(node, labels, annotations, spec),
        uncordon,
    }
}

#[cfg(test)]
/// Plans handing the node from the `NodeMaintenance` `from` to `to` without touching its state:
/// a merge patch (with `metadata.resourceVersion`) that rewrites only the holder annotation.
/// `None` when `from` does not hold the node or `from == to`. The next pass of `to` enters it
/// afterwards to bring the reason annotation up to date.
pub(crate) fn plan_transfer(node: &Node, from: &str, to: &str) -> Option<Value> {
    plan_transfer_to(node, from, Claimant::named(to))
}

/// As [`plan_transfer`], recording `to`'s uid (or removing `from`'s when `to`'s is unknown).
pub(crate) fn plan_transfer_to(node: &Node, from: &str, to: Claimant<'_>) -> Option<Value> {
    if from == to.name || annotation(node, HOLDER_ANNOTATION) != Some(from) {
        return None;
    }
    let mut annotations = Map::new();
    annotations.insert(HOLDER_ANNOTATION.into(), Value::from(to.name));
    if to.uid.is_some() || annotation(node, HOLDER_UID_ANNOTATION).is_some() {
        annotations.insert(
            HOLDER_UID_ANNOTATION.into(),
            to.uid.map_or(Value::Null, Value::from),
        );
    }
    Some(build_patch(node, Map::new(), annotations, Map::new()))
}

/// Errors of the node writes and reads, with upstream's texts.
#[derive(Debug, thiserror::Error)]
pub(crate) enum NodeError {
    /// The patch failed. Displays upstream's `patching node taints failed: <err>`.
    #[error("patching node taints failed: {0}")]
    Patch(#[source] kube::Error),
}

/// What an entry stands for ([`plan_enter_for`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum EnterOutcome {
    /// First entry: the node was cordoned, tainted, labelled and annotated in one patch.
    Entered {
        /// We set `spec.unschedulable` (false when an admin had cordoned it already).
        cordoned: bool,
        /// The node was already in maintenance by upstream NMO (see [`plan_enter`]).
        adopted: bool,
        /// The record of this vanished holder was on the node, but the node no longer carried
        /// the marks it describes: it was discarded and the prior state recorded afresh.
        discarded: Option<String>,
    },
    /// The node carried the record of a NodeMaintenance that no longer exists, and every
    /// maintenance mark: that record (its prior state) was taken over (see [`plan_enter_for`]).
    TookOver {
        /// The vanished holder named by the record.
        from: String,
    },
    /// Re-entry that repaired drift; lists what (see [`EnterPlan::Apply`]).
    Repaired(Vec<&'static str>),
    /// Re-entry that only changed the reason annotation.
    ReasonUpdated,
    /// Already in maintenance for this holder: nothing to write.
    Unchanged,
    /// Another `NodeMaintenance` (named) holds the node; nothing was written.
    HeldBy(String),
}

impl EnterDecision {
    /// What entering reports once its patch (when one is needed) is sent.
    fn outcome(&self) -> EnterOutcome {
        match &self.plan {
            EnterPlan::Unchanged => EnterOutcome::Unchanged,
            EnterPlan::HeldBy(other) => EnterOutcome::HeldBy(other.clone()),
            EnterPlan::Apply { repaired, .. } => {
                if self.first {
                    EnterOutcome::Entered {
                        cordoned: self.cordons,
                        adopted: self.adopted,
                        discarded: match &self.record {
                            Record::Discarded(h) => Some(h.clone()),
                            _ => None,
                        },
                    }
                } else if let Record::Reused(from) = &self.record {
                    EnterOutcome::TookOver { from: from.clone() }
                } else if repaired.is_empty() {
                    EnterOutcome::ReasonUpdated
                } else {
                    EnterOutcome::Repaired(repaired.clone())
                }
            }
        }
    }
}

fn build_patch(
    node: &Node,
    labels: Map<String, Value>,
    annotations: Map<String, Value>,
    spec: Map<String, Value>,
) -> Value {
    let mut metadata = Map::new();
    if let Some(rv) = &node.metadata.resource_version {
        metadata.insert("resourceVersion".into(), Value::from(rv.as_str()));
    }
    if !labels.is_empty() {
        metadata.insert("labels".into(), Value::Object(labels));
    }
    if !annotations.is_empty() {
        metadata.insert("annotations".into(), Value::Object(annotations));
    }
    let mut patch = Map::new();
    patch.insert("metadata".into(), Value::Object(metadata));
    if !spec.is_empty() {
        patch.insert("spec".into(), Value::Object(spec));
    }
    Value::Object(patch)
}

/// Both maintenance taints first, then every other existing taint in its order.
fn entered_taints(node: &Node) -> Vec<Taint> {
    MAINTENANCE_TAINT_KEYS
        .iter()
        .map(|key| Taint {
            key: (*key).to_owned(),
            effect: NO_SCHEDULE.to_owned(),
            ..Taint::default()
        })
        .chain(
            node_taints(node)
                .iter()
                .filter(|t| !is_maintenance_taint(t))
                .cloned(),
        )
        .collect()
}

fn taints_value(taints: &[Taint]) -> Value {
    // Serializing a k8s-openapi Taint cannot fail; Null would only drop the list.
    serde_json::to_value(taints).unwrap_or(Value::Null)
}

fn node_taints(node: &Node) -> &[Taint] {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_deref())
        .unwrap_or(&[])
}

fn has_taint(node: &Node, key: &str, effect: &str) -> bool {
    node_taints(node)
        .iter()
        .any(|t| t.key == key && t.effect == effect)
}

fn is_cordoned(node: &Node) -> bool {
    node.spec.as_ref().and_then(|s| s.unschedulable) == Some(true)
}

fn annotation<'a>(node: &'a Node, key: &str) -> Option<&'a str> {
    node.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .map(String::as_str)
}

fn label<'a>(node: &'a Node, key: &str) -> Option<&'a str> {
    node.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(key))
        .map(String::as_str)
}

fn node_name(node: &Node) -> &str {
    node.metadata.name.as_deref().unwrap_or("")
}

#[cfg(test)]
mod tests;
