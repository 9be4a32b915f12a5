//! Following a maintenance until it Succeeds: `start --wait` and `watch`.
//!
//! A block (the summary line and the blocker table) is printed only when what it shows changed:
//! the phase, the drain progress or the blocker rows ([`crate::render::blocker_rows`], one
//! stable row per pod). A drain held by a budget therefore prints one block until something
//! changes, however often the operator rewrites its status (each `lastUpdate`, each retry's
//! `lastError`).

use std::io::Write;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use kube::api::Api;
use kube::runtime::watcher::Event;
use kube::runtime::{WatchStreamExt, watcher};
use node_maintenance_operator::api::{MaintenancePhase, NodeMaintenance, NodeMaintenanceStatus};

use crate::failure::Failure;
use crate::preflight::human;
use crate::render::{blocker_rows, blocker_table, summary};
use crate::{EXIT_ERROR, EXIT_TIMEOUT};

/// How long a maintenance may go without any status before the wait says that no operator
/// seems to be running: the operator writes its first status within seconds of a create (its
/// finalizer and phase), even with its queue full.
pub(crate) const NO_STATUS_HINT_AFTER: Duration = Duration::from_secs(60);

/// What a printed block shows, compared to decide whether to print again: phase, drain
/// progress and the blocker rows.
#[derive(PartialEq, Eq, Debug, Default)]
pub(crate) struct Shown {
    phase: Option<String>,
    progress: Option<i32>,
    rows: Vec<[String; 5]>,
}

impl Shown {
    /// What `status` shows.
    pub(crate) fn of(status: &NodeMaintenanceStatus) -> Self {
        Shown {
            phase: status.phase.map(|p| p.to_string()),
            progress: status.drain_progress,
            rows: blocker_rows(status),
        }
    }
}

/// Watches NodeMaintenance `name`, printing a block on `out` each time [`Shown`] changes, until
/// it Succeeds (Ok). After [`NO_STATUS_HINT_AFTER`] without any status, one line on `err` says
/// no operator seems to be running (the wait goes on).
///
/// # Errors
/// [`EXIT_ERROR`] when it Fails (its `lastError`), is deleted or is not there;
/// [`EXIT_TIMEOUT`] when `timeout` passes (the last blocker table printed if it was not the last
/// block).
pub(crate) async fn wait_succeeded(
    nms: &Api<NodeMaintenance>,
    name: &str,
    timeout: Duration,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<(), Failure> {
    let mut last: Option<NodeMaintenanceStatus> = None;
    let mut shown: Option<Shown> = None;
    let watch = async {
        let mut stream = watcher(
            nms.clone(),
            watcher::Config::default().fields(&format!("metadata.name={name}")),
        )
        .default_backoff()
        .boxed();
        let hint = tokio::time::sleep(NO_STATUS_HINT_AFTER);
        let mut hint = std::pin::pin!(hint);
        let mut hinted = false;
        let mut seen_in_list = false;
        loop {
            let event = tokio::select! {
                event = stream.try_next() => event,
                () = &mut hint, if !hinted => {
                    hinted = true;
                    if last.as_ref().is_none_or(|s| *s == NodeMaintenanceStatus::default()) {
                        let _ = writeln!(
                            err,
                            "warning: nodemaintenance/{name} has no status after {}: no operator \
                             seems to be running (is the node-maintenance-operator Deployment up \
                             and its webhook registered?)",
                            human(NO_STATUS_HINT_AFTER)
                        );
                    }
                    continue;
                }
            };
            let nm = match event.map_err(|e| {
                Failure::error(format!("watching nodemaintenance/{name}: {e}"))
            })? {
                None => return Err(Failure::error(format!("the watch of nodemaintenance/{name} ended"))),
                Some(Event::Init) => {
                    seen_in_list = false;
                    continue;
                }
                Some(Event::InitDone) if !seen_in_list => {
                    return Err(Failure::error(format!("nodemaintenance/{name} not found")));
                }
                Some(Event::InitDone) => continue,
                Some(Event::Delete(_)) => {
                    return Err(Failure::error(format!(
                        "nodemaintenance/{name} was deleted before it Succeeded"
                    )));
                }
                Some(Event::InitApply(nm)) => {
                    seen_in_list = true;
                    nm
                }
                Some(Event::Apply(nm)) => nm,
            };
            let status = nm.status.clone().unwrap_or_default();
            let now = Shown::of(&status);
            if shown.as_ref() != Some(&now) {
                let _ = write!(
                    out,
                    "nodemaintenance/{name}: {}\n{}",
                    summary(&status),
                    blocker_table(&status)
                );
                shown = Some(now);
            }
            last = Some(status.clone());
            match status.phase {
                Some(MaintenancePhase::Succeeded) => return Ok(()),
                Some(MaintenancePhase::Failed) => {
                    return Err(Failure(
                        EXIT_ERROR,
                        format!(
                            "error: nodemaintenance/{name} Failed: {}",
                            status.last_error.unwrap_or_default()
                        ),
                    ));
                }
                _ => {}
            }
        }
    };
    match tokio::time::timeout(timeout, watch).await {
        Ok(r) => r,
        Err(_) => {
            let last = last.unwrap_or_default();
            if shown.as_ref() != Some(&Shown::of(&last)) {
                let _ = write!(out, "{}", blocker_table(&last));
            }
            Err(Failure(
                EXIT_TIMEOUT,
                format!(
                    "error: timed out after {} waiting for nodemaintenance/{name} to succeed",
                    human(timeout)
                ),
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_block_is_shown_again_only_for_phase_progress_or_rows() {
        let status = |v: serde_json::Value| -> NodeMaintenanceStatus {
            serde_json::from_value(v).unwrap()
        };
        let held = serde_json::json!({"phase": "Running", "drainProgress": 0,
            "lastError": "one", "pendingPods": ["a"],
            "blockers": [{"namespace": "ns", "name": "a", "reason": "PodDisruptionBudget",
                          "podDisruptionBudget": "g"}]});
        let mut rewritten = held.clone();
        rewritten["lastError"] = "two".into();
        rewritten["lastUpdate"] = "2026-01-01T00:00:00Z".into();
        assert_eq!(Shown::of(&status(held.clone())), Shown::of(&status(rewritten)));
        let mut moved = held.clone();
        moved["drainProgress"] = 50.into();
        assert_ne!(Shown::of(&status(held.clone())), Shown::of(&status(moved)));
        let mut other = held.clone();
        other["blockers"][0]["reason"] = "Terminating".into();
        assert_ne!(Shown::of(&status(held)), Shown::of(&status(other)));
    }
}
