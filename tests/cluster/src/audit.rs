//! The local kube-apiserver's audit log: policies for what the tests need to see, and a reader
//! that returns the events written since the last read.
//!
//! Audit events are the API server's own record of each request (verb, resource, subresource,
//! object, user, response code, and when it was received), independent of what any client
//! believes it sent; the chaos suite uses them to see every eviction, the scale benchmark to
//! count the operator's requests.

use std::io::{Read, Seek, SeekFrom};
use std::path::PathBuf;

use serde::Deserialize;

/// File name of the audit log in the cluster directory.
pub const LOG_FILE: &str = "audit.log";

/// A policy that records evictions (`pods/eviction`) at level Metadata and bindings
/// (`pods/binding`, the scheduler placing a pod) at level Request, so the binding's target node
/// is in the event ([`AuditEvent::target`]), by anyone. A binding is recorded once (at
/// ResponseComplete, with the response code); an eviction twice: at RequestReceived, which the
/// API server writes (blocking mode) before it serves the request, and at ResponseComplete,
/// which it writes after it answered. A SIGKILLed API server loses the ResponseComplete of a
/// request it was answering, never its RequestReceived: an eviction with the one and not the
/// other was in flight when the server died ([`AuditEvent::stage`], [`AuditEvent::audit_id`]).
/// The bindings tell on which node an evicted pod was even when no watch saw it there (a pod
/// bound and evicted while a watcher was reconnecting).
pub const EVICTIONS_POLICY: &str = r#"apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["ResponseStarted"]
rules:
- level: Metadata
  resources:
  - group: ""
    resources: ["pods/eviction"]
- level: Request
  omitStages: ["RequestReceived"]
  resources:
  - group: ""
    resources: ["pods/binding"]
- level: None
"#;

/// The stage of an event written after the API server answered (the only stage
/// [`requests_policy`] records).
pub const RESPONSE_COMPLETE: &str = "ResponseComplete";
/// The stage of an event written when the API server received the request, before serving it.
pub const REQUEST_RECEIVED: &str = "RequestReceived";

/// A policy that records evictions by anyone and every request of a user in one of `groups`
/// (e.g. `system:serviceaccounts`, which in the local cluster only the operator is in: every
/// control-plane component is `system:masters`), at level Metadata, once each. A watch is
/// recorded when it ends (ResponseComplete); count it by its `received` time.
pub fn requests_policy(groups: &[&str]) -> String {
    let groups = groups
        .iter()
        .map(|u| format!("\"{u}\""))
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        r#"apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived", "ResponseStarted"]
rules:
- level: Metadata
  resources:
  - group: ""
    resources: ["pods/eviction"]
- level: Metadata
  userGroups: [{groups}]
- level: None
"#
    )
}

/// One audit event (level Metadata).
#[derive(Clone, Debug)]
pub struct AuditEvent {
    /// `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`, ...
    pub verb: String,
    /// The authenticated user name.
    pub user: String,
    /// The resource (`pods`, `nodes`, `nodemaintenances`, ...), empty for non-resource URLs.
    pub resource: String,
    /// The subresource (`eviction`, `status`), empty when none.
    pub subresource: String,
    /// The object's namespace, empty when cluster-scoped or a collection across namespaces.
    pub namespace: String,
    /// The object's name, empty for collections.
    pub name: String,
    /// The HTTP status code of the response (0 when the event carries none).
    pub code: u16,
    /// When the API server received the request.
    pub received: jiff::Timestamp,
    /// When the API server finished it (the event's stage timestamp).
    pub completed: jiff::Timestamp,
    /// The request URI.
    pub uri: String,
    /// The uid in the request object's metadata (a binding names its pod's uid), empty when the
    /// event has no request object.
    pub request_uid: String,
    /// `target.name` of the request object: for a `pods/binding`, the node the pod was bound
    /// to; empty otherwise.
    pub target: String,
    /// The stage the event was written at: [`RESPONSE_COMPLETE`] (with the code) or
    /// [`REQUEST_RECEIVED`] (code 0), where the policy records it.
    pub stage: String,
    /// The request's audit ID: the events of one request at its different stages share it.
    pub audit_id: String,
    /// The event's annotations: e.g. a ValidatingAdmissionPolicy bound with the `Audit` action
    /// records its failed validations under `validation.policy.admission.k8s.io/validation_failure`.
    pub annotations: std::collections::BTreeMap<String, String>,
}

impl AuditEvent {
    /// `verb resource[/subresource]`, e.g. `create pods/eviction`.
    pub fn verb_resource(&self) -> String {
        if self.subresource.is_empty() {
            format!("{} {}", self.verb, self.resource)
        } else {
            format!("{} {}/{}", self.verb, self.resource, self.subresource)
        }
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Wire {
    #[serde(default)]
    verb: String,
    #[serde(default)]
    user: WireUser,
    #[serde(default)]
    object_ref: WireRef,
    #[serde(default)]
    response_status: WireStatus,
    request_received_timestamp: jiff::Timestamp,
    stage_timestamp: jiff::Timestamp,
    #[serde(default, rename = "requestURI")]
    request_uri: String,
    #[serde(default)]
    request_object: WireObject,
    #[serde(default)]
    stage: String,
    #[serde(default, rename = "auditID")]
    audit_id: String,
    #[serde(default)]
    annotations: std::collections::BTreeMap<String, String>,
}

/// The parts of a request object (level Request) the readers use: a binding's pod uid and node.
#[derive(Default, Deserialize)]
struct WireObject {
    #[serde(default)]
    metadata: WireObjectMeta,
    #[serde(default)]
    target: WireTarget,
}

#[derive(Default, Deserialize)]
struct WireObjectMeta {
    #[serde(default)]
    uid: String,
}

#[derive(Default, Deserialize)]
struct WireTarget {
    #[serde(default)]
    name: String,
}

#[derive(Default, Deserialize)]
struct WireUser {
    #[serde(default)]
    username: String,
}

#[derive(Default, Deserialize)]
struct WireRef {
    #[serde(default)]
    resource: String,
    #[serde(default)]
    subresource: String,
    #[serde(default)]
    namespace: String,
    #[serde(default)]
    name: String,
}

#[derive(Default, Deserialize)]
struct WireStatus {
    #[serde(default)]
    code: u16,
}

/// Reads an audit log incrementally: each [`AuditCursor::read`] returns the complete lines
/// written since the previous one. Survives an API server restart (the file is appended to).
pub struct AuditCursor {
    path: PathBuf,
    offset: u64,
}

impl AuditCursor {
    /// A cursor at the start of `path` (which must exist by the first [`AuditCursor::read`]:
    /// kube-apiserver creates it at start when auditing is on).
    pub fn new(path: impl Into<PathBuf>) -> Self {
        AuditCursor {
            path: path.into(),
            offset: 0,
        }
    }

    /// A cursor at the current end of `path`: only events written from now on are read.
    pub fn at_end(path: impl Into<PathBuf>) -> Self {
        let path = path.into();
        let offset = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
        AuditCursor { path, offset }
    }

    /// The events appended since the last read; a trailing partial line is left for the next
    /// read. A log that reads as nothing must mean that nothing was audited, so a missing file
    /// and a complete line that is not an audit event are errors, never an empty answer.
    ///
    /// # Errors
    /// The file is missing (auditing off, or another cluster's path) or cannot be read
    /// (`NotFound` and the like, naming the path), or a complete line is not an audit event
    /// (`InvalidData`, with the line's offset and the parser's message).
    pub fn read(&mut self) -> std::io::Result<Vec<AuditEvent>> {
        let named = |e: std::io::Error| {
            std::io::Error::new(e.kind(), format!("audit log {}: {e}", self.path.display()))
        };
        let mut file = std::fs::File::open(&self.path).map_err(named)?;
        file.seek(SeekFrom::Start(self.offset)).map_err(named)?;
        let mut buf = Vec::new();
        file.read_to_end(&mut buf).map_err(named)?;
        let complete = buf.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
        let mut wires = Vec::new();
        let mut at = self.offset;
        for line in buf[..complete].split(|b| *b == b'\n') {
            if !line.iter().all(u8::is_ascii_whitespace) {
                let wire = serde_json::from_slice::<Wire>(line).map_err(|e| {
                    std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        format!(
                            "audit log {}: the line at byte {at} is not an audit event: {e}",
                            self.path.display()
                        ),
                    )
                })?;
                wires.push(wire);
            }
            at += line.len() as u64 + 1;
        }
        self.offset += complete as u64;
        Ok(wires
            .into_iter()
            .map(|w| AuditEvent {
                verb: w.verb,
                user: w.user.username,
                resource: w.object_ref.resource,
                subresource: w.object_ref.subresource,
                namespace: w.object_ref.namespace,
                name: w.object_ref.name,
                code: w.response_status.code,
                received: w.request_received_timestamp,
                completed: w.stage_timestamp,
                uri: w.request_uri,
                request_uid: w.request_object.metadata.uid,
                target: w.request_object.target.name,
                stage: w.stage,
                audit_id: w.audit_id,
                annotations: w.annotations,
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EVENT: &str = r#"{"kind":"Event","auditID":"a1","stage":"ResponseComplete","verb":"create","user":{"username":"u"},"objectRef":{"resource":"pods","subresource":"eviction","namespace":"ns","name":"p"},"responseStatus":{"code":201},"requestReceivedTimestamp":"2026-01-01T00:00:00.000001Z","stageTimestamp":"2026-01-01T00:00:00.000002Z"}"#;

    fn log(content: &str) -> PathBuf {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static N: AtomicUsize = AtomicUsize::new(0);
        let p = std::env::temp_dir().join(format!(
            "nmo-audit-test-{}-{}.log",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        ));
        std::fs::write(&p, content).unwrap();
        p
    }

    #[test]
    fn reads_complete_lines_and_keeps_a_partial_one() {
        let p = log(&format!("{EVENT}\n{}", &EVENT[..20]));
        let mut c = AuditCursor::new(&p);
        let evs = c.read().unwrap();
        assert_eq!(evs.len(), 1);
        assert_eq!(evs[0].verb_resource(), "create pods/eviction");
        assert_eq!(evs[0].code, 201);
        assert_eq!(evs[0].stage, RESPONSE_COMPLETE);
        assert_eq!(evs[0].audit_id, "a1");
        std::fs::write(&p, format!("{EVENT}\n{EVENT}\n")).unwrap();
        assert_eq!(c.read().unwrap().len(), 1, "only what was appended");
        let _ = std::fs::remove_file(p);
    }

    #[test]
    fn a_missing_log_is_an_error_not_silence() {
        let mut c = AuditCursor::new(std::env::temp_dir().join("nmo-audit-test-no-such.log"));
        let e = c.read().unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::NotFound);
        assert!(e.to_string().contains("nmo-audit-test-no-such.log"), "{e}");
    }

    #[test]
    fn a_line_that_is_no_audit_event_is_an_error() {
        let p = log(&format!("{EVENT}\nnot json\n"));
        let e = AuditCursor::new(&p).read().unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidData);
        assert!(e.to_string().contains("byte"), "{e}");
        let _ = std::fs::remove_file(p);
    }
}
