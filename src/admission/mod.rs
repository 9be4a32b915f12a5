//! Admission rules for `NodeMaintenance` (the validating webhook `vnodemaintenance.kb.io`).
//!
//! Upstream's checks and exact denial texts (`docs/compat.md §6`), decided from watch caches kept
//! by every replica (`docs/design.md §4`), with upstream's weaknesses fixed:
//! - concurrent CREATEs for one node are decided one at a time against the cache plus the
//!   reservations of admitted CREATEs the cache does not show yet, so exactly one is admitted;
//! - the etcd quorum guard also protects non-OpenShift clusters (etcd static pods, else
//!   control-plane labelled nodes, counted as members);
//! - a `spec.nodeName` no node can have gets upstream's not-found text and why.
//!
//! Units: `rules` (the pure CREATE/UPDATE decisions and denial texts), `quorum` (the etcd quorum
//! rules), `platform` (OpenShift or not, detected once), `reservations` (admitted CREATEs not yet
//! cached), `warnings` (the CREATE warnings: budgets that hold the drain, pods that stay or lose
//! data, last ready replicas, the share of nodes under maintenance), `cache` (the stripped
//! reflectors, beside the process's Node watch), `pods` (the indexed pod cache of the warnings) and `webhook` (the
//! decision over the caches and the [`nmo_webhook`] adapter, [`router`]).

mod cache;
mod platform;
mod pods;
mod quorum;
mod reservations;
mod rules;
mod warnings;
mod webhook;

pub use platform::AdmissionError;
pub(crate) use platform::{Platform, detect_platform};
pub use webhook::WEBHOOK_PATH;
pub(crate) use webhook::{Admission, WarningSettings, router};
