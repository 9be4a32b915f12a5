//! The process's shared watches and the toolkit every watch uses, below all of their readers:
//! the controller, admission and the process wiring import this module, and it imports none of
//! them (`docs/design.md §4`, `§7`).
//!
//! - [`nodes`]: the one Node watch, started by the process ([`crate::run`]) and read by the
//!   admission rules and the controller's triggers;
//! - [`relist`]: what every watch needs to survive an API server restart: its back-off, the
//!   logging of its errors, and the deletions a relist implies;
//! - [`optional`]: a watch of a resource the cluster may not serve, found by discovery (the
//!   drain's KubeVirt migrations and Evictions).

pub(crate) mod nodes;
pub(crate) mod optional;
pub(crate) mod relist;

/// Hands the heap a list freed (its response bodies and parsed objects, tens of MB on a large
/// cluster) back to the system. glibc keeps freed memory in its arena and returns it on its
/// own only from the top of the heap, so without this the list's peak would stay in the RSS
/// for good.
pub(crate) fn release_freed_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim takes no pointers; it only walks the allocator's own free lists.
    unsafe {
        libc::malloc_trim(0);
    }
}
