//! The errors that end the process (a leaf: every part of `run` reports through it).

use std::net::SocketAddr;

use crate::leader;

/// Errors that end the process. Each displays as one line naming what failed and why.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// No usable Kubernetes client configuration.
    #[error("{0}")]
    KubeConfig(String),
    /// The client could not be built from the configuration (bad TLS material, bad URL).
    #[error("cannot create Kubernetes client: {0}")]
    Client(#[source] kube::Error),
    /// A plain-HTTP listener could not be bound.
    #[error("cannot listen on {addr} for the {what} server: {source}")]
    Bind {
        /// `metrics` or `health probe`.
        what: &'static str,
        /// The address.
        addr: SocketAddr,
        /// The I/O error (address in use, permission denied).
        #[source]
        source: std::io::Error,
    },
    /// The webhook server failed to start or stopped with an error.
    #[error(transparent)]
    Webhook(#[from] nmo_webhook::ServeError),
    /// Leader election could not be set up.
    #[error(transparent)]
    Leader(#[from] leader::LeaderError),
    /// This replica was the leader and lost the Lease; the controller has been stopped.
    #[error(
        "leader election lost: {0}; exiting so that Kubernetes restarts this replica as a standby"
    )]
    LeadershipLost(String),
    /// `--metrics-secure` has no usable serving certificate.
    #[error("{0}")]
    MetricsTls(String),
    /// The admission handler could not be set up (API discovery failed).
    #[error("cannot set up admission: {0}")]
    Admission(#[source] crate::admission::AdmissionError),
    /// The API server does not serve NodeMaintenance (controller-rs's CRD-present check at
    /// start-up, rather than watches retrying 404s forever).
    #[error(
        "the NodeMaintenance CRD (nodemaintenances.nodemaintenance.medik8s.io) is not installed; apply manifests/crd.yaml"
    )]
    CrdMissing,
    /// An essential task ended on its own.
    #[error("{0} stopped unexpectedly")]
    TaskEnded(&'static str),
    /// The webhook's thread or runtime could not be started.
    #[error("cannot start the admission thread: {0}")]
    AdmissionThread(#[source] std::io::Error),
    /// A signal handler could not be installed.
    #[error("cannot install the {0} signal handler: {1}")]
    Signal(&'static str, #[source] std::io::Error),
}
