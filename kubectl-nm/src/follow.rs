//! Following a maintenance until it Succeeds: `start --wait` and `watch`.
//!
//! A block (the summary line and the blocker table) is printed only when what it shows changed:
//! the phase, the drain progress or the blocker rows ([`crate::render::blocker_rows`], one
//! stable row per pod). A drain held by a budget therefore prints one block until something
//! changes, however often the operator rewrites its status (each `lastUpdate`, each retry's
//! `lastError`), and each held pod stays attributed to what holds it while it is asked again
//! ([`Attribution`]).

use std::collections::BTreeMap;
use std::io::Write;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use kube::api::Api;
use kube::runtime::watcher::Event;
use kube::runtime::{WatchStreamExt, watcher};
use node_maintenance_operator::api::{MaintenancePhase, NodeMaintenance, NodeMaintenanceStatus};

use crate::failure::Failure;
use crate::preflight::human;
use crate::render::{blocker_rows, blocker_table, summary, table_of};
use crate::{EXIT_ERROR, EXIT_TIMEOUT};

/// How long a maintenance may go without any status before the wait says that no operator
/// seems to be running: the operator writes its first status within seconds of a create (its
/// finalizer and phase), even with its queue full.
pub(crate) const NO_STATUS_HINT_AFTER: Duration = Duration::from_secs(60);

/// The reason the operator gives a pod whose eviction was sent and not answered yet
/// (`src/drain/mod.rs`, `reason::EVICTING`): a question in flight, not an answer.
const EVICTING: &str = "Evicting";

/// Each pod's last answered row (any reason but [`EVICTING`]) seen by this wait. A pod held by
/// a budget is asked again every few seconds, and the operator shows it `Evicting` while each
/// ask is in flight, so the table would flip between `PodDisruptionBudget` and `Evicting` while
/// nothing changed. What holds a pod is the last answer about it until a new answer comes:
/// a pod shown `Evicting` keeps its last answered row; a pod never answered yet shows
/// `Evicting`.
#[derive(Debug, Default)]
pub(crate) struct Attribution {
    answered: BTreeMap<String, [String; 5]>,
}

impl Attribution {
    /// `rows` (as [`blocker_rows`]) with each `Evicting` pod given its last answered row;
    /// remembers the answered ones, and forgets pods no longer listed.
    pub(crate) fn rows(&mut self, rows: Vec<[String; 5]>) -> Vec<[String; 5]> {
        self.answered
            .retain(|pod, _| rows.iter().any(|r| &r[0] == pod));
        rows.into_iter()
            .map(|row| {
                if row[1] == EVICTING {
                    self.answered.get(&row[0]).cloned().unwrap_or(row)
                } else {
                    self.answered.insert(row[0].clone(), row.clone());
                    row
                }
            })
            .collect()
    }
}

/// What a printed block shows, compared to decide whether to print again: phase, drain
/// progress and the blocker rows (as [`Attribution`] gives them).
#[derive(PartialEq, Eq, Debug, Default)]
pub(crate) struct Shown {
    phase: Option<String>,
    progress: Option<i32>,
    rows: Vec<[String; 5]>,
}

impl Shown {
    /// What `status` shows with `rows` for its blockers.
    pub(crate) fn of(status: &NodeMaintenanceStatus, rows: Vec<[String; 5]>) -> Self {
        Shown {
            phase: status.phase.map(|p| p.to_string()),
            progress: status.drain_progress,
            rows,
        }
    }
}

/// Watches NodeMaintenance `name`, printing a block on `out` each time [`Shown`] changes, until
/// it Succeeds (Ok). After [`NO_STATUS_HINT_AFTER`] without any status, one line on `err` says
/// no operator seems to be running (the wait goes on).
///
/// # Errors
/// [`EXIT_ERROR`] when it Fails (its `lastError`), is deleted or is not there;
/// [`EXIT_TIMEOUT`] when `timeout` passes (the blocker table printed if no block was).
pub(crate) async fn wait_succeeded(
    nms: &Api<NodeMaintenance>,
    name: &str,
    timeout: Duration,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<(), Failure> {
    let mut last: Option<NodeMaintenanceStatus> = None;
    let mut shown: Option<Shown> = None;
    let mut attribution = Attribution::default();
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
            let nm = match event
                .map_err(|e| Failure::error(format!("watching nodemaintenance/{name}: {e}")))?
            {
                None => {
                    return Err(Failure::error(format!(
                        "the watch of nodemaintenance/{name} ended"
                    )));
                }
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
            let now = Shown::of(&status, attribution.rows(blocker_rows(&status)));
            if shown.as_ref() != Some(&now) {
                let _ = write!(
                    out,
                    "nodemaintenance/{name}: {}\n{}",
                    summary(&status),
                    table_of(now.rows.clone(), &status)
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
            // The last block printed is the last status's table, unless it never printed.
            if shown.is_none() {
                let _ = write!(out, "{}", blocker_table(&last.unwrap_or_default()));
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

    fn status(v: serde_json::Value) -> NodeMaintenanceStatus {
        serde_json::from_value(v).unwrap()
    }

    fn shown(a: &mut Attribution, v: &serde_json::Value) -> Shown {
        let s = status(v.clone());
        Shown::of(&s, a.rows(blocker_rows(&s)))
    }

    #[test]
    fn a_block_is_shown_again_only_for_phase_progress_or_rows() {
        let held = serde_json::json!({"phase": "Running", "drainProgress": 0,
            "lastError": "one", "pendingPods": ["a"],
            "blockers": [{"namespace": "ns", "name": "a", "reason": "PodDisruptionBudget",
                          "podDisruptionBudget": "g"}]});
        let a = &mut Attribution::default();
        let mut rewritten = held.clone();
        rewritten["lastError"] = "two".into();
        rewritten["lastUpdate"] = "2026-01-01T00:00:00Z".into();
        assert_eq!(shown(a, &held), shown(a, &rewritten));
        let mut moved = held.clone();
        moved["drainProgress"] = 50.into();
        assert_ne!(shown(a, &held), shown(a, &moved));
        let mut other = held.clone();
        other["blockers"][0]["reason"] = "Terminating".into();
        assert_ne!(shown(a, &held), shown(a, &other));
    }

    #[test]
    fn a_held_pod_asked_again_stays_attributed_to_its_budget() {
        let a = &mut Attribution::default();
        let evicting = serde_json::json!({"blockers": [
            {"namespace": "ns", "name": "a", "reason": "Evicting"}]});
        let held = serde_json::json!({"blockers": [
            {"namespace": "ns", "name": "a", "reason": "PodDisruptionBudget",
             "podDisruptionBudget": "g", "desiredHealthy": 2, "currentHealthy": 2}]});
        // Never answered yet: shown as asked.
        assert_eq!(shown(a, &evicting).rows[0][1], "Evicting");
        let first = shown(a, &held);
        assert_eq!(first.rows[0][2], "g");
        // Asked again: the budget's answer stands.
        assert_eq!(shown(a, &evicting), first);
        // A new answer replaces it.
        let gone = serde_json::json!({"blockers": [
            {"namespace": "ns", "name": "a", "reason": "Terminating"}]});
        assert_eq!(shown(a, &gone).rows[0][1], "Terminating");
        assert_eq!(shown(a, &evicting).rows[0][1], "Terminating");
        // A pod no longer listed is forgotten.
        assert!(shown(a, &serde_json::json!({})).rows.is_empty());
        assert_eq!(shown(a, &evicting).rows[0][1], "Evicting");
    }
}
