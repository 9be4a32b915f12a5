//! The stage in status (the `stage` knob, [`PassStep::Stage`](super::maintenance::PassStep)).

use super::condition::{self, Stamp, condition, set_condition};
use super::pass::{Flow, Pass};
use super::status::{is_terminal, touch};
use crate::api::{MaintenancePhase, NodeMaintenanceStatus};

impl Pass<'_> {
    pub(super) fn stage(&mut self) -> Flow {
        let stage = self.drain_policy.stage;
        self.status = staged(&self.status, stage, self.window, self.at());
        Flow::Continue(())
    }
}

/// The stage in status: `Stage=True` with the stage as reason (`Preflight`, `Idle`, `Cordon`,
/// `Drain`), written once a stage other than Drain was first set. A stage short of Drain is
/// phase Running (the maintenance is in force, it just goes no further); one that had Succeeded
/// or Failed is Running again, so moving on to Drain drains again. A maintenance failed for
/// good ([`is_terminal`]) stays Failed.
///
/// `window`: the maintenance waits Idle for its window to open then (`startAt`): reason
/// [`condition::MAINTENANCE_WINDOW`].
pub(crate) fn staged(
    status: &NodeMaintenanceStatus,
    stage: crate::api::Stage,
    window: Option<jiff::Timestamp>,
    at: Stamp,
) -> NodeMaintenanceStatus {
    use crate::api::Stage;
    let mut s = status.clone();
    if stage == Stage::Drain && condition(status, condition::STAGE).is_none() {
        return s;
    }
    if let Some(opens) = window {
        let message = format!(
            "idle until the maintenance window opens at {opens} (startAt): nothing on the node \
             is touched and no lease is held"
        );
        let reason = condition::MAINTENANCE_WINDOW;
        set_condition(&mut s, condition::STAGE, true, reason, message, at);
        if !is_terminal(&s) {
            s.phase = Some(MaintenancePhase::Running);
        }
        if *status != s {
            touch(&mut s, at);
        }
        return s;
    }
    let message = match stage {
        Stage::Preflight => {
            "status.blockers lists what would keep pods on the node, from dry-run evictions; \
             nothing on the node is touched and no lease is held"
        }
        Stage::Idle => "nothing on the node is touched and no lease is held",
        Stage::Cordon => {
            "the node is cordoned, tainted and excluded from remediation and the lease held; no \
             eviction is sent"
        }
        Stage::Drain => "the node is cordoned, tainted and drained",
    };
    let reason = stage.to_string();
    set_condition(&mut s, condition::STAGE, true, &reason, message, at);
    if stage != Stage::Drain && !is_terminal(&s) {
        s.phase = Some(MaintenancePhase::Running);
    }
    if *status != s {
        touch(&mut s, at);
    }
    s
}
