//! The drain policy in status ([`PassStep::Policy`](super::maintenance::PassStep)): paused, refused
//! knob values, and the pre-drain hooks' condition.

use super::condition::{self, Stamp, condition, set_condition};
use super::pass::{Flow, Pass};
use super::pre_drain_hooks;
use super::status::{PlannedEvent, event};
use crate::api::NodeMaintenanceStatus;

impl Pass<'_> {
    pub(super) fn policy(&mut self) -> Flow {
        let (status, events) = policy(
            &self.status,
            (&self.drain_policy, self.memory.paused),
            &self.refused,
            self.at(),
        );
        let hooks = &self.drain_policy.hooks;
        self.status = pre_drain_hooks::status(&status, hooks, self.at());
        self.w.events(events, self.node);
        self.memory.paused = Some(self.drain_policy.paused);
        Flow::Continue(())
    }
}

/// The drain policy in status (`docs/drain-contract.md` §10): `DrainPaused` while `policy`
/// pauses the evictions (and `False` once it no longer does), `DrainPolicyValid=False` while an
/// annotation's value is refused; an event on each change. Conditions a maintenance never needed
/// are not written. `remembered` is whether the last pass of this process found it paused, read
/// when the condition is not there (a CRD that prunes it).
pub(crate) fn policy(
    status: &NodeMaintenanceStatus,
    (policy, remembered): (&crate::policy::DrainPolicy, Option<bool>),
    invalid: &[crate::policy::InvalidKnob],
    at: Stamp,
) -> (NodeMaintenanceStatus, Vec<PlannedEvent>) {
    let mut s = status.clone();
    let mut events = Vec::new();
    let was = |type_: &str| condition(status, type_).map(|c| c.status == "True");
    match (policy.paused, was(condition::DRAIN_PAUSED).or(remembered)) {
        (true, was_paused) => {
            let message = "no eviction is sent while the maintenance is paused (spec.paused, the \
                           annotation nodemaintenance.medik8s.io/paused or --drain-paused); the \
                           node stays cordoned and tainted and the lease held";
            set_condition(&mut s, condition::DRAIN_PAUSED, true, "Paused", message, at);
            if was_paused != Some(true) {
                events.push(PlannedEvent::normal(event::PAUSED));
            }
        }
        (false, Some(true)) => {
            let message = "evictions resumed";
            set_condition(
                &mut s,
                condition::DRAIN_PAUSED,
                false,
                "Resumed",
                message,
                at,
            );
            events.push(PlannedEvent::normal(event::RESUMED));
        }
        (false, _) => {}
    }
    let refused = invalid
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ");
    match (refused.is_empty(), was(condition::DRAIN_POLICY_VALID)) {
        (false, _) => {
            let before =
                condition(status, condition::DRAIN_POLICY_VALID).map(|c| c.message.clone());
            let message = format!("{refused}; the default applies");
            if before.as_deref() != Some(message.as_str()) {
                events.push(PlannedEvent::warning(
                    event::INVALID_POLICY,
                    message.clone(),
                ));
            }
            set_condition(
                &mut s,
                condition::DRAIN_POLICY_VALID,
                false,
                "InvalidValue",
                message,
                at,
            );
        }
        (true, Some(false)) => {
            set_condition(
                &mut s,
                condition::DRAIN_POLICY_VALID,
                true,
                "Valid",
                "every knob's value is valid",
                at,
            );
        }
        (true, _) => {}
    }
    (s, events)
}
