//! The drain's deadline in status ([`PassStep::Deadline`](super::maintenance::PassStep),
//! `docs/drain-contract.md` §10); past it with `onTimeout: Fail` the pass ends Failed, and the
//! words both Fail and Abort (`abort.rs`) use.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::condition::{self, Stamp, condition, set_condition};
use super::pass::{Flow, Pass};
use super::status::{
    PlannedEvent, REQUEUE_SUCCEEDED, event, fail_with, now_time, passed, pods_left, touch,
};
use super::timeline;
use crate::api::{MaintenancePhase, NodeMaintenanceStatus};

impl Pass<'_> {
    pub(super) fn deadline(&mut self) -> Flow {
        let p = &self.drain_policy;
        let (status, events) = deadline(
            &self.status,
            (p, self.overdue),
            p.deadline(p.deadline_start),
            self.memory.deadline_announced,
            self.at(),
        );
        self.status = status;
        // `drainStartTime` is this drain's start (the API server's clock), shown from the pass
        // that starts it, with or without a round (paused, held, the node going down).
        if let Some(start) = timeline::deadline_start(&self.timeline) {
            self.status.drain_start_time = Some(now_time(start));
        }
        self.w.events(events, self.node);
        self.memory.deadline_announced = Some(self.overdue.is_some());
        if self.failing {
            // Failed at the deadline: the node, lease and label are still enforced above; no
            // round.
            return Flow::Break(self.hold(REQUEUE_SUCCEEDED));
        }
        Flow::Continue(())
    }
}

/// The drain's deadline in status (`docs/drain-contract.md` §10), once `overdue` says it has
/// passed: a Warning event `DrainDeadlineExceeded` naming what `onTimeout` does, once (not when
/// `Drained` already has that reason or `announced`, this process's memory, says it was sent);
/// with `Fail` (and not Succeeded), phase Failed, `lastError` naming the pods the last round left
/// (its blockers, else `pendingPods`), `Drained=False` with reason `DrainDeadlineExceeded`, and
/// `FailedMaintenance` on the transition. `deadline` is when it passes (`None`: no deadline, or
/// the node not entered yet), shown with what happens then in `drainDeadline` and `onTimeout`.
pub(crate) fn deadline(
    status: &NodeMaintenanceStatus,
    (policy, overdue): (&crate::policy::DrainPolicy, Option<crate::api::OnTimeout>),
    deadline: Option<jiff::Timestamp>,
    announced: Option<bool>,
    at: Stamp,
) -> (NodeMaintenanceStatus, Vec<PlannedEvent>) {
    use crate::api::OnTimeout;
    let mut s = status.clone();
    let mut events = Vec::new();
    s.drain_deadline = deadline.map(Time);
    s.on_timeout = deadline.map(|_| policy.on_timeout);
    let (Some(on_timeout), Some(timeout)) = (overdue, policy.drain_timeout) else {
        return (s, events);
    };
    let passed = passed(Some(timeout), deadline);
    // The drain round may set the reason first (its pod list came after the deadline): only a
    // new process reads it, to not announce again what its predecessor did.
    let said = announced.unwrap_or_else(|| {
        condition(status, condition::DRAINED)
            .is_some_and(|c| c.reason == condition::DEADLINE_EXCEEDED)
    });
    if !said && status.phase != Some(MaintenancePhase::Succeeded) {
        let then = on_timeout.consequence();
        events.push(PlannedEvent::warning(
            event::DEADLINE_EXCEEDED,
            format!("{passed}; {then}"),
        ));
    }
    if on_timeout != OnTimeout::Fail || status.phase == Some(MaintenancePhase::Succeeded) {
        return (s, events);
    }
    let text = crate::bounds::truncate(
        &format!(
            "{passed}; onTimeout Fail; pods still on the node: {}",
            pods_left(status)
        ),
        crate::bounds::MAX_CONDITION_MESSAGE,
    );
    fail_with(status, &mut s, &mut events, text.clone());
    set_condition(
        &mut s,
        condition::DRAINED,
        false,
        condition::DEADLINE_EXCEEDED,
        text,
        at,
    );
    touch(&mut s, at);
    (s, events)
}
