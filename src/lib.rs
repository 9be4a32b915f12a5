//! node-maintenance-operator: keeps a node cordoned, tainted and drained for as long as a
//! `NodeMaintenance` exists, and restores it when the object is deleted. A drop-in replacement for
//! the medik8s Node Maintenance Operator: same API, names and strings.
//!
//! Public for the binaries (`main`, `crdgen`), the tests and the benches: the CRD types
//! ([`api`]), the flags ([`config`]), [`run::run`], [`telemetry::init`] and
//! [`admission::WEBHOOK_PATH`]. Everything else is crate-private. The OLM bundle and Helm chart
//! generators are the workspace crate `nmo-packaging` (`packaging/`).

pub mod admission;
// kube's `KubeSchema` derive re-emits `NodeMaintenanceSpec` as a `pub` copy inside a function to
// build its schema; that copy is the only unreachable `pub` item here (every type of the module
// is public API).
#[allow(unreachable_pub)]
pub mod api;
pub(crate) mod bounds;
/// The Kubernetes clients: kube's stack with `TCP_NODELAY` (public for the benchmarks' bare
/// clients, which must be no slower than the operator's).
pub mod client;
pub mod config;
pub(crate) mod controller;
pub(crate) mod drain;
pub mod knobs;
pub(crate) mod leader;
pub(crate) mod lease;
pub(crate) mod metrics;
pub(crate) mod node;
pub mod policy;
pub mod run;
pub(crate) mod server_time;
pub mod telemetry;
pub(crate) mod tls_profile;
pub(crate) mod watch;
