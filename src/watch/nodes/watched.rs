//! The Node as the watch parses it, from JSON ([`WatchedNode`]'s `Deserialize`) or from
//! protobuf (`protobuf.rs`): only what a reader needs; every other field is skipped while
//! parsing and never allocated.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, NodeSpec, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// A Node as the watch parses it: `metadata` with only `name`, `uid`, `resourceVersion`,
/// `labels` and `annotations` set; `spec` with only `unschedulable` and `taints`; the status of
/// the `Ready` condition; and whether a Node lifecycle condition is True. Every other field is
/// skipped while parsing.
#[derive(Clone, Debug, Default, serde::Deserialize)]
#[serde(from = "WatchedNodeWire")]
pub(crate) struct WatchedNode {
    /// `name`, `uid`, `resourceVersion`, `labels` and `annotations`; every other field empty.
    pub metadata: ObjectMeta,
    /// `unschedulable` and `taints`; every other field empty.
    pub spec: Option<NodeSpec>,
    /// `status` of the `Ready` condition, when the node has one.
    pub ready: Option<String>,
    /// Some Node lifecycle condition (`crate::node::conditions::TYPES`) is True: a maintenance
    /// that has not ended, which may carry no record on the node (stage Idle writes only
    /// `MaintenancePlanned`).
    pub lifecycle: bool,
    /// The node's `GracefulNodeShutdownInProgress` condition is True: it is going down, so its
    /// drain sends no new eviction (`crate::drain::gate::node_shutdown`).
    pub shutting_down: bool,
}

/// Whether any of `conditions` (`(type, status)`) is a Node lifecycle condition that is True.
pub(super) fn lifecycle_true<'a>(mut conditions: impl Iterator<Item = (&'a str, &'a str)>) -> bool {
    conditions.any(|(t, s)| s == "True" && crate::node::conditions::TYPES.contains(&t))
}

#[derive(serde::Deserialize)]
struct WatchedNodeWire {
    #[serde(default)]
    metadata: WireMeta,
    #[serde(default)]
    spec: Option<WireSpec>,
    #[serde(default)]
    status: Option<WireStatus>,
}

#[derive(Default, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireMeta {
    name: Option<String>,
    uid: Option<String>,
    resource_version: Option<String>,
    labels: Option<BTreeMap<String, String>>,
    annotations: Option<BTreeMap<String, String>>,
}

#[derive(serde::Deserialize)]
struct WireSpec {
    unschedulable: Option<bool>,
    taints: Option<Vec<Taint>>,
}

#[derive(serde::Deserialize)]
struct WireStatus {
    #[serde(default)]
    conditions: Vec<WireCondition>,
}

#[derive(serde::Deserialize)]
struct WireCondition {
    #[serde(rename = "type")]
    type_: String,
    status: String,
}

impl From<WatchedNodeWire> for WatchedNode {
    fn from(w: WatchedNodeWire) -> Self {
        WatchedNode {
            metadata: ObjectMeta {
                name: w.metadata.name,
                uid: w.metadata.uid,
                resource_version: w.metadata.resource_version,
                labels: w.metadata.labels,
                annotations: w.metadata.annotations,
                ..ObjectMeta::default()
            },
            spec: w.spec.map(|s| NodeSpec {
                unschedulable: s.unschedulable,
                taints: s.taints,
                ..NodeSpec::default()
            }),
            lifecycle: w.status.as_ref().is_some_and(|s| {
                lifecycle_true(s.conditions.iter().map(|c| (&*c.type_, &*c.status)))
            }),
            shutting_down: w.status.as_ref().is_some_and(|s| {
                crate::node::conditions::shutting_down_in(
                    s.conditions.iter().map(|c| (&*c.type_, &*c.status)),
                )
            }),
            ready: w
                .status
                .and_then(|s| s.conditions.into_iter().find(|c| c.type_ == "Ready"))
                .map(|c| c.status),
        }
    }
}

impl k8s_openapi::Resource for WatchedNode {
    const API_VERSION: &'static str = <Node as k8s_openapi::Resource>::API_VERSION;
    const GROUP: &'static str = <Node as k8s_openapi::Resource>::GROUP;
    const KIND: &'static str = <Node as k8s_openapi::Resource>::KIND;
    const VERSION: &'static str = <Node as k8s_openapi::Resource>::VERSION;
    const URL_PATH_SEGMENT: &'static str = <Node as k8s_openapi::Resource>::URL_PATH_SEGMENT;
    type Scope = k8s_openapi::ClusterResourceScope;
}

impl k8s_openapi::Metadata for WatchedNode {
    type Ty = ObjectMeta;
    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}
