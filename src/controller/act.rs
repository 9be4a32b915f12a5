//! The executor: sends a plan's writes in order and stops at the first that fails. It decides
//! nothing: every body, precondition and target comes from the plan. A precondition that fails
//! (409) or an object that vanished ends the pass ([`Executed::Stopped`]): the next pass observes
//! again, as kube-runtime's `finalizer` and controller-runtime's reconcilers do. Any other API
//! error is returned with upstream's `lastError` text. Events, and the writes the plan marks as
//! not required, are best effort: a failure is logged and the next write is sent. Once the
//! writes are done, [`carry_out`] applies what the plan says to remember and records the metrics
//! of the status it ends with.

use k8s_openapi::api::core::v1::{Namespace, ObjectReference};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType};
use kube::{Resource, ResourceExt};

use super::context::{Context, Error, REPORTER};
use super::memory::Remember;
use super::plan::{EventTarget, NodePurpose, Plan, PlannedEvent, Requeue, Then, Write};
use crate::api::{MaintenancePhase, NodeMaintenance, NodeMaintenanceStatus};
use crate::lease::LeaseError;
use crate::node::{EnterOutcome, NodeError};

/// How far a plan's writes got.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Executed {
    /// Every write was sent.
    Done,
    /// A precondition failed or an object vanished: the pass ends and the next one observes
    /// again.
    Stopped,
}

/// Executes `plan`'s writes, then applies its memory and metrics; `None` when a write stopped
/// the pass.
pub(crate) async fn carry_out(
    ctx: &Context,
    current: &mut NodeMaintenance,
    plan: Plan,
) -> Result<Option<Then>, Error> {
    let before = current.status.as_ref().and_then(|s| s.phase);
    if execute(ctx, current, plan.writes).await? == Executed::Stopped {
        return Ok(None);
    }
    let name = current.name_any();
    ctx.memory.apply(&name, plan.remember);
    if plan.remember == Remember::Forget {
        ctx.metrics.forget_maintenance(&name);
    }
    if let Some(status) = &plan.status {
        record_metrics(ctx, current, before, status);
    }
    Ok(Some(plan.then))
}

/// The metrics of a status a pass ended with: the blockers and the pods evacuating while
/// Running (from the planned status, not the stored one: upstream's CRD prunes `blockers` and
/// `evacuatingPods`) and the drain's duration on the transition to Succeeded.
fn record_metrics(
    ctx: &Context,
    nm: &NodeMaintenance,
    before: Option<MaintenancePhase>,
    status: &NodeMaintenanceStatus,
) {
    let running = status.phase == Some(MaintenancePhase::Running);
    ctx.metrics.set_blockers(
        &nm.name_any(),
        &nm.spec.node_name,
        status
            .blockers
            .iter()
            .flatten()
            .filter(|_| running)
            .map(|b| b.reason.as_str()),
    );
    ctx.metrics.set_evacuating(
        &nm.name_any(),
        &nm.spec.node_name,
        status
            .evacuating_pods
            .filter(|_| running)
            .map_or(0, i64::from),
    );
    if status.phase == Some(MaintenancePhase::Succeeded)
        && before != Some(MaintenancePhase::Succeeded)
        && let Some(start) = &status.drain_start_time
    {
        // The operator's clock now, from the start by the API server's: cluster clocks are kept
        // in step (NTP); a skew that would make it negative counts zero.
        let seconds = jiff::Timestamp::now().duration_since(start.0).as_secs_f64();
        ctx.metrics.drain_duration(seconds.max(0.0));
        tracing::info!("Maintenance was completed - all pods were evicted");
    }
}

/// The controller's action for a plan's requeue.
pub(crate) fn action(requeue: Requeue) -> Action {
    match requeue {
        Requeue::After(d) => Action::requeue(d),
        Requeue::Fixed(d) => {
            tracing::info!(duration = ?d, "Reconciling with fixed duration");
            Action::requeue(d)
        }
        // Resolved by the plan; a wait of its first length if it ever gets here.
        Requeue::LeaseWait => Action::requeue(super::plan::LEASE_WAIT_INITIAL),
        Requeue::Never => Action::await_change(),
    }
}

/// Sends `writes` in order for `nm`, which is kept as the last write to it returned (so the next
/// one carries its resourceVersion).
///
/// # Errors
/// The first write's API error other than a failed precondition or a vanished object:
/// [`Error::AddFinalizer`], [`Error::RemoveFinalizer`], [`Error::RecordEnteredNode`],
/// [`Error::Status`], [`Error::Node`], [`Error::StopAfterLeaseLoss`], [`Error::Lease`].
pub(crate) async fn execute(
    ctx: &Context,
    nm: &mut NodeMaintenance,
    writes: Vec<Write>,
) -> Result<Executed, Error> {
    for write in writes {
        let kind = write.kind();
        let answer = send(ctx, nm, write).await;
        match answer {
            Ok(Sent::Done) => {}
            Ok(Sent::Stopped(why)) => {
                tracing::info!(
                    write = kind,
                    why,
                    "write not applied; the next pass reads again"
                );
                return Ok(Executed::Stopped);
            }
            Err(e) => return Err(e),
        }
    }
    Ok(Executed::Done)
}

/// As [`execute`], for writes that concern no NodeMaintenance (the orphan sweep's Node and lease
/// writes; a NodeMaintenance write among them would go to an object without a name and fail).
///
/// # Errors
/// As [`execute`].
pub(crate) async fn execute_unowned(ctx: &Context, writes: Vec<Write>) -> Result<Executed, Error> {
    let mut none = NodeMaintenance::new("", crate::api::NodeMaintenanceSpec::default());
    execute(ctx, &mut none, writes).await
}

enum Sent {
    Done,
    Stopped(&'static str),
}

/// A 409 (a precondition failed) or a 404 (the object vanished), which end the pass.
fn stops(e: &kube::Error) -> Option<&'static str> {
    match e {
        kube::Error::Api(s) if s.is_conflict() => Some("changed since it was read"),
        kube::Error::Api(s) if s.is_not_found() => Some("gone since it was read"),
        _ => None,
    }
}

fn is_not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.is_not_found())
}

async fn send(ctx: &Context, nm: &mut NodeMaintenance, write: Write) -> Result<Sent, Error> {
    let name = nm.name_any();
    let params = PatchParams::default();
    match write {
        Write::Finalizers { patch, add } => {
            match ctx
                .nms
                .patch(&name, &params, &Patch::<()>::Json(patch))
                .await
            {
                Ok(updated) => *nm = updated,
                // Already gone (someone removed the finalizer and the object with it).
                Err(e) if !add && is_not_found(&e) => {}
                Err(e) if stops(&e).is_some() => return Ok(Sent::Stopped(stops(&e).unwrap_or(""))),
                Err(e) if add => return Err(Error::AddFinalizer(e)),
                Err(e) => return Err(Error::RemoveFinalizer(e)),
            }
        }
        Write::Annotations {
            mut patch,
            required,
        } => {
            patch["metadata"]["resourceVersion"] = nm.resource_version().into();
            match ctx.nms.patch(&name, &params, &Patch::Merge(&patch)).await {
                Ok(updated) => *nm = updated,
                Err(e) if required => return stopped_or(e, Error::RecordEnteredNode),
                // Not required (the plan says so): the next pass writes it again.
                Err(e) => {
                    tracing::warn!(error = %e, "could not record the node entered on the NodeMaintenance yet (an admission webhook may be unreachable); the maintenance goes on and the next pass records it");
                }
            }
        }
        Write::Status {
            mut patch,
            sent,
            wakes,
        } => {
            patch["metadata"] = serde_json::json!({ "resourceVersion": nm.resource_version() });
            match ctx
                .nms
                .patch_status(&name, &params, &Patch::Merge(&patch))
                .await
            {
                Ok(updated) => {
                    ctx.memory.learn(&sent, updated.status.as_ref());
                    let own = (!wakes)
                        .then_some(())
                        .and(updated.metadata.resource_version.as_deref());
                    ctx.memory.own_writes().wrote(&name, own);
                    *nm = updated;
                }
                Err(e) => return stopped_or(e, Error::Status),
            }
        }
        Write::Node {
            name: node,
            patch,
            purpose,
        } => {
            let answer = ctx.nodes.patch(&node, &params, &Patch::Merge(&patch)).await;
            let entering = matches!(purpose, NodePurpose::Enter(_));
            match answer {
                Ok(_) => log_node_write(&node, &purpose),
                Err(e) if is_not_found(&e) && !entering => {
                    tracing::info!(node, "the node is gone; nothing to restore");
                }
                Err(e) if stops(&e).is_some() => return Ok(Sent::Stopped(stops(&e).unwrap_or(""))),
                Err(e) if purpose == NodePurpose::ExitAfterLeaseLoss => {
                    return Err(Error::StopAfterLeaseLoss(NodeError::Patch(e)));
                }
                Err(e) => return Err(Error::Node(NodeError::Patch(e))),
            }
            if purpose == NodePurpose::ExitAfterLeaseLoss {
                ctx.metrics.lease_lost();
            }
        }
        Write::DeleteMaintenance { uid } => {
            let params = kube::api::DeleteParams {
                preconditions: Some(kube::api::Preconditions {
                    uid,
                    resource_version: None,
                }),
                ..Default::default()
            };
            match ctx.nms.delete(&name, &params).await {
                Ok(_) => {}
                Err(e) if is_not_found(&e) => {}
                Err(e) => return stopped_or(e, Error::Expire),
            }
        }
        Write::NodeConditions { name, patch } => {
            let params = PatchParams {
                field_manager: Some(crate::node::conditions::FIELD_MANAGER.into()),
                ..PatchParams::default()
            };
            match ctx
                .nodes
                .patch_status(&name, &params, &Patch::Strategic(&patch))
                .await
            {
                Ok(_) => {}
                Err(e) if is_not_found(&e) => {}
                Err(e) if stops(&e).is_some() => return Ok(Sent::Stopped(stops(&e).unwrap_or(""))),
                Err(e) => return Err(Error::Node(NodeError::Patch(e))),
            }
        }
        Write::LeaseNamespace => {
            let namespace = Namespace {
                metadata: kube::api::ObjectMeta {
                    name: Some(ctx.leases.namespace().to_owned()),
                    ..Default::default()
                },
                ..Namespace::default()
            };
            let api = kube::Api::<Namespace>::all(ctx.nms.clone().into_client());
            match api.create(&PostParams::default(), &namespace).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.is_already_exists() => {}
                Err(e) => return Err(LeaseError::CreateNamespace(e).into()),
            }
        }
        Write::CreateLease(lease) => {
            match ctx
                .leases
                .api()
                .create(&PostParams::default(), &lease)
                .await
            {
                Ok(_) => tracing::debug!("lease created"),
                Err(e) => return stopped_or(e, |e| LeaseError::Api(e).into()),
            }
        }
        Write::ReplaceLease(lease) => {
            let lease_name = lease.name_any();
            match ctx
                .leases
                .api()
                .replace(&lease_name, &PostParams::default(), &lease)
                .await
            {
                Ok(_) => tracing::debug!("lease renewed"),
                Err(e) => return stopped_or(e, |e| LeaseError::Api(e).into()),
            }
        }
        Write::DeleteLease {
            name: lease_name,
            uid,
            resource_version,
        } => {
            let params = DeleteParams {
                preconditions: Some(Preconditions {
                    resource_version,
                    uid,
                }),
                ..DeleteParams::default()
            };
            match ctx.leases.api().delete(&lease_name, &params).await {
                Ok(_) => {}
                Err(e) if is_not_found(&e) => {}
                Err(e) => return stopped_or(e, |e| LeaseError::Api(e).into()),
            }
        }
        Write::CancelEvacuation {
            vmi,
            done,
            mut failed,
        } => match ctx.drainer.cancel_evacuation(&vmi).await {
            Ok(()) => {
                tracing::info!(vmi = %format!("{}/{}", vmi.namespace, vmi.name), "cancelled the evacuation of a VMI off the restored node");
                publish(ctx, nm, None, &done).await;
            }
            Err(e) => {
                tracing::warn!(vmi = %format!("{}/{}", vmi.namespace, vmi.name), error = %e, "could not cancel the evacuation of a VMI");
                failed.message = format!("{}: {e}", failed.message);
                publish(ctx, nm, None, &failed).await;
            }
        },
        Write::Event { event, node } => publish(ctx, nm, node, &event).await,
    }
    Ok(Sent::Done)
}

fn stopped_or(e: kube::Error, error: impl FnOnce(kube::Error) -> Error) -> Result<Sent, Error> {
    match stops(&e) {
        Some(why) => Ok(Sent::Stopped(why)),
        None => Err(error(e)),
    }
}

/// Logs a node write that was applied, in upstream's words where it has them.
fn log_node_write(node: &str, purpose: &NodePurpose) {
    match purpose {
        NodePurpose::Enter(EnterOutcome::Entered {
            cordoned,
            adopted,
            discarded,
        }) => {
            if let Some(vanished) = discarded {
                tracing::warn!(vanished_holder = %vanished, "the node carried the record of a NodeMaintenance that no longer exists and not the marks it describes; prior state recorded afresh");
            }
            tracing::info!(
                cordoned,
                adopted,
                "Maintenance taints will be added to node {node}"
            );
        }
        NodePurpose::Enter(EnterOutcome::TookOver { from }) => {
            tracing::warn!(vanished_holder = %from, "node is held by a NodeMaintenance that no longer exists and still carries its maintenance, taking it over");
        }
        NodePurpose::Enter(EnterOutcome::Repaired(what)) => {
            tracing::warn!(repaired = ?what, "maintenance had been partly undone on the node, re-applied");
        }
        NodePurpose::Enter(_) => {}
        NodePurpose::Exit => {
            tracing::info!("Maintenance taints  will be removed from node {node}");
        }
        NodePurpose::ExitAfterLeaseLoss => {
            tracing::warn!("lease could not be extended, failing maintenance");
        }
        NodePurpose::Transfer { to } => {
            tracing::info!(successor = %to, "handed the node over to the next NodeMaintenance");
        }
        NodePurpose::AdoptAndExit => {
            tracing::info!("adopted a node left in maintenance by upstream NMO, and restored it");
        }
    }
}

fn node_ref(name: &str, uid: Option<String>) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Node".into()),
        name: Some(name.to_owned()),
        uid,
        ..ObjectReference::default()
    }
}

/// Publishes an event about `nm`, or about the Node `node` (name and uid; `spec.nodeName` when
/// `None`); a failure is logged, never fails the reconcile.
async fn publish(
    ctx: &Context,
    nm: &NodeMaintenance,
    node: Option<(String, Option<String>)>,
    e: &PlannedEvent,
) {
    let reference = match e.target {
        EventTarget::Maintenance => nm.object_ref(&()),
        EventTarget::Node => {
            let (name, uid) = node.unwrap_or_else(|| (nm.spec.node_name.clone(), None));
            node_ref(&name, uid)
        }
    };
    let event = Event {
        type_: if e.warning {
            EventType::Warning
        } else {
            EventType::Normal
        },
        reason: e.reason.to_string(),
        note: Some(e.message.clone()),
        action: e.reason.to_string(),
        secondary: e
            .pod
            .as_ref()
            .map(|p| ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Pod".into()),
                namespace: Some(p.namespace.clone()),
                name: Some(p.name.clone()),
                ..ObjectReference::default()
            })
            .or_else(|| {
                let kubevirt = [
                    (e.vmi.as_ref(), "VirtualMachineInstance"),
                    (e.migration.as_ref(), "VirtualMachineInstanceMigration"),
                ];
                let (v, kind) = kubevirt.into_iter().find_map(|(v, k)| Some((v?, k)))?;
                Some(ObjectReference {
                    api_version: Some(crate::drain::migration::KUBEVIRT_GROUP_VERSION.into()),
                    kind: Some(kind.into()),
                    namespace: Some(v.namespace.clone()),
                    name: Some(v.name.clone()),
                    ..ObjectReference::default()
                })
            }),
    };
    let regarding = reference.name.as_deref().unwrap_or_default();
    let now = jiff::Timestamp::now();
    let nanos = u64::try_from(now.as_nanosecond()).unwrap_or_default();
    let result = if format!("{regarding}.{nanos:x}").len() > MAX_EVENT_NAME {
        publish_shortened(ctx, &event, reference, now, nanos).await
    } else {
        ctx.recorder.publish(&event, &reference).await
    };
    if let Err(err) = result {
        tracing::warn!(reason = e.reason, error = %err, "failed to publish event");
    }
}

/// Longest name an Event may have (a DNS-1123 subdomain): 253.
const MAX_EVENT_NAME: usize = 253;

/// The name of an Event about `regarding`: `<regarding>.<nanoseconds in hex>`, client-go's and
/// kube's form, with `regarding` cut (and trailing `.`/`-` dropped) so the whole fits in 253
/// characters. Tools find events by `regarding`/`involvedObject`, never by the event's name, so
/// the cut loses nothing; without it an event about a node or NodeMaintenance whose name has
/// more than 236 characters is refused with 422 (`docs/drain-contract.md` §7).
pub(crate) fn event_name(regarding: &str, nanos: u64) -> String {
    let suffix = format!(".{nanos:x}");
    let mut keep = MAX_EVENT_NAME
        .saturating_sub(suffix.len())
        .min(regarding.len());
    while !regarding.is_char_boundary(keep) {
        keep -= 1;
    }
    let prefix = regarding[..keep].trim_end_matches(['.', '-']);
    format!("{prefix}{suffix}")
}

/// Publishes `event` as kube's [`Recorder`](kube::runtime::events::Recorder) would, under the
/// shortened [`event_name`]; used only when the recorder's name would be too long. Such events
/// are never repeated into a series (each of ours is published once per transition).
async fn publish_shortened(
    ctx: &Context,
    event: &Event,
    reference: ObjectReference,
    now: jiff::Timestamp,
    nanos: u64,
) -> Result<(), kube::Error> {
    use k8s_openapi::api::events::v1::Event as K8sEvent;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
    let namespace = reference
        .namespace
        .clone()
        .unwrap_or_else(|| "default".to_string());
    let k8s = K8sEvent {
        metadata: kube::api::ObjectMeta {
            name: Some(event_name(
                reference.name.as_deref().unwrap_or_default(),
                nanos,
            )),
            namespace: Some(namespace.clone()),
            ..Default::default()
        },
        action: Some(event.action.clone()),
        reason: Some(event.reason.clone()),
        note: event.note.clone(),
        event_time: Some(MicroTime(now)),
        regarding: Some(reference),
        related: event.secondary.clone(),
        reporting_controller: Some(REPORTER.to_string()),
        reporting_instance: Some(
            ctx.reporter_instance
                .clone()
                .unwrap_or_else(|| REPORTER.to_string()),
        ),
        type_: Some(
            match event.type_ {
                EventType::Normal => "Normal",
                EventType::Warning => "Warning",
            }
            .to_string(),
        ),
        ..Default::default()
    };
    kube::Api::<K8sEvent>::namespaced(ctx.nms.clone().into_client(), &namespace)
        .create(&Default::default(), &k8s)
        .await
        .map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    use k8s_openapi::api::coordination::v1::Lease;
    use kube::runtime::events::{Recorder, Reporter};

    /// What the fake API server saw: method, path and query, and the body.
    type Seen = Arc<Mutex<Vec<(String, serde_json::Value)>>>;

    /// A context whose client is a fake API server in the `tower-test` style: it records each
    /// request and answers 200 with the object echoed, or `fail` (status code) for the request
    /// whose path contains `fail_on`.
    fn fake(fail_on: Option<(&'static str, u16)>) -> (Context, Seen) {
        let seen: Seen = Arc::default();
        let log = seen.clone();
        let version = Arc::new(std::sync::atomic::AtomicU32::new(8));
        let service = tower::service_fn(move |req: http::Request<kube::client::Body>| {
            let log = log.clone();
            let version = version.clone();
            async move {
                use http_body_util::BodyExt;
                let line = format!(
                    "{} {}",
                    req.method(),
                    req.uri().path_and_query().map_or("", |p| p.as_str())
                );
                let body = req.into_body().collect().await.unwrap().to_bytes();
                let body: serde_json::Value =
                    serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null);
                log.lock().unwrap().push((line.clone(), body.clone()));
                let (code, answer) = match fail_on {
                    Some((path, code)) if line.contains(path) => (
                        code,
                        serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code, "reason": if code == 409 { "Conflict" } else { "InternalError" }, "message": "fake"}),
                    ),
                    _ if line.contains("/nodemaintenances/") => (
                        200,
                        serde_json::json!({
                            "apiVersion": "nodemaintenance.medik8s.io/v1beta1",
                            "kind": "NodeMaintenance",
                            "metadata": {"name": "nm", "uid": "u", "resourceVersion":
                                version.fetch_add(1, std::sync::atomic::Ordering::Relaxed).to_string()},
                            "spec": {"nodeName": "n1"},
                        }),
                    ),
                    _ if line.contains("/nodes/") => (
                        200,
                        serde_json::json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}}),
                    ),
                    _ if line.starts_with("DELETE") => (
                        200,
                        serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Success"}),
                    ),
                    // A create or replace: the object as sent.
                    _ => (200, body),
                };
                let response = http::Response::builder()
                    .status(code)
                    .header("content-type", "application/json")
                    .body(kube::client::Body::from(
                        serde_json::to_vec(&answer).unwrap(),
                    ))
                    .unwrap();
                Ok::<_, std::convert::Infallible>(response)
            }
        });
        let client = kube::Client::new(service, "default");
        let (store, _writer) = kube::runtime::reflector::store::<NodeMaintenance>();
        let (_, nms_synced) = tokio::sync::watch::channel(true);
        let ctx = Context {
            nms: kube::Api::all(client.clone()),
            nodes: kube::Api::all(client.clone()),
            drainer: crate::drain::Drainer::new(
                client.clone(),
                crate::drain::SendClients {
                    evictions: client.clone(),
                    others: client.clone(),
                },
                crate::drain::DrainOptions::default(),
                Arc::new(crate::metrics::Metrics::new()),
                Default::default(),
                (
                    crate::drain::BudgetWatch::none(),
                    crate::drain::migration::MigrationWatch::none(),
                    crate::drain::responders::ResponderWatch::none(),
                ),
            ),
            leases: crate::lease::NodeLeases::new(client.clone(), "medik8s-leases".into()),
            recorder: Recorder::new(
                client,
                Reporter {
                    controller: REPORTER.into(),
                    instance: None,
                },
            ),
            reporter_instance: None,
            metrics: Arc::new(crate::metrics::Metrics::new()),
            store,
            nms_synced,
            drain_budget: None,
            node_cache: crate::watch::nodes::NodeCache::new(Default::default()),
            wake: futures::channel::mpsc::unbounded().0,
            memory: Default::default(),
            policy: Default::default(),
        };
        (ctx, seen)
    }

    /// One write of every kind, in a plan's order.
    fn every_kind() -> Vec<Write> {
        let event = PlannedEvent::normal(super::super::plan::event::BEGIN);
        let lease = |rv: Option<&str>| {
            let mut l = Lease::default();
            l.metadata.name = Some("node-n1".into());
            l.metadata.resource_version = rv.map(str::to_owned);
            Box::new(l)
        };
        vec![
            Write::Finalizers {
                patch: serde_json::from_value(serde_json::json!([{"op": "test", "path": "/metadata/finalizers", "value": null}])).unwrap(),
                add: true,
            },
            Write::Annotations {
                patch: serde_json::json!({"metadata": {"annotations": {"a": "b"}}}),
                required: true,
            },
            Write::Status {
                patch: serde_json::json!({"status": {"phase": "Running"}}),
                sent: Box::default(),
                wakes: true,
            },
            Write::LeaseNamespace,
            Write::CreateLease(lease(None)),
            Write::ReplaceLease(lease(Some("3"))),
            Write::Node {
                name: "n1".into(),
                patch: serde_json::json!({"metadata": {"resourceVersion": "4"}, "spec": {"unschedulable": true}}),
                purpose: NodePurpose::Exit,
            },
            Write::DeleteLease {
                name: "node-n1".into(),
                uid: Some("lu".into()),
                resource_version: Some("5".into()),
            },
            Write::Event { event, node: None },
        ]
    }

    fn nm() -> NodeMaintenance {
        let mut nm = NodeMaintenance::new(
            "nm",
            crate::api::NodeMaintenanceSpec {
                node_name: "n1".into(),
                reason: None,
                ..Default::default()
            },
        );
        nm.metadata.resource_version = Some("7".into());
        nm
    }

    /// The executor sends every kind of write as planned, in order, each with its precondition:
    /// the NodeMaintenance's resourceVersion chained from the previous answer.
    #[tokio::test]
    async fn every_kind_of_write_is_sent_in_the_planned_order() {
        let (ctx, seen) = fake(None);
        let mut current = nm();
        let done = execute(&ctx, &mut current, every_kind()).await.unwrap();
        assert_eq!(done, Executed::Done);
        let seen = seen.lock().unwrap().clone();
        let lines: Vec<&str> = seen.iter().map(|(l, _)| l.as_str()).collect();
        let nms = "/apis/nodemaintenance.medik8s.io/v1beta1/nodemaintenances/nm";
        let leases = "/apis/coordination.k8s.io/v1/namespaces/medik8s-leases/leases";
        assert_eq!(
            lines,
            [
                format!("PATCH {nms}?"),
                format!("PATCH {nms}?"),
                format!("PATCH {nms}/status?"),
                "POST /api/v1/namespaces?".to_string(),
                format!("POST {leases}?"),
                format!("PUT {leases}/node-n1?"),
                "PATCH /api/v1/nodes/n1?".to_string(),
                format!("DELETE {leases}/node-n1?"),
                "POST /apis/events.k8s.io/v1/namespaces/default/events?".to_string(),
            ]
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>()
        );
        // Each NodeMaintenance patch carries the resourceVersion the previous one returned.
        assert_eq!(seen[1].1["metadata"]["resourceVersion"], "8");
        assert_eq!(seen[2].1["metadata"]["resourceVersion"], "9");
        assert_eq!(seen[5].1["metadata"]["resourceVersion"], "3");
        assert_eq!(seen[6].1["metadata"]["resourceVersion"], "4");
        assert_eq!(
            seen[7].1["preconditions"],
            serde_json::json!({"resourceVersion": "5", "uid": "lu"})
        );
    }

    /// A failed precondition ends the pass at that write: nothing after it is sent, and it is
    /// not an error (the next pass observes again). Any other refusal is the pass's error.
    #[tokio::test]
    async fn the_first_failure_ends_the_pass() {
        let (ctx, seen) = fake(Some(("/nodes/n1", 409)));
        let done = execute(&ctx, &mut nm(), every_kind()).await.unwrap();
        assert_eq!(done, Executed::Stopped);
        {
            let seen = seen.lock().unwrap();
            assert_eq!(seen.len(), 7, "stopped at the node write: {seen:?}");
            assert!(seen.last().unwrap().0.contains("/nodes/n1"));
        }

        let (ctx, seen) = fake(Some(("/status", 500)));
        let err = execute(&ctx, &mut nm(), every_kind()).await.unwrap_err();
        assert!(matches!(err, Error::Status(_)), "{err:?}");
        assert_eq!(seen.lock().unwrap().len(), 3);
    }

    #[test]
    fn event_names_fit_the_api_limit_whatever_the_object_name() {
        let nanos = 0x1873_0f2a_9b4c_d5e6;
        assert_eq!(event_name("node-a", nanos), "node-a.18730f2a9b4cd5e6");
        for len in [236, 237, 240, 248, 253] {
            let regarding = format!("{}{}", "a".repeat(len - 2), "-b");
            let name = event_name(&regarding, nanos);
            assert!(name.len() <= MAX_EVENT_NAME, "{len}: {}", name.len());
            assert!(name.ends_with(".18730f2a9b4cd5e6"), "{name}");
            assert!(crate::api::validate_node_name(&name).is_ok(), "{name}");
        }
        // A cut that would leave a trailing '-' or '.' before the suffix drops it.
        let regarding = format!("{}-{}", "a".repeat(235), "b".repeat(10));
        let name = event_name(&regarding, nanos);
        assert_eq!(name, format!("{}.18730f2a9b4cd5e6", "a".repeat(235)));
    }
}
