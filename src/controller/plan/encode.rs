//! Status encoding: whether a planned status is worth a write, and the merge patch that stores
//! it.

use crate::api::NodeMaintenanceStatus;
use crate::controller::memory::StatusSchema;
use crate::server_time::now_time;

/// Whether `new` differs from `old` in more than `lastUpdate` (which every step bumps), i.e.
/// whether a status write is due. `pruned` names the status fields (JSON names) the API server
/// drops (those of [`crate::api::ADDED_STATUS_FIELDS`] when upstream's CRD is installed): `old`
/// was read back without them, so comparing them would call for a write on every pass
/// (docs/design.md §1).
pub(crate) fn needs_write(
    old: &NodeMaintenanceStatus,
    new: &NodeMaintenanceStatus,
    pruned: &[String],
) -> bool {
    let kept = |s: &NodeMaintenanceStatus| {
        let mut v = serde_json::to_value(s).unwrap_or_default();
        if let Some(map) = v.as_object_mut() {
            map.remove("lastUpdate");
            for f in pruned {
                map.remove(f);
            }
        }
        v
    };
    kept(old) != kept(new)
}

/// The JSON merge patch for the status subresource that makes the stored status equal `status`:
/// unset fields are sent as explicit `null` (a merge patch otherwise leaves them), lists are
/// replaced whole. The executor adds the object's `resourceVersion` when it sends it, so the API
/// server rejects the write with 409 when the object changed since it was read.
pub(crate) fn status_patch(status: &NodeMaintenanceStatus) -> serde_json::Value {
    let mut body = serde_json::to_value(status).unwrap_or_else(|_| serde_json::json!({}));
    if let Some(map) = body.as_object_mut() {
        // Every field, from the probe that sets them all (one list of the status's fields).
        for f in StatusSchema::fields() {
            map.entry(f).or_insert(serde_json::Value::Null);
        }
    }
    serde_json::json!({ "status": body })
}

/// The status patch that records a failed pass's error in `lastError` (the error sink: best
/// effort, no precondition, the next successful pass replaces it); `None` when it says so
/// already. An API server's or a webhook's message can be any length, so it is bounded
/// (docs/drain-contract.md §5).
pub(crate) fn last_error_patch(
    nm: &crate::api::NodeMaintenance,
    error: &str,
    now: jiff::Timestamp,
) -> Option<serde_json::Value> {
    let text = crate::bounds::truncate(error, crate::bounds::MAX_ERROR * 4);
    if nm.status.as_ref().and_then(|s| s.last_error.as_deref()) == Some(text.as_str()) {
        return None;
    }
    Some(serde_json::json!({"status": {"lastError": text, "lastUpdate": now_time(now)}}))
}
