//! The process's shared watches and the toolkit every watch uses, below all of their readers:
//! the controller, admission and the process wiring import this module, and it imports none of
//! them (`docs/design.md §4`, `§7`).
//!
//! - [`nodes`]: the one Node watch, started by the process ([`crate::run`]) and read by the
//!   admission rules and the controller's triggers;
//! - [`relist`]: what every watch needs to survive an API server restart: its back-off, the
//!   logging of its errors, and the deletions a relist implies.

pub(crate) mod nodes;
pub(crate) mod relist;
