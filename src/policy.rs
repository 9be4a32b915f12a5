//! The drain policy of one maintenance: each knob resolved from, in this order, its annotation
//! `nodemaintenance.medik8s.io/<knob>` on the NodeMaintenance (never pruned, so it works on
//! upstream's CRD), its field in our CRD's `spec`, and the operator's flag (the cluster default).
//! Without any of them, behaviour is upstream's (`docs/drain-contract.md` §10).
//!
//! Pure: the controller resolves the policy into each pass's observation, the webhook refuses
//! an invalid value, and on a cluster without the webhook an invalid value is reported in status
//! and the default applies.

use std::time::Duration;

use kube::ResourceExt;

use crate::api::{DrainRule, NodeMaintenance, OnTimeout, Stage};

pub mod pre_drain_hooks;
mod strict;

/// Annotation of the `paused` knob: `"true"` or `"false"`.
pub const PAUSED_ANNOTATION: &str = "nodemaintenance.medik8s.io/paused";
/// Annotation of the `drainTimeout` knob: a duration ([`parse_duration`]).
pub const DRAIN_TIMEOUT_ANNOTATION: &str = "nodemaintenance.medik8s.io/drainTimeout";
/// Annotation of the `onTimeout` knob: one of [`OnTimeout::ALL`].
pub const ON_TIMEOUT_ANNOTATION: &str = "nodemaintenance.medik8s.io/onTimeout";
/// Annotation of the `drainRules` knob: the rules as a JSON list ([`parse_rules`]).
pub const DRAIN_RULES_ANNOTATION: &str = "nodemaintenance.medik8s.io/drainRules";
/// Annotation of the `nodeConditions` knob: `"true"` or `"false"`.
pub const NODE_CONDITIONS_ANNOTATION: &str = "nodemaintenance.medik8s.io/nodeConditions";
/// Annotation of the `startAt` knob: an RFC 3339 time.
pub const START_AT_ANNOTATION: &str = "nodemaintenance.medik8s.io/startAt";
/// Annotation of the `expireAfter` knob: a duration ([`parse_duration`]).
pub const EXPIRE_AFTER_ANNOTATION: &str = "nodemaintenance.medik8s.io/expireAfter";
/// Annotation of the `waitForVolumeDetach` knob: `"true"` (the bound
/// [`crate::drain::consts::VOLUME_DETACH_BOUND`]), `"false"` or a duration bound.
pub const WAIT_FOR_VOLUME_DETACH_ANNOTATION: &str =
    "nodemaintenance.medik8s.io/waitForVolumeDetach";
/// Annotation of the `stage` knob: one of [`Stage::ALL`].
pub const STAGE_ANNOTATION: &str = "nodemaintenance.medik8s.io/stage";
/// Every knob annotation: any other of the group on a NodeMaintenance, save the operator's own
/// records, is refused as a typo of one of them ([`strict::unknown_annotations`]).
pub const KNOB_ANNOTATIONS: [&str; 9] = [
    PAUSED_ANNOTATION,
    DRAIN_TIMEOUT_ANNOTATION,
    ON_TIMEOUT_ANNOTATION,
    DRAIN_RULES_ANNOTATION,
    STAGE_ANNOTATION,
    NODE_CONDITIONS_ANNOTATION,
    START_AT_ANNOTATION,
    EXPIRE_AFTER_ANNOTATION,
    WAIT_FOR_VOLUME_DETACH_ANNOTATION,
];
const RULES_ACCEPTED: &str = "a JSON list of rules {podSelector, namespaceSelector, behavior: \
                              Drain, Skip or WaitCompleted, order}, each with at least one \
                              selector of at least one matchLabels or matchExpressions entry";
const KNOBS_ACCEPTED: &str = "nodemaintenance.medik8s.io/ followed by paused, drainTimeout, \
                              onTimeout, drainRules, stage, nodeConditions, startAt, expireAfter \
                              or waitForVolumeDetach";

/// Parses drain rules given as JSON text at `source` (the annotation's name, `--drain-rules`),
/// strictly: exactly the keys of [`DrainRule`] at every depth, known values, and every rule
/// selecting what it names ([`strict`]).
///
/// # Errors
/// What is wrong and where: `<source>[0]: unknown field "selector", expected one of …`.
pub fn parse_rules(s: &str, source: &str) -> Result<Vec<DrainRule>, String> {
    strict::parse_rules(s, source)
}

const DURATION_ACCEPTED: &str = "a positive duration such as 90s, 15m or 1h30m";
const ON_TIMEOUT_ACCEPTED: &str = "Wait, Fail, SkipStuck, ForceDelete, Abort";
const STAGE_ACCEPTED: &str = "Preflight, Idle, Cordon, Drain";
const WAIT_ACCEPTED: &str = "true, false, or a positive duration bound such as 5m";
const START_AT_ACCEPTED: &str = "an RFC 3339 time such as 2030-01-02T03:00:00Z";

/// The operator's defaults of the knobs (its flags).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Defaults {
    /// `--drain-paused`: every maintenance starts with its evictions paused.
    pub paused: bool,
    /// `--drain-timeout`: the deadline of every drain, from its start (`None`: none).
    pub drain_timeout: Option<Duration>,
    /// `--on-timeout`: what happens at the deadline.
    pub on_timeout: OnTimeout,
    /// `--drain-rules`: the rules of every maintenance that has none of its own.
    pub drain_rules: Vec<DrainRule>,
    /// `--stage`: how far every maintenance goes.
    pub stage: Stage,
    /// `--node-conditions`: every maintenance writes the Node lifecycle conditions.
    pub node_conditions: bool,
    /// `--expire-after`: how long every Succeeded maintenance stays (`None`: for ever).
    pub expire_after: Option<Duration>,
    /// `--wait-for-volume-detach`: the bound of every maintenance's wait for its node's
    /// VolumeAttachments (`None`: no wait).
    pub wait_for_volume_detach: Option<Duration>,
}

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

/// Parses a knob's duration: jiff's friendly format (`90s`, `15m`, `1h30m`, `1h 30m`, Go's
/// `time.ParseDuration` spellings of whole units) or ISO 8601 (`PT90S`); it must be positive.
///
/// # Errors
/// The accepted form, when `s` is not one.
pub fn parse_duration(s: &str) -> Result<Duration, &'static str> {
    s.trim()
        .parse::<jiff::SignedDuration>()
        .ok()
        .filter(|d| d.is_positive())
        .and_then(|d| Duration::try_from(d).ok())
        .ok_or(DURATION_ACCEPTED)
}

/// Parses a `waitForVolumeDetach` value: `true` (the bound
/// [`crate::drain::consts::VOLUME_DETACH_BOUND`]), `false` (no wait, whatever the flag says) or
/// a bound as [`parse_duration`] reads it.
///
/// # Errors
/// The accepted forms, when `s` is none of them.
pub fn parse_wait_for_volume_detach(s: &str) -> Result<Option<Duration>, &'static str> {
    match s.trim() {
        "true" => Ok(Some(crate::drain::consts::VOLUME_DETACH_BOUND)),
        "false" => Ok(None),
        other => parse_duration(other).map(Some).map_err(|_| WAIT_ACCEPTED),
    }
}

fn stage(s: &str) -> Option<Stage> {
    Stage::ALL
        .iter()
        .find(|(_, name)| *name == s)
        .map(|(v, _)| *v)
}

fn on_timeout(s: &str) -> Option<OnTimeout> {
    OnTimeout::ALL
        .iter()
        .find(|(_, name)| *name == s)
        .map(|(v, _)| *v)
}

/// The reads of one maintenance's knobs, each refused value recorded.
struct Knobs<'a> {
    nm: &'a NodeMaintenance,
    invalid: Vec<InvalidKnob>,
}

impl Knobs<'_> {
    fn parse<T>(
        &mut self,
        knob: (&'static str, &'static str, &'static str),
        value: Option<&String>,
        parse: impl Fn(&str) -> Option<T>,
    ) -> Option<T> {
        self.detailed(knob, value, |v| parse(v).ok_or(None))
    }

    /// As [`Knobs::parse`], with the problem's own words (`Err(Some(detail))`) where there are.
    fn detailed<T>(
        &mut self,
        (knob, source_name, accepted): (&'static str, &'static str, &'static str),
        value: Option<&String>,
        parse: impl Fn(&str) -> Result<T, Option<String>>,
    ) -> Option<T> {
        let value = value?;
        match parse(value) {
            Ok(parsed) => Some(parsed),
            Err(detail) => {
                self.invalid.push(InvalidKnob {
                    knob,
                    source_name,
                    value: value.clone(),
                    accepted,
                    detail,
                });
                None
            }
        }
    }

    fn annotation<T>(
        &mut self,
        (knob, annotation, accepted): (&'static str, &'static str, &'static str),
        parse: impl Fn(&str) -> Option<T>,
    ) -> Option<T> {
        let nm = self.nm;
        self.parse(
            (knob, annotation, accepted),
            nm.annotations().get(annotation),
            parse,
        )
    }
}

/// The policy of `nm` under `defaults`: annotation, else spec, else flag, per knob; and the
/// values refused (each knob then falls back as if that value were absent).
pub fn resolve(nm: &NodeMaintenance, defaults: &Defaults) -> (DrainPolicy, Vec<InvalidKnob>) {
    let mut k = Knobs {
        nm,
        invalid: Vec::new(),
    };
    let boolean = |v: &str| match v {
        "true" => Some(true),
        "false" => Some(false),
        _ => None,
    };
    let paused = k
        .annotation(("paused", PAUSED_ANNOTATION, "true, false"), boolean)
        .or(nm.spec.paused)
        .unwrap_or(defaults.paused);
    let duration = |v: &str| parse_duration(v).ok();
    let timeout = ("drainTimeout", DRAIN_TIMEOUT_ANNOTATION, DURATION_ACCEPTED);
    let drain_timeout = k
        .annotation(timeout, duration)
        .or_else(|| {
            let spec = ("drainTimeout", "spec.drainTimeout", DURATION_ACCEPTED);
            k.parse(spec, nm.spec.drain_timeout.as_ref(), duration)
        })
        .or(defaults.drain_timeout);
    let on_timeout = k
        .annotation(
            ("onTimeout", ON_TIMEOUT_ANNOTATION, ON_TIMEOUT_ACCEPTED),
            on_timeout,
        )
        .or(nm.spec.on_timeout)
        .unwrap_or(defaults.on_timeout);
    // A rule list with one rule that cannot be read is refused whole: the knob falls back as if
    // absent (a rule that cannot be read selects nothing, never every pod).
    let drain_rules = k
        .detailed(
            ("drainRules", DRAIN_RULES_ANNOTATION, RULES_ACCEPTED),
            nm.annotations().get(DRAIN_RULES_ANNOTATION),
            |v| parse_rules(v, DRAIN_RULES_ANNOTATION).map_err(Some),
        )
        .or_else(|| {
            let spec = ("drainRules", "spec.drainRules", RULES_ACCEPTED);
            let rules = nm.spec.drain_rules.as_ref();
            let text = rules.map(|r| serde_json::to_string(r).unwrap_or_default());
            k.detailed(spec, text.as_ref(), |_| {
                let rules = rules.cloned().unwrap_or_default();
                strict::check_rules(&rules, "spec.drainRules").map_err(Some)?;
                Ok(rules)
            })
        })
        .unwrap_or_else(|| defaults.drain_rules.clone());
    let stage = k
        .annotation(("stage", STAGE_ANNOTATION, STAGE_ACCEPTED), stage)
        .or(nm.spec.stage)
        .unwrap_or(defaults.stage);
    let node_conditions = k
        .annotation(
            ("nodeConditions", NODE_CONDITIONS_ANNOTATION, "true, false"),
            boolean,
        )
        .or(nm.spec.node_conditions)
        .unwrap_or(defaults.node_conditions);
    let time = |v: &str| v.trim().parse::<jiff::Timestamp>().ok();
    let start_at = k
        .annotation(("startAt", START_AT_ANNOTATION, START_AT_ACCEPTED), time)
        .or_else(|| {
            let spec = ("startAt", "spec.startAt", START_AT_ACCEPTED);
            k.parse(spec, nm.spec.start_at.as_ref(), time)
        });
    let expire = ("expireAfter", EXPIRE_AFTER_ANNOTATION, DURATION_ACCEPTED);
    let expire_after = k
        .annotation(expire, duration)
        .or_else(|| {
            let spec = ("expireAfter", "spec.expireAfter", DURATION_ACCEPTED);
            k.parse(spec, nm.spec.expire_after.as_ref(), duration)
        })
        .or(defaults.expire_after);
    let detach = (
        "waitForVolumeDetach",
        WAIT_FOR_VOLUME_DETACH_ANNOTATION,
        WAIT_ACCEPTED,
    );
    let wait_for_volume_detach = k
        .annotation(detach, |v| parse_wait_for_volume_detach(v).ok())
        .or_else(|| {
            let spec = (
                "waitForVolumeDetach",
                "spec.waitForVolumeDetach",
                WAIT_ACCEPTED,
            );
            let value = nm.spec.wait_for_volume_detach.as_ref();
            k.parse(spec, value, |v| parse_wait_for_volume_detach(v).ok())
        })
        .unwrap_or(defaults.wait_for_volume_detach);
    for (name, value) in strict::unknown_annotations(nm, &KNOB_ANNOTATIONS) {
        k.invalid.push(InvalidKnob {
            knob: "annotations",
            source_name: "metadata.annotations",
            value: value.clone(),
            accepted: KNOBS_ACCEPTED,
            detail: Some(format!(
                "{name}: unknown annotation of the drain policy (no knob has this name)"
            )),
        });
    }
    for (_, value, why) in pre_drain_hooks::refused(nm) {
        k.invalid.push(InvalidKnob {
            knob: "preDrainHooks",
            source_name: "metadata.annotations",
            value: value.clone(),
            accepted: pre_drain_hooks::HOOKS_ACCEPTED,
            detail: Some(why),
        });
    }
    let policy = DrainPolicy {
        hooks: pre_drain_hooks::owners(nm),
        paused,
        node_conditions,
        start_at,
        expire_after,
        wait_for_volume_detach,
        drain_timeout,
        on_timeout,
        drain_rules,
        stage,
        deadline_start: None,
    };
    (policy, k.invalid)
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

    fn nm(spec: Option<bool>, annotation: Option<&str>) -> NodeMaintenance {
        let mut nm = NodeMaintenance::new(
            "nm",
            NodeMaintenanceSpec {
                node_name: "n1".into(),
                paused: spec,
                ..NodeMaintenanceSpec::default()
            },
        );
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
    fn a_duration_is_positive_in_friendly_or_iso_form() {
        for (text, secs) in [
            ("90s", 90),
            ("15m", 900),
            ("1h30m", 5400),
            ("1h 30m", 5400),
            ("PT90S", 90),
        ] {
            assert_eq!(
                parse_duration(text),
                Ok(Duration::from_secs(secs)),
                "{text}"
            );
        }
        for text in ["", "0s", "-5s", "90", "soon", "5 parsecs"] {
            assert_eq!(parse_duration(text), Err(DURATION_ACCEPTED), "{text}");
        }
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
        nm.spec.drain_timeout = Some("90s".into());
        nm.spec.on_timeout = Some(OnTimeout::SkipStuck);
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
        nm.spec.drain_timeout = Some("-1s".into());
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
        // The value set is declared once (`OnTimeout::ALL`); the refusal's text lists it all.
        let names: Vec<&str> = OnTimeout::ALL.iter().map(|(_, n)| *n).collect();
        assert_eq!(ON_TIMEOUT_ACCEPTED, names.join(", "));
        for (value, name) in OnTimeout::ALL {
            let mut nm = NodeMaintenance::new("nm", Default::default());
            nm.annotations_mut()
                .insert(ON_TIMEOUT_ANNOTATION.into(), (*name).into());
            let (p, invalid) = resolve(&nm, &Defaults::default());
            assert_eq!((p.on_timeout, invalid.len()), (*value, 0), "{name}");
        }
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
        nm.spec.drain_rules = Some(vec![rule(DrainBehavior::WaitCompleted)]);
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
        nm.spec.drain_rules = Some(serde_json::from_str(bad).unwrap());
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
