//! What the `waitForVolumeDetach` wait (`crate::drain::volume_detach`, `docs/drain-contract.md`
//! §13) makes of the status a drain round with no pod left would write ([`super::drained`]):
//! phase Running with one blocker per attachment while it waits, Failed or Succeeded naming them
//! at the bound as `onTimeout` says. Pure.

use crate::api::{MaintenancePhase, NodeMaintenanceStatus, PodBlocker};
use crate::drain::volume_detach::{FAILED_PREFIX, Verdict, named};

use super::condition::{self, Stamp, set_condition};
use super::status::{
    PlannedEvent, REQUEUE_SUCCEEDED, REQUEUE_TERMINATING, Requeue, Step, event, fail_with, now_time,
};

/// `Drained` condition reason while the wait holds Succeeded back.
pub(crate) const VOLUMES_ATTACHED: &str = "VolumesAttached";
/// `Drained` condition reason, and Warning event, once the bound has passed.
pub(crate) const DETACH_TIMEOUT: &str = "VolumeDetachTimeout";

/// `step`, the status a round with nothing pending would write (phase Succeeded), under the
/// wait's `verdict`, from the status `old` the round started with; `bound` is when the wait's
/// bound passes (RFC 3339 in the messages). [`Verdict::Detached`] leaves it as it is. While it
/// waits: phase Running, the attachments as `blockers` (pending pods stay empty: no pod is
/// left), `Drained=False` with reason [`VOLUMES_ATTACHED`] (or [`DETACH_TIMEOUT`] once the bound
/// passed with `onTimeout: Wait`), no `SucceedMaintenance`, and the next pass in 1 s (how soon a
/// detach is seen). [`Verdict::Fail`]: phase Failed, `lastError` naming the attachments
/// ([`FAILED_PREFIX`]), `FailedMaintenance` on the transition. [`Verdict::Skip`]: Succeeded, the
/// `Drained` message and a Warning [`DETACH_TIMEOUT`] (on the transition) naming them.
pub(crate) fn hold(
    mut step: Step,
    old: &NodeMaintenanceStatus,
    verdict: Verdict,
    bound: Option<jiff::Timestamp>,
    at: Stamp,
) -> Step {
    let bound = bound.map_or_else(|| "unknown".to_string(), |b| b.to_string());
    let s = &mut step.status;
    // From the condition the round started with, so a wait that goes on keeps its
    // lastTransitionTime (and no write is made per pass for it).
    let drained = |s: &mut NodeMaintenanceStatus, reason: &str, message: String| {
        let mut was = old.conditions.iter().flatten();
        let was = was.find(|c| c.type_ == condition::DRAINED).cloned();
        let list = s.conditions.get_or_insert_with(Vec::new);
        list.retain(|c| c.type_ != condition::DRAINED);
        list.extend(was);
        let message = crate::bounds::truncate(&message, crate::bounds::MAX_CONDITION_MESSAGE);
        set_condition(s, condition::DRAINED, false, reason, message, at);
    };
    match verdict {
        Verdict::Detached => {}
        Verdict::Wait { blockers, overdue } => {
            s.phase = Some(MaintenancePhase::Running);
            s.blockers = Some(capped(&blockers));
            let (reason, when) = match overdue {
                false => (VOLUMES_ATTACHED, "until"),
                true => (DETACH_TIMEOUT, "past its bound (onTimeout Wait) of"),
            };
            let message = format!(
                "all pods are gone; waiting {when} {bound} for volumes to detach: {}",
                named(&blockers)
            );
            drained(s, reason, message);
            step.events.retain(|e| e.reason != event::SUCCEED.0);
            step.requeue = Requeue::Fixed(REQUEUE_TERMINATING);
        }
        Verdict::Fail(blockers) => {
            s.blockers = Some(capped(&blockers));
            let text = format!(
                "{FAILED_PREFIX} ({bound}); onTimeout Fail; VolumeAttachments still on the \
                 node: {}",
                named(&blockers)
            );
            let error = crate::bounds::truncate(&text, crate::bounds::MAX_CONDITION_MESSAGE);
            drained(s, DETACH_TIMEOUT, text);
            step.events.retain(|e| e.reason != event::SUCCEED.0);
            // Every failure's Warning `FailedMaintenance` (docs/compat.md §4).
            fail_with(old, s, &mut step.events, error);
            step.requeue = Requeue::After(REQUEUE_SUCCEEDED);
        }
        Verdict::Skip(blockers) => {
            let text = format!(
                "volumes still attached at the waitForVolumeDetach bound ({bound}), left as \
                 onTimeout says: {}",
                named(&blockers)
            );
            if let Some(c) = s
                .conditions
                .iter_mut()
                .flatten()
                .find(|c| c.type_ == condition::DRAINED)
            {
                c.message = crate::bounds::truncate(
                    &format!("{}; {text}", c.message),
                    crate::bounds::MAX_CONDITION_MESSAGE,
                );
            }
            if old.phase != Some(MaintenancePhase::Succeeded) {
                step.events.push(PlannedEvent::warning(
                    DETACH_TIMEOUT,
                    crate::bounds::truncate(&text, crate::bounds::MAX_EVENT_NOTE),
                ));
            }
        }
    }
    s.last_update = Some(now_time(at.now));
    step
}

/// Whether a maintenance in `status` stays Failed this pass (no round): its drain's deadline
/// passed (`overdue`) with `onTimeout: Fail` and it had not Succeeded, or the wait failed it and
/// still would ([`crate::drain::volume_detach::failed`]: `policy`'s bound passed at `now`, the
/// API server's time, with Fail).
pub(crate) fn failing(
    overdue: Option<crate::api::OnTimeout>,
    status: &NodeMaintenanceStatus,
    policy: &crate::policy::DrainPolicy,
    now: jiff::Timestamp,
) -> bool {
    let deadline = overdue == Some(crate::api::OnTimeout::Fail)
        && status.phase != Some(MaintenancePhase::Succeeded);
    deadline || crate::drain::volume_detach::failed(status, policy, now)
}

/// The blockers as the status lists them (at most `MAX_BLOCKERS`, messages cut).
fn capped(blockers: &[PodBlocker]) -> Vec<PodBlocker> {
    crate::drain::report::cap_blockers(blockers).0
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::api::OnTimeout;
    use crate::controller::plan::encode::needs_write;
    use crate::controller::plan::outcome::DrainRound;
    use crate::controller::plan::{Then, drained_plan};
    use crate::drain::DrainReport;
    use crate::drain::volume_detach::{Attachment, Observed};

    fn t(s: i64) -> jiff::Timestamp {
        jiff::Timestamp::from_second(1_800_000_000 + s).unwrap()
    }

    /// A round of node n1 begun with `status`, whose drain started at t(0), with the wait's
    /// bound `wait` seconds and `on_timeout`.
    fn round(status: &NodeMaintenanceStatus, wait: u64, on_timeout: OnTimeout) -> DrainRound {
        DrainRound {
            node: "n1".into(),
            status: status.clone(),
            stored: status.clone(),
            started: Some(t(0)),
            policy: crate::policy::DrainPolicy {
                wait_for_volume_detach: Some(Duration::from_secs(wait)),
                on_timeout,
                deadline_start: Some(t(0)),
                ..Default::default()
            },
            generation: Some(1),
            pruned: Vec::new(),
        }
    }

    /// Attachments `names` on n1, listed at `at`.
    fn attached(names: &[&str], at: jiff::Timestamp) -> Observed {
        Observed {
            attachments: names
                .iter()
                .map(|n| Attachment {
                    name: (*n).into(),
                    pv: Some(format!("pv-{n}")),
                    attacher: "csi.example.com".into(),
                    claim: None,
                })
                .collect(),
            at: Some(at),
            ..Observed::default()
        }
    }

    fn running() -> NodeMaintenanceStatus {
        NodeMaintenanceStatus {
            phase: Some(MaintenancePhase::Running),
            ..Default::default()
        }
    }

    fn drained_reason(s: &NodeMaintenanceStatus) -> (String, String) {
        let c = s.conditions.iter().flatten();
        let c = c
            .into_iter()
            .find(|c| c.type_ == condition::DRAINED)
            .unwrap();
        (c.status.clone(), c.reason.clone())
    }

    #[test]
    fn a_drained_node_with_attachments_stays_running_naming_them() {
        let done = DrainReport::default();
        let r = round(&running(), 120, OnTimeout::Wait);
        let plan = drained_plan(&r, &done, Some(&attached(&["a", "b"], t(5))), t(5));
        let s = plan.status.clone().unwrap();
        assert_eq!(s.phase, Some(MaintenancePhase::Running));
        let names: Vec<_> = s
            .blockers
            .iter()
            .flatten()
            .map(|b| (&b.name, &b.reason))
            .collect();
        assert_eq!(names.len(), 2);
        assert!(
            names.iter().all(|(_, r)| *r == "VolumeAttached"),
            "{names:?}"
        );
        assert_eq!(s.pending_pods, None);
        assert_eq!(
            drained_reason(&s),
            ("False".into(), VOLUMES_ATTACHED.into())
        );
        assert_eq!(
            plan.then,
            Then::Requeue(Requeue::Fixed(REQUEUE_TERMINATING))
        );
        let events: Vec<_> = plan
            .writes
            .iter()
            .filter(|w| w.kind() != "status")
            .map(|w| w.kind())
            .collect();
        assert!(
            events.is_empty(),
            "no SucceedMaintenance while attached: {events:?}"
        );
        // The next pass, still attached: nothing to write (the condition keeps its transition).
        let next = round(&s, 120, OnTimeout::Wait);
        let again = drained_plan(&next, &done, Some(&attached(&["a", "b"], t(6))), t(6));
        assert!(!needs_write(&s, again.status.as_ref().unwrap(), &[]));
        // Detached: Succeeded as without the knob, Drained turning True now.
        let gone = drained_plan(&next, &done, Some(&attached(&[], t(7))), t(7));
        let s = gone.status.unwrap();
        assert_eq!(s.phase, Some(MaintenancePhase::Succeeded));
        assert_eq!(s.blockers, None);
        assert_eq!(drained_reason(&s).0, "True");
        // Without the knob's observation (knob off), Succeeded at once.
        let off = drained_plan(&r, &done, None, t(5)).status.unwrap();
        assert_eq!(off.phase, Some(MaintenancePhase::Succeeded));
    }

    #[test]
    fn at_the_bound_fail_fails_and_skip_stuck_succeeds_naming_the_attachments() {
        let done = DrainReport::default();
        let fail = round(&running(), 10, OnTimeout::Fail);
        let plan = drained_plan(&fail, &done, Some(&attached(&["a"], t(10))), t(10));
        let s = plan.status.unwrap();
        assert_eq!(s.phase, Some(MaintenancePhase::Failed));
        let error = s.last_error.clone().unwrap();
        assert!(
            error.starts_with(FAILED_PREFIX) && error.contains('a'),
            "{error}"
        );
        // Warning, as every FailedMaintenance (a Normal one was written here before).
        let failed: Vec<_> = plan
            .writes
            .iter()
            .filter_map(|w| match w {
                crate::controller::plan::Write::Event { event, .. }
                    if event.reason == event::FAILED.0 =>
                {
                    Some(event.warning)
                }
                _ => None,
            })
            .collect();
        assert_eq!(failed, [true], "one Warning FailedMaintenance");
        assert!(crate::drain::volume_detach::failed(&s, &fail.policy, t(11)));
        assert!(failing(None, &s, &fail.policy, t(11)));
        let skip = round(&running(), 10, OnTimeout::SkipStuck);
        let plan = drained_plan(&skip, &done, Some(&attached(&["a"], t(10))), t(10));
        let s = plan.status.clone().unwrap();
        assert_eq!(s.phase, Some(MaintenancePhase::Succeeded));
        let kinds: Vec<_> = plan.writes.iter().map(|w| w.kind()).collect();
        assert!(kinds.contains(&DETACH_TIMEOUT), "{kinds:?}");
    }
}
