//! Admission rules for `NodeMaintenance` (the validating webhook `vnodemaintenance.kb.io`).
//!
//! Upstream's checks and exact denial strings (nmo-compat.md §9) with its weaknesses fixed
//! (§16 rows 9, 10, 20):
//! - lookups go to the API server, not a cache, and concurrent CREATEs for one node are serialised
//!   inside the process, with admitted-but-not-yet-listed objects remembered, so exactly one of
//!   several racing CREATEs for a node is admitted;
//! - the etcd quorum guard also protects non-OpenShift clusters (etcd static pods, else
//!   control-plane labelled nodes, counted as members);
//! - an empty or malformed `spec.nodeName` gets a clear message.
//!
//! The decisions are pure functions over observed facts ([`validate_create`],
//! [`validate_update`], [`etcd_quorum_allows`], [`openshift_quorum_allows`]); [`Admission`] does
//! the lookups and plugs into [`nmo_webhook`] via [`router`].
//!
//! Units: `rules` (the pure CREATE/UPDATE decisions and denial texts), `quorum` (the etcd quorum
//! rules), `reservations` (admitted CREATEs not yet listed) and `webhook` (the lookups and the
//! [`nmo_webhook`] adapter).

mod quorum;
mod reservations;
mod rules;
mod webhook;

pub use quorum::*;
pub use reservations::*;
pub use rules::*;
pub use webhook::*;
