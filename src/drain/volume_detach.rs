//! The `waitForVolumeDetach` knob (`docs/drain-contract.md` §13): a drained node is not yet safe
//! to reboot while a volume is still attached to it (a ReadWriteOnce Rook/Ceph volume attached
//! elsewhere gets a Multi-Attach error until it is detached here; Cluster API waits for the
//! node's VolumeAttachments with `nodeVolumeDetachTimeout` for the same reason). With the knob,
//! a maintenance whose pods are all gone reaches Succeeded only once no storage.k8s.io/v1
//! VolumeAttachment has `spec.nodeName` equal to its node, save those of the pods the drain keeps
//! on it (DaemonSet, mirror and skipped pods).
//!
//! Observe ([`read_attachments`]: the attachments, the kept pods' claims, each attachment's
//! PersistentVolume's claimRef), decide ([`blockers`], [`verdict`]: pure), act nothing: the
//! wait only blocks. The bound counts from the drain's start (the API server's time recorded on
//! the node, as `drainTimeout`), never from the operator's memory, so a restart changes nothing.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::{PersistentVolume, Pod};
use k8s_openapi::api::storage::v1::VolumeAttachment;
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};

use crate::api::{OnTimeout, PodBlocker};
use crate::policy::DrainPolicy;

/// Blocker reason of an attachment still naming the node (`namespace` empty, `name` the
/// VolumeAttachment's).
pub(crate) const VOLUME_ATTACHED: &str = "VolumeAttached";
/// Blocker reason when the attachments could not be read: the wait never takes "unknown" for
/// "detached".
pub(crate) const ATTACHMENTS_UNREAD: &str = "VolumeAttachmentsUnread";

/// One VolumeAttachment whose `spec.nodeName` is the node.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Attachment {
    /// Its name.
    pub name: String,
    /// `spec.source.persistentVolumeName` (`None`: an inline volume).
    pub pv: Option<String>,
    /// `spec.attacher` (the CSI driver).
    pub attacher: String,
    /// The claim (`namespace/name`) its PersistentVolume is bound to (`spec.claimRef`), when the
    /// volume could be read (`None`: unknown, so it is waited for).
    pub claim: Option<String>,
}

/// What one wait observed of a node.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Observed {
    /// The attachments naming the node, by name.
    pub attachments: Vec<Attachment>,
    /// The claims (`namespace/name`) of the pods still on the node and not finished: the pods
    /// the drain keeps (once the drain is done, every pod left is one).
    pub kept_claims: BTreeSet<String>,
    /// The API server's time of the attachments' list (`None`: no `Date` header).
    pub at: Option<jiff::Timestamp>,
    /// Why the attachments could not be read (`Some`: nothing else is known).
    pub unread: Option<String>,
}

/// What the wait makes of a drained node.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Verdict {
    /// Nothing is attached (or only the kept pods' volumes): Succeeded as without the knob.
    Detached,
    /// Attached and within the bound (or past it with `onTimeout: Wait`, `overdue`): phase
    /// Running with these blockers.
    Wait {
        /// One per attachment.
        blockers: Vec<PodBlocker>,
        /// The bound has passed (`onTimeout: Wait`).
        overdue: bool,
    },
    /// The bound passed with `onTimeout: Fail`: phase Failed naming these.
    Fail(Vec<PodBlocker>),
    /// The bound passed with `onTimeout: SkipStuck` or `ForceDelete` (the operator never
    /// deletes an attachment): Succeeded naming these.
    Skip(Vec<PodBlocker>),
}

/// The claims (`namespace/name`) `pod` mounts: its `persistentVolumeClaim` volumes and its
/// generic ephemeral volumes (whose claim is `<pod>-<volume>`, as the ephemeral volume
/// controller names it).
fn claims_of(pod: &Pod) -> impl Iterator<Item = String> + '_ {
    let ns = pod.namespace().unwrap_or_default();
    let name = pod.name_any();
    pod.spec
        .iter()
        .flat_map(|s| s.volumes.iter().flatten())
        .filter_map(move |v| {
            let claim = match (&v.persistent_volume_claim, &v.ephemeral) {
                (Some(c), _) => c.claim_name.clone(),
                (None, Some(_)) => format!("{name}-{}", v.name),
                (None, None) => return None,
            };
            Some(format!("{ns}/{claim}"))
        })
}

/// Whether `pod` still runs (or may): not `Succeeded` or `Failed`, whose volumes the kubelet
/// unmounts.
fn not_finished(pod: &Pod) -> bool {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    !matches!(phase, Some("Succeeded" | "Failed"))
}

/// The attachments of `node` among `all`, by name.
pub(crate) fn on_node(all: &[VolumeAttachment], node: &str) -> Vec<Attachment> {
    let mut out: Vec<Attachment> = all
        .iter()
        .filter(|va| va.spec.node_name == node)
        .map(|va| Attachment {
            name: va.name_any(),
            pv: va.spec.source.persistent_volume_name.clone(),
            attacher: va.spec.attacher.clone(),
            claim: None,
        })
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

/// Reads what the wait of `node` needs: every VolumeAttachment (one list: the API server offers
/// no field selector on `spec.nodeName`), kept only when it names the node; when some do and a
/// pod left on the node mounts a claim, the pods' claims and each attachment's
/// PersistentVolume's `claimRef` (one GET each; a volume that cannot be read stays unknown and is
/// waited for). Each call is bounded by the drain's read deadline. A failed list is recorded in
/// [`Observed::unread`], never read as "nothing attached".
pub(crate) async fn read_attachments(client: &Client, node: &str) -> Observed {
    let timeout = super::consts::READ_TIMEOUT;
    let request = kube::core::Request::new("/apis/storage.k8s.io/v1/volumeattachments")
        .list(&ListParams::default())
        .map_err(kube::Error::BuildRequest);
    let listed = match request {
        Ok(req) => {
            let call = crate::server_time::request_dated::<kube::core::ObjectList<VolumeAttachment>>(
                client, req,
            );
            match tokio::time::timeout(timeout, call).await {
                Ok(r) => r.map_err(|e| e.to_string()),
                Err(_) => Err(format!("no answer within {} s", timeout.as_secs())),
            }
        }
        Err(e) => Err(e.to_string()),
    };
    let (list, at) = match listed {
        Ok(ok) => ok,
        Err(e) => {
            return Observed {
                unread: Some(format!("the list of VolumeAttachments failed: {e}")),
                ..Observed::default()
            };
        }
    };
    let mut o = Observed {
        attachments: on_node(&list.items, node),
        at,
        ..Observed::default()
    };
    if o.attachments.is_empty() {
        return o;
    }
    let pods: Api<Pod> = Api::all(client.clone());
    let lp = ListParams::default().fields(&format!("spec.nodeName={node}"));
    if let Ok(Ok(list)) = tokio::time::timeout(timeout, pods.list(&lp)).await {
        o.kept_claims = list
            .items
            .iter()
            .filter(|p| not_finished(p))
            .flat_map(claims_of)
            .collect();
    }
    if o.kept_claims.is_empty() {
        return o;
    }
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    for a in &mut o.attachments {
        let Some(pv) = &a.pv else { continue };
        if let Ok(Ok(Some(pv))) = tokio::time::timeout(timeout, pvs.get_opt(pv)).await {
            a.claim = pv.spec.and_then(|s| s.claim_ref).map(|r| {
                format!(
                    "{}/{}",
                    r.namespace.unwrap_or_default(),
                    r.name.unwrap_or_default()
                )
            });
        }
    }
    o
}

/// One blocker per attachment of `o` on `node` that is not a kept pod's (its volume's claim is
/// known and mounted by a pod left on the node), by attachment name; one
/// [`ATTACHMENTS_UNREAD`] blocker when they could not be read. Pure.
pub(crate) fn blockers(o: &Observed, node: &str) -> Vec<PodBlocker> {
    if let Some(why) = &o.unread {
        return vec![PodBlocker {
            name: "volumeattachments".into(),
            reason: ATTACHMENTS_UNREAD.into(),
            message: Some(why.clone()),
            ..PodBlocker::default()
        }];
    }
    o.attachments
        .iter()
        .filter(|a| !a.claim.as_ref().is_some_and(|c| o.kept_claims.contains(c)))
        .map(|a| PodBlocker {
            name: a.name.clone(),
            reason: VOLUME_ATTACHED.into(),
            message: Some(format!(
                "VolumeAttachment {} of PersistentVolume {} (attacher {}) still attaches it to \
                 node {node}",
                a.name,
                a.pv.as_deref().unwrap_or("<inline>"),
                a.attacher
            )),
            ..PodBlocker::default()
        })
        .collect()
}

/// When the wait's bound passes: the drain's start (`policy.deadline_start`, the API server's
/// time recorded on the node) plus `waitForVolumeDetach`; `None` without the knob or a start.
pub(crate) fn bound(policy: &DrainPolicy) -> Option<jiff::Timestamp> {
    let wait = jiff::SignedDuration::try_from(policy.wait_for_volume_detach?).ok()?;
    policy.deadline_start?.checked_add(wait).ok()
}

/// The wait's verdict on a drained node: `blockers` left ([`blockers`]) at `now` (the API
/// server's time of the attachments' list) under `policy`: none, [`Verdict::Detached`]; before
/// the [`bound`], [`Verdict::Wait`]; at it, `onTimeout` (Wait keeps waiting, Fail fails,
/// SkipStuck and ForceDelete succeed naming what is left; Abort fails as Fail does: every pod is
/// gone by then, and a node given back with its volumes stuck attached would take new pods
/// whose storage cannot follow). Pure.
pub(crate) fn verdict(
    blockers: Vec<PodBlocker>,
    policy: &DrainPolicy,
    now: jiff::Timestamp,
) -> Verdict {
    if blockers.is_empty() {
        return Verdict::Detached;
    }
    let overdue = bound(policy).is_some_and(|b| now >= b);
    match (overdue, policy.on_timeout) {
        (false, _) | (true, OnTimeout::Wait) => Verdict::Wait { blockers, overdue },
        (true, OnTimeout::Fail | OnTimeout::Abort) => Verdict::Fail(blockers),
        (true, OnTimeout::SkipStuck | OnTimeout::ForceDelete) => Verdict::Skip(blockers),
    }
}

/// The words `lastError` of a maintenance this wait failed starts with: how the next pass
/// knows the Failed phase is the wait's (it stays Failed, as at a drain deadline), from the
/// stored object alone.
pub(crate) const FAILED_PREFIX: &str = "volumes still attached at the waitForVolumeDetach bound";

/// Whether a maintenance in `status` stays Failed by this wait: it says so ([`FAILED_PREFIX`]),
/// and under `policy` the bound has passed at `now` with `onTimeout: Fail` (or `Abort`, see
/// [`verdict`]) (an edit of the
/// policy that lifts either resumes it). Pure.
pub(crate) fn failed(
    status: &crate::api::NodeMaintenanceStatus,
    policy: &DrainPolicy,
    now: jiff::Timestamp,
) -> bool {
    status.phase == Some(crate::api::MaintenancePhase::Failed)
        && status
            .last_error
            .as_deref()
            .is_some_and(|e| e.starts_with(FAILED_PREFIX))
        && matches!(policy.on_timeout, OnTimeout::Fail | OnTimeout::Abort)
        && bound(policy).is_some_and(|b| now >= b)
}

/// The names of `blockers` (the attachments), comma-separated, for a message.
pub(crate) fn named(blockers: &[PodBlocker]) -> String {
    blockers
        .iter()
        .map(|b| b.name.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests;
