//! The Node lifecycle conditions (KEP-5683's types: `MaintenancePlanned`,
//! `MaintenanceInProgress`, `DrainInProgress`, `Drained`) a maintenance writes on its Node's
//! status, for other controllers to read (docs/design.md §3, "Node lifecycle conditions").
//!
//! Pure: the patch is a strategic-merge patch of `status.conditions`, which merges by `type`,
//! sent to `nodes/status` under a field manager of its own ([`FIELD_MANAGER`]), so the
//! kubelet's (kwok's) conditions are never touched. Only the conditions that change are sent: a
//! pass that finds them as wanted writes nothing.

use k8s_openapi::api::core::v1::{Node, NodeCondition};
use serde_json::{Value, json};

/// The field manager of the condition writes.
pub(crate) const FIELD_MANAGER: &str = "node-maintenance-operator-conditions";
/// A maintenance is planned for the node (it exists, in any stage).
pub(crate) const MAINTENANCE_PLANNED: &str = "MaintenancePlanned";
/// The node is in maintenance: cordoned, tainted, leased.
pub(crate) const MAINTENANCE_IN_PROGRESS: &str = "MaintenanceInProgress";
/// The node's pods are being evicted.
pub(crate) const DRAIN_IN_PROGRESS: &str = "DrainInProgress";
/// The node's evictable pods are gone.
pub(crate) const DRAINED: &str = "Drained";
/// The four types, in the order they are written.
pub(crate) const TYPES: [&str; 4] = [
    MAINTENANCE_PLANNED,
    MAINTENANCE_IN_PROGRESS,
    DRAIN_IN_PROGRESS,
    DRAINED,
];
/// The reasons, KEP-5683's vocabulary (docs/design.md §3, "Node lifecycle conditions", has the
/// table of which stage gives which).
pub(crate) mod reason {
    /// `MaintenancePlanned` True (and `MaintenanceInProgress` True once the node is held): an
    /// admin asked for it with a NodeMaintenance.
    pub(crate) const ADMIN_REQUESTED: &str = "AdminRequested";
    /// `MaintenancePlanned` True while the maintenance waits for its `startAt` window.
    pub(crate) const MAINTENANCE_WINDOW: &str = "MaintenanceWindow";
    /// `MaintenanceInProgress` False: the stage does not hold the node (Preflight, Idle, a
    /// window not open, a drain slot not yet given).
    pub(crate) const MAINTENANCE_NOT_STARTED: &str = "MaintenanceNotStarted";
    /// `DrainInProgress` True, and `Drained` False, from the pass that starts a drain (stage
    /// Drain, the node held) until it succeeds: a `Drained` left True by an earlier drain is
    /// reset before this drain's first eviction (the kubectl drain proposal).
    pub(crate) const DRAIN_STARTED: &str = "DrainStarted";
    /// `DrainInProgress` False and `Drained` False: no drain runs (a stage short of Drain, or
    /// waiting for a window or a slot).
    pub(crate) const DRAIN_NOT_STARTED: &str = "DrainNotStarted";
    /// `Drained` True and `DrainInProgress` False once the drain succeeded.
    pub(crate) const DRAIN_COMPLETED: &str = "DrainCompleted";
    /// Every condition False once the maintenance ended (deleted, its record swept, or the knob
    /// turned off).
    pub(crate) const MAINTENANCE_ENDED: &str = "MaintenanceEnded";
}
pub(crate) use reason::MAINTENANCE_ENDED;
/// The admin's condition a graceful node shutdown is announced by (k8s.io/api core/v1
/// `NodeGracefulNodeShutdownInProgress`, "The admin is responsible for setting and clearing this
/// condition", or the kubelet): read by the drain (`crate::drain::gate::node_shutdown`) and the Node watch, never written.
pub(crate) const GRACEFUL_NODE_SHUTDOWN_IN_PROGRESS: &str = "GracefulNodeShutdownInProgress";

/// Whether `conditions` (`(type, status)` of a Node's) say the node is going down:
/// `GracefulNodeShutdownInProgress` is `True` (`False`, `Unknown` or absent: it is not).
pub(crate) fn shutting_down_in<'a>(
    mut conditions: impl Iterator<Item = (&'a str, &'a str)>,
) -> bool {
    conditions.any(|(t, s)| t == GRACEFUL_NODE_SHUTDOWN_IN_PROGRESS && s == "True")
}

/// What a maintenance says of its node: each condition's value and reason (`None`: it ended,
/// all False with [`MAINTENANCE_ENDED`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Lifecycle {
    /// `MaintenancePlanned`.
    pub planned: (bool, &'static str),
    /// `MaintenanceInProgress`.
    pub in_progress: (bool, &'static str),
    /// `DrainInProgress`.
    pub draining: (bool, &'static str),
    /// `Drained`.
    pub drained: (bool, &'static str),
}

impl Lifecycle {
    /// The lifecycle of a maintenance in `stage` (`Preflight`, `Idle`, `Cordon`, `Drain`; the
    /// stage a pass runs, Idle while a window is not open): `held` whether it holds the node,
    /// `succeeded` whether its drain is done, `window` whether it waits for its `startAt`.
    pub(crate) fn of(stage: crate::api::Stage, held: bool, succeeded: bool, window: bool) -> Self {
        use reason::*;
        let draining = stage == crate::api::Stage::Drain && held;
        Lifecycle {
            planned: (
                true,
                if window {
                    MAINTENANCE_WINDOW
                } else {
                    ADMIN_REQUESTED
                },
            ),
            in_progress: if held {
                (true, ADMIN_REQUESTED)
            } else {
                (false, MAINTENANCE_NOT_STARTED)
            },
            draining: match (draining, succeeded) {
                (true, false) => (true, DRAIN_STARTED),
                (true, true) => (false, DRAIN_COMPLETED),
                _ => (false, DRAIN_NOT_STARTED),
            },
            drained: match (draining, succeeded) {
                (true, false) => (false, DRAIN_STARTED),
                (true, true) => (true, DRAIN_COMPLETED),
                _ => (false, DRAIN_NOT_STARTED),
            },
        }
    }

    fn each(&self) -> [(&'static str, (bool, &'static str)); 4] {
        [
            (MAINTENANCE_PLANNED, self.planned),
            (MAINTENANCE_IN_PROGRESS, self.in_progress),
            (DRAIN_IN_PROGRESS, self.draining),
            (DRAINED, self.drained),
        ]
    }
}

fn condition<'a>(node: &'a Node, type_: &str) -> Option<&'a NodeCondition> {
    node.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
}

/// The message of a condition written for NodeMaintenance `nm`.
fn message(nm: &str) -> String {
    format!("NodeMaintenance {nm}")
}

/// The NodeMaintenance named by the lifecycle conditions on `node` (their message,
/// `NodeMaintenance <name>`), when any is there.
pub(crate) fn named(node: &Node) -> Option<&str> {
    TYPES.iter().find_map(|t| {
        condition(node, t)?
            .message
            .as_deref()?
            .strip_prefix("NodeMaintenance ")
    })
}

/// Whether `node` carries a lifecycle condition that is True (a maintenance not ended).
pub(crate) fn any_true(node: &Node) -> bool {
    TYPES
        .iter()
        .any(|t| condition(node, t).is_some_and(|c| c.status == "True"))
}

/// The pass's write of the conditions on `node` for NodeMaintenance `nm`: [`patch`] to `wanted`
/// (`None`: the knob is off), except that a knob turned off ends only what this maintenance
/// wrote (their message names it) and a node without them needs nothing.
pub(crate) fn pass_patch(
    node: &Node,
    nm: &str,
    wanted: Option<Lifecycle>,
    now: jiff::Timestamp,
) -> Option<Value> {
    (wanted.is_some() || named(node) == Some(nm))
        .then(|| patch(node, nm, wanted, now))
        .flatten()
}

/// The strategic-merge patch of `node`'s `status.conditions` that makes them say `wanted` for
/// NodeMaintenance `nm` (`None`: ended), at `now`; `None` when they say it already.
/// `lastTransitionTime` moves only when a condition's status does.
pub(crate) fn patch(
    node: &Node,
    nm: &str,
    wanted: Option<Lifecycle>,
    now: jiff::Timestamp,
) -> Option<Value> {
    let ended = (false, MAINTENANCE_ENDED);
    let each = wanted.map_or([ended; 4].map(|v| ("", v)), |l| l.each());
    let message = message(nm);
    let now = crate::server_time::now_time(now);
    let changed: Vec<Value> = TYPES
        .iter()
        .zip(each)
        .filter_map(|(type_, (_, (value, reason)))| {
            let status = if value { "True" } else { "False" };
            let old = condition(node, type_);
            if old.is_none() && wanted.is_none() {
                return None;
            }
            let same = |c: &&NodeCondition| {
                c.status == status
                    && c.reason.as_deref() == Some(reason)
                    && c.message.as_deref() == Some(message.as_str())
            };
            if old.filter(same).is_some() {
                return None;
            }
            let transition = match old {
                Some(c) if c.status == status => c.last_transition_time.clone(),
                _ => Some(now.clone()),
            };
            Some(json!({
                "type": type_,
                "status": status,
                "reason": reason,
                "message": message,
                "lastHeartbeatTime": now,
                "lastTransitionTime": transition,
            }))
        })
        .collect();
    (!changed.is_empty()).then(|| json!({"status": {"conditions": changed}}))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::Stage;

    fn t(s: i64) -> jiff::Timestamp {
        jiff::Timestamp::from_second(1_800_000_000 + s).unwrap()
    }

    /// `node` with `patch` applied as the API server merges it: by type.
    fn applied(node: &Node, patch: &Value) -> Node {
        let mut n = node.clone();
        let conditions = n
            .status
            .get_or_insert_with(Default::default)
            .conditions
            .get_or_insert_with(Vec::new);
        for c in patch["status"]["conditions"].as_array().unwrap() {
            let c: NodeCondition = serde_json::from_value(c.clone()).unwrap();
            match conditions.iter_mut().find(|o| o.type_ == c.type_) {
                Some(o) => *o = c,
                None => conditions.push(c),
            }
        }
        n
    }

    fn kubelets() -> Node {
        serde_json::from_value(json!({
            "metadata": {"name": "n1"},
            "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]}
        }))
        .unwrap()
    }

    fn says(node: &Node) -> Vec<(String, String, String)> {
        TYPES
            .iter()
            .filter_map(|t| condition(node, t))
            .map(|c| {
                (
                    c.type_.clone(),
                    c.status.clone(),
                    c.reason.clone().unwrap_or_default(),
                )
            })
            .collect()
    }

    /// `(type, status, reason)` of each condition `patch` sends.
    fn sent(patch: &Value) -> Vec<(String, String, String)> {
        patch["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                let f = |k: &str| c[k].as_str().unwrap_or_default().to_string();
                (f("type"), f("status"), f("reason"))
            })
            .collect()
    }

    #[test]
    fn the_conditions_follow_the_lifecycle_and_end_false_touching_only_their_own() {
        use reason::*;
        let node = kubelets();
        let idle = Lifecycle::of(Stage::Idle, false, false, false);
        let p = patch(&node, "nm1", Some(idle), t(0)).unwrap();
        let node = applied(&node, &p);
        assert_eq!(named(&node), Some("nm1"));
        assert!(any_true(&node));
        let reasons = |node: &Node| {
            says(node)
                .iter()
                .map(|(t, s, r)| format!("{t}={s}:{r}"))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            reasons(&node),
            [
                "MaintenancePlanned=True:AdminRequested",
                "MaintenanceInProgress=False:MaintenanceNotStarted",
                "DrainInProgress=False:DrainNotStarted",
                "Drained=False:DrainNotStarted"
            ]
        );
        // Written only on transitions: the same lifecycle again sends nothing.
        assert_eq!(patch(&node, "nm1", Some(idle), t(5)), None);
        // Waiting for its window: planned, for the window.
        let window = Lifecycle::of(Stage::Idle, false, false, true);
        assert_eq!(window.planned, (true, MAINTENANCE_WINDOW));
        let draining = Lifecycle::of(Stage::Drain, true, false, false);
        let node = applied(&node, &patch(&node, "nm1", Some(draining), t(10)).unwrap());
        assert_eq!(
            reasons(&node),
            [
                "MaintenancePlanned=True:AdminRequested",
                "MaintenanceInProgress=True:AdminRequested",
                "DrainInProgress=True:DrainStarted",
                "Drained=False:DrainStarted"
            ]
        );
        let done = Lifecycle::of(Stage::Drain, true, true, false);
        let p = patch(&node, "nm1", Some(done), t(20)).unwrap();
        // Planned and InProgress unchanged: only the drain's two are sent.
        assert_eq!(p["status"]["conditions"].as_array().unwrap().len(), 2);
        let node = applied(&node, &p);
        assert_eq!(
            reasons(&node),
            [
                "MaintenancePlanned=True:AdminRequested",
                "MaintenanceInProgress=True:AdminRequested",
                "DrainInProgress=False:DrainCompleted",
                "Drained=True:DrainCompleted"
            ]
        );
        let node = applied(&node, &patch(&node, "nm1", None, t(30)).unwrap());
        assert!(!any_true(&node));
        assert!(
            says(&node)
                .iter()
                .all(|(_, s, r)| s == "False" && r == MAINTENANCE_ENDED)
        );
        assert_eq!(patch(&node, "nm1", None, t(40)), None);
        // The kubelet's condition is never in a patch.
        let ready = condition(&node, "Ready").unwrap();
        assert_eq!(ready.reason.as_deref(), Some("KubeletReady"));
    }

    /// A `Drained=True` left by an earlier drain (ours moved Drain → Idle → Drain, or another
    /// tool's) is False from the pass that starts the new drain, and True again at its success.
    #[test]
    fn a_drain_that_starts_resets_drained_until_it_succeeds() {
        let mut node = kubelets();
        node.status
            .as_mut()
            .unwrap()
            .conditions
            .as_mut()
            .unwrap()
            .push(NodeCondition {
                type_: DRAINED.into(),
                status: "True".into(),
                reason: Some("DrainCompleted".into()),
                message: Some("another tool".into()),
                ..NodeCondition::default()
            });
        let starts = Lifecycle::of(Stage::Drain, true, false, false);
        let p = patch(&node, "nm1", Some(starts), t(0)).unwrap();
        assert!(
            sent(&p).contains(&(
                "Drained".into(),
                "False".into(),
                reason::DRAIN_STARTED.into()
            )),
            "{p}"
        );
        // The status moved: so did lastTransitionTime.
        let drained = p["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == DRAINED)
            .unwrap();
        assert_eq!(drained["lastTransitionTime"], json!(t(0).to_string()));
        let node = applied(&node, &p);
        let done = Lifecycle::of(Stage::Drain, true, true, false);
        let node = applied(&node, &patch(&node, "nm1", Some(done), t(10)).unwrap());
        assert_eq!(condition(&node, DRAINED).unwrap().status, "True");
        // Moved back to Idle, then on to Drain again: False at the start of the second drain.
        let idle = Lifecycle::of(Stage::Idle, false, false, false);
        let node = applied(&node, &patch(&node, "nm1", Some(idle), t(20)).unwrap());
        assert_eq!(condition(&node, DRAINED).unwrap().status, "False");
        let p = patch(&node, "nm1", Some(starts), t(30)).unwrap();
        assert!(sent(&p).contains(&(
            "Drained".into(),
            "False".into(),
            reason::DRAIN_STARTED.into()
        )));
    }

    /// `GracefulNodeShutdownInProgress` is the admin's (or the kubelet's): no patch, in any
    /// stage, window, slot or end, ever names it, even on a node that carries it.
    #[test]
    fn no_patch_ever_names_graceful_node_shutdown_in_progress() {
        let mut node = kubelets();
        node.status
            .as_mut()
            .unwrap()
            .conditions
            .as_mut()
            .unwrap()
            .push(NodeCondition {
                type_: GRACEFUL_NODE_SHUTDOWN_IN_PROGRESS.into(),
                status: "True".into(),
                ..NodeCondition::default()
            });
        let mut wanted: Vec<Option<Lifecycle>> = vec![None];
        for stage in [Stage::Preflight, Stage::Idle, Stage::Cordon, Stage::Drain] {
            for held in [false, true] {
                for succeeded in [false, true] {
                    for window in [false, true] {
                        wanted.push(Some(Lifecycle::of(stage, held, succeeded, window)));
                    }
                }
            }
        }
        let mut patches = 0;
        for from in &wanted {
            let start = from
                .and_then(|l| patch(&node, "nm1", Some(l), t(0)))
                .map_or(node.clone(), |p| applied(&node, &p));
            for to in &wanted {
                if let Some(p) = patch(&start, "nm1", *to, t(1)) {
                    patches += 1;
                    assert!(
                        !p.to_string().contains(GRACEFUL_NODE_SHUTDOWN_IN_PROGRESS),
                        "{p}"
                    );
                    assert!(sent(&p).iter().all(|(t, _, _)| TYPES.contains(&t.as_str())));
                }
            }
        }
        assert!(patches > 100, "{patches}");
        assert!(!TYPES.contains(&GRACEFUL_NODE_SHUTDOWN_IN_PROGRESS));
    }

    #[test]
    fn a_node_without_them_needs_no_end() {
        assert_eq!(patch(&kubelets(), "nm1", None, t(0)), None);
        assert!(!any_true(&kubelets()));
        assert_eq!(named(&kubelets()), None);
    }
}
