//! API types of `nodemaintenance.medik8s.io/v1beta1` `NodeMaintenance`.
//!
//! The JSON names, scope, short name and the verbatim field descriptions (typos included) are
//! upstream's contract (medik8s node-maintenance-operator `api/v1beta1`); tools such as
//! NodeHealthCheck and KubeVirt read them. What we add on top (`conditions`,
//! `observedGeneration`, `blockers`, `drainStartTime`, `drainDeadline`, `onTimeout`, the drain
//! knobs of `spec`, printer columns) is additive and optional,
//! so an object written by upstream NMO reads back unchanged.

pub(crate) mod condition;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use crate::knobs::{DaemonSets, DrainBehavior, DrainKnobs, DrainRule, OnTimeout, Stage};

/// API group of the NodeMaintenance kind.
pub const GROUP: &str = "nodemaintenance.medik8s.io";
/// Finalizer that keeps a NodeMaintenance until its node has been restored (upstream's
/// `NodeMaintenanceFinalizer`).
pub const FINALIZER: &str = "foregroundDeleteNodeMaintenance";

/// Upstream's admission text for a changed `spec.nodeName`, also the message of the CRD's own
/// immutability rule, so the change is refused with the same words when the webhook is bypassed
/// (docs/compat.md §1).
pub const NODE_NAME_IMMUTABLE: &str = "updating spec.NodeName isn't allowed";

/// Annotation on a NodeMaintenance naming the node it entered, so cleanup restores that node
/// whatever `spec.nodeName` says later (docs/design.md §1). An annotation, not a status field:
/// upstream's CRD would prune the latter. Written after the node is entered, best effort (a
/// failed write does not end the pass and is retried each pass until it lands): entering needs
/// no write of the NodeMaintenance's metadata, which the operator's own webhook intercepts
/// (docs/design.md §1, "Entry").
pub const ENTERED_NODE_ANNOTATION: &str = "nodemaintenance.medik8s.io/entered-node";

/// Annotation on a NodeMaintenance with the `spec.providerID` of the node it entered (empty when
/// that node had none), written with [`ENTERED_NODE_ANNOTATION`]. A Node of that name whose
/// providerID differs from a recorded non-empty one is another machine under a reused name: the
/// maintenance leaves it alone (docs/drain-contract.md §3).
pub const ENTERED_NODE_PROVIDER_ID_ANNOTATION: &str =
    "nodemaintenance.medik8s.io/entered-node-provider-id";

/// Annotation on a NodeMaintenance with the `metadata.uid` of the Node object it entered,
/// written with [`ENTERED_NODE_ANNOTATION`] (for the record: a Node deleted and registered again
/// has a new uid, whichever machine it is; the machine is told by its providerID).
pub const ENTERED_NODE_UID_ANNOTATION: &str = "nodemaintenance.medik8s.io/entered-node-uid";

/// Annotation with the time a drain started (RFC 3339, whole seconds, the API server's clock):
/// on the Node, a record annotation written in the patch that enters it and removed on exit with
/// the holder and the prior state (`crate::node`); on a NodeMaintenance, the legacy place
/// (written before the node was entered by versions before the Node record), still read when
/// the Node carries none. A pod created after it that tolerates both maintenance taints is a
/// replacement and is kept (docs/drain-contract.md §2). Annotations, for the same reason as the
/// entered node's.
pub const DRAIN_STARTED_ANNOTATION: &str = "nodemaintenance.medik8s.io/drain-started";

/// Condition type in `status.conditions` recording that the drain was aborted at its deadline
/// (`onTimeout: Abort`, `True`), or that the abort ended (`False`, a stage short of Cordon)
/// (docs/drain-contract.md §10a).
pub const ABORTED_CONDITION: &str = "Aborted";
/// Reason of `Aborted=True`: the drain did not finish by its deadline and `onTimeout` is `Abort`.
pub const DRAIN_ABORTED_REASON: &str = "DrainAborted";

/// Desired state: which node to keep in maintenance, and why.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[kube(
    group = "nodemaintenance.medik8s.io",
    version = "v1beta1",
    kind = "NodeMaintenance",
    plural = "nodemaintenances",
    singular = "nodemaintenance",
    shortname = "nm",
    status = "NodeMaintenanceStatus",
    derive = "PartialEq",
    doc = "NodeMaintenance is the Schema for the nodemaintenances API",
    printcolumn = r#"{"name":"Node","type":"string","jsonPath":".spec.nodeName","description":"The node in maintenance"}"#,
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase","description":"Running, Succeeded or Failed"}"#,
    printcolumn = r#"{"name":"Progress","type":"integer","jsonPath":".status.drainProgress","description":"Percentage of the evictable pods that are gone"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    printcolumn = r#"{"name":"Reason","type":"string","jsonPath":".spec.reason","priority":1,"description":"Why the node is in maintenance"}"#,
    printcolumn = r#"{"name":"LastError","type":"string","jsonPath":".status.lastError","priority":1,"description":"The latest error, cleared on success"}"#,
    printcolumn = r#"{"name":"Deadline","type":"string","jsonPath":".status.drainDeadline","priority":1,"description":"When the drain's deadline passes (drainTimeout)"}"#,
    printcolumn = r#"{"name":"OnTimeout","type":"string","jsonPath":".status.onTimeout","priority":1,"description":"What happens at the deadline"}"#,
    printcolumn = r#"{"name":"Migrating","type":"integer","jsonPath":".status.evacuatingPods","priority":1,"description":"Pending pods whose responder moves them away (KubeVirt live migrations, active eviction responders)"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct NodeMaintenanceSpec {
    /// Node name to apply maintanance on/off
    #[x_kube(validation = Rule::new("self == oldSelf").message("updating spec.NodeName isn't allowed"))]
    pub node_name: String,
    /// Reason for maintanance
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The drain knobs (`crate::knobs`), flattened: their JSON names are the spec's.
    #[serde(flatten)]
    pub knobs: DrainKnobs,
}

/// Phase of a maintenance, upstream's three values.
// Also the `phase` label of `nmo_maintenances`, spelled as the variant (kept out of the doc
// comment, which becomes the CRD's schema description).
#[derive(
    Serialize,
    Deserialize,
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Hash,
    JsonSchema,
    prometheus_client::encoding::EncodeLabelValue,
)]
pub enum MaintenancePhase {
    /// The node is being cordoned, tainted and drained (or waits for the lease).
    Running,
    /// Every evictable pod is gone; the node stays cordoned until the object is deleted.
    Succeeded,
    /// Maintenance could not be carried out (missing node, lease lost for good).
    Failed,
}

impl MaintenancePhase {
    /// Every phase.
    pub const ALL: &'static [MaintenancePhase] = &[Self::Running, Self::Succeeded, Self::Failed];
}

impl std::fmt::Display for MaintenancePhase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The variants are spelled as the API spells the phase (upstream's strings).
        std::fmt::Debug::fmt(self, f)
    }
}

/// Observed state. Every upstream field keeps its exact JSON name and is omitted when unset.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeMaintenanceStatus {
    /// Phase is the represtation of the maintenance progress (Running,Succeeded,Failed)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<MaintenancePhase>,
    /// Percentage completion of draining the node
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drain_progress: Option<i32>,
    /// The last time the status has been updated
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_update: Option<Time>,
    /// LastError represents the latest error if any in the latest reconciliation
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// PendingPods is a list of pending pods for eviction
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_pods: Option<Vec<String>>,
    /// PendingPodsRefs is a list of refs of pending pods for eviction
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_pods_refs: Option<Vec<PodReference>>,
    /// TotalPods is the total number of all pods on the node from the start
    #[serde(default, rename = "totalpods", skip_serializing_if = "Option::is_none")]
    pub total_pods: Option<i32>,
    /// EvictionPods is the total number of pods up for eviction from the start
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eviction_pods: Option<i32>,
    /// Consecutive number of errors upon obtaining a lease
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_on_lease_count: Option<i32>,
    /// What keeps each pending pod on the node: a PodDisruptionBudget (with the healthy pods it
    /// needs and has), another eviction error, or a pod that is still terminating.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blockers: Option<Vec<PodBlocker>>,
    /// How many pending pods a responder moves away: `Evacuating` (live migrations in flight,
    /// for KubeVirt) or `EvictionResponder` (a KEP-4563 responder `Active`); unset when none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evacuating_pods: Option<i32>,
    /// When the drain started: the start recorded on the node, or the moment a maintenance that
    /// waited got its drain slot (both the API server's clock), so kept across operator
    /// restarts; unset before it (stage Cordon, waiting for a drain slot, before the window) and
    /// after a release, so a new drain has its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drain_start_time: Option<Time>,
    /// When the drain's deadline passes (its start plus drainTimeout), while one is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drain_deadline: Option<Time>,
    /// What happens at drainDeadline (the onTimeout knob resolved), while a deadline is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_timeout: Option<OnTimeout>,
    /// The generation of the spec that this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Standard conditions: `Cordoned` (the node is cordoned and tainted for this maintenance),
    /// `Drained` (every evictable pod is gone) and `LeaseHeld` (the medik8s lease is ours).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<Condition>>,
}

/// A pod by namespace and name (upstream's `PodReference`).
#[derive(
    Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, JsonSchema,
)]
pub struct PodReference {
    /// Namespace of the pod
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    /// Name of the pod
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
}

/// Why a pod has not left the node yet.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodBlocker {
    /// Namespace of the pod
    pub namespace: String,
    /// Name of the pod
    pub name: String,
    /// One of `PodDisruptionBudget` (an eviction was refused with 429 by a budget),
    /// `MultiplePodDisruptionBudgets` (the API server refuses to evict a pod that several budgets
    /// select), `NamespaceTerminating`, `Terminating` (evicted, waiting for the pod to go),
    /// `StuckTerminating` (terminating for longer than its grace period plus a margin),
    /// `Evacuating` (a responder such as KubeVirt is moving the workload away: a live migration,
    /// progress, not an error), `NotMigratable` (KubeVirt: the VMI must live-migrate and cannot),
    /// `TooManyRequests` (another 429), `EvictionError`, or `EvictionResponder` (a KEP-4563
    /// responder named in `responder` is `Active` on the pod's `lifecycle.k8s.io` Eviction:
    /// progress, not an error; `message` is the responder's, `expectedCompletionTime` its
    /// estimate).
    pub reason: String,
    /// The API server's or our own words about it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The PodDisruptionBudget that refused the eviction, from the 429's cause.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_disruption_budget: Option<String>,
    /// Healthy pods the budget needs, from the 429's cause.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub desired_healthy: Option<i32>,
    /// Healthy pods the budget has, from the 429's cause.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_healthy: Option<i32>,
    /// The KubeVirt VirtualMachineInstance an `Evacuating` virt-launcher pod runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub virtual_machine_instance: Option<String>,
    /// The VMI's newest VirtualMachineInstanceMigration (label `kubevirt.io/vmi-name`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub migration: Option<String>,
    /// That migration's `status.phase`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub migration_phase: Option<String>,
    /// That migration's start (`status.migrationState.startTimestamp`, RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub migration_start_time: Option<String>,
    /// The `Active` responder of the pod's Eviction (`lifecycle.k8s.io`, KEP-4563): its
    /// `status.targetResponders[].name`, a domain-prefixed name such as `acme.io/mover`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub responder: Option<String>,
    /// When that responder expects to be done (its `status.responders[].expectedCompletionTime`,
    /// RFC 3339, the responder's own estimate).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_completion_time: Option<String>,
}

impl PodBlocker {
    /// The status entry of `pod` with `reason` (one of [`Self::reason`]'s, or a kept pod's) and
    /// `message`; the other fields empty.
    pub(crate) fn of(pod: &PodReference, reason: &str, message: String) -> Self {
        Self {
            namespace: pod.namespace.clone(),
            name: pod.name.clone(),
            reason: reason.to_string(),
            message: Some(message),
            ..Self::default()
        }
    }

    /// The pod it is about.
    pub(crate) fn pod(&self) -> PodReference {
        PodReference {
            namespace: self.namespace.clone(),
            name: self.name.clone(),
        }
    }

    /// The same blocker, about `pod`: a refusal that holds every pod of its budget.
    pub(crate) fn for_pod(&self, pod: &PodReference) -> Self {
        Self {
            namespace: pod.namespace.clone(),
            name: pod.name.clone(),
            ..self.clone()
        }
    }
}

/// Why a `spec.nodeName` cannot name a Node. Displays as a clause for a sentence about the name
/// ("it is empty").
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NodeNameError {
    /// The name is empty.
    #[error("it is empty")]
    Empty,
    /// The name has more than 253 characters.
    #[error("it is longer than 253 characters")]
    TooLong,
    /// The name is not a lower-case DNS-1123 subdomain.
    #[error(
        "it is not a valid node name (lower-case letters, digits, '-' and '.', each \
         dot-separated part starting and ending with a letter or digit)"
    )]
    Malformed,
}

/// Checks that `name` can be a Node name: a DNS-1123 subdomain (at most 253 characters of
/// lower-case letters, digits, `-` and `.`, each dot-separated label non-empty and starting and
/// ending with a letter or digit), which the API server requires of Node names. The one rule
/// used by both the webhook and the controller, so the two never disagree.
///
/// # Errors
/// The [`NodeNameError`] saying why not.
pub fn validate_node_name(name: &str) -> Result<(), NodeNameError> {
    if name.is_empty() {
        return Err(NodeNameError::Empty);
    }
    if name.len() > 253 {
        return Err(NodeNameError::TooLong);
    }
    let label_ok = |l: &str| {
        let b = l.as_bytes();
        let alnum = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
        b.first().is_some_and(alnum)
            && b.last().is_some_and(alnum)
            && b.iter().all(|c| alnum(c) || *c == b'-')
    };
    if !name.split('.').all(label_ok) {
        return Err(NodeNameError::Malformed);
    }
    Ok(())
}

/// The status fields we add to upstream's schema. A CRD installed by upstream (e.g. owned by
/// OLM) lacks them and the API server prunes them from every write, so correctness must never
/// depend on reading them back (docs/compat.md §1, docs/design.md §1).
pub const ADDED_STATUS_FIELDS: [&str; 7] = [
    "blockers",
    "evacuatingPods",
    "conditions",
    "drainStartTime",
    "drainDeadline",
    "onTimeout",
    "observedGeneration",
];

/// The NodeMaintenance CRD as upstream NMO ships it, generated from our types minus what we add:
/// the status fields of [`ADDED_STATUS_FIELDS`], every drain knob's spec field
/// ([`DrainKnobs::ALL`]), the printer columns and the CEL rules. Used by
/// the tests (and `crdgen --upstream`) to prove the controller works on upstream's schema.
pub fn upstream_schema_crd()
-> k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition {
    use kube::CustomResourceExt;
    fn strip_cel(v: &mut serde_json::Value) {
        match v {
            serde_json::Value::Object(map) => {
                map.remove("x-kubernetes-validations");
                map.values_mut().for_each(strip_cel);
            }
            serde_json::Value::Array(items) => items.iter_mut().for_each(strip_cel),
            _ => {}
        }
    }
    let mut crd = serde_json::to_value(NodeMaintenance::crd()).unwrap_or_default();
    if let Some(versions) = crd
        .pointer_mut("/spec/versions")
        .and_then(|v| v.as_array_mut())
    {
        for version in versions {
            if let Some(map) = version.as_object_mut() {
                map.remove("additionalPrinterColumns");
            }
            if let Some(status) = version
                .pointer_mut("/schema/openAPIV3Schema/properties/status/properties")
                .and_then(|p| p.as_object_mut())
            {
                for field in ADDED_STATUS_FIELDS {
                    status.remove(field);
                }
            }
            if let Some(spec) = version
                .pointer_mut("/schema/openAPIV3Schema/properties/spec/properties")
                .and_then(|p| p.as_object_mut())
            {
                // The drain knobs, which upstream's CRD prunes: there they are set by their
                // annotations (`crate::policy`).
                for knob in DrainKnobs::ALL {
                    spec.remove(knob.name);
                }
            }
            strip_cel(version);
        }
    }
    serde_json::from_value(crd).unwrap_or_else(|_| NodeMaintenance::crd())
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::CustomResourceExt;

    #[test]
    fn a_phase_displays_as_the_api_spells_it() {
        for phase in MaintenancePhase::ALL {
            let json = serde_json::to_value(phase).unwrap();
            assert_eq!(Some(phase.to_string().as_str()), json.as_str());
        }
    }

    #[test]
    fn node_names_are_dns_1123_subdomains() {
        assert_eq!(validate_node_name(""), Err(NodeNameError::Empty));
        assert_eq!(
            validate_node_name(&"a".repeat(254)),
            Err(NodeNameError::TooLong)
        );
        for bad in [
            "Node-A", "node_a", "-node", "node-", "a..b", ".a", "a.", "a.-b",
        ] {
            assert_eq!(
                validate_node_name(bad),
                Err(NodeNameError::Malformed),
                "{bad}"
            );
        }
        for good in [
            "a",
            "0",
            "node-a",
            "ip-10-0-0-1.ec2.internal",
            &"a".repeat(253),
        ] {
            assert_eq!(validate_node_name(good), Ok(()), "{good}");
        }
    }

    #[test]
    fn upstream_json_names_round_trip() {
        let upstream = serde_json::json!({
            "apiVersion": "nodemaintenance.medik8s.io/v1beta1",
            "kind": "NodeMaintenance",
            "metadata": {"name": "nodemaintenance-sample"},
            "spec": {"nodeName": "node02", "reason": "Test node maintenance"},
            "status": {
                "phase": "Succeeded", "drainProgress": 100, "lastUpdate": "2026-01-02T03:04:05Z",
                "lastError": "x", "pendingPods": ["p"],
                "pendingPodsRefs": [{"namespace": "ns", "name": "p"}],
                "totalpods": 3, "evictionPods": 2, "errorOnLeaseCount": 1
            }
        });
        let nm: NodeMaintenance = serde_json::from_value(upstream.clone()).unwrap();
        let status = nm.status.as_ref().unwrap();
        assert_eq!(status.total_pods, Some(3));
        assert_eq!(status.phase, Some(MaintenancePhase::Succeeded));
        assert_eq!(serde_json::to_value(&nm).unwrap(), upstream);
    }

    #[test]
    fn node_name_is_immutable_in_the_crd_with_upstreams_message() {
        let crd = serde_json::to_value(NodeMaintenance::crd()).unwrap();
        let rules = crd
            .pointer("/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties/nodeName/x-kubernetes-validations")
            .expect("a CEL rule on nodeName");
        assert_eq!(
            rules,
            &serde_json::json!([{"rule": "self == oldSelf", "message": NODE_NAME_IMMUTABLE}])
        );
    }

    #[test]
    fn upstream_schema_crd_lacks_exactly_our_additions() {
        let ours = serde_json::to_value(NodeMaintenance::crd()).unwrap();
        let upstream = serde_json::to_value(upstream_schema_crd()).unwrap();
        let fields = |crd: &serde_json::Value| -> Vec<String> {
            crd.pointer("/spec/versions/0/schema/openAPIV3Schema/properties/status/properties")
                .unwrap()
                .as_object()
                .unwrap()
                .keys()
                .cloned()
                .collect()
        };
        let mut expected = fields(&ours);
        expected.retain(|f| !ADDED_STATUS_FIELDS.contains(&f.as_str()));
        assert_eq!(fields(&upstream), expected);
        assert_eq!(
            expected,
            [
                "drainProgress",
                "errorOnLeaseCount",
                "evictionPods",
                "lastError",
                "lastUpdate",
                "pendingPods",
                "pendingPodsRefs",
                "phase",
                "totalpods"
            ]
        );
        let spec = upstream
            .pointer("/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties")
            .and_then(|p| p.as_object())
            .unwrap();
        assert_eq!(
            spec.keys().collect::<Vec<_>>(),
            ["nodeName", "reason"],
            "upstream's spec: no knob"
        );
        let text = upstream.to_string();
        assert!(
            !text.contains("x-kubernetes-validations")
                && !text.contains("additionalPrinterColumns")
        );
        assert_eq!(upstream["metadata"], ours["metadata"]);
    }

    #[test]
    fn crd_is_cluster_scoped_with_short_name_and_status() {
        let crd = NodeMaintenance::crd();
        assert_eq!(
            crd.metadata.name.as_deref(),
            Some("nodemaintenances.nodemaintenance.medik8s.io")
        );
        assert_eq!(crd.spec.scope, "Cluster");
        assert_eq!(crd.spec.names.short_names, Some(vec!["nm".to_string()]));
        let v = &crd.spec.versions[0];
        assert!(v.subresources.as_ref().unwrap().status.is_some());
        let schema = serde_json::to_value(v.schema.as_ref().unwrap()).unwrap();
        assert_eq!(
            schema.pointer("/openAPIV3Schema/properties/spec/required"),
            Some(&serde_json::json!(["nodeName"]))
        );
        assert!(
            schema
                .pointer("/openAPIV3Schema/properties/status/properties/totalpods")
                .is_some()
        );
    }
}
