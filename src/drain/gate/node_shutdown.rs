//! A node going down stops its drain's new evictions (`docs/drain-contract.md` §4, "A node
//! going down"). A node whose `GracefulNodeShutdownInProgress` condition is True (k8s.io/api
//! core/v1 `NodeGracefulNodeShutdownInProgress`: set and cleared by the admin, or by the kubelet
//! as its graceful shutdown begins) is shutting its pods down itself; an eviction sent then
//! races the shutdown, so the drain sends nothing new until the condition is False or gone, then
//! resumes. The condition is read, never written, whatever the `nodeConditions` knob says.
//!
//! Two readers, one rule (`crate::node::conditions::shutting_down_in`): the pass, on the Node it read (no round starts,
//! and the NodeMaintenance's status says why: [`status`]), and the gate asked right before each
//! request is sent ([`super::may_send`]), on the node as the process's Node watch holds it
//! (`crate::watch::nodes`, whose fingerprint includes it, so its change starts the maintenance's
//! pass). Pure.

use k8s_openapi::api::core::v1::Node;

use crate::api::NodeMaintenanceStatus;
use crate::api::condition::{Stamp, set_condition};
use crate::node::conditions::{GRACEFUL_NODE_SHUTDOWN_IN_PROGRESS, shutting_down_in};

/// The NodeMaintenance's condition type: True while its node shuts down and the drain sends
/// nothing; False once it no longer does. Written once the node was first seen going down, so a
/// maintenance whose node never did keeps upstream's status.
pub(crate) const CONDITION: &str = "NodeShuttingDown";
/// Reason of [`CONDITION`] False: the node's condition is False or gone, evictions resume.
pub(crate) const NOT_SHUTTING_DOWN: &str = "NodeNotShuttingDown";

/// [`shutting_down_in`] of `node`'s conditions.
pub(crate) fn shutting_down(node: &Node) -> bool {
    let conditions = node.status.as_ref().and_then(|s| s.conditions.as_deref());
    shutting_down_in(
        conditions
            .unwrap_or_default()
            .iter()
            .map(|c| (c.type_.as_str(), c.status.as_str())),
    )
}

/// The status of a maintenance in stage Drain whose pass read `node`: [`CONDITION`] True
/// (reason `GracefulNodeShutdownInProgress`, the message naming the node) while it shuts down,
/// False once it no longer does after it did; and whether the pass must start no round. A
/// Succeeded maintenance sends nothing anyway and is left as it is: its node going down is the
/// reboot it was drained for.
pub(crate) fn status(
    status: &NodeMaintenanceStatus,
    node: Option<&Node>,
    at: Stamp,
) -> (NodeMaintenanceStatus, bool) {
    let mut s = status.clone();
    if s.phase == Some(crate::api::MaintenancePhase::Succeeded) {
        return (s, false);
    }
    let name = node.and_then(|n| n.metadata.name.as_deref()).unwrap_or("");
    let down = node.is_some_and(shutting_down);
    let was = s
        .conditions
        .iter()
        .flatten()
        .any(|c| c.type_ == CONDITION && c.status == "True");
    if down {
        let message = format!(
            "node {name} has {GRACEFUL_NODE_SHUTDOWN_IN_PROGRESS}=True: no new eviction or forced \
             deletion is sent until it is False or removed"
        );
        set_condition(
            &mut s,
            CONDITION,
            true,
            GRACEFUL_NODE_SHUTDOWN_IN_PROGRESS,
            message,
            at,
        );
    } else if was {
        let message = format!(
            "node {name} no longer has {GRACEFUL_NODE_SHUTDOWN_IN_PROGRESS}=True: evictions resume"
        );
        set_condition(&mut s, CONDITION, false, NOT_SHUTTING_DOWN, message, at);
    }
    (s, down)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(condition: Option<&str>) -> Node {
        let conditions: Vec<_> = condition
            .map(|s| json!({"type": "GracefulNodeShutdownInProgress", "status": s}))
            .into_iter()
            .chain([json!({"type": "Ready", "status": "True"})])
            .collect();
        serde_json::from_value(json!({
            "metadata": {"name": "n1"},
            "status": {"conditions": conditions}
        }))
        .unwrap()
    }

    fn t(s: i64) -> jiff::Timestamp {
        jiff::Timestamp::from_second(1_800_000_000 + s).unwrap()
    }

    /// A status written at `t(s)` of generation 1.
    fn at(s: i64) -> Stamp {
        Stamp {
            generation: Some(1),
            now: t(s),
        }
    }

    fn says(s: &NodeMaintenanceStatus) -> Option<(String, String, String)> {
        s.conditions
            .iter()
            .flatten()
            .find(|c| c.type_ == CONDITION)
            .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
    }

    #[test]
    fn only_a_true_graceful_shutdown_condition_is_a_node_going_down() {
        assert!(shutting_down(&node(Some("True"))));
        for other in [Some("False"), Some("Unknown"), Some("true"), None] {
            assert!(!shutting_down(&node(other)), "{other:?}");
        }
    }

    #[test]
    fn a_node_going_down_halts_the_round_and_says_so_then_resumes() {
        let none = NodeMaintenanceStatus::default();
        // A node that never went down: nothing written, the round runs.
        let (s, halted) = status(&none, Some(&node(None)), at(0));
        assert!(!halted);
        assert_eq!(s, none);
        // Going down: halted, and the status names the node and the condition.
        let (down, halted) = status(&none, Some(&node(Some("True"))), at(1));
        assert!(halted);
        let (value, reason, message) = says(&down).unwrap();
        assert_eq!(
            (value.as_str(), reason.as_str()),
            ("True", "GracefulNodeShutdownInProgress")
        );
        assert!(
            message.contains("node n1") && message.contains("GracefulNodeShutdownInProgress"),
            "{message}"
        );
        // The same again writes the same status (no write).
        assert_eq!(status(&down, Some(&node(Some("True"))), at(5)).0, down);
        // Cleared (False, or removed): the round runs again, and the status says so.
        for cleared in [Some("False"), None] {
            let (up, halted) = status(&down, Some(&node(cleared)), at(9));
            assert!(!halted);
            let (value, reason, _) = says(&up).unwrap();
            assert_eq!(
                (value.as_str(), reason.as_str()),
                ("False", NOT_SHUTTING_DOWN)
            );
        }
        // No node read: nothing to halt on (the pass ends before without one).
        assert!(!status(&none, None, at(0)).1);
        // Succeeded: nothing is sent anyway, the reboot it was drained for is not a halt.
        let succeeded = NodeMaintenanceStatus {
            phase: Some(crate::api::MaintenancePhase::Succeeded),
            ..NodeMaintenanceStatus::default()
        };
        assert_eq!(
            status(&succeeded, Some(&node(Some("True"))), at(0)),
            (succeeded, false)
        );
    }
}
