//! The maintenance pass (upstream's reconcile, docs/design.md §1): the status initialised before
//! the node is touched, the lease, its ownership recorded before entering, the node entered (its
//! record, the drain's start among it, in the same patch), the entered node recorded on the
//! NodeMaintenance (best effort), then the drain round.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;

use super::*;
use crate::api::{
    DRAIN_STARTED_ANNOTATION, ENTERED_NODE_ANNOTATION, ENTERED_NODE_PROVIDER_ID_ANNOTATION,
    ENTERED_NODE_UID_ANNOTATION, MaintenancePhase, OnTimeout,
};
use crate::controller::queue::Place;
use crate::lease::{self, LeaseRequest};
use crate::node::{self, Claimant, EnterPlan, ExitPlan};

/// After restoring a node that `spec.nodeName` no longer names, the next pass starts on the new
/// one at once.
const REQUEUE_NODE_CHANGED: Duration = Duration::from_millis(100);

/// The maintenance pass. `invalid` says why `spec.nodeName` cannot name a node.
pub(super) fn plan_maintenance(
    o: &Observed,
    m: &ObservedMaintenance,
    invalid: Option<&str>,
    now: jiff::Timestamp,
) -> Plan {
    let nm = &o.nm;
    let node_name = nm.spec.node_name.as_str();
    let generation = nm.metadata.generation;
    let old = nm.status.clone().unwrap_or_default();
    let name = nm.name_any();
    let me = Claimant {
        name: &name,
        uid: nm.metadata.uid.as_deref(),
    };
    let mut w = Writes::new(old.clone(), &o.schema);
    if let Some((entered, node, lease)) = &m.entered {
        // Restore the node entered first; the next pass starts over on the new one.
        leave(&mut w, entered, node.as_ref(), lease.as_ref(), me);
        w.push(clear_record());
        let step = Step {
            status: NodeMaintenanceStatus::default(),
            events: Vec::new(),
            requeue: Requeue::After(REQUEUE_NODE_CHANGED),
        };
        return w.finish(step, None, o.memory);
    }
    if let Some(why) = invalid {
        let step = invalid_node_name(&old, node_name, why, generation, now);
        return w.finish(step, None, o.memory);
    }
    let mut status = old.clone();
    if let Some(s) = m
        .survey
        .as_ref()
        .and_then(|survey| init_status(&old, survey, generation, now))
    {
        w.status(&s);
        status = s;
    }
    let Some(node) = &m.node else {
        let step = node_missing(&status, node_name, generation, now);
        return w.finish(step, None, o.memory);
    };
    if let Some(replaced) = replaced(nm, node) {
        // Another machine under the name entered: nothing on it is ours to touch, and no lease
        // is taken for it. Ours, still held for the machine that left, is given up unless a
        // maintenance entered the new one (its holder record), which may be renewing it.
        let step = node_replaced(&status, node_name, &replaced, generation, now);
        w.status(&step.status);
        if node::observe(node).holder.is_none() {
            invalidate(&mut w, m.lease.as_ref());
        }
        return w.finish(step, Some(node), o.memory);
    }
    let (mut drain_policy, invalid) = crate::policy::resolve(nm, &o.policy);
    // The deadline counts from the start recorded on the node when it was entered, by the API
    // server's clock (a node not entered yet has no deadline), or from when a maintenance that
    // waited for a drain slot got one (none while it waits); a maintenance it failed stays
    // Failed while the policy says so (an edit of the policy resumes it).
    drain_policy.deadline_start = deadline_start(node, &status, m.queue.as_ref(), now);
    let overdue = drain_policy.overdue(drain_policy.deadline_start, m.server_time.unwrap_or(now));
    let failing =
        overdue == Some(OnTimeout::Fail) && status.phase != Some(MaintenancePhase::Succeeded);
    let status = if failing {
        status
    } else {
        node_present(&status)
    };
    let request = lease::request(
        node_name,
        node.metadata.uid.as_deref(),
        m.lease.as_ref(),
        now,
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
        .is_some_and(|h| me.owns(h, record.holder_uid.as_deref()));
    let mut memory = o.memory;
    let status = match lease_result(&status, &observation, holds_node, generation, now) {
        LeaseStep::Proceed(s) => {
            // Ownership (and a phase back from Failed) is recorded before touching the node.
            lease_writes(&mut w, request, m.lease_namespace_missing);
            memory.lease_waits = 0;
            w.status(&s);
            s
        }
        LeaseStep::Wait(step) => return w.finish(step, Some(node), o.memory),
        LeaseStep::Stop(step) => {
            let exit = node::plan_exit_for(node, me);
            let uncordon = matches!(exit, ExitPlan::Apply { uncordon: true, .. });
            let failed = lease_failed(&step.status, uncordon, generation, now);
            w.status(&step.status);
            if let ExitPlan::Apply { patch, .. } = exit {
                w.push(Write::Node {
                    name: node_name.to_owned(),
                    patch,
                    purpose: NodePurpose::ExitAfterLeaseLoss,
                });
            }
            invalidate(&mut w, m.lease.as_ref());
            return w.finish(failed, Some(node), o.memory);
        }
    };
    // The drain starts when the node is entered, by the API server's clock (the one that stamps
    // the pods it is compared with); the operator's only when the answer carried no `Date`.
    let start = m.server_time.unwrap_or(now);
    let mut started = drain_started(nm, Some(node));
    let live = |_: &str, _: Option<&str>| m.holder_live;
    let (plan, outcome) =
        node::plan_enter_for(node, me, nm.spec.reason.as_deref(), &live, Some(start));
    let repaired = match (plan, outcome) {
        (EnterPlan::HeldBy(other), _) => {
            let step = held_by_other(&status, node_name, &other, generation, now);
            return with_memory(w.finish(step, Some(node), o.memory), memory, o.memory);
        }
        (EnterPlan::Unchanged, _) => Vec::new(),
        (EnterPlan::Apply { patch, repaired }, outcome) => {
            if node::records_start(&outcome) {
                started = Some(node::whole_seconds(start));
            }
            w.push(Write::Node {
                name: node_name.to_owned(),
                patch,
                purpose: NodePurpose::Enter(outcome),
            });
            repaired
        }
    };
    if let Some(patch) = entered_record(nm, node) {
        w.push(Write::Annotations {
            patch,
            required: false,
        });
    }
    let (status, events) = entered(&status, node_name, &repaired, generation, now);
    w.events(events, Some(node));
    let (status, events) = policy(
        &status,
        (&drain_policy, memory.paused),
        &invalid,
        generation,
        now,
    );
    w.events(events, Some(node));
    memory.paused = Some(drain_policy.paused);
    let (status, events) = deadline(
        &status,
        (&drain_policy, overdue),
        drain_policy.deadline(drain_policy.deadline_start),
        memory.deadline_announced,
        generation,
        now,
    );
    w.events(events, Some(node));
    memory.deadline_announced = Some(overdue.is_some());
    if failing {
        // Failed at the deadline: the node, lease and label are still enforced above; no round.
        let step = Step {
            status,
            events: Vec::new(),
            requeue: Requeue::After(REQUEUE_SUCCEEDED),
        };
        return with_memory(w.finish(step, Some(node), o.memory), memory, o.memory);
    }
    let (status, events) = queued(&status, m.queue.as_ref(), memory.queued, generation, now);
    w.events(events, Some(node));
    memory.queued = m.queue.as_ref().map(|p| matches!(p, Place::Queued { .. }));
    let waits = matches!(m.queue, Some(Place::Queued { .. }));
    if (drain_policy.paused || waits) && status.phase != Some(MaintenancePhase::Succeeded) {
        // Paused, or queued for a drain slot: the node, lease and label are enforced above; no
        // round, so no new eviction. An edit of the object (unpausing) or a freed slot
        // (`Context::wake_admitted`) starts the next pass; the lease is renewed on time, and a
        // deadline still passes (the pass at it applies onTimeout Fail).
        let until_deadline = drain_policy
            .deadline(drain_policy.deadline_start)
            .and_then(|d| Duration::try_from(d.duration_since(m.server_time.unwrap_or(now))).ok())
            .filter(|d| !d.is_zero());
        let step = Step {
            status,
            events: Vec::new(),
            requeue: Requeue::After(
                until_deadline.map_or(REQUEUE_SUCCEEDED, |d| d.min(REQUEUE_SUCCEEDED)),
            ),
        };
        return with_memory(w.finish(step, Some(node), o.memory), memory, o.memory);
    }
    if status.phase == Some(MaintenancePhase::Succeeded) {
        // Drained once is drained: a pod that arrives later (an admin's maintenance job) stays.
        // The node, lease and label are still enforced above. Upstream drains on every
        // reconcile, it just rarely reconciles a Succeeded one (docs/drain-contract.md §3).
        let step = Step {
            status,
            events: Vec::new(),
            requeue: Requeue::After(REQUEUE_SUCCEEDED),
        };
        return with_memory(w.finish(step, Some(node), o.memory), memory, o.memory);
    }
    Plan {
        then: Then::Drain(Box::new(DrainRound {
            node: node_name.to_owned(),
            status: status.clone(),
            stored: w.stored.clone(),
            started,
            policy: drain_policy,
            generation,
            pruned: w.pruned.clone(),
        })),
        writes: w.list,
        remember: remember(memory, o.memory),
        status: Some(status),
    }
}

/// When the drain's deadline counts from: the start recorded on `node` when it was entered,
/// or, for a maintenance that waited for a drain slot, the moment it got one (`DrainQueued`
/// turning False: now, when the last pass found it waiting and it holds a slot now); `None`
/// while it waits or before the node was entered.
fn deadline_start(
    node: &Node,
    status: &NodeMaintenanceStatus,
    queue: Option<&Place>,
    now: jiff::Timestamp,
) -> Option<jiff::Timestamp> {
    if matches!(queue, Some(Place::Queued { .. })) {
        return None;
    }
    let entered = node::drain_started(node)?;
    let dequeued = condition(status, condition::DRAIN_QUEUED).map(|c| {
        if c.status == "True" {
            now
        } else {
            c.last_transition_time.0
        }
    });
    Some(dequeued.map_or(entered, |d| d.max(entered)))
}

fn remember(new: Memory, old: Memory) -> Remember {
    if new == old {
        Remember::Same
    } else {
        Remember::Set(new)
    }
}

fn with_memory(mut plan: Plan, new: Memory, old: Memory) -> Plan {
    if plan.remember == Remember::Same {
        plan.remember = remember(new, old);
    }
    plan
}

/// Clears the record of the node entered (the node, its identity, the legacy drain start) on the
/// NodeMaintenance, after that node was left: a required write (the next pass starts over on
/// `spec.nodeName` only once it landed).
fn clear_record() -> Write {
    Write::Annotations {
        patch: serde_json::json!({"metadata": {"annotations": {
            ENTERED_NODE_ANNOTATION: null,
            ENTERED_NODE_PROVIDER_ID_ANNOTATION: null,
            ENTERED_NODE_UID_ANNOTATION: null,
            DRAIN_STARTED_ANNOTATION: null,
        }}}),
        required: true,
    }
}

/// The record of `node`, entered by `nm`, on the NodeMaintenance: its name, `spec.providerID`
/// (empty when it has none) and `metadata.uid`, in one merge patch; `None` when `nm` records
/// exactly that already.
///
/// It is written after the node is entered and is not required: a failure is logged, the pass
/// goes on, and the next pass writes it again until it lands. Entering therefore needs no
/// NodeMaintenance metadata write, an UPDATE that the operator's own validating webhook
/// intercepts (`failurePolicy: Fail`): an admitted maintenance enters its node while the webhook
/// is unreachable, as upstream's does (it writes only status, the Lease and the Node after the
/// finalizer). The record is safe to lag because the node it names can change only with an
/// UPDATE of `spec.nodeName`, which the CRD's CEL rule refuses and which lands only when the
/// webhook is absent or admits it; while the webhook is unreachable no UPDATE of the
/// NodeMaintenance lands at all, neither the record nor a change of `spec.nodeName`, so the node
/// entered is still `spec.nodeName` when the record lands. Meanwhile the Node's own record
/// (holder and holder-uid) names the maintenance, and deletion and the orphan sweep find the
/// node by `spec.nodeName` (docs/design.md §1, "Entry").
fn entered_record(nm: &NodeMaintenance, node: &Node) -> Option<serde_json::Value> {
    let name = node.metadata.name.as_deref().unwrap_or_default();
    let provider_id = provider_id(node);
    let uid = node.metadata.uid.as_deref().unwrap_or_default();
    let annotations = nm.annotations();
    let recorded = |key: &str| annotations.get(key).map(String::as_str);
    if recorded(ENTERED_NODE_ANNOTATION) == Some(name)
        && recorded(ENTERED_NODE_PROVIDER_ID_ANNOTATION) == Some(provider_id)
        && recorded(ENTERED_NODE_UID_ANNOTATION) == Some(uid)
    {
        return None;
    }
    Some(serde_json::json!({"metadata": {"annotations": {
        ENTERED_NODE_ANNOTATION: name,
        ENTERED_NODE_PROVIDER_ID_ANNOTATION: provider_id,
        ENTERED_NODE_UID_ANNOTATION: uid,
    }}}))
}

/// The lease writes of a request that found the lease ours (or free): the namespace when it is
/// missing, then the create or the replace; nothing while ours is current.
fn lease_writes(w: &mut Writes, request: LeaseRequest, namespace_missing: bool) {
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

/// Gives up the lease read (upstream's `InvalidateLease`): deleted when it is ours; another
/// holder's (a remediation's) is left alone, as upstream does on stop.
pub(super) fn invalidate(w: &mut Writes, lease: Option<&Lease>) {
    if let lease::Invalidation::Delete {
        name,
        uid,
        resource_version,
    } = lease::invalidation(lease)
    {
        w.push(Write::DeleteLease {
            name,
            uid,
            resource_version,
        });
    }
}

/// Takes the node entered first out of maintenance when it is still ours, then gives up its
/// lease (a node held by another NodeMaintenance keeps the lease that one renews). A missing
/// node counts as left.
fn leave(w: &mut Writes, name: &str, node: Option<&Node>, lease: Option<&Lease>, me: Claimant<'_>) {
    let Some(node) = node else {
        invalidate(w, lease);
        return;
    };
    if let ExitPlan::Apply { patch, uncordon } = node::plan_exit_for(node, me) {
        w.push(Write::Node {
            name: name.to_owned(),
            patch,
            purpose: NodePurpose::Exit,
        });
        if uncordon {
            let e = PlannedEvent::normal(EventTarget::Node, event::UNCORDON);
            w.events(vec![e], Some(node));
        }
        invalidate(w, lease);
    }
}
