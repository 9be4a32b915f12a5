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
/// Reason of every condition once the maintenance ended (deleted, or its record swept).
pub(crate) const MAINTENANCE_ENDED: &str = "MaintenanceEnded";

/// What a maintenance says of its node: each condition's value and reason (`None`: it ended,
/// all False with [`MAINTENANCE_ENDED`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Lifecycle {
    /// `MaintenancePlanned`; the reason names the stage.
    pub planned: (bool, &'static str),
    /// `MaintenanceInProgress`.
    pub in_progress: (bool, &'static str),
    /// `DrainInProgress`.
    pub draining: (bool, &'static str),
    /// `Drained`.
    pub drained: (bool, &'static str),
}

impl Lifecycle {
    /// The lifecycle of a maintenance in `stage` (`Preflight`, `Idle`, `Cordon`, `Drain`):
    /// `held` whether it holds the node, `succeeded` whether its drain is done.
    pub(crate) fn of(stage: crate::api::Stage, held: bool, succeeded: bool) -> Self {
        use crate::api::Stage;
        let draining = stage == Stage::Drain && held;
        Lifecycle {
            planned: (true, stage_reason(stage)),
            in_progress: if held {
                (true, "NodeCordoned")
            } else {
                (false, "NotStarted")
            },
            draining: match (draining, succeeded) {
                (true, false) => (true, "Draining"),
                (true, true) => (false, "Drained"),
                _ => (false, "NotDraining"),
            },
            drained: if draining && succeeded {
                (true, "Drained")
            } else {
                (false, "NotDrained")
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

fn stage_reason(stage: crate::api::Stage) -> &'static str {
    use crate::api::Stage;
    match stage {
        Stage::Preflight => "Preflight",
        Stage::Idle => "Idle",
        Stage::Cordon => "Cordon",
        Stage::Drain => "Drain",
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

/// The NodeMaintenance named by the lifecycle conditions on `node` (their message), when any is
/// there.
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
    let now = crate::controller::plan::now_time(now);
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

    #[test]
    fn the_conditions_follow_the_lifecycle_and_end_false_touching_only_their_own() {
        let node = kubelets();
        let idle = Lifecycle::of(Stage::Idle, false, false);
        let p = patch(&node, "nm1", Some(idle), t(0)).unwrap();
        let node = applied(&node, &p);
        assert_eq!(named(&node), Some("nm1"));
        assert!(any_true(&node));
        // Written only on transitions: the same lifecycle again sends nothing.
        assert_eq!(patch(&node, "nm1", Some(idle), t(5)), None);
        let draining = Lifecycle::of(Stage::Drain, true, false);
        let node = applied(&node, &patch(&node, "nm1", Some(draining), t(10)).unwrap());
        let done = Lifecycle::of(Stage::Drain, true, true);
        let p = patch(&node, "nm1", Some(done), t(20)).unwrap();
        // Planned and InProgress unchanged: only the drain's two are sent.
        assert_eq!(p["status"]["conditions"].as_array().unwrap().len(), 2);
        let node = applied(&node, &p);
        assert_eq!(
            says(&node)
                .iter()
                .map(|(t, s, _)| format!("{t}={s}"))
                .collect::<Vec<_>>(),
            [
                "MaintenancePlanned=True",
                "MaintenanceInProgress=True",
                "DrainInProgress=False",
                "Drained=True"
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

    #[test]
    fn a_node_without_them_needs_no_end() {
        assert_eq!(patch(&kubelets(), "nm1", None, t(0)), None);
        assert!(!any_true(&kubelets()));
        assert_eq!(named(&kubelets()), None);
    }
}
