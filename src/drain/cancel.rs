//! Cancelling KubeVirt's evacuations when a maintenance ends (`docs/design.md` §2c): after the
//! node is restored, each VMI still evacuating off it (`status.evacuationNodeName` is the node)
//! gets KubeVirt's `evacuate/cancel` (kubevirt #15957: `PUT
//! /apis/subresources.kubevirt.io/v1/namespaces/<ns>/virtualmachineinstances/<name>/evacuate/cancel`,
//! body `EvacuateCancelOptions`), where the API server offers it; else the migrations go on, as
//! upstream's, and an event says so.
//!
//! Read only when KubeVirt's migrations are watched (KubeVirt found and readable at start): on
//! other clusters nothing is asked.

use kube::api::{DynamicObject, ListParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::{Api, Client, ResourceExt};

/// The API group version of KubeVirt's subresources (served by virt-api behind an APIService).
pub(crate) const SUBRESOURCES_GROUP_VERSION: &str = "subresources.kubevirt.io/v1";
/// The subresource that cancels a VMI's evacuation, as discovery lists it.
pub(crate) const CANCEL_RESOURCE: &str = "virtualmachineinstances/evacuate/cancel";

/// A VMI, by namespace and name.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct VmiRef {
    /// `metadata.namespace`.
    pub namespace: String,
    /// `metadata.name`.
    pub name: String,
}

/// What the deletion pass knows of the node's evacuations.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Evacuations {
    /// The VMIs whose `status.evacuationNodeName` is the node, sorted.
    pub vmis: Vec<VmiRef>,
    /// Discovery of [`SUBRESOURCES_GROUP_VERSION`] lists [`CANCEL_RESOURCE`].
    pub cancel_served: bool,
    /// The VMIs could not be listed: the error. The node is restored all the same (an
    /// evacuation is not worth keeping the node in maintenance for).
    pub unread: Option<String>,
}

/// The VMIs of `vmis` evacuating off `node` (`status.evacuationNodeName`), sorted.
pub(crate) fn evacuating_off(node: &str, vmis: &[DynamicObject]) -> Vec<VmiRef> {
    let mut off: Vec<VmiRef> = vmis
        .iter()
        .filter(|v| v.data["status"]["evacuationNodeName"].as_str() == Some(node))
        .map(|v| VmiRef {
            namespace: v.namespace().unwrap_or_default(),
            name: v.name_any(),
        })
        .collect();
    off.sort();
    off
}

/// The path of `vmi`'s `evacuate/cancel` subresource.
pub(crate) fn cancel_path(vmi: &VmiRef) -> String {
    format!(
        "/apis/{SUBRESOURCES_GROUP_VERSION}/namespaces/{}/virtualmachineinstances/{}/evacuate/cancel",
        vmi.namespace, vmi.name
    )
}

fn vmi_resource() -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk(
        "kubevirt.io",
        "v1",
        "VirtualMachineInstance",
    ))
}

/// Reads the VMIs evacuating off `node` (one list of VMIs in every namespace) and, when there
/// are any, whether the API server offers `evacuate/cancel` (one discovery call). Each call is
/// bounded by the drain's read deadline.
///
/// # Errors
/// The list's error (or timeout, as [`kube::Error::Service`]); a failed discovery reads as
/// "not offered".
pub(crate) async fn observe(client: &Client, node: &str) -> Result<Evacuations, kube::Error> {
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &vmi_resource());
    let list = tokio::time::timeout(
        super::consts::READ_TIMEOUT,
        api.list(&ListParams::default()),
    )
    .await
    .map_err(|e| kube::Error::Service(Box::new(e)))??;
    let vmis = evacuating_off(node, &list.items);
    if vmis.is_empty() {
        return Ok(Evacuations::default());
    }
    let discovery = client.list_api_group_resources(SUBRESOURCES_GROUP_VERSION);
    let cancel_served = match tokio::time::timeout(super::consts::READ_TIMEOUT, discovery).await {
        Ok(Ok(list)) => list.resources.iter().any(|r| r.name == CANCEL_RESOURCE),
        _ => false,
    };
    Ok(Evacuations {
        vmis,
        cancel_served,
        unread: None,
    })
}

/// Sends `evacuate/cancel` for `vmi` (an empty `EvacuateCancelOptions`), bounded by the
/// drain's read deadline.
///
/// # Errors
/// The API server's answer (a 404: the VMI is gone), or a timeout as [`kube::Error::Service`].
pub(crate) async fn cancel(client: &Client, vmi: &VmiRef) -> Result<(), kube::Error> {
    let body = serde_json::to_vec(&serde_json::json!({
        "kind": "EvacuateCancelOptions",
        "apiVersion": SUBRESOURCES_GROUP_VERSION,
    }))
    .map_err(kube::Error::SerdeError)?;
    let request = http::Request::put(cancel_path(vmi))
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(body)
        .map_err(kube::Error::HttpError)?;
    tokio::time::timeout(super::consts::READ_TIMEOUT, client.request_text(request))
        .await
        .map_err(|e| kube::Error::Service(Box::new(e)))??;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn vmi(ns: &str, name: &str, evacuation: Option<&str>) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
            "metadata": {"name": name, "namespace": ns},
            "status": {"nodeName": "n1", "evacuationNodeName": evacuation}
        }))
        .unwrap()
    }

    #[test]
    fn only_vmis_evacuating_off_the_node_are_cancelled() {
        let vmis = [
            vmi("b", "vm-2", Some("n1")),
            vmi("a", "vm-1", Some("n1")),
            vmi("a", "elsewhere", Some("n2")),
            vmi("a", "staying", None),
        ];
        let off = evacuating_off("n1", &vmis);
        let names: Vec<_> = off
            .iter()
            .map(|v| format!("{}/{}", v.namespace, v.name))
            .collect();
        assert_eq!(names, ["a/vm-1", "b/vm-2"]);
        assert_eq!(
            cancel_path(&off[0]),
            "/apis/subresources.kubevirt.io/v1/namespaces/a/virtualmachineinstances/vm-1/evacuate/cancel"
        );
        assert!(evacuating_off("n3", &vmis).is_empty());
    }
}
