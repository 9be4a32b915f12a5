//! The decision of a reconcile, without I/O or clock: [`plan`] turns what one pass observed
//! ([`Observed`]) into everything the pass does ([`Plan`]): an ordered list of complete writes
//! ([`Write`]), then either a requeue or the drain round, and what the object's memory becomes.
//! The drain round is planned the same way once its evictions have answered ([`drained_plan`]).
//! The reconciler (`reconcile.rs`) observes (`observe.rs`) and the executor (`act.rs`) sends the
//! writes; neither decides (docs/design.md §1).
//!
//! - `maintenance.rs`: the maintenance pass: its steps in their order, those each stage runs;
//! - `observed.rs`, `outcome.rs`: what a pass read, and what it does;
//! - `pass.rs`: the pass being planned, and how it ends;
//! - one file per step, its flow with its status: `release.rs` (every exit of the node: stage,
//!   moved node, lost lease, deletion), `node_found.rs`, `init.rs`, `stage.rs`, `lease.rs`,
//!   `enter.rs`, `node_conditions.rs`, `drain_policy.rs`, `deadline.rs`, `slot.rs`,
//!   `expire.rs`, `draining.rs`, `preflight.rs`;
//! - `abort.rs`: `onTimeout: Abort`, recorded at the deadline, then the node released;
//! - `timeline.rs`: the maintenance's moments, and the deadline, arrival, expiry and slot read
//!   from them;
//! - `pre_drain_hooks.rs`: the pre-drain hooks' condition, and the start they hold back;
//! - `record.rs`: the record of the node entered, on the NodeMaintenance;
//! - `deletion.rs`: the deletion pass (restore or hand over, lease, finalizer);
//! - `status.rs`: what a step yields (status, events, requeue) and the helpers the steps share
//!   (the conditions they set: `crate::api::condition`, named `condition` here);
//! - `encode.rs`: when a status is worth a write, and its merge patch;
//! - `write.rs`: the writes.

pub(crate) mod abort;
pub(crate) use crate::api::condition;
mod deadline;
mod deletion;
mod drain_policy;
mod draining;
mod encode;
mod enter;
mod expire;
mod init;
mod lease;
mod maintenance;
mod node_conditions;
mod node_found;
mod observed;
mod outcome;
mod pass;
mod pre_drain_hooks;
mod preflight;
mod preflight_events;
mod record;
mod release;
mod slot;
mod stage;
#[cfg(test)]
mod stage_tests;
mod status;
#[cfg(test)]
mod tests;
pub(crate) mod timeline;
mod volume_detach;
mod write;

use kube::ResourceExt;

use crate::api::{FINALIZER, NodeMaintenance};

pub(crate) use deletion::successor;
pub(crate) use draining::drained_plan;
pub(crate) use encode::last_error_patch;
pub(crate) use node_found::replaced;
pub(crate) use observed::{Observed, ObservedDeletion, ObservedMaintenance, World};
pub(crate) use outcome::{Plan, Then};
pub(crate) use preflight::preflight_plan;
#[cfg(test)]
pub(crate) use status::event;
pub(crate) use status::{EventTarget, LEASE_WAIT_INITIAL, PlannedEvent, Requeue, is_terminal};
pub(crate) use write::{NodePurpose, Write};

/// What to do with a NodeMaintenance before looking at its node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Entry {
    /// Being deleted with our finalizer: restore the node, then remove the finalizer.
    Cleanup,
    /// Being deleted without our finalizer: nothing to do, and never fall through to
    /// maintenance (upstream bug #154).
    Ignore,
    /// Failed for good (the lease could not be recovered): no writes, no events.
    Terminal,
    /// `spec.nodeName` is unusable; the text says why. No node is touched.
    InvalidNodeName(String),
    /// Carry on with the maintenance.
    Maintain,
}

/// The first decision of every reconcile, deletion first: what the pass does, with the write
/// that adds our finalizer when it is missing (`None`: nothing to add) taken as done.
pub(crate) fn entry(nm: &NodeMaintenance) -> (Option<Write>, Entry) {
    let has_finalizer = nm.finalizers().iter().any(|f| f == FINALIZER);
    if nm.metadata.deletion_timestamp.is_some() {
        let e = if has_finalizer {
            Entry::Cleanup
        } else {
            Entry::Ignore
        };
        return (None, e);
    }
    let add = (!has_finalizer).then(|| add_finalizer_write(nm));
    if let Some(status) = &nm.status
        && is_terminal(status)
    {
        return (add, Entry::Terminal);
    }
    match validate_node_name(&nm.spec.node_name) {
        Err(why) => (add, Entry::InvalidNodeName(why)),
        Ok(()) => (add, Entry::Maintain),
    }
}

/// Whether `name` can be a Node name ([`crate::api::validate_node_name`], the webhook's rule
/// too) and that node can have a medik8s lease ([`crate::lease::lease_name_error`]: a name of
/// more than 248 characters cannot, `docs/drain-contract.md` §7); the error says why not, for
/// `status.lastError`. Such a name is maintained by nobody: no node or lease is touched.
///
/// # Errors
/// The reason as a clause (`it is empty`).
pub(crate) fn validate_node_name(name: &str) -> Result<(), String> {
    crate::api::validate_node_name(name).map_err(|e| e.to_string())?;
    crate::lease::lease_name_error(name).map_or(Ok(()), Err)
}

/// What a pass reads besides the NodeMaintenance ([`reads`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Reads {
    /// Nothing.
    Nothing,
    /// The deletion pass's reads ([`ObservedDeletion`]) of `node`, the node entered (else
    /// `spec.nodeName`); `None` when that is no valid node name (nothing is read).
    Deletion {
        /// The node, when its name is valid.
        node: Option<String>,
        /// The node's name as recorded.
        name: String,
    },
    /// The maintenance pass's reads ([`ObservedMaintenance`]) of `spec.nodeName`; `None` when
    /// it is no valid node name (nothing is read). `survey`: the pods too (no phase yet).
    Maintenance {
        /// The node, when its name is valid.
        node: Option<String>,
        /// The pods are counted for the status initialisation.
        survey: bool,
    },
    /// The maintenance pass's reads of the node entered first, which `spec.nodeName` no
    /// longer names ([`ObservedMaintenance::entered`]).
    EnteredNode(String),
}

/// What a pass must read for `nm`, from the same entry decision [`plan`] makes.
pub(crate) fn reads(nm: &NodeMaintenance) -> Reads {
    let entered = entered_node(nm);
    let valid = |n: &str| validate_node_name(n).is_ok().then(|| n.to_owned());
    match entry(nm).1 {
        Entry::Cleanup => {
            let name = entered.unwrap_or(&nm.spec.node_name).to_owned();
            Reads::Deletion {
                node: valid(&name),
                name,
            }
        }
        Entry::Maintain | Entry::InvalidNodeName(_)
            if entered.is_some_and(|n| n != nm.spec.node_name) =>
        {
            Reads::EnteredNode(entered.unwrap_or_default().to_owned())
        }
        Entry::Maintain => Reads::Maintenance {
            node: Some(nm.spec.node_name.clone()),
            survey: nm.status.as_ref().and_then(|s| s.phase).is_none(),
        },
        Entry::InvalidNodeName(_) => Reads::Maintenance {
            node: None,
            survey: false,
        },
        Entry::Ignore | Entry::Terminal => Reads::Nothing,
    }
}

/// The whole decision of one pass (pure: no I/O, no clock): the entry decision with our
/// finalizer, the finalizer's events around the pass's writes (`preflight_events`), then the
/// deletion pass or the maintenance pass.
pub(crate) fn plan(o: &Observed, now: jiff::Timestamp) -> Plan {
    let (add_finalizer, e) = entry(&o.nm);
    let cleanup = matches!((&o.world, &e), (World::Deletion(_), Entry::Cleanup));
    let (stage, status) = (o.policy.0.stage, o.nm.status.as_ref());
    let (first, last) = preflight_events::writes(stage, status, add_finalizer, cleanup);
    let mut plan = match (&o.world, e) {
        (World::Deletion(d), Entry::Cleanup) => deletion::plan_deletion(d, now),
        (World::Maintenance(m), e @ (Entry::Maintain | Entry::InvalidNodeName(_))) => {
            let invalid = match &e {
                Entry::InvalidNodeName(why) => Some(why.as_str()),
                _ => None,
            };
            maintenance::plan_maintenance(o, m, invalid, now)
        }
        _ => Plan::wait(Vec::new()),
    };
    plan.writes.splice(0..0, first);
    plan.writes.extend(last);
    plan
}

/// Adds our finalizer: a JSON patch whose `test` op fails (409-like 422) if the list changed
/// since it was read, since the API server does not deduplicate finalizers.
fn add_finalizer_write(nm: &NodeMaintenance) -> Write {
    let list = nm.finalizers();
    let ops = if list.is_empty() {
        serde_json::json!([
            {"op": "test", "path": "/metadata/finalizers", "value": null},
            {"op": "add", "path": "/metadata/finalizers", "value": [FINALIZER]},
        ])
    } else {
        serde_json::json!([
            {"op": "test", "path": "/metadata/finalizers", "value": list},
            {"op": "add", "path": "/metadata/finalizers/-", "value": FINALIZER},
        ])
    };
    Write::Finalizers {
        patch: serde_json::from_value(ops).unwrap_or_default(),
        add: true,
    }
}

/// The node a NodeMaintenance entered (its annotation), if recorded.
pub(crate) fn entered_node(nm: &NodeMaintenance) -> Option<&str> {
    nm.annotations()
        .get(crate::api::ENTERED_NODE_ANNOTATION)
        .map(String::as_str)
}
