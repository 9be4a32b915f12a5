//! The pod as the drain reads it: only the fields a drain decision uses, deserialized straight
//! from the pod list's JSON, so a pass holds tens of bytes per pod instead of the whole object
//! (a kubelet-size pod is about 11 KB of JSON, and several times that as a `k8s_openapi` `Pod`).
//!
//! Everything else in the JSON (container specs, managed fields, status details, annotations
//! other than the five the drain reads ([`PodMarks`]), volumes other than whether one is an emptyDir) is skipped by the
//! deserializer without being kept (`serde::de::IgnoredAny`).

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::api::core::v1::Toleration;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde::Deserialize;
use serde::de::{IgnoredAny, MapAccess, SeqAccess, Visitor};

use crate::api::PodReference;

pub(crate) mod opt_out_marks;

/// A pod on the node, as far as the drain cares (`metadata`, `spec`, `status.phase`).
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub(crate) struct DrainPod {
    /// Identity, owners, timestamps, labels.
    #[serde(default)]
    pub metadata: PodMeta,
    /// Tolerations, priority, grace period, emptyDir use.
    #[serde(default)]
    pub spec: PodSpecView,
    /// The phase only.
    #[serde(default)]
    pub status: PodStatusView,
}

/// The metadata fields the drain reads.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub(crate) struct PodMeta {
    /// `metadata.name`.
    #[serde(default)]
    pub name: String,
    /// `metadata.namespace`.
    #[serde(default)]
    pub namespace: String,
    /// `metadata.uid` (the eviction's precondition, the retry schedule's key).
    #[serde(default)]
    pub uid: Option<String>,
    /// `metadata.creationTimestamp` (the API server's clock, whole seconds).
    #[serde(default)]
    pub creation_timestamp: Option<Time>,
    /// `metadata.deletionTimestamp`: the pod is terminating; due at this time.
    #[serde(default)]
    pub deletion_timestamp: Option<Time>,
    /// `metadata.deletionGracePeriodSeconds`.
    #[serde(default)]
    pub deletion_grace_period_seconds: Option<i64>,
    /// `metadata.labels` (PodDisruptionBudget selectors are matched against them).
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Which of the annotations the drain reads `metadata.annotations` has; no annotation is
    /// kept.
    #[serde(default, rename = "annotations", deserialize_with = "marks")]
    pub marks: PodMarks,
    /// `metadata.ownerReferences`, without `blockOwnerDeletion`.
    #[serde(default)]
    pub owner_references: Vec<OwnerRef>,
    /// `metadata.finalizers` (named in a stuck pod's message).
    #[serde(default)]
    pub finalizers: Vec<String>,
}

/// The annotations the drain reads, by presence (their values do not matter).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct PodMarks {
    /// [`super::MIRROR_ANNOTATION`]: a static pod's mirror.
    pub mirror: bool,
    /// [`super::EVICTION_IN_PROGRESS_ANNOTATION`]: a responder is evacuating the pod.
    pub eviction_in_progress: bool,
    /// [`super::REQUEST_EVICT_ONLY_ANNOTATION`]: a responder carries out its eviction.
    pub request_evict_only: bool,
    /// The opt-out annotations and what their values say ([`super::opt_out`]).
    pub opt_out: opt_out_marks::OptOutMarks,
}

/// An owner reference as the drain reads it.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub(crate) struct OwnerRef {
    /// `apiVersion` of the owner (`apps/v1`).
    #[serde(default)]
    pub api_version: String,
    /// `kind` of the owner.
    #[serde(default)]
    pub kind: String,
    /// `name` of the owner.
    #[serde(default)]
    pub name: String,
    /// `uid` of the owner.
    #[serde(default)]
    pub uid: String,
    /// Whether this owner is the managing controller.
    #[serde(default)]
    pub controller: Option<bool>,
}

/// The spec fields the drain reads.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub(crate) struct PodSpecView {
    /// `spec.tolerations`.
    #[serde(default)]
    pub tolerations: Vec<Toleration>,
    /// `spec.priority` (resolved by the Priority admission plugin).
    #[serde(default)]
    pub priority: Option<i32>,
    /// `spec.priorityClassName`.
    #[serde(default)]
    pub priority_class_name: Option<String>,
    /// `spec.terminationGracePeriodSeconds`.
    #[serde(default)]
    pub termination_grace_period_seconds: Option<i64>,
    /// Whether some `spec.volumes[]` is an emptyDir; no volume is kept.
    #[serde(default, rename = "volumes", deserialize_with = "has_empty_dir")]
    pub empty_dir: bool,
}

/// The status fields the drain reads.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub(crate) struct PodStatusView {
    /// `status.phase`.
    #[serde(default)]
    pub phase: Option<String>,
    /// Whether `status.conditions` has `Ready` `True`; no condition is kept.
    #[serde(default, rename = "conditions", deserialize_with = "is_ready")]
    pub ready: bool,
}

impl DrainPod {
    /// Namespace and name.
    pub(crate) fn reference(&self) -> PodReference {
        PodReference {
            namespace: self.metadata.namespace.clone(),
            name: self.metadata.name.clone(),
        }
    }
    /// `Succeeded` or `Failed`: it will not run again.
    pub(crate) fn is_terminal(&self) -> bool {
        matches!(
            self.status.phase.as_deref(),
            Some("Succeeded") | Some("Failed")
        )
    }
    /// The owner reference with `controller: true`.
    pub(crate) fn controller_ref(&self) -> Option<&OwnerRef> {
        self.metadata
            .owner_references
            .iter()
            .find(|o| o.controller == Some(true))
    }
    /// The controller reference that makes a pod DaemonSet-managed, for a pod that is not
    /// finished: group `apps` (any version) and kind `DaemonSet`. A `DaemonSet` kind of another
    /// group (a custom resource) does not count: such a pod is drained like any other controlled
    /// pod. The drain GETs the DaemonSet of that name in the pod's namespace and passes its UID
    /// to [`super::classify`], which also requires it to equal the reference's UID (kubectl's
    /// drain checks kind and apiVersion, but not the UID).
    pub(crate) fn daemon_set_owner(&self) -> Option<&OwnerRef> {
        if self.is_terminal() {
            return None;
        }
        self.controller_ref()
            .filter(|o| o.kind == "DaemonSet" && api_group(&o.api_version) == "apps")
    }
}

/// The API group of an `apiVersion` (`apps/v1` -> `apps`, `v1` -> the core group `""`).
pub(crate) fn api_group(api_version: &str) -> &str {
    api_version.rsplit_once('/').map_or("", |(group, _)| group)
}

/// A page of `GET /api/v1/pods` as the drain reads it.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct PodPage {
    /// The list's metadata: the continue token.
    #[serde(default)]
    pub metadata: PageMeta,
    /// The pods of the page.
    #[serde(default)]
    pub items: Vec<DrainPod>,
}

/// `metadata` of a list.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct PageMeta {
    /// The token for the next page; absent or empty on the last.
    #[serde(default, rename = "continue")]
    pub continue_: Option<String>,
}

fn marks<'de, D: serde::Deserializer<'de>>(d: D) -> Result<PodMarks, D::Error> {
    struct V;
    impl<'de> Visitor<'de> for V {
        type Value = PodMarks;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a map of annotations or null")
        }
        fn visit_unit<E>(self) -> Result<PodMarks, E> {
            Ok(PodMarks::default())
        }
        fn visit_none<E>(self) -> Result<PodMarks, E> {
            Ok(PodMarks::default())
        }
        fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<PodMarks, D::Error> {
            d.deserialize_map(V)
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<PodMarks, A::Error> {
            let mut marks = PodMarks::default();
            while let Some(key) = map.next_key::<String>()? {
                match key.as_str() {
                    super::consts::MIRROR_ANNOTATION => marks.mirror = true,
                    super::consts::EVICTION_IN_PROGRESS_ANNOTATION => {
                        marks.eviction_in_progress = true
                    }
                    super::consts::REQUEST_EVICT_ONLY_ANNOTATION => marks.request_evict_only = true,
                    k @ (opt_out_marks::DO_NOT_DISRUPT | opt_out_marks::SAFE_TO_EVICT) => {
                        let value = map.next_value::<String>()?;
                        opt_out_marks::read(&mut marks.opt_out, k, &value);
                        continue;
                    }
                    _ => {}
                }
                map.next_value::<IgnoredAny>()?;
            }
            Ok(marks)
        }
    }
    d.deserialize_option(V)
}

/// `status.conditions` read as whether one is `Ready` with status `True`.
fn is_ready<'de, D: serde::Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    #[derive(Deserialize)]
    struct Condition {
        #[serde(default, rename = "type")]
        type_: String,
        #[serde(default)]
        status: String,
    }
    let conditions: Option<Vec<Condition>> = Option::deserialize(d)?;
    Ok(conditions
        .unwrap_or_default()
        .iter()
        .any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn has_empty_dir<'de, D: serde::Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    #[derive(Deserialize)]
    struct Volume {
        #[serde(default, rename = "emptyDir")]
        empty_dir: Option<IgnoredAny>,
    }
    struct V;
    impl<'de> Visitor<'de> for V {
        type Value = bool;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a list of volumes or null")
        }
        fn visit_unit<E>(self) -> Result<bool, E> {
            Ok(false)
        }
        fn visit_none<E>(self) -> Result<bool, E> {
            Ok(false)
        }
        fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<bool, D::Error> {
            d.deserialize_seq(V)
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<bool, A::Error> {
            let mut found = false;
            while let Some(v) = seq.next_element::<Volume>()? {
                found |= v.empty_dir.is_some();
            }
            Ok(found)
        }
    }
    d.deserialize_option(V)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reads_only_what_the_drain_uses_from_a_full_pod() {
        let p: DrainPod = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": "web-1", "namespace": "ns", "uid": "u1",
                "creationTimestamp": "2026-01-01T00:00:00Z",
                "labels": {"app": "web"},
                "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{...}",
                                "kubernetes.io/config.mirror": "x",
                                "descheduler.alpha.kubernetes.io/eviction-in-progress": "kubevirt"},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web",
                                     "uid": "rs", "controller": true, "blockOwnerDeletion": true}],
                "managedFields": [{"manager": "kube-controller-manager"}]
            },
            "spec": {
                "containers": [{"name": "c", "image": "i", "env": [{"name": "A", "value": "B"}]}],
                "volumes": [{"name": "a", "configMap": {"name": "x"}}, {"name": "b", "emptyDir": {}}],
                "tolerations": [{"operator": "Exists"}],
                "priority": 7
            },
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
        }))
        .unwrap();
        assert_eq!(p.reference().name, "web-1");
        assert!(p.metadata.marks.mirror && p.spec.empty_dir);
        assert!(p.metadata.marks.eviction_in_progress && !p.metadata.marks.request_evict_only);
        assert_eq!(
            p.controller_ref().map(|o| o.kind.as_str()),
            Some("ReplicaSet")
        );
        assert_eq!((p.spec.tolerations.len(), p.spec.priority), (1, Some(7)));
        assert!(!p.is_terminal());
        assert!(p.status.ready);
        // Ready is its condition's status "True"; anything else, or no such condition, is not.
        for conditions in [
            json!([{"type": "Ready", "status": "False"}]),
            json!([{"type": "Ready", "status": "Unknown"}]),
            json!([{"type": "ContainersReady", "status": "True"}]),
            json!([]),
            json!(null),
        ] {
            let p: DrainPod =
                serde_json::from_value(json!({"status": {"conditions": conditions}})).unwrap();
            assert!(!p.status.ready, "{conditions}");
        }
        let bare: DrainPod = serde_json::from_value(json!({
            "metadata": {"name": "b", "annotations": null},
            "spec": {"volumes": null}
        }))
        .unwrap();
        assert!(
            bare.metadata.marks == PodMarks::default()
                && !bare.spec.empty_dir
                && bare.controller_ref().is_none()
        );
        let page: PodPage = serde_json::from_value(json!({
            "kind": "PodList", "metadata": {"continue": "abc", "resourceVersion": "1"},
            "items": [{"metadata": {"name": "x"}}]
        }))
        .unwrap();
        assert_eq!(page.metadata.continue_.as_deref(), Some("abc"));
        assert_eq!(page.items.len(), 1);
    }
}
