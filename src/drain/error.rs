//! The failure of a whole drain pass: a read it cannot do without failed or hung. Single
//! evictions never fail a pass (their answers are the round's facts).

use super::consts::READ_TIMEOUT;

/// Failure of a whole pass (the pod list or a GET it needs failed or hung); single evictions
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
    /// A GET the round needs failed with something other than NotFound: a pod's DaemonSet
    /// (kubectl aborts the drain in this case too), a namespace's labels (a drain rule's
    /// namespace selector), a pod's workload (`surge`).
    #[error("failed to get {what}: {source}")]
    Get {
        /// What was read: its kind and name, with the namespace where it has one
        /// (`DaemonSet ns/fluentd`, `namespace ns`).
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
