//! The record of the node a maintenance entered, on the NodeMaintenance (docs/design.md §1,
//! "Entry"): written after the node is entered, cleared once it was left.

use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;

use super::write::Write;
use crate::api::{
    DRAIN_STARTED_ANNOTATION, ENTERED_NODE_ANNOTATION, ENTERED_NODE_PROVIDER_ID_ANNOTATION,
    ENTERED_NODE_UID_ANNOTATION, NodeMaintenance,
};

/// `node`'s `spec.providerID`, empty when it has none.
pub(crate) fn provider_id(node: &Node) -> &str {
    node.spec
        .as_ref()
        .and_then(|s| s.provider_id.as_deref())
        .unwrap_or_default()
}

/// Clears the record of the node entered (the node, its identity, the legacy drain start) on the
/// NodeMaintenance, after that node was left: a required write (the next pass starts over on
/// `spec.nodeName` only once it landed).
pub(super) fn clear_record() -> Write {
    Write::Annotations {
        patch: serde_json::json!({"metadata": {"annotations": {
            ENTERED_NODE_ANNOTATION: null,
            ENTERED_NODE_PROVIDER_ID_ANNOTATION: null,
            ENTERED_NODE_UID_ANNOTATION: null,
            DRAIN_STARTED_ANNOTATION: null,
        }}}),
        required: true,
    }
}

/// The record of `node`, entered by `nm`, on the NodeMaintenance: its name, `spec.providerID`
/// (empty when it has none) and `metadata.uid`, in one merge patch; `None` when `nm` records
/// exactly that already.
///
/// It is written after the node is entered and is not required: a failure is logged, the pass
/// goes on, and the next pass writes it again until it lands. Entering therefore needs no
/// NodeMaintenance metadata write, an UPDATE that the operator's own validating webhook
/// intercepts (`failurePolicy: Fail`): an admitted maintenance enters its node while the webhook
/// is unreachable, as upstream's does (it writes only status, the Lease and the Node after the
/// finalizer). The record is safe to lag because the node it names can change only with an
/// UPDATE of `spec.nodeName`, which the CRD's CEL rule refuses and which lands only when the
/// webhook is absent or admits it; while the webhook is unreachable no UPDATE of the
/// NodeMaintenance lands at all, neither the record nor a change of `spec.nodeName`, so the node
/// entered is still `spec.nodeName` when the record lands. Meanwhile the Node's own record
/// (holder and holder-uid) names the maintenance, and deletion and the orphan sweep find the
/// node by `spec.nodeName` (docs/design.md §1, "Entry").
pub(super) fn entered_record(nm: &NodeMaintenance, node: &Node) -> Option<serde_json::Value> {
    let name = node.metadata.name.as_deref().unwrap_or_default();
    let provider_id = provider_id(node);
    let uid = node.metadata.uid.as_deref().unwrap_or_default();
    let annotations = nm.annotations();
    let recorded = |key: &str| annotations.get(key).map(String::as_str);
    if recorded(ENTERED_NODE_ANNOTATION) == Some(name)
        && recorded(ENTERED_NODE_PROVIDER_ID_ANNOTATION) == Some(provider_id)
        && recorded(ENTERED_NODE_UID_ANNOTATION) == Some(uid)
    {
        return None;
    }
    Some(serde_json::json!({"metadata": {"annotations": {
        ENTERED_NODE_ANNOTATION: name,
        ENTERED_NODE_PROVIDER_ID_ANNOTATION: provider_id,
        ENTERED_NODE_UID_ANNOTATION: uid,
    }}}))
}
