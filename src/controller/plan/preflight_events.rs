//! The lifecycle events of a NodeMaintenance in stage Preflight (issue 48): a preflight (e.g.
//! `kubectl nm preflight`'s temporary object) only asks dry-run evictions and never touches the
//! node, so its events say "preflight" and not upstream's `BeginMaintenance` /
//! `RemovedMaintenance`, which tooling and admins read as a node that went into maintenance.
//! Every other stage, Drain (upstream's only behaviour) included, keeps upstream's events
//! (docs/drain-contract.md §10, "Stages and events").

use super::status::PlannedEvent;
use super::write::Write;
use crate::api::{NodeMaintenanceStatus, Stage};

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

/// The finalizer's writes around a pass's own: `add` (the finalizer's patch), then the begin
/// event, first when the pass adds it; the removed event last when the pass is the deletion pass
/// (`cleanup`), which removes it. A NodeMaintenance whose `stage` (its annotation, spec or the
/// operator's default, as [`crate::policy::resolve`] reads it) is Preflight begins with
/// [`BEGIN_PREFLIGHT`], and is removed with [`REMOVED_PREFLIGHT`] while its `status` has no
/// `Cordoned` condition (written once a stage cordoned the node, kept False `Released` when a
/// later stage gave it up); every other one with upstream's events.
pub(super) fn writes(
    stage: Stage,
    status: Option<&NodeMaintenanceStatus>,
    add: Option<Write>,
    cleanup: bool,
) -> (Vec<Write>, Vec<Write>) {
    if add.is_none() && !cleanup {
        return (Vec::new(), Vec::new());
    }
    let preflight = stage == Stage::Preflight;
    let cordoned = status.is_some_and(|s| condition(s, condition::CORDONED).is_some());
    let event = |e| Write::Event {
        event: PlannedEvent::normal(e),
        node: None,
    };
    let begin = if preflight {
        BEGIN_PREFLIGHT
    } else {
        event::BEGIN
    };
    let removed = if preflight && !cordoned {
        REMOVED_PREFLIGHT
    } else {
        event::REMOVED
    };
    let first = add.map_or_else(Vec::new, |add| vec![add, event(begin)]);
    let last = if cleanup {
        vec![event(removed)]
    } else {
        Vec::new()
    };
    (first, last)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::NodeMaintenance;
    use crate::policy::Defaults;

    type Said = (&'static str, &'static str);

    /// The begin and removed events' reasons, as a pass that adds the finalizer and one that
    /// removes it write them.
    fn begin(nm: &NodeMaintenance, d: &Defaults) -> &'static str {
        let add = Write::LeaseNamespace;
        let stage = crate::policy::resolve(nm, d).0.stage;
        reason(writes(stage, nm.status.as_ref(), Some(add), false).0[1].clone())
    }
    fn removed(nm: &NodeMaintenance, d: &Defaults) -> &'static str {
        let stage = crate::policy::resolve(nm, d).0.stage;
        reason(writes(stage, nm.status.as_ref(), None, true).1[0].clone())
    }
    fn reason(w: Write) -> &'static str {
        match w {
            Write::Event { event, .. } => event.reason,
            w => panic!("not an event: {w:?}"),
        }
    }
    fn r(said: Said) -> &'static str {
        said.0
    }

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
        assert_eq!(begin(&nm(Some("Preflight"), None), &d), r(BEGIN_PREFLIGHT));
        assert_eq!(
            removed(&nm(Some("Preflight"), None), &d),
            r(REMOVED_PREFLIGHT)
        );
    }

    #[test]
    fn every_other_stage_keeps_upstreams_events() {
        let d = Defaults::default();
        for stage in [None, Some("Drain"), Some("Cordon"), Some("Idle")] {
            assert_eq!(begin(&nm(stage, None), &d), r(event::BEGIN), "{stage:?}");
            assert_eq!(
                removed(&nm(stage, None), &d),
                r(event::REMOVED),
                "{stage:?}"
            );
        }
    }

    #[test]
    fn a_preflight_that_once_cordoned_the_node_is_removed_as_a_maintenance() {
        let d = Defaults::default();
        let was_cordoned = nm(Some("Preflight"), Some("Released"));
        assert_eq!(removed(&was_cordoned, &d), r(event::REMOVED));
    }
}
