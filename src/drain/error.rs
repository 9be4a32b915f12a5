//! The failure of a whole drain pass: a read it cannot do without failed or hung. Single
//! evictions never fail a pass (their answers are the round's facts).

use super::consts::READ_TIMEOUT;

/// Failure of a whole pass (the pod list or a DaemonSet lookup failed or hung); single evictions
/// never fail a pass.
#[derive(Debug, thiserror::Error)]
pub(crate) enum DrainError {
    /// Listing the pods of the node failed.
    #[error("failed to list pods on node {node}: {source}")]
    ListPods {
        /// The node.
        node: String,
        /// The API error.
        source: kube::Error,
    },
    /// Looking up a pod's DaemonSet failed with something other than NotFound (kubectl aborts
    /// the drain in this case too).
    #[error("failed to get DaemonSet {namespace}/{name}: {source}")]
    DaemonSet {
        /// Namespace of the DaemonSet.
        namespace: String,
        /// Name of the DaemonSet.
        name: String,
        /// The API error.
        source: kube::Error,
    },
    /// Reading the labels of a pod's namespace (a drain rule's namespace selector) failed.
    #[error("failed to get namespace {name} for the drain rules: {source}")]
    Namespace {
        /// The namespace.
        name: String,
        /// The API error.
        source: kube::Error,
    },
    /// Reading a pod's workload (`surge`: its ReplicaSet or Deployment) failed.
    #[error("failed to get {what}: {source}")]
    Workload {
        /// What was read: its kind, namespace and name (`ReplicaSet ns/web-5d8f`).
        what: String,
        /// The API error.
        source: kube::Error,
    },
    /// A read did not answer within [`READ_TIMEOUT`].
    #[error("{what} did not answer within {}s", READ_TIMEOUT.as_secs())]
    Timeout {
        /// The call, e.g. `the list of pods on node n1 (page 3)`.
        what: String,
    },
}
