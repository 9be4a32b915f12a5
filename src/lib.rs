//! node-maintenance-operator: keeps a node cordoned, tainted and drained for as long as a
//! `NodeMaintenance` exists, and restores it when the object is deleted. A drop-in replacement for
//! the medik8s Node Maintenance Operator: same API, names and strings.

pub mod admission;
pub mod api;
pub mod bundle;
pub mod config;
pub mod controller;
pub mod drain;
pub mod leader;
pub mod lease;
pub mod metrics;
pub mod node;
pub mod nodewatch;
pub mod run;
pub mod telemetry;
