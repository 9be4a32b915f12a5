//! The I/O of `surge` (`super::surge`, which decides): the workloads of a round's pods, read
//! from the API server (a pod's ReplicaSet, its Deployment, and for a Deployment already
//! restarted for this maintenance what holds its rollout), and the restarts the round decided,
//! each sent only while the maintenance may still send (`super::gate`). Decides nothing.

use std::collections::HashMap;

use k8s_openapi::api::apps::v1::{Deployment as K8sDeployment, ReplicaSet};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{ListParams, Patch, PatchParams};
use kube::{Api, Client};
use tokio_util::sync::CancellationToken;

use super::consts::READ_TIMEOUT;
use super::disposition::Disposition;
use super::error::DrainError;
use super::gate::Standing;
use super::pod::DrainPod;
use super::pod::api_group;
use super::report::DrainReport;
use super::surge::{Deployment, Facts, PlannedRestart, RESTARTED_AT, RESTARTED_FOR, Workload};

async fn read<T>(
    kind: &'static str,
    namespace: &str,
    name: &str,
    call: impl std::future::Future<Output = Result<T, kube::Error>>,
) -> Result<T, DrainError> {
    let what = format!("{kind} {namespace}/{name}");
    match tokio::time::timeout(READ_TIMEOUT, call).await {
        Ok(answer) => answer.map_err(|source| DrainError::Get { what, source }),
        Err(_) => Err(DrainError::Timeout {
            what: format!("the GET of {what}"),
        }),
    }
}

/// The workloads of the pods up for eviction among `pods` (each ReplicaSet and Deployment read
/// once), for the drain whose record ([`super::surge::record`], `<uid>@<start>`) is `maintenance`.
///
/// # Errors
/// A read failed (other than NotFound: the pod is then evicted as without `surge`) or hung.
pub(crate) async fn observe(
    client: &Client,
    pods: &[(DrainPod, Disposition)],
    maintenance: Option<&str>,
) -> Result<Facts, DrainError> {
    let mut facts = Facts {
        maintenance: maintenance.map(str::to_string),
        workloads: HashMap::new(),
    };
    let mut by_rs: HashMap<(String, String), Option<Workload>> = HashMap::new();
    for (pod, disposition) in pods {
        if !matches!(disposition, Disposition::Evict { .. }) {
            continue;
        }
        let Some(owner) = pod.controller_ref() else {
            continue;
        };
        let namespace = &pod.metadata.namespace;
        let workload = if owner.kind == "ReplicaSet" && api_group(&owner.api_version) == "apps" {
            let key = (namespace.clone(), owner.name.clone());
            if !by_rs.contains_key(&key) {
                let w = replica_set(client, namespace, &owner.name, maintenance).await?;
                by_rs.insert(key.clone(), w);
            }
            by_rs[&key].clone()
        } else {
            Some(Workload::Other {
                kind: owner.kind.clone(),
                name: owner.name.clone(),
            })
        };
        if let Some(w) = workload {
            let r = pod.reference();
            facts.workloads.insert((r.namespace, r.name), w);
        }
    }
    Ok(facts)
}

/// The workload of the ReplicaSet `namespace/name`: its Deployment (by its controller
/// reference, same UID), else the ReplicaSet itself; `None` when not found.
async fn replica_set(
    client: &Client,
    namespace: &str,
    name: &str,
    maintenance: Option<&str>,
) -> Result<Option<Workload>, DrainError> {
    let api: Api<ReplicaSet> = Api::namespaced(client.clone(), namespace);
    let Some(rs) = read("ReplicaSet", namespace, name, api.get_metadata_opt(name)).await? else {
        return Ok(None);
    };
    let owner = rs
        .metadata
        .owner_references
        .unwrap_or_default()
        .into_iter()
        .find(|o| {
            o.controller == Some(true)
                && o.kind == "Deployment"
                && api_group(&o.api_version) == "apps"
        });
    let Some(owner) = owner else {
        return Ok(Some(Workload::Other {
            kind: "ReplicaSet".into(),
            name: name.into(),
        }));
    };
    let api: Api<K8sDeployment> = Api::namespaced(client.clone(), namespace);
    let got = read(
        "Deployment",
        namespace,
        &owner.name,
        api.get_opt(&owner.name),
    )
    .await?;
    let Some(d) = got.filter(|d| d.metadata.uid.as_deref() == Some(owner.uid.as_str())) else {
        return Ok(None);
    };
    let mut facts = deployment(&d, namespace);
    // The pod's ReplicaSet is the Deployment's newest: the revision the controller recorded on
    // both (`deployment.kubernetes.io/revision`).
    let revision = |a: Option<&std::collections::BTreeMap<String, String>>| {
        a.and_then(|a| a.get(REVISION)).cloned()
    };
    let newest = revision(d.metadata.annotations.as_ref());
    facts.current = newest.is_some() && newest == revision(rs.metadata.annotations.as_ref());
    if maintenance.is_some_and(|m| super::surge::restarted_by(&facts, m)) {
        facts.stuck = match progressing_false(&d) {
            Some(why) => Some(why),
            None => unscheduled(client, namespace, &d).await?,
        };
    }
    Ok(Some(Workload::Deployment(facts)))
}

/// The revision annotation the Deployment controller sets on a Deployment and its ReplicaSets.
const REVISION: &str = "deployment.kubernetes.io/revision";

/// What the decision reads of `d`.
pub(crate) fn deployment(d: &K8sDeployment, namespace: &str) -> Deployment {
    let spec = &d.spec;
    let strategy = spec.strategy.as_ref();
    let max_surge = strategy
        .and_then(|s| s.rolling_update.as_ref())
        .and_then(|r| r.max_surge.as_ref());
    Deployment {
        namespace: namespace.to_string(),
        name: d.metadata.name.clone().unwrap_or_default(),
        resource_version: d.metadata.resource_version.clone(),
        replicas: spec.replicas.unwrap_or(1),
        recreate: strategy.and_then(|s| s.type_.as_deref()) == Some("Recreate"),
        max_surge_zero: match max_surge {
            Some(IntOrString::Int(n)) => *n == 0,
            Some(IntOrString::String(s)) => s.trim_end_matches('%').trim() == "0",
            None => false,
        },
        paused: spec.paused == Some(true),
        restarted_for: d
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(RESTARTED_FOR))
            .cloned(),
        restarted_at: spec
            .template
            .metadata
            .as_ref()
            .and_then(|m| m.annotations.as_ref())
            .and_then(|a| a.get(RESTARTED_AT))
            .and_then(|t| t.parse().ok()),
        current: false,
        stuck: None,
    }
}

/// The Deployment's `Progressing=False` condition, as a reason and message.
fn progressing_false(d: &K8sDeployment) -> Option<String> {
    let c = d.status.as_ref()?.conditions.as_ref()?.iter().find(|c| {
        c.type_.as_deref() == Some("Progressing") && c.status.as_deref() == Some("False")
    })?;
    Some(format!(
        "its Progressing condition is False ({}): {}",
        c.reason.as_deref().unwrap_or(""),
        c.message.as_deref().unwrap_or("")
    ))
}

/// The first of the Deployment's pods not scheduled (`spec.nodeName` empty) whose
/// `PodScheduled` condition is False, as its name and the scheduler's message.
async fn unscheduled(
    client: &Client,
    namespace: &str,
    d: &K8sDeployment,
) -> Result<Option<String>, DrainError> {
    let labels = d.spec.selector.match_labels.as_ref();
    let Some(labels) = labels.filter(|l| !l.is_empty()) else {
        return Ok(None);
    };
    let selector: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let lp = ListParams::default()
        .labels(&selector.join(","))
        .fields("spec.nodeName=");
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let name = d.metadata.name.as_deref().unwrap_or_default();
    let pods = read("Pod list of Deployment", namespace, name, api.list(&lp)).await?;
    Ok(pods.items.iter().find_map(|p| {
        let c = p
            .status
            .as_ref()?
            .conditions
            .as_ref()?
            .iter()
            .find(|c| c.type_ == "PodScheduled" && c.status == "False")?;
        Some(format!(
            "its replacement pod {} is not scheduled ({}): {}",
            p.metadata.name.as_deref().unwrap_or(""),
            c.reason.as_deref().unwrap_or(""),
            c.message.as_deref().unwrap_or("")
        ))
    }))
}

/// Sends one rollout restart the round decided, while the maintenance may still send
/// (`standing`, the controller not `stopped`); a sent one is reported (its one event), a failed
/// one is an error of the round (the next round decides again from what the API server holds).
pub(crate) async fn send(
    client: &Client,
    r: &PlannedRestart,
    standing: &Standing,
    stopped: &CancellationToken,
    report: &mut DrainReport,
) {
    let deployment = format!("{}/{}", r.namespace, r.name);
    if let Some(halt) = standing.halted(stopped) {
        tracing::info!(%deployment, %halt, "rollout restart not sent");
        return;
    }
    match restart(client, r).await {
        Ok(()) => {
            tracing::info!(%deployment, pod = %r.blocker.name, "Deployment restarted (surge RolloutRestart)");
            report.restarted.push(r.blocker.clone());
        }
        Err(e) => {
            tracing::warn!(%deployment, error = %e, "the rollout restart failed");
            report.errors.push(format!(
                "the rollout restart of Deployment {deployment} failed: {e}"
            ));
        }
    }
}

/// Sends `restart` (`kubectl rollout restart`'s merge patch, with the maintenance's record and
/// the observed `resourceVersion` as precondition).
///
/// # Errors
/// The API server's answer (409: the Deployment changed since the round read it), or a
/// timeout.
async fn restart(client: &Client, restart: &PlannedRestart) -> Result<(), String> {
    let api: Api<K8sDeployment> = Api::namespaced(client.clone(), &restart.namespace);
    let patch = restart.patch();
    let (params, patch) = (PatchParams::default(), Patch::Merge(&patch));
    let call = api.patch(&restart.name, &params, &patch);
    match tokio::time::timeout(READ_TIMEOUT, call).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("no answer within {}s", READ_TIMEOUT.as_secs())),
    }
}
