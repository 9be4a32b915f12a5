//! The decision of a reconcile, without I/O or clock: [`plan`] turns what one pass observed
//! ([`Observed`]) into everything the pass does ([`Plan`]): an ordered list of complete writes
//! ([`Write`]), then either a requeue or the drain round, and what the object's memory becomes.
//! The drain round is planned the same way once its evictions have answered ([`drained_plan`]).
//! The reconciler (`reconcile.rs`) observes (`observe.rs`) and the executor (`act.rs`) sends the
//! writes; neither decides (docs/design.md §1).
//!
//! - `maintenance.rs`: the maintenance pass (status, lease, node entry, drain), step by step;
//! - `steps.rs`: the pass's steps, and those each stage runs;
//! - `abort.rs`: `onTimeout: Abort`, recorded at the deadline, then the node released;
//! - `timeline.rs`: the maintenance's moments, and the deadline, arrival, expiry and slot read
//!   from them;
//! - `pre_drain_hooks.rs`: the pre-drain hooks' condition, and the start they hold back;
//! - `record.rs`: the record of the node entered, on the NodeMaintenance;
//! - `deletion.rs`: the deletion pass (restore or hand over, lease, finalizer);
//! - `status.rs`: the status steps (phases, conditions, events, requeues);
//! - `encode.rs`: when a status is worth a write, and its merge patch;
//! - `write.rs`: the writes.

pub(crate) mod abort;
pub(crate) mod condition;
mod deletion;
mod encode;
mod maintenance;
mod pre_drain_hooks;
mod preflight_events;
mod record;
#[cfg(test)]
mod stage_tests;
mod status;
mod steps;
#[cfg(test)]
mod tests;
pub(crate) mod timeline;
mod volume_detach;
mod write;

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;

use super::memory::{Memory, Remember, StatusSchema};
use crate::api::{FINALIZER, NodeMaintenance, NodeMaintenanceStatus};
use crate::drain::{DrainReport, Survey};

pub(crate) use deletion::{ObservedDeletion, successor};
#[cfg(test)]
use encode::STATUS_FIELDS;
pub(crate) use encode::{needs_write, status_patch};
pub(crate) use status::*;
pub(crate) use write::{NodePurpose, Precondition, Write};

/// Next pass while evicted pods are only terminating (the pass is cheap: one pod list).
pub(crate) const REQUEUE_TERMINATING: Duration = Duration::from_secs(1);
/// Next pass while an eviction is refused (upstream's `waitDurationOnDrainError`).
pub(crate) const REQUEUE_BLOCKED: Duration = Duration::from_secs(5);
/// Re-check of a Succeeded maintenance: renews the 3600 s lease well before it expires and
/// corrects drift the Node watch might have missed.
pub(crate) const REQUEUE_SUCCEEDED: Duration = Duration::from_secs(300);
/// Re-check while the node does not exist (the Node watch usually comes first).
pub(crate) const REQUEUE_NODE_MISSING: Duration = Duration::from_secs(30);
/// Re-check while another NodeMaintenance holds the node.
pub(crate) const REQUEUE_HELD_BY_OTHER: Duration = Duration::from_secs(30);
/// Re-check after a lease we held was found held by someone else.
pub(crate) const REQUEUE_LEASE_LOST: Duration = Duration::from_secs(5);
/// First wait for a lease we never held; doubles per attempt up to [`LEASE_WAIT_MAX`].
pub(crate) const LEASE_WAIT_INITIAL: Duration = Duration::from_secs(2);
/// Longest wait for a lease we never held.
pub(crate) const LEASE_WAIT_MAX: Duration = Duration::from_secs(30);
/// Re-check of a NodeMaintenance with an invalid nodeName (the webhook forbids editing it, so
/// this is only a safety net).
pub(crate) const REQUEUE_INVALID: Duration = Duration::from_secs(300);
/// Upstream's `maxAllowedErrorToUpdateOwnedLease`: a count above this fails the maintenance.
pub(crate) const MAX_LEASE_ERRORS: i32 = 3;

/// What to do with a NodeMaintenance before looking at its node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Entry {
    /// Being deleted with our finalizer: restore the node, then remove the finalizer.
    Cleanup,
    /// Being deleted without our finalizer: nothing to do, and never fall through to
    /// maintenance (upstream bug #154).
    Ignore,
    /// Add the finalizer (then emit BeginMaintenance, or BeginPreflight in stage Preflight, and
    /// continue).
    AddFinalizer,
    /// Failed for good (the lease could not be recovered): no writes, no events.
    Terminal,
    /// `spec.nodeName` is unusable; the text says why. No node is touched.
    InvalidNodeName(String),
    /// Carry on with the maintenance.
    Maintain,
}

/// The first decision of every reconcile. Deletion comes first.
pub(crate) fn entry(nm: &NodeMaintenance) -> Entry {
    let has_finalizer = nm.finalizers().iter().any(|f| f == FINALIZER);
    if nm.metadata.deletion_timestamp.is_some() {
        return if has_finalizer {
            Entry::Cleanup
        } else {
            Entry::Ignore
        };
    }
    if !has_finalizer {
        return Entry::AddFinalizer;
    }
    if let Some(status) = &nm.status
        && is_terminal(status)
    {
        return Entry::Terminal;
    }
    match validate_node_name(&nm.spec.node_name) {
        Err(why) => Entry::InvalidNodeName(why),
        Ok(()) => Entry::Maintain,
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

/// Everything one pass reads (the output of the reconcile's `observe`, the input of [`plan`]).
#[derive(Clone, Debug)]
pub(crate) struct Observed {
    /// The NodeMaintenance as the pass began with it.
    pub(crate) nm: NodeMaintenance,
    /// What was read besides it; which part depends on [`reads`].
    pub(crate) world: World,
    /// What earlier passes of this object remember.
    pub(crate) memory: Memory,
    /// Which status fields the installed CRD keeps, as learnt so far.
    pub(crate) schema: StatusSchema,
    /// The operator's defaults of the drain knobs (its flags), resolved with the object's own
    /// ([`crate::policy::resolve`]).
    pub(crate) policy: crate::policy::Defaults,
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
    match entry_with_finalizer(nm).1 {
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
        Entry::Ignore | Entry::Terminal | Entry::AddFinalizer => Reads::Nothing,
    }
}

/// What a pass read besides the NodeMaintenance.
#[derive(Clone, Debug)]
pub(crate) enum World {
    /// Nothing: the pass ends without touching node or lease.
    Nothing,
    /// The deletion pass's reads.
    Deletion(Box<ObservedDeletion>),
    /// The maintenance pass's reads.
    Maintenance(Box<ObservedMaintenance>),
}

/// What a maintenance pass read: pods, node and lease, each only when the pass gets that far
/// (`None` otherwise, or when absent).
#[derive(Clone, Debug, Default)]
pub(crate) struct ObservedMaintenance {
    /// The pods on the node, read only while `status.phase` is unset (status initialisation).
    pub(crate) survey: Option<Survey>,
    /// The node (`None`: it does not exist, or it was not read).
    pub(crate) node: Option<Node>,
    /// When the API server answered the node's read: its `Date` header (whole seconds; `None`
    /// when not read or the header was missing). The drain's start when this pass enters the
    /// node, else the plan's `now` (the operator's clock).
    pub(crate) server_time: Option<jiff::Timestamp>,
    /// The node's medik8s lease (`None`: there is none, or it was not read).
    pub(crate) lease: Option<Lease>,
    /// The lease namespace is missing (read only when the lease is).
    pub(crate) lease_namespace_missing: bool,
    /// Whether the NodeMaintenance recorded as the node's holder still exists (`true` while the
    /// cache has not listed everything).
    pub(crate) holder_live: bool,
    /// Where the maintenance stands in the drain budget (`None`: no budget is set, or it takes
    /// no part).
    pub(crate) queue: Option<super::queue::Place>,
    /// The node entered first when `spec.nodeName` no longer names it ([`Reads::EnteredNode`]):
    /// its name, the node and its lease as read.
    pub(crate) entered: Option<(String, Option<Node>, Option<Lease>)>,
}

/// Everything one pass does.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Plan {
    /// The writes, in order; the first that fails ends the pass.
    pub(crate) writes: Vec<Write>,
    /// After the writes.
    pub(crate) then: Then,
    /// What the object's memory becomes once the writes are done.
    pub(crate) remember: Remember,
    /// The status the pass ends with, for the metrics (`None`: the pass plans none).
    pub(crate) status: Option<NodeMaintenanceStatus>,
}

impl Plan {
    fn wait(writes: Vec<Write>) -> Self {
        Plan {
            writes,
            then: Then::Requeue(Requeue::Never),
            remember: Remember::Same,
            status: None,
        }
    }

    /// Each write's kind and precondition, in order (the debug log).
    pub(crate) fn preconditions(&self) -> Vec<(&'static str, Precondition)> {
        self.writes
            .iter()
            .map(|w| (w.kind(), w.precondition()))
            .collect()
    }
}

/// How a pass goes on after its writes.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Then {
    /// Come back then ([`Requeue::LeaseWait`] never appears here: the plan resolves it).
    Requeue(Requeue),
    /// Run one drain round, then write what [`drained_plan`] makes of it.
    Drain(Box<DrainRound>),
    /// Ask the node's evictions with a dry run (the stage Preflight), then write what
    /// [`preflight_plan`] makes of the refusals.
    Preflight(Box<DrainRound>),
}

/// What the drain round needs from the pass that planned it.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct DrainRound {
    /// The node.
    pub(crate) node: String,
    /// The status before the drain (with the node entered).
    pub(crate) status: NodeMaintenanceStatus,
    /// The status the API server holds once the pass's writes are done.
    pub(crate) stored: NodeMaintenanceStatus,
    /// When the drain started, the time the drain compares pods' creation with
    /// (`timeline::arrival`): the start recorded on the node when the drain started (the API
    /// server's time of the node read of the pass that started it).
    pub(crate) started: Option<jiff::Timestamp>,
    /// The maintenance's drain policy, resolved by the pass ([`crate::policy::resolve`]).
    pub(crate) policy: crate::policy::DrainPolicy,
    /// `metadata.generation`.
    pub(crate) generation: Option<i64>,
    /// The status fields the API server prunes.
    pub(crate) pruned: Vec<String>,
}

/// The writes of a pass being planned, with the status the API server will hold after them
/// (so a status equal to it is not written again).
struct Writes {
    list: Vec<Write>,
    stored: NodeMaintenanceStatus,
    pruned: Vec<String>,
}

impl Writes {
    fn new(stored: NodeMaintenanceStatus, schema: &StatusSchema) -> Self {
        Writes {
            list: Vec::new(),
            stored,
            pruned: schema.pruned(),
        }
    }

    fn push(&mut self, w: Write) {
        self.list.push(w);
    }

    /// Writes `status` when it differs from the stored one in more than `lastUpdate`.
    fn status(&mut self, status: &NodeMaintenanceStatus) {
        if needs_write(&self.stored, status, &self.pruned) {
            self.list.push(Write::Status {
                patch: status_patch(status, None),
                sent: Box::new(status.clone()),
                wakes: write::wakes(&self.stored, status),
            });
            self.stored = status.clone();
        }
    }

    /// Publishes `events` (a Node event about `node`: name and uid).
    fn events(&mut self, events: Vec<PlannedEvent>, node: Option<&Node>) {
        for event in events {
            let node = match event.target {
                EventTarget::Node => node.map(|n| (n.name_any(), n.metadata.uid.clone())),
                EventTarget::Maintenance => None,
            };
            self.list.push(Write::Event { event, node });
        }
    }

    /// Records `step`: its status, then its events.
    fn finish(mut self, step: Step, node: Option<&Node>, memory: Memory) -> Plan {
        self.status(&step.status);
        self.events(step.events, node);
        let (requeue, remember) = match step.requeue {
            Requeue::LeaseWait => (
                Requeue::After(lease_wait(memory.lease_waits)),
                Remember::Set(Memory {
                    lease_waits: memory.lease_waits.saturating_add(1),
                    ..memory
                }),
            ),
            r => (r, Remember::Same),
        };
        Plan {
            writes: self.list,
            then: Then::Requeue(requeue),
            remember,
            status: Some(step.status),
        }
    }
}

/// The whole decision of one pass (pure: no I/O, no clock).
pub(crate) fn plan(o: &Observed, now: jiff::Timestamp) -> Plan {
    let (add_finalizer, e) = entry_with_finalizer(&o.nm);
    let mut plan = match (&o.world, e) {
        (World::Deletion(d), Entry::Cleanup) => {
            deletion::plan_deletion(d, preflight_events::removed(&o.nm, &o.policy), now)
        }
        (World::Maintenance(m), Entry::Maintain) => maintenance::plan_maintenance(o, m, None, now),
        (World::Maintenance(m), Entry::InvalidNodeName(why)) => {
            maintenance::plan_maintenance(o, m, Some(&why), now)
        }
        _ => Plan::wait(Vec::new()),
    };
    if add_finalizer {
        let begin = Write::Event {
            event: PlannedEvent::normal(
                EventTarget::Maintenance,
                preflight_events::begin(&o.nm, &o.policy),
            ),
            node: None,
        };
        let first = [add_finalizer_write(&o.nm), begin];
        plan.writes.splice(0..0, first);
    }
    plan
}

/// The drain round's writes, from what its evictions answered: the status [`drained`] makes of
/// the report (written when it changed), held by the `waitForVolumeDetach` wait when the round
/// observed the node's VolumeAttachments (`volumes`: only with the knob and no pod left), its
/// events, its requeue.
pub(crate) fn drained_plan(
    round: &DrainRound,
    report: &DrainReport,
    volumes: Option<&crate::drain::volume_detach::Observed>,
    now: jiff::Timestamp,
) -> Plan {
    let mut step = drained(&round.status, report, round.generation, now);
    if let Some(o) = volumes.filter(|_| report.done()) {
        use crate::drain::volume_detach as vd;
        let verdict = vd::verdict(
            vd::blockers(o, &round.node),
            &round.policy,
            o.at.unwrap_or(now),
        );
        let bound = vd::bound(&round.policy);
        step = volume_detach::hold(step, &round.status, verdict, bound, round.generation, now);
    }
    let mut writes = Writes {
        list: Vec::new(),
        stored: round.stored.clone(),
        pruned: round.pruned.clone(),
    };
    // Events about single pods first: the round has already recorded them as announced in the
    // drain's memory, so a status write that finds the object changed (a pass woken by an
    // eviction's answer may read the cache before our previous write reached it) must not take
    // them with it. The phase's events follow the status they announce.
    let (about_pods, phase): (Vec<_>, Vec<_>) =
        step.events.into_iter().partition(|e| e.pod.is_some());
    writes.events(about_pods, None);
    writes.status(&step.status);
    writes.events(phase, None);
    Plan {
        writes: writes.list,
        then: Then::Requeue(step.requeue),
        remember: Remember::Same,
        status: Some(step.status),
    }
}

/// The preflight's writes, from the refusals of its dry-run evictions: the status
/// [`preflight`] makes of them (written when it changed), its requeue.
pub(crate) fn preflight_plan(
    round: &DrainRound,
    blockers: &[crate::api::PodBlocker],
    now: jiff::Timestamp,
) -> Plan {
    let step = preflight(&round.status, blockers, round.generation, now);
    let mut writes = Writes {
        list: Vec::new(),
        stored: round.stored.clone(),
        pruned: round.pruned.clone(),
    };
    writes.status(&step.status);
    Plan {
        writes: writes.list,
        then: Then::Requeue(step.requeue),
        remember: Remember::Same,
        status: Some(step.status),
    }
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

/// The entry decision, with our finalizer taken as added when it is missing: whether to add it,
/// and what the pass does then.
pub(crate) fn entry_with_finalizer(nm: &NodeMaintenance) -> (bool, Entry) {
    match entry(nm) {
        Entry::AddFinalizer => {
            let mut with = nm.clone();
            with.finalizers_mut().push(FINALIZER.to_string());
            (true, entry(&with))
        }
        e => (false, e),
    }
}

/// The node a NodeMaintenance entered (its annotation), if recorded.
pub(crate) fn entered_node(nm: &NodeMaintenance) -> Option<&str> {
    nm.annotations()
        .get(crate::api::ENTERED_NODE_ANNOTATION)
        .map(String::as_str)
}

/// `node`'s `spec.providerID`, empty when it has none.
pub(crate) fn provider_id(node: &Node) -> &str {
    node.spec
        .as_ref()
        .and_then(|s| s.provider_id.as_deref())
        .unwrap_or_default()
}

/// A Node under the name `nm` entered that is another machine: the providerID `nm` recorded
/// ([`crate::api::ENTERED_NODE_PROVIDER_ID_ANNOTATION`]) for that name, and the one `node` has
/// (empty when none).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Replaced {
    /// The providerID of the node entered.
    pub(crate) entered: String,
    /// The providerID of the node found under its name now.
    pub(crate) found: String,
}

/// Whether `node` is another machine than the one `nm` entered under its name: `nm` recorded a
/// non-empty providerID for that name and `node`'s differs (or is empty). No record, an empty
/// one (the node had none) or the same providerID is the same machine, which resumes
/// (docs/drain-contract.md §3). The uid is no test: the same machine registering again is a new
/// Node object. A node that registers before its cloud controller sets the providerID is taken
/// for another until it shows the recorded one; the check is made on every pass, so it then
/// resumes.
pub(crate) fn replaced(nm: &NodeMaintenance, node: &Node) -> Option<Replaced> {
    let annotations = nm.annotations();
    if annotations.get(crate::api::ENTERED_NODE_ANNOTATION) != node.metadata.name.as_ref() {
        return None;
    }
    let entered = annotations
        .get(crate::api::ENTERED_NODE_PROVIDER_ID_ANNOTATION)
        .filter(|p| !p.is_empty())?;
    let found = provider_id(node);
    (entered != found).then(|| Replaced {
        entered: entered.clone(),
        found: found.to_owned(),
    })
}
