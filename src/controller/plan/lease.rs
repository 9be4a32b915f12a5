//! The medik8s lease of the node ([`PassStep::Lease`](super::maintenance::PassStep)): requested, and
//! its ownership recorded in status before the node is entered; upstream's errorOnLeaseCount
//! rules, and the release when it is lost for good.

use std::time::Duration;

use super::condition::{self, Stamp, set_condition};
use super::pass::{Flow, Pass};
use super::release::{exit, invalidate};
use super::status::{
    MAX_LEASE_ERRORS, PlannedEvent, Requeue, Step, event, fail, held_lease_before, not_cordoned,
    touch,
};
use super::write::{NodePurpose, Write, Writes};
use crate::api::NodeMaintenanceStatus;
use crate::lease::{self, LeaseRequest};
use crate::node::{self, Claimant};

/// Re-check after a lease we held was found held by someone else.
pub(crate) const REQUEUE_LEASE_LOST: Duration = Duration::from_secs(5);

impl Pass<'_> {
    pub(super) fn lease(&mut self) -> Flow {
        let (at, node_name) = (self.at(), self.node_name());
        let Some(node) = self.node else {
            return Flow::Continue(());
        };
        let request = lease::request(
            node_name,
            node.metadata.uid.as_deref(),
            self.m.lease.as_ref(),
            at.now,
        );
        let observation = match &request {
            LeaseRequest::AlreadyHeld { holder } => LeaseObservation::AlreadyHeld(
                lease::LeaseError::AlreadyHeld {
                    holder: holder.clone(),
                }
                .to_string(),
            ),
            _ => LeaseObservation::Held,
        };
        let record = node::observe(node);
        let holds_node = record
            .holder
            .as_deref()
            .is_some_and(|h| self.me().owns(h, record.holder_uid.as_deref()));
        match lease_result(&self.status, &observation, holds_node, at) {
            LeaseStep::Proceed(s) => {
                // Ownership (and a phase back from Failed) is recorded before touching the node.
                lease_writes(&mut self.w, request, self.m.lease_namespace_missing);
                self.memory.lease_waits = 0;
                self.w.status(&s);
                self.status = s;
                Flow::Continue(())
            }
            LeaseStep::Wait(step) => Flow::Break(self.end(step)),
            LeaseStep::Stop(step) => {
                self.w.status(&step.status);
                let me = Claimant {
                    name: &self.name,
                    uid: self.o.nm.metadata.uid.as_deref(),
                };
                let purpose = NodePurpose::ExitAfterLeaseLoss;
                let uncordon = exit(&mut self.w, node_name, node, me, purpose, false);
                let failed = lease_failed(&step.status, uncordon == Some(true), at);
                invalidate(&mut self.w, self.m.lease.as_ref());
                Flow::Break(self.end(failed))
            }
        }
    }
}

/// The lease writes of a request that found the lease ours (or free): the namespace when it is
/// missing, then the create or the replace; nothing while ours is current.
pub(crate) fn lease_writes(w: &mut Writes, request: LeaseRequest, namespace_missing: bool) {
    match request {
        LeaseRequest::Create(lease) => {
            if namespace_missing {
                w.push(Write::LeaseNamespace);
            }
            w.push(Write::CreateLease(lease));
        }
        LeaseRequest::Replace(lease) => w.push(Write::ReplaceLease(lease)),
        LeaseRequest::Current | LeaseRequest::AlreadyHeld { .. } => {}
    }
}

/// What requesting the medik8s lease returned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum LeaseObservation {
    /// Ours (created, renewed, taken over or still current).
    Held,
    /// Held by another holder; the error text
    /// (`can't update or invalidate the lease because it is held by different owner: <holder>`).
    AlreadyHeld(String),
}

/// What to do after the lease request.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum LeaseStep {
    /// Carry on with this status (record it first if it differs from the old one: it may carry
    /// the `LeaseHeld` ownership that later counting depends on).
    Proceed(NodeMaintenanceStatus),
    /// Don't touch the node now; record the step and come back.
    Wait(Step),
    /// The lease is lost for good: record the step's status, take the node out of maintenance
    /// (emitting `UncordonNode` if it was uncordoned), invalidate the lease, then mark the
    /// maintenance Failed with [`lease_failed`].
    Stop(Step),
}

/// Upstream's errorOnLeaseCount rules (docs/compat.md §3), with ownership tracked by the
/// `LeaseHeld` condition: AlreadyHeld for a lease we never held is not counted (lastError
/// `failed to obtain a lease that is not owned by us : <err> errorOnLeaseCount <n>`, wait with
/// backoff); AlreadyHeld for a lease we held counts (lastError
/// `failed to extend a lease that used to be owned by us, incrementing error on lease count: <err>, errorOnLeaseCount: <n>`),
/// and a count above [`MAX_LEASE_ERRORS`] stops the maintenance. Success resets the count.
///
/// "Used to be ours" never rests on a field upstream's schema lacks alone (a CRD installed by
/// upstream prunes `conditions`): `entered` is the caller's evidence from outside the status (the
/// node carries our holder record, and we enter a node only after obtaining its lease), and a
/// non-zero `errorOnLeaseCount` (an upstream field, only ever raised for a lease we held) counts
/// too (docs/compat.md §3).
pub(crate) fn lease_result(
    old: &NodeMaintenanceStatus,
    observed: &LeaseObservation,
    entered: bool,
    at: Stamp,
) -> LeaseStep {
    let mut s = old.clone();
    let n = old.error_on_lease_count.unwrap_or(0);
    let held_before = entered || n > 0 || held_lease_before(old);
    match observed {
        LeaseObservation::Held => {
            s.error_on_lease_count = None;
            touch(&mut s, at);
            set_condition(
                &mut s,
                condition::LEASE_HELD,
                true,
                "LeaseObtained",
                "the medik8s lease of the node is held by node-maintenance",
                at,
            );
            LeaseStep::Proceed(s)
        }
        LeaseObservation::AlreadyHeld(err) if !held_before => {
            s.last_error = Some(format!(
                "failed to obtain a lease that is not owned by us : {err} errorOnLeaseCount {n}"
            ));
            set_condition(
                &mut s,
                condition::LEASE_HELD,
                false,
                condition::HELD_BY_OTHER,
                err.clone(),
                at,
            );
            touch(&mut s, at);
            LeaseStep::Wait(Step::quiet(s, Requeue::LeaseWait))
        }
        LeaseObservation::AlreadyHeld(err) => {
            // Our own status write wakes the controller at once; without spacing, the four
            // strikes would be spent in well under a second (upstream's tight loop). A strike
            // counts only once REQUEUE_LEASE_LOST has passed since the last one (lastUpdate has
            // one-second precision, hence the second of slack).
            if n > 0
                && let Some(last) = &old.last_update
            {
                let spacing = jiff::SignedDuration::try_from(REQUEUE_LEASE_LOST)
                    .unwrap_or_default()
                    .saturating_sub(jiff::SignedDuration::from_secs(1));
                let elapsed = at.now.duration_since(last.0);
                if elapsed < spacing {
                    let remaining = Duration::try_from(spacing.saturating_sub(elapsed))
                        .unwrap_or(REQUEUE_LEASE_LOST);
                    return LeaseStep::Wait(Step::quiet(
                        old.clone(),
                        Requeue::After(remaining.max(Duration::from_millis(100))),
                    ));
                }
            }
            let n = n.saturating_add(1);
            s.error_on_lease_count = Some(n);
            set_condition(
                &mut s,
                condition::LEASE_HELD,
                false,
                condition::LEASE_LOST,
                err.clone(),
                at,
            );
            touch(&mut s, at);
            if n > MAX_LEASE_ERRORS {
                s.last_error = Some(format!(
                    "maintenance failed: lease could not be extended after {n} attempts"
                ));
                LeaseStep::Stop(Step::quiet(s, Requeue::Never))
            } else {
                s.last_error = Some(format!(
                    "failed to extend a lease that used to be owned by us, incrementing error on lease count: {err}, errorOnLeaseCount: {n}"
                ));
                LeaseStep::Wait(Step::quiet(s, Requeue::Fixed(REQUEUE_LEASE_LOST)))
            }
        }
    }
}

/// After the node was taken out of maintenance because the lease was lost for good: phase
/// Failed (terminal), Warning `FailedMaintenance` on the transition, `UncordonNode` on the Node
/// when the node was uncordoned.
pub(crate) fn lease_failed(recorded: &NodeMaintenanceStatus, uncordoned: bool, at: Stamp) -> Step {
    let mut s = recorded.clone();
    let mut events = Vec::new();
    if uncordoned {
        events.push(PlannedEvent::normal(event::UNCORDON).on_node());
    }
    fail(recorded, &mut s, &mut events);
    let cordoned = (
        condition::LEASE_LOST,
        "the node was taken out of maintenance because the medik8s lease could not be extended",
    );
    not_cordoned(s, events, cordoned, Requeue::Never, at)
}
