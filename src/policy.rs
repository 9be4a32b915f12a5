//! The drain policy of one maintenance: each knob resolved from, in this order, its annotation
//! `nodemaintenance.medik8s.io/<knob>` on the NodeMaintenance (never pruned, so it works on
//! upstream's CRD), its field in our CRD's `spec`, and the operator's flag (the cluster default).
//! Without any of them, behaviour is upstream's (`docs/drain-contract.md` §10).
//!
//! Pure: the controller resolves the policy into each pass's observation, the webhook refuses
//! an invalid value, and on a cluster without the webhook an invalid value is reported in status
//! and the default applies.

use std::collections::BTreeMap;
use std::time::Duration;

use kube::ResourceExt;

use crate::api::{DaemonSets, DrainRule, NodeMaintenance, OnTimeout, Stage};
use crate::knobs::Surge;
use crate::knobs::{DrainKnobs, Knob, check_rules};

pub mod pre_drain_hooks;
mod strict;

pub use crate::knobs::{
    DAEMON_SETS_ANNOTATION, DRAIN_RULES_ANNOTATION, DRAIN_TIMEOUT_ANNOTATION,
    ON_TIMEOUT_ANNOTATION, PAUSED_ANNOTATION, STAGE_ANNOTATION, SURGE_ANNOTATION,
    WAIT_FOR_VOLUME_DETACH_ANNOTATION, parse_duration, parse_rules, parse_wait_for_volume_detach,
};

/// The operator's defaults of the knobs: the policy its flags resolve to ([`defaults`]).
pub type Defaults = DrainPolicy;

/// The knobs of one maintenance, resolved.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DrainPolicy {
    /// No new eviction is sent; cordon, taints, label and lease are kept (ours; Cluster API and
    /// kured pause by annotation too).
    pub paused: bool,
    /// How long the drain may take from its start (`None`: for ever, upstream's behaviour).
    pub drain_timeout: Option<Duration>,
    /// What happens once it has passed.
    pub on_timeout: OnTimeout,
    /// The rules for the node's pods, the first that selects a pod applying
    /// ([`crate::drain::rules`]).
    pub drain_rules: Vec<DrainRule>,
    /// How far the maintenance goes: which steps its passes run.
    pub stage: Stage,
    /// Whether it writes the Node lifecycle conditions (`crate::node::conditions`).
    pub node_conditions: bool,
    /// When its maintenance window opens (`None`: at once). No flag: a cluster-wide start time
    /// is no default.
    pub start_at: Option<jiff::Timestamp>,
    /// How long it stays once Succeeded before the operator deletes it (`None`: for ever).
    pub expire_after: Option<Duration>,
    /// The owners of the pre-drain hooks that hold the drain ([`pre_drain_hooks::owners`], in
    /// name order; empty: none). Not a knob: read from the annotations alone, no spec field or
    /// flag (a hook is one owner's own hold).
    pub hooks: Vec<String>,
    /// How long Succeeded waits, from the drain's start, for the node's VolumeAttachments to go
    /// (`None`: no wait, upstream's behaviour; `crate::drain::volume_detach`).
    pub wait_for_volume_detach: Option<Duration>,
    /// What the drain does with the node's DaemonSet pods (`Ignore`: upstream's behaviour;
    /// `crate::drain::daemon_sets`).
    pub daemon_sets: DaemonSets,
    /// What the drain does with a pod of a Deployment that cannot lose it
    /// (`crate::drain::surge`; `Never`: evict it, upstream's behaviour).
    pub surge: Surge,
    /// When the deadline counts from, filled in by the maintenance pass (not a knob; `None`
    /// from [`resolve`]): the drain's start recorded on the node, or when a maintenance that
    /// waited for a drain slot got one.
    pub deadline_start: Option<jiff::Timestamp>,
}

impl DrainPolicy {
    /// Whether no eviction may be sent now: paused, or held by a pre-drain hook.
    pub fn holds_evictions(&self) -> bool {
        self.paused || !self.hooks.is_empty()
    }

    /// The drain's deadline: `started` (the API server's time the node was entered) plus
    /// `drain_timeout`; `None` without a timeout, a start, or when it is beyond jiff's range.
    pub fn deadline(&self, started: Option<jiff::Timestamp>) -> Option<jiff::Timestamp> {
        let timeout = jiff::SignedDuration::try_from(self.drain_timeout?).ok()?;
        started?.checked_add(timeout).ok()
    }

    /// What applies at `now` (the API server's time): `Some(on_timeout)` once the deadline has
    /// passed, `None` before it or without one.
    pub fn overdue(
        &self,
        started: Option<jiff::Timestamp>,
        now: jiff::Timestamp,
    ) -> Option<OnTimeout> {
        self.deadline(started)
            .filter(|d| now >= *d)
            .map(|_| self.on_timeout)
    }
}

/// A knob whose value was refused, as the webhook denial and the status say it: `<source> has
/// the invalid value "<value>" for the knob <knob> (accepted: …)`, or with a `detail`
/// `<path>: <problem> (value "<value>"; accepted: …)`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InvalidKnob {
    /// The knob (`paused`).
    pub knob: &'static str,
    /// Where the value was read (the annotation's name, or `spec.<knob>`).
    pub source_name: &'static str,
    /// The value.
    pub value: String,
    /// The accepted values.
    pub accepted: &'static str,
    /// Where in the value the problem is and what it is, when the value has parts (the drain
    /// rules: `spec.drainRules[0].podSelector: …`), or the name of an unknown annotation.
    pub detail: Option<String>,
}

impl std::fmt::Display for InvalidKnob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let Self {
            knob,
            source_name,
            value,
            accepted,
            detail,
        } = self;
        match detail {
            None => write!(
                f,
                "{source_name} has the invalid value {value:?} for the knob {knob} (accepted: \
                 {accepted})"
            ),
            Some(detail) => write!(f, "{detail} (value {value:?}; accepted: {accepted})"),
        }
    }
}

impl std::error::Error for InvalidKnob {}

/// The value `s` names exactly (the variant's name, as the CRD and the flag spell it).
fn named<T: clap::ValueEnum>(s: &str) -> Option<T> {
    T::from_str(s, false).ok()
}

/// The reads of one maintenance's knobs, each refused value recorded.
struct Reads<'a> {
    annotations: &'a BTreeMap<String, String>,
    invalid: Vec<InvalidKnob>,
}

type Read<T> = Result<T, Option<String>>;

impl Reads<'_> {
    /// `knob` from its annotation read with `text` (`Err(Some(detail))`: the problem's own
    /// words), recorded when refused; `None` without.
    fn annotation<T>(&mut self, knob: Knob, text: impl Fn(&str) -> Read<T>) -> Option<T> {
        let annotations = self.annotations;
        let value = annotations.get(knob.annotation)?;
        let read = text(value);
        read.map_err(|detail| self.refuse(knob, knob.annotation, value.clone(), detail))
            .ok()
    }

    /// `knob` from its annotation, else from the `written` text (`spec.<knob>`) read alike.
    fn text<T>(
        &mut self,
        knob: Knob,
        text: impl Fn(&str) -> Read<T>,
        written: Option<&String>,
    ) -> Option<T> {
        self.annotation(knob, &text).or_else(|| {
            let value = written?;
            text(value)
                .map_err(|detail| self.refuse(knob, knob.field, value.clone(), detail))
                .ok()
        })
    }

    fn refuse(&mut self, knob: Knob, source: &'static str, value: String, detail: Option<String>) {
        self.invalid.push(InvalidKnob {
            knob: knob.name,
            source_name: source,
            value,
            accepted: knob.accepted,
            detail,
        });
    }

    /// The rules of `spec.drainRules`, as the API server leaves them after pruning: refused when
    /// one would select every pod.
    fn spec_rules(&mut self, rules: &[DrainRule]) -> Option<Vec<DrainRule>> {
        let knob = DrainKnobs::DRAIN_RULES;
        match check_rules(rules, knob.field) {
            Ok(()) => Some(rules.to_vec()),
            Err(detail) => {
                let value = serde_json::to_string(rules).unwrap_or_default();
                self.refuse(knob, knob.field, value, Some(detail));
                None
            }
        }
    }

    /// Each knob from its annotation, else `w` (the spec's, or the flags'), else `d`.
    fn policy(&mut self, w: &DrainKnobs, d: &DrainPolicy) -> DrainPolicy {
        type K = DrainKnobs;
        let boolean = |v: &str| match v {
            "true" => Ok(true),
            "false" => Ok(false),
            _ => Err(None),
        };
        let duration = |v: &str| parse_duration(v).map_err(|_| None);
        let time = |v: &str| v.trim().parse::<jiff::Timestamp>().map_err(|_| None);
        let wait = |v: &str| parse_wait_for_volume_detach(v).map_err(|_| None);
        DrainPolicy {
            paused: self
                .annotation(K::PAUSED, boolean)
                .or(w.paused)
                .unwrap_or(d.paused),
            drain_timeout: self
                .text(K::DRAIN_TIMEOUT, duration, w.drain_timeout.as_ref())
                .or(d.drain_timeout),
            on_timeout: self
                .annotation(K::ON_TIMEOUT, |v| named::<OnTimeout>(v).ok_or(None))
                .or(w.on_timeout)
                .unwrap_or(d.on_timeout),
            // A rule list with one rule that cannot be read is refused whole: the knob falls back
            // as if absent (a rule that cannot be read selects nothing, never every pod).
            drain_rules: self
                .annotation(K::DRAIN_RULES, |v| {
                    parse_rules(v, DRAIN_RULES_ANNOTATION).map_err(Some)
                })
                .or_else(|| self.spec_rules(w.drain_rules.as_ref()?))
                .unwrap_or_else(|| d.drain_rules.clone()),
            stage: self
                .annotation(K::STAGE, |v| named::<Stage>(v).ok_or(None))
                .or(w.stage)
                .unwrap_or(d.stage),
            node_conditions: self
                .annotation(K::NODE_CONDITIONS, boolean)
                .or(w.node_conditions)
                .unwrap_or(d.node_conditions),
            start_at: self
                .text(K::START_AT, time, w.start_at.as_ref())
                .or(d.start_at),
            expire_after: self
                .text(K::EXPIRE_AFTER, duration, w.expire_after.as_ref())
                .or(d.expire_after),
            wait_for_volume_detach: self
                .text(
                    K::WAIT_FOR_VOLUME_DETACH,
                    wait,
                    w.wait_for_volume_detach.as_ref(),
                )
                .unwrap_or(d.wait_for_volume_detach),
            daemon_sets: self
                .annotation(K::DAEMON_SETS, |v| named::<DaemonSets>(v).ok_or(None))
                .or(w.daemon_sets)
                .unwrap_or(d.daemon_sets),
            surge: self
                .annotation(K::SURGE, |v| named::<Surge>(v).ok_or(None))
                .or(w.surge)
                .unwrap_or(d.surge),
            hooks: Vec::new(),
            deadline_start: None,
        }
    }
}

/// A maintenance's policy and the knob values refused ([`resolve`]).
pub type Resolved = (DrainPolicy, Vec<InvalidKnob>);

/// The policy of `nm` under `defaults`: annotation, else spec, else flag, per knob; and the
/// values refused (each knob then falls back as if that value were absent).
pub fn resolve(nm: &NodeMaintenance, defaults: &Defaults) -> Resolved {
    let mut reads = Reads {
        annotations: nm.annotations(),
        invalid: Vec::new(),
    };
    let mut policy = reads.policy(&nm.spec.knobs, defaults);
    for (name, value) in strict::unknown_annotations(nm) {
        reads.invalid.push(InvalidKnob {
            knob: "annotations",
            source_name: "metadata.annotations",
            value: value.clone(),
            accepted: crate::knobs::KNOBS_ACCEPTED.as_str(),
            detail: Some(format!(
                "{name}: unknown annotation of the drain policy (no knob has this name)"
            )),
        });
    }
    policy.hooks = pre_drain_hooks::owners(nm);
    for (_, value, why) in pre_drain_hooks::refused(nm) {
        reads.invalid.push(InvalidKnob {
            knob: "preDrainHooks",
            source_name: "metadata.annotations",
            value: value.clone(),
            accepted: pre_drain_hooks::HOOKS_ACCEPTED,
            detail: Some(why),
        });
    }
    (policy, reads.invalid)
}

/// The defaults the operator's flags give (`crate::config::Config`'s knobs, already checked by
/// their parsers), read as a spec would be, over upstream's behaviour.
pub fn defaults(flags: &DrainKnobs) -> Defaults {
    let none = BTreeMap::new();
    let mut reads = Reads {
        annotations: &none,
        invalid: Vec::new(),
    };
    reads.policy(flags, &DrainPolicy::default())
}

/// Whether `nm` goes as far as the drain at `now` (its `stage` under `defaults` is Drain and
/// its window, `startAt`, is open): only those take part in the drain budgets, so a maintenance
/// kept Idle or Cordon, or waiting for its window, holds no slot.
pub fn drains(nm: &NodeMaintenance, defaults: &Defaults, now: jiff::Timestamp) -> bool {
    let policy = resolve(nm, defaults).0;
    policy.stage == Stage::Drain && policy.start_at.is_none_or(|t| t <= now)
}

/// A drain budget: a number of maintenances, or a percentage of the cluster's nodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DrainLimit {
    /// At most this many (at least 1).
    Count(u32),
    /// At most this share of the nodes, rounded down, and at least 1.
    Percent(u32),
}

impl DrainLimit {
    /// Parses `2` or `10%`.
    ///
    /// # Errors
    /// What is accepted, when `s` is neither a positive integer nor a percentage of 1 to 100.
    pub fn parse(s: &str) -> Result<Self, String> {
        let accepted = || format!("expected a positive number or a percentage (10%), not {s:?}");
        match s.trim().strip_suffix('%') {
            Some(p) => match p.trim().parse::<u32>() {
                Ok(p @ 1..=100) => Ok(Self::Percent(p)),
                _ => Err(accepted()),
            },
            None => match s.trim().parse::<u32>() {
                Ok(n @ 1..) => Ok(Self::Count(n)),
                _ => Err(accepted()),
            },
        }
    }

    /// How many maintenances may drain at once in a cluster of `nodes` nodes.
    pub fn slots(&self, nodes: usize) -> usize {
        match *self {
            Self::Count(n) => n as usize,
            Self::Percent(p) => (nodes * p as usize / 100).max(1),
        }
    }
}

impl std::fmt::Display for DrainLimit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Count(n) => write!(f, "{n}"),
            Self::Percent(p) => write!(f, "{p}%"),
        }
    }
}

/// A drain budget of the nodes a label selector selects (`--max-parallel-drains-for`): at most
/// `limit` maintenances of those nodes evict at once, a percentage being of the nodes selected.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeBudget {
    /// The selector as given (`node-role.kubernetes.io/storage`, `pool=db,zone!=a`).
    pub text: String,
    /// Its terms, all of which must hold.
    pub selector: Vec<SelectorTerm>,
    /// The budget.
    pub limit: DrainLimit,
}

/// One term of a node label selector in kubectl's equality-based form.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SelectorTerm {
    /// `key=value` (or `key==value`).
    Equal(String, String),
    /// `key!=value`.
    NotEqual(String, String),
    /// `key`.
    Exists(String),
    /// `!key`.
    DoesNotExist(String),
}

impl NodeBudget {
    /// Parses `<selector>=<limit>`: the limit after the last `=`, the selector before it as
    /// comma-separated terms `key=value`, `key!=value`, `key`, `!key` (kubectl's
    /// equality-based selectors).
    ///
    /// # Errors
    /// What is accepted, when `s` is not of that form.
    pub fn parse(s: &str) -> Result<Self, String> {
        let form = || {
            format!(
                "expected <node label selector>=<number or percentage>, such as node-role.kubernetes.io/storage=1, not {s:?}"
            )
        };
        let (text, limit) = s.rsplit_once('=').ok_or_else(form)?;
        let limit = DrainLimit::parse(limit).map_err(|e| format!("{}: {e}", form()))?;
        let text = text.strip_suffix('=').unwrap_or(text).trim();
        let mut selector = Vec::new();
        for term in text.split(',').map(str::trim) {
            let t = if let Some((k, v)) = term.split_once("!=") {
                SelectorTerm::NotEqual(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
                SelectorTerm::Equal(k.trim().into(), v.trim().into())
            } else if let Some(k) = term.strip_prefix('!') {
                SelectorTerm::DoesNotExist(k.trim().into())
            } else {
                SelectorTerm::Exists(term.into())
            };
            let key = match &t {
                SelectorTerm::Equal(k, _)
                | SelectorTerm::NotEqual(k, _)
                | SelectorTerm::Exists(k)
                | SelectorTerm::DoesNotExist(k) => k,
            };
            if key.is_empty() || key.contains(char::is_whitespace) {
                return Err(form());
            }
            selector.push(t);
        }
        Ok(Self {
            text: text.to_string(),
            selector,
            limit,
        })
    }

    /// Whether the node with `labels` is one of this budget's.
    pub fn selects(&self, labels: Option<&std::collections::BTreeMap<String, String>>) -> bool {
        let get = |k: &str| labels.and_then(|l| l.get(k));
        self.selector.iter().all(|t| match t {
            SelectorTerm::Equal(k, v) => get(k) == Some(v),
            SelectorTerm::NotEqual(k, v) => get(k) != Some(v),
            SelectorTerm::Exists(k) => get(k).is_some(),
            SelectorTerm::DoesNotExist(k) => get(k).is_none(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::NodeMaintenanceSpec;
    use clap::ValueEnum;

    fn nm(spec: Option<bool>, annotation: Option<&str>) -> NodeMaintenance {
        let mut nm = NodeMaintenance::new(
            "nm",
            NodeMaintenanceSpec {
                node_name: "n1".into(),
                ..NodeMaintenanceSpec::default()
            },
        );
        nm.spec.knobs.paused = spec;
        if let Some(a) = annotation {
            nm.annotations_mut()
                .insert(PAUSED_ANNOTATION.into(), a.into());
        }
        nm
    }

    #[test]
    fn the_annotation_wins_over_the_spec_and_the_spec_over_the_flag() {
        let off = &Defaults::default();
        let on = &Defaults {
            paused: true,
            ..Defaults::default()
        };
        // (spec, annotation, flag) -> paused, refused
        for (spec, annotation, defaults, paused, refused) in [
            (None, None, off, false, false),
            (None, None, on, true, false),
            (Some(true), None, off, true, false),
            (Some(false), None, on, false, false),
            (Some(false), Some("true"), off, true, false),
            (Some(true), Some("false"), on, false, false),
            (Some(true), Some("yes"), off, true, true),
            (None, Some("TRUE"), off, false, true),
        ] {
            let (policy, invalid) = resolve(&nm(spec, annotation), defaults);
            assert_eq!(
                (policy.paused, !invalid.is_empty()),
                (paused, refused),
                "{spec:?} {annotation:?} {defaults:?}"
            );
        }
        let (_, invalid) = resolve(&nm(None, Some("yes")), off);
        assert_eq!(
            invalid[0].to_string(),
            "nodemaintenance.medik8s.io/paused has the invalid value \"yes\" for the knob paused \
             (accepted: true, false)"
        );
    }

    #[test]
    fn the_deadline_knobs_resolve_like_paused_and_a_bad_spec_value_is_refused() {
        let mut nm = nm(None, None);
        let defaults = Defaults {
            drain_timeout: Some(Duration::from_secs(600)),
            on_timeout: OnTimeout::Fail,
            ..Defaults::default()
        };
        let (p, invalid) = resolve(&nm, &defaults);
        assert_eq!(
            (p.drain_timeout, p.on_timeout),
            (Some(Duration::from_secs(600)), OnTimeout::Fail)
        );
        assert!(invalid.is_empty());
        nm.spec.knobs.drain_timeout = Some("90s".into());
        nm.spec.knobs.on_timeout = Some(OnTimeout::SkipStuck);
        let (p, _) = resolve(&nm, &defaults);
        assert_eq!(
            (p.drain_timeout, p.on_timeout),
            (Some(Duration::from_secs(90)), OnTimeout::SkipStuck)
        );
        nm.annotations_mut()
            .insert(DRAIN_TIMEOUT_ANNOTATION.into(), "2m".into());
        nm.annotations_mut()
            .insert(ON_TIMEOUT_ANNOTATION.into(), "ForceDelete".into());
        let (p, _) = resolve(&nm, &defaults);
        assert_eq!(
            (p.drain_timeout, p.on_timeout),
            (Some(Duration::from_secs(120)), OnTimeout::ForceDelete)
        );
        // A refused annotation falls back to the spec; a refused spec value to the flag.
        nm.annotations_mut()
            .insert(DRAIN_TIMEOUT_ANNOTATION.into(), "later".into());
        nm.annotations_mut()
            .insert(ON_TIMEOUT_ANNOTATION.into(), "forcedelete".into());
        nm.spec.knobs.drain_timeout = Some("-1s".into());
        let (p, invalid) = resolve(&nm, &defaults);
        assert_eq!(
            (p.drain_timeout, p.on_timeout),
            (Some(Duration::from_secs(600)), OnTimeout::SkipStuck)
        );
        let texts: Vec<String> = invalid.iter().map(ToString::to_string).collect();
        assert_eq!(
            texts,
            [
                "nodemaintenance.medik8s.io/drainTimeout has the invalid value \"later\" for the knob drainTimeout (accepted: a positive duration such as 90s, 15m or 1h30m)",
                "spec.drainTimeout has the invalid value \"-1s\" for the knob drainTimeout (accepted: a positive duration such as 90s, 15m or 1h30m)",
                "nodemaintenance.medik8s.io/onTimeout has the invalid value \"forcedelete\" for the knob onTimeout (accepted: Wait, Fail, SkipStuck, ForceDelete, Abort)",
            ]
        );
    }

    #[test]
    fn every_on_timeout_value_is_read_from_the_annotation_and_named_when_refused() {
        // The value set is declared once (`OnTimeout`'s variants); the refusal's text lists it all.
        let names: Vec<String> = OnTimeout::value_variants()
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(DrainKnobs::ON_TIMEOUT.accepted, names.join(", "));
        for (value, name) in OnTimeout::value_variants().iter().zip(&names) {
            let mut nm = NodeMaintenance::new("nm", Default::default());
            nm.annotations_mut()
                .insert(ON_TIMEOUT_ANNOTATION.into(), name.clone());
            let (p, invalid) = resolve(&nm, &Defaults::default());
            assert_eq!((p.on_timeout, invalid.len()), (*value, 0), "{name}");
        }
    }

    #[test]
    fn daemon_sets_resolve_like_on_timeout_and_an_unknown_value_is_named() {
        let mut nm = NodeMaintenance::new("nm", Default::default());
        let evict_last = Defaults {
            daemon_sets: DaemonSets::EvictLast,
            ..Defaults::default()
        };
        assert_eq!(
            resolve(&nm, &Defaults::default()).0.daemon_sets,
            DaemonSets::Ignore
        );
        assert_eq!(
            resolve(&nm, &evict_last).0.daemon_sets,
            DaemonSets::EvictLast
        );
        nm.spec.knobs.daemon_sets = Some(DaemonSets::Ignore);
        assert_eq!(resolve(&nm, &evict_last).0.daemon_sets, DaemonSets::Ignore);
        nm.annotations_mut()
            .insert(DAEMON_SETS_ANNOTATION.into(), "EvictLast".into());
        assert_eq!(
            resolve(&nm, &Defaults::default()).0.daemon_sets,
            DaemonSets::EvictLast
        );
        nm.annotations_mut()
            .insert(DAEMON_SETS_ANNOTATION.into(), "Evict".into());
        let (p, invalid) = resolve(&nm, &evict_last);
        assert_eq!(
            p.daemon_sets,
            DaemonSets::Ignore,
            "the spec's, the annotation refused"
        );
        assert_eq!(
            invalid[0].to_string(),
            "nodemaintenance.medik8s.io/daemonSets has the invalid value \"Evict\" for the knob \
             daemonSets (accepted: Ignore, EvictLast)"
        );
    }

    #[test]
    fn the_deadline_counts_from_the_drain_start_by_the_api_servers_clock() {
        let start: jiff::Timestamp = "2026-12-02T10:00:00Z".parse().unwrap();
        let p = DrainPolicy {
            drain_timeout: Some(Duration::from_secs(90)),
            on_timeout: OnTimeout::Fail,
            ..DrainPolicy::default()
        };
        let at = |s: &str| s.parse::<jiff::Timestamp>().unwrap();
        assert_eq!(p.overdue(Some(start), at("2026-12-02T10:01:29Z")), None);
        assert_eq!(
            p.overdue(Some(start), at("2026-12-02T10:01:30Z")),
            Some(OnTimeout::Fail)
        );
        assert_eq!(p.overdue(None, at("2026-12-02T11:00:00Z")), None);
        assert_eq!(
            DrainPolicy::default().overdue(Some(start), at("2030-01-01T00:00:00Z")),
            None
        );
    }
    #[test]
    fn a_limit_is_a_count_or_a_share_of_the_nodes() {
        assert_eq!(DrainLimit::parse("2"), Ok(DrainLimit::Count(2)));
        assert_eq!(DrainLimit::parse("10%"), Ok(DrainLimit::Percent(10)));
        for bad in ["0", "0%", "101%", "-1", "two", "", "%"] {
            assert!(DrainLimit::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(DrainLimit::Percent(10).slots(5000), 500);
        assert_eq!(DrainLimit::Percent(10).slots(5), 1, "at least one");
        assert_eq!(DrainLimit::Count(3).slots(1), 3);
    }

    #[test]
    fn a_node_budget_is_a_selector_and_a_limit() {
        let b = NodeBudget::parse("node-role.kubernetes.io/storage=1").unwrap();
        assert_eq!(b.limit, DrainLimit::Count(1));
        assert_eq!(b.text, "node-role.kubernetes.io/storage");
        let labels = |pairs: &[(&str, &str)]| {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<std::collections::BTreeMap<_, _>>()
        };
        assert!(b.selects(Some(&labels(&[("node-role.kubernetes.io/storage", "")]))));
        assert!(!b.selects(Some(&labels(&[("pool", "db")]))));
        assert!(!b.selects(None));
        let b = NodeBudget::parse("pool=db,zone!=a,!spot=50%").unwrap();
        assert_eq!(b.limit, DrainLimit::Percent(50));
        assert!(b.selects(Some(&labels(&[("pool", "db"), ("zone", "b")]))));
        assert!(!b.selects(Some(&labels(&[("pool", "db"), ("zone", "a")]))));
        assert!(!b.selects(Some(&labels(&[("pool", "db"), ("spot", "true")]))));
        for bad in ["storage", "=1", "storage=0", "a b=1", "pool=db,=2"] {
            assert!(NodeBudget::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn drain_rules_come_from_the_annotation_the_spec_or_the_flag_whole() {
        use crate::api::DrainBehavior;
        let rule = |behavior| DrainRule {
            pod_selector: Some(
                k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector {
                    match_labels: Some([("app".to_string(), "db".to_string())].into()),
                    ..Default::default()
                },
            ),
            behavior,
            ..DrainRule::default()
        };
        let defaults = Defaults {
            drain_rules: vec![rule(DrainBehavior::Skip)],
            ..Defaults::default()
        };
        let mut nm = nm(None, None);
        assert_eq!(resolve(&nm, &defaults).0.drain_rules, defaults.drain_rules);
        nm.spec.knobs.drain_rules = Some(vec![rule(DrainBehavior::WaitCompleted)]);
        assert_eq!(
            resolve(&nm, &defaults).0.drain_rules,
            [rule(DrainBehavior::WaitCompleted)]
        );
        nm.annotations_mut().insert(
            DRAIN_RULES_ANNOTATION.into(),
            r#"[{"podSelector": {"matchLabels": {"app": "db"}}, "behavior": "Drain", "order": 2}]"#
                .into(),
        );
        let (p, invalid) = resolve(&nm, &defaults);
        assert!(invalid.is_empty());
        assert_eq!((p.drain_rules.len(), p.drain_rules[0].order), (1, Some(2)));
        nm.annotations_mut().insert(
            DRAIN_RULES_ANNOTATION.into(),
            r#"[{"behavior": "Evict"}]"#.into(),
        );
        let (p, invalid) = resolve(&nm, &defaults);
        assert_eq!(
            p.drain_rules,
            [rule(DrainBehavior::WaitCompleted)],
            "falls back to the spec"
        );
        assert!(invalid[0].to_string().contains("drainRules"), "{invalid:?}");
    }

    #[test]
    fn a_rule_whose_selector_cannot_be_evaluated_is_refused() {
        let bad = r#"[{"podSelector": {"matchExpressions": [{"key": "app", "operator": "in", "values": ["db"]}]}, "behavior": "Skip"}]"#;
        assert!(parse_rules(bad, DRAIN_RULES_ANNOTATION).is_err());
        let mut nm = nm(None, None);
        nm.spec.knobs.drain_rules = Some(serde_json::from_str(bad).unwrap());
        let (p, invalid) = resolve(&nm, &Defaults::default());
        assert!(p.drain_rules.is_empty(), "the default applies");
        assert!(
            invalid[0].to_string().starts_with(
                "spec.drainRules[0].podSelector.matchExpressions[0].operator: unknown value \"in\""
            ),
            "{invalid:?}"
        );
    }
}
