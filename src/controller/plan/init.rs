//! The status initialised (upstream's `initMaintenanceStatus`) before the node is touched
//! ([`PassStep::StatusInit`](super::maintenance::PassStep)).

use super::condition::Stamp;
use super::pass::{Flow, Pass};
use super::status::{count, names, non_empty, touch};
use crate::api::{MaintenancePhase, NodeMaintenanceStatus};
use crate::drain::Survey;

impl Pass<'_> {
    pub(super) fn status_init(&mut self) -> Flow {
        if let Some(s) = self
            .m
            .survey
            .as_ref()
            .and_then(|survey| init_status(&self.status, survey, self.at()))
        {
            self.w.status(&s);
            self.status = s;
        }
        Flow::Continue(())
    }
}

/// Status initialisation (upstream's `initMaintenanceStatus`), only while `phase` is unset:
/// phase Running, `totalpods`, `evictionPods`, pending pods, lastUpdate, observedGeneration
/// (`drainStartTime` waits for the drain's start: stage Cordon and the queue come first).
/// `None` when the phase is already set (upstream test "Should not modify the CR after
/// initalization").
pub(crate) fn init_status(
    old: &NodeMaintenanceStatus,
    survey: &Survey,
    at: Stamp,
) -> Option<NodeMaintenanceStatus> {
    if old.phase.is_some() {
        return None;
    }
    let mut s = old.clone();
    s.phase = Some(MaintenancePhase::Running);
    s.total_pods = Some(count(survey.total_pods));
    s.eviction_pods = Some(count(survey.evictable.len()));
    let (refs, _) = crate::bounds::cap_pending(&survey.evictable);
    s.pending_pods = non_empty(names(&refs));
    s.pending_pods_refs = non_empty(refs);
    s.drain_progress = Some(0);
    touch(&mut s, at);
    Some(s)
}
