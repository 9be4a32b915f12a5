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
/// Annotation surfacing the `NodeMaintenance`'s `spec.reason` on the node (docs/compat.md §2).
pub(crate) const REASON_ANNOTATION: &str = "nodemaintenance.medik8s.io/reason";
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
    #[cfg(test)]
    /// True when a holder is recorded and the node is cordoned, carries both maintenance taints
    /// and is excluded from remediation, i.e. entry needs no node change except possibly the
    /// reason annotation.
    pub(crate) fn complete(&self) -> bool {
        self.holder.is_some()
            && self.cordoned
            && self.drain_taint
            && self.unschedulable_taint
            && self.excluded
    }

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
    #[cfg(test)]
    /// A claimant known by name only (its record on the node matches any uid).
    pub(crate) fn named(name: &'a str) -> Self {
        Self { name, uid: None }
    }

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
        .map(|r| crate::drain::bounds::truncate(r, crate::drain::bounds::MAX_REASON_ANNOTATION));
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
/// value; our three annotations are deleted. A node that still carries our holder annotation but
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
    for key in [
        HOLDER_ANNOTATION,
        HOLDER_UID_ANNOTATION,
        PRIOR_STATE_ANNOTATION,
        REASON_ANNOTATION,
    ] {
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
mod tests {
    use super::*;
    use serde_json::json;

    const NM: &str = "nm-1";

    fn node(value: Value) -> Node {
        let mut base = json!({
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": "worker-1", "resourceVersion": "100"},
        });
        json_patch::merge(&mut base, &value);
        serde_json::from_value(base).expect("valid node")
    }

    /// Applies a merge patch the way the API server does (RFC 7386) and bumps resourceVersion.
    fn apply(n: &Node, patch: &Value) -> Node {
        let mut doc = serde_json::to_value(n).unwrap();
        json_patch::merge(&mut doc, patch);
        let rv: u64 = n
            .metadata
            .resource_version
            .as_deref()
            .unwrap()
            .parse()
            .unwrap();
        doc["metadata"]["resourceVersion"] = json!((rv + 1).to_string());
        serde_json::from_value(doc).unwrap()
    }

    fn enter_patch(n: &Node, holder: &str, reason: Option<&str>) -> (Value, Vec<&'static str>) {
        match plan_enter(n, holder, reason) {
            EnterPlan::Apply { patch, repaired } => (patch, repaired),
            other => panic!("expected Apply, got {other:?}"),
        }
    }

    fn exit_patch(n: &Node, holder: &str) -> (Value, bool) {
        match plan_exit(n, holder) {
            ExitPlan::Apply { patch, uncordon } => (patch, uncordon),
            other => panic!("expected Apply, got {other:?}"),
        }
    }

    fn taint_refs(n: &Node) -> Vec<(String, String)> {
        node_taints(n)
            .iter()
            .map(|t| (t.key.clone(), t.effect.clone()))
            .collect()
    }

    fn pair(key: &str, effect: &str) -> (String, String) {
        (key.to_owned(), effect.to_owned())
    }

    #[test]
    fn first_entry_on_clean_node_writes_everything_in_one_patch() {
        let clean = node(json!({"spec": {}}));
        let (patch, repaired) = enter_patch(&clean, NM, Some("kernel upgrade"));
        assert!(
            repaired.is_empty(),
            "first entry repairs nothing: {repaired:?}"
        );
        assert_eq!(
            patch,
            json!({
                "metadata": {
                    "resourceVersion": "100",
                    "labels": {EXCLUDE_LABEL: "true"},
                    "annotations": {
                        HOLDER_ANNOTATION: NM,
                        PRIOR_STATE_ANNOTATION:
                            r#"{"unschedulable":false,"taints":[],"excludeLabel":false}"#,
                        REASON_ANNOTATION: "kernel upgrade",
                    },
                },
                "spec": {
                    "unschedulable": true,
                    "taints": [
                        {"key": UNSCHEDULABLE_TAINT_KEY, "effect": "NoSchedule"},
                        {"key": DRAIN_TAINT_KEY, "effect": "NoSchedule"},
                    ],
                },
            })
        );
        let entered = apply(&clean, &patch);
        let state = observe(&entered);
        assert!(state.complete(), "{state:?}");
        assert_eq!(state.holder.as_deref(), Some(NM));
        assert_eq!(
            plan_enter(&entered, NM, Some("kernel upgrade")),
            EnterPlan::Unchanged
        );
        let d = decide_enter(&clean, Claimant::named(NM), None, &|_, _| true);
        assert!(d.first && d.cordons && !d.adopted);
    }

    #[test]
    fn upstream_taint_order_maintenance_taints_first_then_others_in_order() {
        let n = node(json!({"spec": {"taints": [
            {"key": "a", "effect": "NoExecute", "value": "x"},
            {"key": UNSCHEDULABLE_TAINT_KEY, "effect": "NoSchedule", "timeAdded": "2024-01-01T00:00:00Z"},
            {"key": "b", "effect": "PreferNoSchedule"},
            {"key": UNSCHEDULABLE_TAINT_KEY, "effect": "NoExecute"},
        ]}}));
        let (patch, _) = enter_patch(&n, NM, None);
        assert_eq!(
            patch["spec"]["taints"],
            json!([
                {"key": UNSCHEDULABLE_TAINT_KEY, "effect": "NoSchedule"},
                {"key": DRAIN_TAINT_KEY, "effect": "NoSchedule"},
                {"key": "a", "effect": "NoExecute", "value": "x"},
                {"key": "b", "effect": "PreferNoSchedule"},
                {"key": UNSCHEDULABLE_TAINT_KEY, "effect": "NoExecute"},
            ])
        );
    }

    #[test]
    fn entry_over_admin_cordon_and_exit_keeps_cordon_and_preexisting_taints() {
        let original = node(json!({
            "metadata": {"labels": {"kubernetes.io/hostname": "worker-1"}},
            "spec": {"unschedulable": true, "taints": [
                {"key": "dummy-key", "effect": "PreferNoSchedule", "value": "dummy"},
                {"key": UNSCHEDULABLE_TAINT_KEY, "effect": "NoSchedule"},
            ]},
        }));
        let (patch, repaired) = enter_patch(&original, NM, None);
        assert!(repaired.is_empty());
        assert!(
            patch["spec"].get("unschedulable").is_none(),
            "already cordoned: {patch}"
        );
        assert!(!decide_enter(&original, Claimant::named(NM), None, &|_, _| true).cordons);
        let prior: PriorState = serde_json::from_str(
            patch["metadata"]["annotations"][PRIOR_STATE_ANNOTATION]
                .as_str()
                .unwrap(),
        )
        .unwrap();
        assert_eq!(
            prior,
            PriorState {
                unschedulable: true,
                taints: vec![TaintRef {
                    key: UNSCHEDULABLE_TAINT_KEY.into(),
                    effect: "NoSchedule".into()
                }],
                exclude_label: false,
                exclude_label_value: None,
            }
        );
        let entered = apply(&original, &patch);
        assert!(observe(&entered).complete());

        let (patch, uncordon) = exit_patch(&entered, NM);
        assert!(!uncordon, "admin cordon must survive exit");
        assert!(patch["spec"].get("unschedulable").is_none(), "{patch}");
        let exited = apply(&entered, &patch);
        let state = observe(&exited);
        assert!(state.cordoned);
        assert!(state.unschedulable_taint);
        assert!(!state.drain_taint);
        assert!(!state.excluded);
        assert_eq!(state.holder, None);
        assert_eq!(
            taint_refs(&exited),
            vec![
                pair(UNSCHEDULABLE_TAINT_KEY, "NoSchedule"),
                pair("dummy-key", "PreferNoSchedule"),
            ]
        );
        assert_eq!(node_taints(&exited)[1].value.as_deref(), Some("dummy"));
        assert_eq!(
            exited
                .metadata
                .annotations
                .as_ref()
                .map(|a| a.len())
                .unwrap_or(0),
            0
        );
        assert_eq!(
            exited.metadata.labels, original.metadata.labels,
            "only the exclude label we added is removed"
        );
    }

    #[test]
    fn drift_repair_lists_what_was_repaired_and_keeps_prior_state() {
        let original = node(json!({"spec": {"taints": [{"key": "x", "effect": "NoSchedule"}]}}));
        let (patch, _) = enter_patch(&original, NM, Some("r"));
        let entered = apply(&original, &patch);
        let prior_before = annotation(&entered, PRIOR_STATE_ANNOTATION)
            .unwrap()
            .to_owned();

        // An admin uncordons, strips our drain taint and the label.
        let drifted = apply(
            &entered,
            &json!({
                "metadata": {"labels": {EXCLUDE_LABEL: null}},
                "spec": {"unschedulable": false, "taints": [
                    {"key": UNSCHEDULABLE_TAINT_KEY, "effect": "NoSchedule"},
                    {"key": "x", "effect": "NoSchedule"},
                ]},
            }),
        );
        let (patch, repaired) = enter_patch(&drifted, NM, Some("r"));
        assert_eq!(
            repaired,
            vec![
                REPAIRED_CORDON,
                REPAIRED_DRAIN_TAINT,
                REPAIRED_EXCLUDE_LABEL
            ]
        );
        assert!(
            patch["metadata"].get("annotations").is_none(),
            "prior state untouched: {patch}"
        );
        assert_eq!(
            patch["metadata"]["resourceVersion"],
            json!("102"),
            "the re-read version"
        );
        let repaired_node = apply(&drifted, &patch);
        assert!(observe(&repaired_node).complete());
        assert_eq!(
            annotation(&repaired_node, PRIOR_STATE_ANNOTATION),
            Some(prior_before.as_str())
        );
        assert!(!decide_enter(&drifted, Claimant::named(NM), Some("r"), &|_, _| true).first);

        // Only the taint list drifted.
        let untainted = apply(
            &entered,
            &json!({"spec": {"taints": [{"key": "x", "effect": "NoSchedule"}]}}),
        );
        let (_, repaired) = enter_patch(&untainted, NM, Some("r"));
        assert_eq!(
            repaired,
            vec![REPAIRED_DRAIN_TAINT, REPAIRED_UNSCHEDULABLE_TAINT]
        );
    }

    #[test]
    fn reason_change_alone_updates_only_the_annotation() {
        let original = node(json!({}));
        let (patch, _) = enter_patch(&original, NM, Some("old"));
        let entered = apply(&original, &patch);
        let (patch, repaired) = enter_patch(&entered, NM, Some("new"));
        assert!(repaired.is_empty());
        assert_eq!(
            patch,
            json!({"metadata": {"resourceVersion": "101", "annotations": {REASON_ANNOTATION: "new"}}})
        );
        let (patch, _) = enter_patch(&entered, NM, None);
        assert_eq!(
            patch["metadata"]["annotations"],
            json!({REASON_ANNOTATION: null})
        );
        assert_eq!(plan_enter(&entered, NM, Some("old")), EnterPlan::Unchanged);
        // A reason of any length is copied cut to its bound, and then stays unchanged.
        let huge = "r".repeat(1 << 20);
        let (patch, _) = enter_patch(&entered, NM, Some(&huge));
        let copied = patch["metadata"]["annotations"][REASON_ANNOTATION]
            .as_str()
            .unwrap();
        assert!(
            copied.len() <= crate::drain::bounds::MAX_REASON_ANNOTATION
                && copied.starts_with("rrr")
        );
        let cut = apply(&entered, &patch);
        assert_eq!(plan_enter(&cut, NM, Some(&huge)), EnterPlan::Unchanged);
    }

    #[test]
    fn node_held_by_another_maintenance_is_left_alone() {
        let n = node(json!({"metadata": {"annotations": {HOLDER_ANNOTATION: "other-nm"}}}));
        assert_eq!(
            plan_enter(&n, NM, None),
            EnterPlan::HeldBy("other-nm".into())
        );
        assert_eq!(
            plan_exit(&n, NM),
            ExitPlan::NotHeld(Some("other-nm".into()))
        );
    }

    #[test]
    fn exit_when_not_held_writes_nothing() {
        // Looks like maintenance but carries no holder: we can't prove we added any of it.
        let n = node(json!({
            "metadata": {
                "labels": {EXCLUDE_LABEL: "true"},
                "annotations": {PRIOR_STATE_ANNOTATION: r#"{"unschedulable":false,"taints":[],"excludeLabel":false}"#},
            },
            "spec": {"unschedulable": true, "taints": [{"key": DRAIN_TAINT_KEY, "effect": "NoSchedule"}]},
        }));
        assert_eq!(plan_exit(&n, NM), ExitPlan::NotHeld(None));
        assert_eq!(plan_exit(&node(json!({})), NM), ExitPlan::NotHeld(None));
    }

    #[test]
    fn exit_without_prior_state_but_with_our_holder_removes_everything() {
        let n = node(json!({
            "metadata": {
                "labels": {EXCLUDE_LABEL: "true"},
                "annotations": {HOLDER_ANNOTATION: NM, PRIOR_STATE_ANNOTATION: "{not json"},
            },
            "spec": {"unschedulable": true, "taints": [
                {"key": UNSCHEDULABLE_TAINT_KEY, "effect": "NoSchedule"},
                {"key": DRAIN_TAINT_KEY, "effect": "NoSchedule"},
            ]},
        }));
        let (patch, uncordon) = exit_patch(&n, NM);
        assert!(uncordon);
        assert_eq!(
            patch,
            json!({
                "metadata": {
                    "resourceVersion": "100",
                    "labels": {EXCLUDE_LABEL: null},
                    "annotations": {HOLDER_ANNOTATION: null, PRIOR_STATE_ANNOTATION: null},
                },
                "spec": {"unschedulable": false, "taints": null},
            })
        );
    }

    #[test]
    fn exit_removes_the_label_only_when_we_added_it() {
        let labelled = node(json!({"metadata": {"labels": {EXCLUDE_LABEL: "true"}}}));
        let entered = apply(&labelled, &enter_patch(&labelled, NM, None).0);
        let (patch, uncordon) = exit_patch(&entered, NM);
        assert!(uncordon);
        assert!(patch["metadata"].get("labels").is_none(), "{patch}");
        assert!(observe(&apply(&entered, &patch)).excluded);

        let unlabelled = node(json!({}));
        let entered = apply(&unlabelled, &enter_patch(&unlabelled, NM, None).0);
        let (patch, _) = exit_patch(&entered, NM);
        assert_eq!(patch["metadata"]["labels"], json!({EXCLUDE_LABEL: null}));

        let other_value = node(json!({"metadata": {"labels": {EXCLUDE_LABEL: "false"}}}));
        let entered = apply(&other_value, &enter_patch(&other_value, NM, None).0);
        assert!(observe(&entered).excluded);
        let (patch, _) = exit_patch(&entered, NM);
        assert_eq!(patch["metadata"]["labels"], json!({EXCLUDE_LABEL: "false"}));

        // Someone changed the label during maintenance: not ours to remove any more.
        let changed = apply(
            &entered,
            &json!({"metadata": {"labels": {EXCLUDE_LABEL: "custom"}}}),
        );
        let (patch, _) = exit_patch(&changed, NM);
        assert!(patch["metadata"].get("labels").is_none(), "{patch}");
    }

    #[test]
    fn node_left_in_maintenance_by_upstream_nmo_is_adopted_and_exit_restores_like_upstream() {
        let upstream = node(json!({
            "metadata": {"labels": {EXCLUDE_LABEL: "true"}},
            "spec": {"unschedulable": true, "taints": [
                {"key": UNSCHEDULABLE_TAINT_KEY, "effect": "NoSchedule"},
                {"key": DRAIN_TAINT_KEY, "effect": "NoSchedule"},
                {"key": "keep", "effect": "NoExecute"},
            ]},
        }));
        let decision = decide_enter(&upstream, Claimant::named(NM), None, &|_, _| true);
        assert!(decision.first && decision.adopted && !decision.cordons);
        let EnterPlan::Apply { patch, repaired } = decision.plan else {
            panic!("expected Apply");
        };
        assert!(repaired.is_empty());
        assert!(
            patch.get("spec").is_none(),
            "nothing to change on the node: {patch}"
        );
        let entered = apply(&upstream, &patch);
        let (patch, uncordon) = exit_patch(&entered, NM);
        assert!(uncordon);
        let exited = apply(&entered, &patch);
        let state = observe(&exited);
        assert!(
            !state.cordoned && !state.drain_taint && !state.unschedulable_taint && !state.excluded
        );
        assert_eq!(taint_refs(&exited), vec![pair("keep", "NoExecute")]);
    }

    #[test]
    fn every_patch_carries_the_resource_version() {
        let n = node(json!({"metadata": {"resourceVersion": "4711"}}));
        let (p, _) = enter_patch(&n, NM, None);
        assert_eq!(p["metadata"]["resourceVersion"], json!("4711"));
        let entered = apply(&n, &p);
        let (p, _) = enter_patch(&entered, NM, Some("why"));
        assert_eq!(p["metadata"]["resourceVersion"], json!("4712"));
        let (p, _) = exit_patch(&entered, NM);
        assert_eq!(p["metadata"]["resourceVersion"], json!("4712"));
        let p = plan_transfer(&entered, NM, "nm-2").unwrap();
        assert_eq!(p["metadata"]["resourceVersion"], json!("4712"));
    }

    #[test]
    fn transfer_rewrites_only_the_holder() {
        let original = node(json!({"spec": {"unschedulable": true}}));
        let entered = apply(&original, &enter_patch(&original, NM, Some("r")).0);
        let patch = plan_transfer(&entered, NM, "nm-2").unwrap();
        assert_eq!(
            patch,
            json!({"metadata": {"resourceVersion": "101", "annotations": {HOLDER_ANNOTATION: "nm-2"}}})
        );
        let moved = apply(&entered, &patch);
        assert_eq!(
            plan_enter(&moved, NM, Some("r")),
            EnterPlan::HeldBy("nm-2".into())
        );
        assert_eq!(plan_enter(&moved, "nm-2", Some("r")), EnterPlan::Unchanged);
        // The prior state travels with the node: the admin cordon still survives exit.
        let (_, uncordon) = exit_patch(&moved, "nm-2");
        assert!(!uncordon);
        assert_eq!(plan_transfer(&moved, NM, "nm-3"), None);
        assert_eq!(plan_transfer(&moved, "nm-2", "nm-2"), None);
    }

    /// Enter then exit restores every combination of prior cordon, pre-existing unschedulable
    /// taint, exclude label value and foreign taint placement (compared on key and effect; the
    /// pre-existing maintenance taint may move to the front, as upstream's entry puts it there).
    #[test]
    fn enter_then_exit_restores_the_prior_state_for_every_combination() {
        let labels = [None, Some("true"), Some("false"), Some("")];
        for cordoned in [false, true] {
            for unsched_taint in [false, true] {
                for label_value in labels {
                    for foreign_first in [false, true] {
                        let mut taints = Vec::new();
                        let foreign = json!({"key": "f", "effect": "NoExecute", "value": "v"});
                        if foreign_first {
                            taints.push(foreign.clone());
                        }
                        if unsched_taint {
                            taints.push(
                                json!({"key": UNSCHEDULABLE_TAINT_KEY, "effect": "NoSchedule"}),
                            );
                        }
                        if !foreign_first {
                            taints.push(foreign);
                        }
                        let mut labels = Map::new();
                        labels.insert("keep".into(), json!("me"));
                        if let Some(v) = label_value {
                            labels.insert(EXCLUDE_LABEL.into(), json!(v));
                        }
                        let original = node(json!({
                            "metadata": {"labels": labels, "annotations": {"other": "x"}},
                            "spec": {"unschedulable": cordoned, "taints": taints},
                        }));
                        let case = format!(
                            "cordoned={cordoned} unsched_taint={unsched_taint} label={label_value:?} foreign_first={foreign_first}"
                        );
                        let (patch, _) = enter_patch(&original, NM, Some("r"));
                        let entered = apply(&original, &patch);
                        assert!(observe(&entered).complete(), "{case}");
                        assert_eq!(
                            plan_enter(&entered, NM, Some("r")),
                            EnterPlan::Unchanged,
                            "{case}"
                        );
                        let (patch, uncordon) = exit_patch(&entered, NM);
                        assert_eq!(uncordon, !cordoned, "{case}");
                        let exited = apply(&entered, &patch);
                        assert_eq!(observe(&exited).cordoned, cordoned, "{case}");
                        let mut before = taint_refs(&original);
                        let mut after = taint_refs(&exited);
                        before.sort();
                        after.sort();
                        assert_eq!(after, before, "{case}");
                        assert_eq!(exited.metadata.labels, original.metadata.labels, "{case}");
                        assert_eq!(
                            exited.metadata.annotations, original.metadata.annotations,
                            "{case}"
                        );
                    }
                }
            }
        }
    }

    /// Issue 8 item 2: an owner that releases a mark recorded as pre-existing while we hold the
    /// node is heard: the mark is re-applied for the maintenance, and the end no longer restores it.
    #[test]
    fn a_released_pre_existing_mark_is_reapplied_and_forgotten_by_the_prior_state() {
        // An admin cordon (with the taint the node lifecycle controller adds for it) and a
        // label someone else set.
        let original = node(json!({
            "metadata": {"labels": {EXCLUDE_LABEL: "true"}},
            "spec": {"unschedulable": true, "taints": [
                {"key": UNSCHEDULABLE_TAINT_KEY, "effect": "NoSchedule"},
                {"key": "x", "effect": "NoExecute"},
            ]},
        }));
        let entered = apply(&original, &enter_patch(&original, NM, None).0);
        assert_eq!(
            prior_state(&entered).unwrap(),
            PriorState {
                unschedulable: true,
                taints: vec![TaintRef {
                    key: UNSCHEDULABLE_TAINT_KEY.into(),
                    effect: NO_SCHEDULE.into()
                }],
                exclude_label: true,
                exclude_label_value: None,
            }
        );
        // `kubectl uncordon` (which also drops the unschedulable taint) and the label's owner
        // removes it.
        let released = apply(
            &entered,
            &json!({
                "metadata": {"labels": {EXCLUDE_LABEL: null}},
                "spec": {"unschedulable": false, "taints": [
                    {"key": DRAIN_TAINT_KEY, "effect": "NoSchedule"},
                    {"key": "x", "effect": "NoExecute"},
                ]},
            }),
        );
        let (patch, repaired) = enter_patch(&released, NM, None);
        assert_eq!(
            repaired,
            vec![
                REPAIRED_CORDON,
                REPAIRED_UNSCHEDULABLE_TAINT,
                REPAIRED_EXCLUDE_LABEL
            ]
        );
        let reentered = apply(&released, &patch);
        assert!(observe(&reentered).complete(), "still enforced: {patch}");
        assert_eq!(prior_state(&reentered).unwrap(), PriorState::default());
        assert_eq!(plan_enter(&reentered, NM, None), EnterPlan::Unchanged);
        let (patch, uncordon) = exit_patch(&reentered, NM);
        assert!(uncordon);
        let exited = apply(&reentered, &patch);
        let state = observe(&exited);
        assert!(!state.cordoned && !state.unschedulable_taint && !state.drain_taint);
        assert!(!state.excluded && label(&exited, EXCLUDE_LABEL).is_none());
        assert_eq!(taint_refs(&exited), vec![pair("x", "NoExecute")]);

        // The label's owner sets another value instead: that value is what the end restores.
        let relabelled = apply(
            &entered,
            &json!({"metadata": {"labels": {EXCLUDE_LABEL: "false"}}}),
        );
        let reentered = apply(&relabelled, &enter_patch(&relabelled, NM, None).0);
        let exited = apply(&reentered, &exit_patch(&reentered, NM).0);
        assert_eq!(label(&exited, EXCLUDE_LABEL), Some("false"));
        assert!(observe(&exited).cordoned, "the cordon owner did not let go");

        // A drift of a mark that was ours changes nothing in the prior state.
        let clean = node(json!({}));
        let entered = apply(&clean, &enter_patch(&clean, NM, None).0);
        let drifted = apply(&entered, &json!({"spec": {"unschedulable": false}}));
        let (patch, _) = enter_patch(&drifted, NM, None);
        assert!(patch["metadata"].get("annotations").is_none(), "{patch}");
    }

    fn claimant<'a>(name: &'a str, uid: &'a str) -> Claimant<'a> {
        Claimant {
            name,
            uid: Some(uid),
        }
    }

    /// Issue 8 item 10: the record of a vanished holder is reused only while the node still
    /// carries the marks it describes; otherwise the prior state is recorded afresh.
    #[test]
    fn a_record_of_a_vanished_holder_is_reused_only_while_its_marks_are_on_the_node() {
        let nobody_alive: HolderLive<'_> = &|_, _| false;
        let clean = node(json!({}));
        let b = claimant("b", "uid-b");
        let entered = match plan_enter_for(&clean, b, Some("r"), nobody_alive).0 {
            EnterPlan::Apply { patch, .. } => apply(&clean, &patch),
            other => panic!("{other:?}"),
        };
        assert_eq!(annotation(&entered, HOLDER_UID_ANNOTATION), Some("uid-b"));

        // Rolled back to upstream: its stop uncordons, untaints, unlabels, leaves our
        // annotations; then an admin cordons.
        let upstream_stopped = apply(
            &entered,
            &json!({"metadata": {"labels": {EXCLUDE_LABEL: null}},
                    "spec": {"unschedulable": true, "taints": null}}),
        );
        let c = claimant("c", "uid-c");
        let d = decide_enter(&upstream_stopped, c, None, nobody_alive);
        assert!(d.first && !d.adopted, "record discarded, fresh entry");
        assert_eq!(d.record, Record::Discarded("b".into()));
        let EnterPlan::Apply { patch, .. } = d.plan else {
            panic!("Apply")
        };
        let entered_c = apply(&upstream_stopped, &patch);
        assert_eq!(annotation(&entered_c, HOLDER_ANNOTATION), Some("c"));
        assert_eq!(annotation(&entered_c, HOLDER_UID_ANNOTATION), Some("uid-c"));
        assert!(prior_state(&entered_c).unwrap().unschedulable);
        let exited = apply(&entered_c, &exit_patch(&entered_c, "c").0);
        assert!(observe(&exited).cordoned, "the admin's cordon survives");
        assert!(
            exited.metadata.annotations.as_ref().is_none_or(|a| a
                .keys()
                .all(|k| !k.starts_with("nodemaintenance.medik8s.io/"))),
            "our record is gone: {:?}",
            exited.metadata.annotations
        );

        // Same name, another object (uid): the old record is not ours.
        let b2 = claimant("b", "uid-b2");
        let d = decide_enter(&upstream_stopped, b2, None, nobody_alive);
        assert_eq!(d.record, Record::Discarded("b".into()));
        assert_eq!(
            plan_exit_for(&entered, b2),
            ExitPlan::NotHeld(Some("b".into()))
        );

        // The record's holder vanished but the node still carries every mark: the maintenance
        // it describes is still in place, so its prior state is taken over as it is.
        let admin_cordoned = node(json!({"spec": {"unschedulable": true}}));
        let held = match plan_enter_for(&admin_cordoned, b, None, nobody_alive).0 {
            EnterPlan::Apply { patch, .. } => apply(&admin_cordoned, &patch),
            other => panic!("{other:?}"),
        };
        let d = decide_enter(&held, c, None, nobody_alive);
        assert_eq!(d.record, Record::Reused("b".into()));
        let EnterPlan::Apply { patch, repaired } = d.plan else {
            panic!("Apply")
        };
        assert!(
            repaired.is_empty() && patch.get("spec").is_none(),
            "{patch}"
        );
        assert_eq!(
            patch["metadata"]["annotations"],
            json!({HOLDER_ANNOTATION: "c", HOLDER_UID_ANNOTATION: "uid-c"})
        );
        let taken = apply(&held, &patch);
        let exited = apply(&taken, &exit_patch(&taken, "c").0);
        assert!(observe(&exited).cordoned, "the recorded admin cordon stays");

        // `docs/drain-contract.md` §6 with a new NodeMaintenance: the vanished holder's node uncordoned by
        // hand, its drain taint and label left. The maintenance is still in place: the record
        // is reused, so the admin's label value that predated it comes back at the end.
        let labelled = node(json!({"metadata": {"labels": {EXCLUDE_LABEL: "no"}}}));
        let held = match plan_enter_for(&labelled, b, None, nobody_alive).0 {
            EnterPlan::Apply { patch, .. } => apply(&labelled, &patch),
            other => panic!("{other:?}"),
        };
        let uncordoned = apply(
            &held,
            &json!({"spec": {"unschedulable": false, "taints": [{"key": DRAIN_TAINT_KEY, "effect": NO_SCHEDULE}]}}),
        );
        assert!(record_in_place(&uncordoned));
        let d = decide_enter(&uncordoned, c, None, nobody_alive);
        assert_eq!(d.record, Record::Reused("b".into()));
        let EnterPlan::Apply { patch, .. } = d.plan else {
            panic!("Apply")
        };
        let taken = apply(&uncordoned, &patch);
        let exited = apply(&taken, &exit_patch(&taken, "c").0);
        assert_eq!(
            label(&exited, EXCLUDE_LABEL),
            Some("no"),
            "the admin's value"
        );
        let after = observe(&exited);
        assert!(!after.cordoned && !after.drain_taint && !after.unschedulable_taint);

        // A live holder (same name and uid in the cache) keeps its node.
        let alive: HolderLive<'_> = &|name, uid| name == "b" && uid == Some("uid-b");
        assert_eq!(
            plan_enter_for(&held, c, None, alive).0,
            EnterPlan::HeldBy("b".into())
        );
        assert_eq!(
            plan_enter_for(&held, b, None, alive).0,
            EnterPlan::Unchanged,
            "its own record"
        );
    }
}
