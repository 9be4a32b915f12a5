//! What one pass read (the output of the reconcile's `observe`, the input of
//! [`plan`](super::plan)): the NodeMaintenance, the node, lease and pods as far as the pass needs
//! them, and what earlier passes remember. A leaf of the plan.

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;

use crate::api::NodeMaintenance;
use crate::controller::memory::{Memory, StatusSchema};
use crate::drain::Survey;

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
    /// Its drain policy, the operator's defaults (its flags) resolved with the object's own
    /// knobs once a pass ([`crate::policy::resolve`]), and the values refused.
    pub(crate) policy: crate::policy::Resolved,
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
    pub(crate) queue: Option<crate::controller::queue::Place>,
    /// The node entered first when `spec.nodeName` no longer names it ([`Reads::EnteredNode`]):
    /// its name, the node and its lease as read.
    pub(crate) entered: Option<(String, Option<Node>, Option<Lease>)>,
}

/// What the deletion pass of a NodeMaintenance observed (the input of `deletion::plan_deletion`).
#[derive(Clone, Debug, Default)]
pub(crate) struct ObservedDeletion {
    /// `metadata.name` of the NodeMaintenance being deleted.
    pub(crate) name: String,
    /// Its `metadata.uid`.
    pub(crate) uid: Option<String>,
    /// The node it entered ([`ENTERED_NODE_ANNOTATION`](crate::api::ENTERED_NODE_ANNOTATION)),
    /// else `spec.nodeName`.
    pub(crate) node_name: String,
    /// The node as read; `None` when it does not exist or `node_name` is no valid node name
    /// (then it was not read).
    pub(crate) node: Option<Node>,
    /// The live NodeMaintenance that should take the node over ([`successor`]): name and uid.
    pub(crate) successor: Option<(String, Option<String>)>,
    /// `status.phase` is set: the maintenance was started (by us or by upstream NMO).
    pub(crate) started: bool,
    /// The node's medik8s lease (`None`: there is none, or `node_name` is invalid).
    pub(crate) lease: Option<Lease>,
    /// `metadata.finalizers` of the NodeMaintenance.
    pub(crate) finalizers: Vec<String>,

    /// KubeVirt's evacuations off the node (empty without KubeVirt); cancelled only when this
    /// pass restores the node.
    pub(crate) evacuations: crate::drain::cancel::Evacuations,

    /// The node as read is another machine than the one entered under its name
    /// ([`super::replaced`](super::node_found::replaced)): never adopted (nothing on it was ours; a record on it is another
    /// maintenance's, and is left alone as any other holder's).
    pub(crate) replaced: bool,
}
