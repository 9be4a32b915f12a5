//! The lifecycle events of a NodeMaintenance in stage Preflight (issue 48): a preflight (e.g.
//! `kubectl nm preflight`'s temporary object) only asks dry-run evictions and never touches the
//! node, so its events say "preflight" and not upstream's `BeginMaintenance` /
//! `RemovedMaintenance`, which tooling and admins read as a node that went into maintenance.
//! Every other stage, Drain (upstream's only behaviour) included, keeps upstream's events
//! (docs/drain-contract.md §10, "Stages and events").

use crate::api::{NodeMaintenance, Stage};

use super::condition::{self, condition};
use super::status::event;

/// Normal, on the NodeMaintenance, after the finalizer was added to one in stage Preflight
/// (ours; upstream's [`event::BEGIN`] otherwise).
pub(crate) const BEGIN_PREFLIGHT: (&str, &str) = (
    "BeginPreflight",
    "Begin a preflight: dry-run evictions only; the node is not cordoned, tainted or drained and no lease is held",
);

/// Normal, on the NodeMaintenance, after the finalizer was removed from one in stage Preflight
/// that never cordoned the node (ours; upstream's [`event::REMOVED`] otherwise).
pub(crate) const REMOVED_PREFLIGHT: (&str, &str) = (
    "RemovedPreflight",
    "Removed a preflight; the node was not touched",
);

fn stage(nm: &NodeMaintenance, defaults: &crate::policy::Defaults) -> Stage {
    crate::policy::resolve(nm, defaults).0.stage
}

/// The event of the pass that adds the finalizer: [`BEGIN_PREFLIGHT`] when `nm`'s stage (its
/// annotation, spec or the operator's default, as [`crate::policy::resolve`] reads it) is
/// Preflight, else upstream's `BeginMaintenance`.
pub(crate) fn begin(
    nm: &NodeMaintenance,
    defaults: &crate::policy::Defaults,
) -> (&'static str, &'static str) {
    if stage(nm, defaults) == Stage::Preflight {
        BEGIN_PREFLIGHT
    } else {
        event::BEGIN
    }
}

/// The event of the pass that removes the finalizer: [`REMOVED_PREFLIGHT`] when `nm` is in
/// stage Preflight and its status has no `Cordoned` condition (written once a stage cordoned the
/// node, kept False `Released` when a later stage gave it up), else upstream's
/// `RemovedMaintenance`.
pub(crate) fn removed(
    nm: &NodeMaintenance,
    defaults: &crate::policy::Defaults,
) -> (&'static str, &'static str) {
    let cordoned = nm
        .status
        .as_ref()
        .is_some_and(|s| condition(s, condition::CORDONED).is_some());
    if stage(nm, defaults) == Stage::Preflight && !cordoned {
        REMOVED_PREFLIGHT
    } else {
        event::REMOVED
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Defaults;

    fn nm(stage: Option<&str>, cordoned: Option<&str>) -> NodeMaintenance {
        let mut v = serde_json::json!({
            "apiVersion": "nodemaintenance.medik8s.io/v1beta1",
            "kind": "NodeMaintenance",
            "metadata": {"name": "m"},
            "spec": {"nodeName": "n1", "reason": "r"},
        });
        if let Some(stage) = stage {
            v["spec"]["stage"] = stage.into();
        }
        if let Some(reason) = cordoned {
            v["status"] = serde_json::json!({"conditions": [{
                "type": "Cordoned", "status": "False", "reason": reason, "message": "",
                "lastTransitionTime": "2026-01-01T00:00:00Z"}]});
        }
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn a_preflight_begins_and_ends_as_a_preflight() {
        let d = Defaults::default();
        assert_eq!(begin(&nm(Some("Preflight"), None), &d), BEGIN_PREFLIGHT);
        assert_eq!(removed(&nm(Some("Preflight"), None), &d), REMOVED_PREFLIGHT);
    }

    #[test]
    fn every_other_stage_keeps_upstreams_events() {
        let d = Defaults::default();
        for stage in [None, Some("Drain"), Some("Cordon"), Some("Idle")] {
            assert_eq!(begin(&nm(stage, None), &d), event::BEGIN, "{stage:?}");
            assert_eq!(removed(&nm(stage, None), &d), event::REMOVED, "{stage:?}");
        }
    }

    #[test]
    fn a_preflight_that_once_cordoned_the_node_is_removed_as_a_maintenance() {
        let d = Defaults::default();
        let was_cordoned = nm(Some("Preflight"), Some("Released"));
        assert_eq!(removed(&was_cordoned, &d), event::REMOVED);
    }
}
