//! The drain knobs of a maintenance, each declared once, in [`DrainKnobs`]: next to each field
//! its JSON name and description in our CRD's `spec` (serde, schemars), its annotation
//! `nodemaintenance.medik8s.io/<JSON name>` ([`Knob`]: the names and what it accepts, as a
//! refusal says them), its flag for the operator's default (clap: name, help, default) and the
//! reading of its text (the flag's `value_parser`, the function `crate::policy::resolve` reads
//! the annotation and the spec with). The values the knobs take ([`Stage`], [`OnTimeout`],
//! [`DrainRule`]) live here too, so this module imports nothing of the crate: the CRD
//! (`crate::api`, which flattens [`DrainKnobs`] into its spec), the flags (`crate::config`,
//! which flattens it into its own) and the policy (`crate::policy`, which resolves it) build on
//! it.
//!
//! Adding a knob: a field of [`DrainKnobs`] (its doc the CRD's description; `#[arg]` its flag, or
//! `#[arg(skip)]` for none) and its [`Knob`] in [`DrainKnobs::ALL`]; its resolved value in
//! `crate::policy::DrainPolicy` and `resolve`; the code that uses it; then the generated CRD,
//! chart and bundle (the README's `crdgen`, `chartgen` and `bundlegen` commands).

use std::sync::LazyLock;
use std::time::Duration;

use clap::ArgAction;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

mod rules;

pub use rules::{DrainBehavior, DrainRule, check_rules, parse_rules};

/// The group's annotation prefix: the knobs' annotations (and the operator's own records).
pub const PREFIX: &str = "nodemaintenance.medik8s.io/";

/// The drain knobs of one maintenance as written (the text of a duration, not yet read): the
/// knob fields of `spec` (flattened there, so their JSON names are the spec's) and, flattened
/// into `crate::config::Config`, the operator's flags giving their defaults. Each is resolved
/// from its annotation, else this field, else the flag (`crate::policy::resolve`); unset
/// everywhere, upstream's behaviour.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema, clap::Args)]
#[serde(rename_all = "camelCase")]
pub struct DrainKnobs {
    /// While true, no new eviction is sent; the node stays cordoned and tainted and the lease
    /// held. The annotation nodemaintenance.medik8s.io/paused ("true" or "false") wins over this
    /// field, which wins over the operator's --drain-paused flag.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[arg(long = "drain-paused", default_value = "false", action = ArgAction::Set,
          num_args = 0..=1, default_missing_value = "true", value_name = "BOOL",
          help = "Default of the `paused` drain knob: every maintenance keeps its node cordoned \
              and tainted but sends no eviction until unpaused (`spec.paused: false` or the \
              annotation nodemaintenance.medik8s.io/paused=false). Off by default, as upstream")]
    pub paused: Option<bool>,
    /// How long the drain may take, from its start, before onTimeout applies: a duration such
    /// as "90s", "15m" or "1h30m". The annotation nodemaintenance.medik8s.io/drainTimeout wins
    /// over this field, which wins over the operator's --drain-timeout flag. Unset: no deadline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[arg(long, value_name = "DURATION", value_parser = duration_flag,
          help = "Default of the `drainTimeout` knob: how long a drain may take from its start \
              before `--on-timeout` applies (90s, 15m, 1h30m). Unset by default: no deadline, \
              as upstream")]
    pub drain_timeout: Option<String>,
    /// What happens once drainTimeout has passed: Wait (keep draining, with a Warning event),
    /// Fail (phase Failed, the node stays cordoned), SkipStuck (stop waiting for pods whose
    /// deletion is overdue) or ForceDelete (delete each remaining pod its own grace period
    /// ahead of the deadline, so it ends by then) or Abort (the node restored as on delete,
    /// nothing more evicted, phase Failed with reason DrainAborted). The annotation nodemaintenance.medik8s.io/onTimeout wins over this field, which
    /// wins over the operator's --on-timeout flag.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[arg(
        long,
        value_enum,
        default_value = "Wait",
        value_name = "ACTION",
        help = "Default of the `onTimeout` knob: Wait, Fail, SkipStuck, ForceDelete (which needs \
              the force-delete RBAC overlay) or Abort. Wait by default"
    )]
    pub on_timeout: Option<OnTimeout>,
    /// Rules for the pods of this maintenance's node, the first whose selectors select a pod
    /// applying to it (a pod's own nodemaintenance.medik8s.io/drain or cluster.x-k8s.io/drain
    /// label wins over them). Each rule needs podSelector or namespaceSelector, each with at
    /// least one matchLabels or matchExpressions entry; a rule without is refused, never read as
    /// every pod. The annotation nodemaintenance.medik8s.io/drainRules (the same list
    /// as JSON) wins over this field, which wins over the operator's --drain-rules flag.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[arg(long, value_name = "JSON", value_parser = rules_flag,
          help = "Default of the `drainRules` knob: a JSON list of rules ({podSelector, \
              namespaceSelector, behavior: Drain, Skip or WaitCompleted, order}) for every \
              maintenance that has none of its own. None by default")]
    pub drain_rules: Option<DrainRules>,
    /// How far the maintenance goes: Preflight (only status.blockers, from dry-run evictions;
    /// nothing else is touched), Idle (nothing on the node is touched, no lease), Cordon (lease,
    /// cordon, taints and label; no eviction) or Drain (cordon and drain, the default). Moving
    /// back restores the node as a delete would and keeps the object. The annotation
    /// nodemaintenance.medik8s.io/stage wins over this field, which wins over the operator's
    /// --stage flag.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[arg(
        long,
        value_enum,
        default_value = "Drain",
        value_name = "STAGE",
        help = "Default of the `stage` knob: Preflight, Idle, Cordon or Drain (how far every \
              maintenance goes until its spec.stage or the annotation \
              nodemaintenance.medik8s.io/stage says otherwise). Drain by default, as upstream"
    )]
    pub stage: Option<Stage>,
    /// While true, the operator writes the Node lifecycle conditions MaintenancePlanned,
    /// MaintenanceInProgress, DrainInProgress and Drained on the node's status (all False with
    /// reason MaintenanceEnded at the end). The annotation nodemaintenance.medik8s.io/nodeConditions
    /// ("true" or "false") wins over this field, which wins over the operator's --node-conditions
    /// flag.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[arg(long, default_value = "false", action = ArgAction::Set, num_args = 0..=1,
          default_missing_value = "true", value_name = "BOOL",
          help = "Default of the `nodeConditions` knob: every maintenance writes the Node \
              lifecycle conditions (MaintenancePlanned, MaintenanceInProgress, \
              DrainInProgress, Drained) on its node's status. Off by default: upstream writes \
              no node status")]
    pub node_conditions: Option<bool>,
    /// When the maintenance window opens (RFC 3339, e.g. "2030-01-02T03:00:00Z"): until then,
    /// by the API server's clock, the maintenance stays Idle (nothing on the node is touched,
    /// no lease; the Stage condition's reason is MaintenanceWindow), then goes on to its stage.
    /// The annotation nodemaintenance.medik8s.io/startAt wins over this field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    // No flag: a cluster-wide start time is no default.
    #[arg(skip)]
    pub start_at: Option<String>,
    /// How long a Succeeded maintenance stays (a duration such as "30s", "12h"): then the
    /// operator deletes the NodeMaintenance (event MaintenanceExpired) and the node is restored
    /// as on any delete. The annotation nodemaintenance.medik8s.io/expireAfter wins over this
    /// field, which wins over the operator's --expire-after flag. Unset: it stays.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[arg(long, value_name = "DURATION", value_parser = duration_flag,
          help = "Default of the `expireAfter` knob: how long a Succeeded maintenance stays before \
              the operator deletes it (30s, 12h), restoring the node. Unset by default: it \
              stays, as upstream")]
    pub expire_after: Option<String>,
    /// With a bound, the maintenance reaches Succeeded only once no VolumeAttachment names the
    /// node (those of the pods the drain keeps aside): "true" (a bound of 5m), "false", or a
    /// duration such as "5m", counted from the drain's start; at the bound onTimeout applies.
    /// The annotation nodemaintenance.medik8s.io/waitForVolumeDetach wins over this field, which
    /// wins over the operator's --wait-for-volume-detach flag. Unset: no wait, as upstream.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[arg(long, value_name = "DURATION|BOOL", value_parser = wait_flag,
          help = "Default of the `waitForVolumeDetach` knob: Succeeded waits until no \
              VolumeAttachment names the node, for at most this bound from the drain's start \
              (5m, or true for 5m; then --on-timeout applies). Off by default, as upstream")]
    pub wait_for_volume_detach: Option<String>,
    /// What the drain does with the node's DaemonSet pods: Ignore (leave them, as upstream and
    /// kubectl's --ignore-daemonsets) or EvictLast (once every other pod has left the node,
    /// evict them through the Eviction API, system-critical ones and the operator's own pod
    /// still last; one that comes back because it tolerates the maintenance taints is kept and
    /// named). The annotation nodemaintenance.medik8s.io/daemonSets wins over this field, which
    /// wins over the operator's --daemon-sets flag.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[arg(
        long,
        value_enum,
        default_value = "Ignore",
        value_name = "POLICY",
        help = "Default of the `daemonSets` knob: Ignore (DaemonSet pods stay, as upstream) or \
              EvictLast (evicted once every other pod has left the node). Ignore by default"
    )]
    pub daemon_sets: Option<DaemonSets>,
    /// What the drain does with a pod of a Deployment that cannot lose it (its budget allows no
    /// disruption, or the Deployment has one replica): Never (evict it as any pod, the default,
    /// as upstream) or RolloutRestart (restart the Deployment's rollout as `kubectl rollout
    /// restart` does, once per drain, and wait until the Deployment has replaced the pod
    /// on another node). The annotation nodemaintenance.medik8s.io/surge wins over this field,
    /// which wins over the operator's --surge flag.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[arg(
        long,
        value_enum,
        default_value = "Never",
        value_name = "SURGE",
        help = "Default of the `surge` knob: Never (evict as any pod, as upstream) or \
              RolloutRestart (a Deployment's pod its budget holds, or its only replica, is \
              replaced by a rollout restart of the Deployment before it goes). Never by default"
    )]
    pub surge: Option<Surge>,
}

/// A list of drain rules: an alias, so clap reads `--drain-rules`' one value as the whole list
/// (it reads an `Option<Vec<_>>` field as a repeated flag).
pub type DrainRules = Vec<DrainRule>;

/// A knob's names and the values it accepts, as a refusal says them
/// (`crate::policy::InvalidKnob`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Knob {
    /// Its JSON name in `spec` (`drainTimeout`).
    pub name: &'static str,
    /// Its annotation, `nodemaintenance.medik8s.io/<name>`.
    pub annotation: &'static str,
    /// Its field, `spec.<name>`.
    pub field: &'static str,
    /// The values it accepts.
    pub accepted: &'static str,
}

/// The [`Knob`] of the [`DrainKnobs`] field whose JSON name is `$name`.
macro_rules! knob {
    ($name:literal, $accepted:expr) => {
        Knob {
            name: $name,
            annotation: concat!("nodemaintenance.medik8s.io/", $name),
            field: concat!("spec.", $name),
            accepted: $accepted,
        }
    };
}

impl DrainKnobs {
    /// `paused`: `"true"` or `"false"`.
    pub const PAUSED: Knob = knob!("paused", "true, false");
    /// `drainTimeout`: a duration ([`parse_duration`]).
    pub const DRAIN_TIMEOUT: Knob = knob!("drainTimeout", DURATION_ACCEPTED);
    /// `onTimeout`: one of [`OnTimeout`]'s variants, spelled as named.
    pub const ON_TIMEOUT: Knob = knob!("onTimeout", "Wait, Fail, SkipStuck, ForceDelete, Abort");
    /// `drainRules`: the rules, as a JSON list in the annotation ([`parse_rules`]).
    pub const DRAIN_RULES: Knob = knob!(
        "drainRules",
        "a JSON list of rules {podSelector, namespaceSelector, behavior: Drain, Skip or \
         WaitCompleted, order}, each with at least one selector of at least one matchLabels or \
         matchExpressions entry"
    );
    /// `stage`: one of [`Stage`]'s variants, spelled as named.
    pub const STAGE: Knob = knob!("stage", "Preflight, Idle, Cordon, Drain");
    /// `nodeConditions`: `"true"` or `"false"`.
    pub const NODE_CONDITIONS: Knob = knob!("nodeConditions", "true, false");
    /// `startAt`: an RFC 3339 time.
    pub const START_AT: Knob = knob!("startAt", "an RFC 3339 time such as 2030-01-02T03:00:00Z");
    /// `expireAfter`: a duration ([`parse_duration`]).
    pub const EXPIRE_AFTER: Knob = knob!("expireAfter", DURATION_ACCEPTED);
    /// `waitForVolumeDetach`: `"true"` (the bound [`DEFAULT_DETACH_BOUND`]), `"false"` or a
    /// duration bound ([`parse_wait_for_volume_detach`]).
    pub const WAIT_FOR_VOLUME_DETACH: Knob = knob!(
        "waitForVolumeDetach",
        "true, false, or a positive duration bound such as 5m"
    );
    /// `daemonSets`: one of [`DaemonSets`]'s variants, spelled as named.
    pub const DAEMON_SETS: Knob = knob!("daemonSets", "Ignore, EvictLast");
    /// `surge`: one of [`Surge`]'s variants, spelled as named.
    pub const SURGE: Knob = knob!("surge", "Never, RolloutRestart");
    /// Every knob, in the order of the fields.
    pub const ALL: [Knob; 11] = [
        Self::PAUSED,
        Self::DRAIN_TIMEOUT,
        Self::ON_TIMEOUT,
        Self::DRAIN_RULES,
        Self::STAGE,
        Self::NODE_CONDITIONS,
        Self::START_AT,
        Self::EXPIRE_AFTER,
        Self::WAIT_FOR_VOLUME_DETACH,
        Self::DAEMON_SETS,
        Self::SURGE,
    ];
}

/// Annotation of the `paused` knob.
pub const PAUSED_ANNOTATION: &str = DrainKnobs::PAUSED.annotation;
/// Annotation of the `drainTimeout` knob.
pub const DRAIN_TIMEOUT_ANNOTATION: &str = DrainKnobs::DRAIN_TIMEOUT.annotation;
/// Annotation of the `onTimeout` knob.
pub const ON_TIMEOUT_ANNOTATION: &str = DrainKnobs::ON_TIMEOUT.annotation;
/// Annotation of the `drainRules` knob.
pub const DRAIN_RULES_ANNOTATION: &str = DrainKnobs::DRAIN_RULES.annotation;
/// Annotation of the `stage` knob.
pub const STAGE_ANNOTATION: &str = DrainKnobs::STAGE.annotation;
/// Annotation of the `waitForVolumeDetach` knob.
pub const WAIT_FOR_VOLUME_DETACH_ANNOTATION: &str = DrainKnobs::WAIT_FOR_VOLUME_DETACH.annotation;

/// Annotation of the `daemonSets` knob.
pub const DAEMON_SETS_ANNOTATION: &str = DrainKnobs::DAEMON_SETS.annotation;
/// Annotation of the `surge` knob.
pub const SURGE_ANNOTATION: &str = DrainKnobs::SURGE.annotation;

/// The knob annotations, as a refusal of an unknown one lists them.
pub static KNOBS_ACCEPTED: LazyLock<String> = LazyLock::new(|| {
    let names: Vec<&str> = DrainKnobs::ALL.iter().map(|k| k.name).collect();
    let (last, rest) = names.split_last().unwrap_or((&"", &[]));
    format!("{PREFIX} followed by {} or {last}", rest.join(", "))
});

/// What a knob's duration accepts ([`parse_duration`]).
pub const DURATION_ACCEPTED: &str = "a positive duration such as 90s, 15m or 1h30m";

/// The bound of `waitForVolumeDetach: "true"`: Cluster API's drain waits of the same kind are
/// minutes; five is long enough for a CSI driver's detach and short enough to be noticed.
pub const DEFAULT_DETACH_BOUND: Duration = Duration::from_secs(300);

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

/// Parses a `waitForVolumeDetach` value: `true` (the bound [`DEFAULT_DETACH_BOUND`]), `false`
/// (no wait, whatever the flag says) or a bound as [`parse_duration`] reads it.
///
/// # Errors
/// The accepted forms, when `s` is none of them.
pub fn parse_wait_for_volume_detach(s: &str) -> Result<Option<Duration>, &'static str> {
    match s.trim() {
        "true" => Ok(Some(DEFAULT_DETACH_BOUND)),
        "false" => Ok(None),
        other => parse_duration(other)
            .map(Some)
            .map_err(|_| DrainKnobs::WAIT_FOR_VOLUME_DETACH.accepted),
    }
}

// The flags' readers: the knob's own, keeping the text as the spec holds it, with clap's wording.

fn duration_flag(s: &str) -> Result<String, String> {
    parse_duration(s)
        .map(|_| s.to_owned())
        .map_err(|accepted| format!("expected {accepted}"))
}

fn wait_flag(s: &str) -> Result<String, String> {
    parse_wait_for_volume_detach(s)
        .map(|_| s.to_owned())
        .map_err(|accepted| format!("expected {accepted}"))
}

fn rules_flag(s: &str) -> Result<DrainRules, String> {
    parse_rules(s, "--drain-rules")
}

/// How far the maintenance goes: Preflight (only status.blockers, from dry-run evictions),
/// Idle (nothing on the node is touched, no lease), Cordon (lease, cordon, taints and label; no
/// eviction) or Drain (the default). Moving back restores the node and keeps the object. The
/// annotation nodemaintenance.medik8s.io/stage wins over spec.stage, which wins over --stage.
// KEP-4212's stages (docs/design.md §1, "Stages"). Spelled as the variant in the CRD, the
// annotation and the flag.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema, clap::ValueEnum,
)]
#[value(rename_all = "verbatim")]
pub enum Stage {
    /// Only `status.blockers`, from server-side dry-run evictions; nothing else is touched.
    Preflight,
    /// Nothing on the node is touched and no lease is held.
    Idle,
    /// Lease, cordon, both taints and the exclude-from-remediation label; no eviction.
    Cordon,
    /// Cordon and drain (upstream's behaviour).
    #[default]
    Drain,
}

impl std::fmt::Display for Stage {
    /// The value as the CRD, the annotation and the flag spell it: the variant's name.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self, f)
    }
}

/// What the drain does with the node's DaemonSet pods: Ignore (they stay, as upstream) or
/// EvictLast (evicted once every other pod has left the node, before the system-critical pods
/// and the operator's own; one that comes back because it tolerates the maintenance taints is
/// kept and named). The annotation nodemaintenance.medik8s.io/daemonSets wins over
/// spec.daemonSets, which wins over --daemon-sets.
// `docs/drain-contract.md` "DaemonSet pods last". Spelled as the variant in the CRD, the
// annotation and the flag.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema, clap::ValueEnum,
)]
#[value(rename_all = "verbatim")]
pub enum DaemonSets {
    /// Left on the node (upstream's behaviour, kubectl's `--ignore-daemonsets`).
    #[default]
    Ignore,
    /// Evicted once every other pod has left the node, before the system-critical pods and the
    /// operator's own pod; one that comes back (it tolerates the maintenance taints) is kept.
    EvictLast,
}

/// What happens when a drain's deadline (`drainTimeout`) passes (`docs/drain-contract.md` §10).
// Spelled as the variant in the CRD, the annotation and the flag.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema, clap::ValueEnum,
)]
#[value(rename_all = "verbatim")]
pub enum OnTimeout {
    /// Keep draining (upstream's behaviour), with a Warning event and a condition reason.
    #[default]
    Wait,
    /// Phase Failed; the node stays cordoned and tainted and lastError names the pods left.
    Fail,
    /// Stop waiting for pods whose deletion is overdue, and report them as skipped.
    SkipStuck,
    /// Delete each remaining evictable pod its own grace period ahead of the deadline, with that
    /// grace cut to the time left (needs pods delete).
    ForceDelete,
    /// Give the node back: restored as on delete (uncordoned unless cordoned before, taints,
    /// label and lease removed), nothing more evicted; phase Failed, reason DrainAborted.
    Abort,
}

impl OnTimeout {
    /// What follows the deadline, as the `DrainDeadlineExceeded` Warning event says it.
    pub fn consequence(self) -> &'static str {
        match self {
            Self::Wait => "the drain goes on (onTimeout Wait)",
            Self::Fail => "the maintenance fails; the node stays cordoned (onTimeout Fail)",
            Self::SkipStuck => {
                "pods whose deletion is overdue are no longer waited for (onTimeout SkipStuck)"
            }
            Self::ForceDelete => "the remaining pods are deleted (onTimeout ForceDelete)",
            Self::Abort => {
                "the drain is aborted: the node is restored as on delete and nothing more is \
                 evicted (onTimeout Abort)"
            }
        }
    }
}

impl std::fmt::Display for OnTimeout {
    /// The value as the CRD, the annotation and the flag spell it: the variant's name.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self, f)
    }
}

/// What the drain does with a pod of a Deployment that cannot lose it: Never (evict it, as
/// upstream) or RolloutRestart (restart the Deployment's rollout once and wait until it has
/// replaced the pod on another node) (`docs/drain-contract.md` §15).
// Spelled as the variant in the CRD, the annotation and the flag.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema, clap::ValueEnum,
)]
#[value(rename_all = "verbatim")]
pub enum Surge {
    /// Evict it as any pod (upstream's behaviour): held by its budget, or its only pod lost.
    #[default]
    Never,
    /// Restart the Deployment's rollout (`kubectl rollout restart`), once per drain, and
    /// wait until the Deployment has replaced the pod on another node.
    RolloutRestart,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_field_is_a_knob_named_by_its_json_name() {
        let every = DrainKnobs {
            paused: Some(true),
            drain_timeout: Some("1m".into()),
            on_timeout: Some(OnTimeout::Fail),
            drain_rules: Some(Vec::new()),
            stage: Some(Stage::Cordon),
            node_conditions: Some(true),
            start_at: Some("2030-01-02T03:00:00Z".into()),
            expire_after: Some("1m".into()),
            wait_for_volume_detach: Some("true".into()),
            daemon_sets: Some(DaemonSets::EvictLast),
            surge: Some(Surge::RolloutRestart),
        };
        let json = serde_json::to_value(&every).unwrap();
        let fields: Vec<&str> = json
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        let mut names: Vec<&str> = DrainKnobs::ALL.iter().map(|k| k.name).collect();
        names.sort_unstable();
        assert_eq!(fields, names, "a Knob for each field, by its JSON name");
        for knob in DrainKnobs::ALL {
            assert_eq!(knob.annotation, format!("{PREFIX}{}", knob.name));
            assert_eq!(knob.field, format!("spec.{}", knob.name));
        }
        assert_eq!(
            *KNOBS_ACCEPTED,
            "nodemaintenance.medik8s.io/ followed by paused, drainTimeout, onTimeout, drainRules, \
             stage, nodeConditions, startAt, expireAfter, waitForVolumeDetach, daemonSets or surge"
        );
        // Each value is spelled once, as its variant: serde (the CRD, the annotation), clap (the
        // flag) and `accepted` (the refusals) agree.
        fn spelled<T: clap::ValueEnum + Serialize>() -> Vec<String> {
            T::value_variants()
                .iter()
                .map(|v| {
                    let name = v.to_possible_value().unwrap().get_name().to_string();
                    assert_eq!(serde_json::to_value(v).unwrap(), name.as_str());
                    name
                })
                .collect()
        }
        let daemon_sets: Vec<String> = spelled::<DaemonSets>();
        assert_eq!(DrainKnobs::DAEMON_SETS.accepted, daemon_sets.join(", "));
        let on_timeout: Vec<String> = spelled::<OnTimeout>();
        assert_eq!(DrainKnobs::ON_TIMEOUT.accepted, on_timeout.join(", "));
        let stages: Vec<String> = spelled::<Stage>();
        assert_eq!(DrainKnobs::STAGE.accepted, stages.join(", "));
        let surges: Vec<String> = spelled::<Surge>();
        assert_eq!(DrainKnobs::SURGE.accepted, surges.join(", "));
    }

    /// The flags as clap reads them: each knob's text kept as the spec would hold it, checked by
    /// the knob's own reader.
    #[test]
    fn each_flag_is_read_with_its_knobs_reader() {
        use clap::Parser;
        #[derive(Parser)]
        struct Flags {
            #[command(flatten)]
            knobs: DrainKnobs,
        }
        let parse = |args: &[&str]| {
            Flags::try_parse_from(std::iter::once("manager").chain(args.iter().copied()))
                .map(|f| f.knobs)
        };
        let none = parse(&[]).unwrap();
        assert_eq!(
            none,
            DrainKnobs {
                paused: Some(false),
                on_timeout: Some(OnTimeout::Wait),
                stage: Some(Stage::Drain),
                node_conditions: Some(false),
                daemon_sets: Some(DaemonSets::Ignore),
                surge: Some(Surge::Never),
                ..DrainKnobs::default()
            },
            "upstream's behaviour"
        );
        let every = parse(&[
            "--drain-paused",
            "--drain-timeout=90s",
            "--on-timeout=Fail",
            r#"--drain-rules=[{"podSelector": {"matchLabels": {"app": "db"}}, "behavior": "Skip"}]"#,
            "--stage=Cordon",
            "--node-conditions=true",
            "--expire-after=12h",
            "--wait-for-volume-detach=false",
            "--daemon-sets=EvictLast",
            "--surge=RolloutRestart",
        ])
        .unwrap();
        assert_eq!(every.paused, Some(true));
        assert_eq!(every.drain_timeout.as_deref(), Some("90s"));
        assert_eq!(every.on_timeout, Some(OnTimeout::Fail));
        assert_eq!(
            every.drain_rules.map(|r| r[0].behavior),
            Some(DrainBehavior::Skip)
        );
        assert_eq!(every.stage, Some(Stage::Cordon));
        assert_eq!(every.node_conditions, Some(true));
        assert_eq!(every.expire_after.as_deref(), Some("12h"));
        assert_eq!(every.wait_for_volume_detach.as_deref(), Some("false"));
        assert_eq!(every.daemon_sets, Some(DaemonSets::EvictLast));
        assert_eq!(every.surge, Some(Surge::RolloutRestart));
        for (args, says) in [
            (
                &["--drain-timeout=soon"][..],
                "expected a positive duration such as 90s",
            ),
            (
                &["--expire-after=0s"],
                "expected a positive duration such as 90s",
            ),
            (
                &["--wait-for-volume-detach=maybe"],
                "expected true, false, or a positive",
            ),
            (
                &[r#"--drain-rules=[{"behavior": "Skip"}]"#],
                "--drain-rules[0]: the rule has neither",
            ),
            (&["--daemon-sets=Evict"], "invalid value 'Evict'"),
            (
                &["--start-at=2030-01-02T03:00:00Z"],
                "unexpected argument '--start-at'",
            ),
        ] {
            let err = parse(args).map(|_| ()).unwrap_err().to_string();
            assert!(err.contains(says), "{args:?}: {err}");
        }
    }

    #[test]
    fn a_wait_is_true_false_or_a_bound() {
        assert_eq!(
            parse_wait_for_volume_detach("true"),
            Ok(Some(DEFAULT_DETACH_BOUND))
        );
        assert_eq!(parse_wait_for_volume_detach(" false "), Ok(None));
        assert_eq!(
            parse_wait_for_volume_detach("90s"),
            Ok(Some(Duration::from_secs(90)))
        );
        assert_eq!(
            parse_wait_for_volume_detach("yes"),
            Err(DrainKnobs::WAIT_FOR_VOLUME_DETACH.accepted)
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
}
