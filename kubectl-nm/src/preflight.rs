//! `kubectl nm preflight <node>`: what would block the node's drain, without touching it.

use std::io::Write;
use std::time::Duration;

use kube::api::{Api, DeleteParams};
use node_maintenance_operator::api::{NodeMaintenance, Stage};

use crate::create::{create, set_stage};
use crate::failure::Failure;
use crate::render::blocker_table;
use crate::{EXIT_BLOCKED, EXIT_ERROR};

/// `preflight <node>`: creates a NodeMaintenance (`nm-preflight-<node>-<random>`) in stage
/// Preflight, waits at most `timeout` for the operator's answer, prints the blocker table, then
/// deletes the object and waits until it is gone (the operator's finalizer released), so nothing
/// is left behind whatever the answer.
///
/// The answer is the `Stage` condition with reason Preflight whose `observedGeneration` is the
/// object's generation: the operator writes it in the same status write as the dry-run
/// evictions' `status.blockers` (docs/design.md §1, "Stages"), so it vouches for them.
///
/// # Errors
/// [`EXIT_BLOCKED`] when something blocks (the table printed); [`crate::EXIT_REFUSED`] when admission
/// refuses the object; [`EXIT_ERROR`] when no answer came within `timeout` (an operator without
/// the `stage` knob, or upstream's CRD, which prunes `status.conditions`) or on API errors.
pub(crate) async fn preflight(
    client: &kube::Client,
    node: &str,
    timeout: Duration,
    out: &mut dyn Write,
) -> Result<(), Failure> {
    use kube::runtime::wait::await_condition;
    let nms: Api<NodeMaintenance> = Api::all(client.clone());
    let mut nm = NodeMaintenance::new(
        "",
        node_maintenance_operator::api::NodeMaintenanceSpec {
            node_name: node.to_string(),
            reason: Some("kubectl nm preflight".into()),
            ..Default::default()
        },
    );
    nm.metadata.name = None;
    nm.metadata.generate_name = Some(format!("nm-preflight-{node}-"));
    set_stage(&mut nm, Stage::Preflight);
    let (warnings, created) = create(client, &nm).await?;
    for warning in warnings {
        let _ = writeln!(out, "Warning: {warning}");
    }
    let name = created.metadata.name.clone().unwrap_or_default();
    let generation = created.metadata.generation;
    let answered = move |nm: Option<&NodeMaintenance>| {
        nm.and_then(|nm| nm.status.as_ref()?.conditions.as_ref())
            .is_some_and(|cs| {
                cs.iter().any(|c| {
                    c.type_ == "Stage"
                        && c.status == "True"
                        && c.reason == "Preflight"
                        && c.observed_generation == generation
                })
            })
    };
    let answer = tokio::time::timeout(timeout, await_condition(nms.clone(), &name, answered)).await;

    // Deleted whatever the answer, so a preflight leaves nothing behind.
    let uid = created.metadata.uid.clone().unwrap_or_default();
    let gone = delete_and_wait(&nms, &name, &uid, timeout).await;

    let status = match answer {
        Ok(Ok(nm)) => nm.and_then(|nm| nm.status).unwrap_or_default(),
        Ok(Err(e)) => return Err(Failure::error(e)),
        Err(_) => {
            return Err(Failure(
                EXIT_ERROR,
                format!(
                    "error: timed out after {} waiting for the preflight of node/{node} \
                     (nodemaintenance/{name}, condition Stage=Preflight for generation {}): \
                     is the operator running, with its own CRD?",
                    human(timeout),
                    generation.unwrap_or_default()
                ),
            ));
        }
    };
    let _ = write!(out, "{}", blocker_table(&status));
    gone?;
    let blocked = status.blockers.as_ref().map_or(0, Vec::len);
    if blocked > 0 {
        return Err(Failure(
            EXIT_BLOCKED,
            format!("error: {blocked} pod(s) would stay on node/{node} if it were drained now"),
        ));
    }
    Ok(())
}

/// Deletes NodeMaintenance `name` (gone already is fine) and waits at most `timeout` until the
/// object with `uid` is gone, i.e. the operator released its finalizer.
///
/// # Errors
/// [`EXIT_ERROR`] on an API error or when it is still there after `timeout`.
pub(crate) async fn delete_and_wait(
    nms: &Api<NodeMaintenance>,
    name: &str,
    uid: &str,
    timeout: Duration,
) -> Result<(), Failure> {
    use kube::runtime::wait::{await_condition, conditions};
    match nms.delete(name, &DeleteParams::default()).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 404 => return Ok(()),
        Err(e) => return Err(e.into()),
    }
    match tokio::time::timeout(
        timeout,
        await_condition(nms.clone(), name, conditions::is_deleted(uid)),
    )
    .await
    {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(Failure::error(e)),
        Err(_) => Err(Failure(
            EXIT_ERROR,
            format!(
                "error: nodemaintenance/{name} is still there {} after its deletion",
                human(timeout)
            ),
        )),
    }
}

/// A duration as kubectl's `--timeout` takes it (`1m30s`).
pub(crate) fn human(d: Duration) -> String {
    jiff::SignedDuration::try_from(d).map_or_else(|_| format!("{d:?}"), |d| format!("{d:#}"))
}
