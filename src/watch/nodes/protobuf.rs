//! The Node watch in the API server's protobuf encoding (`docs/design.md §7`).
//!
//! Why not JSON: on a cluster of 5,000 kubelet-sized Nodes (about 12 KB of JSON each, 40 images
//! with digests), kube-apiserver spends most of a second *encoding* a JSON list of them, and
//! about 1.7 s streaming them as JSON watch events; the same objects in protobuf take it about
//! 0.5 s. The encoding on the server, not parsing here, is what start-to-ready waits for.
//!
//! kube-rs reads JSON only, so this module speaks the wire format itself, for this one
//! resource, and yields the same [`watcher::Event`]s as kube's watcher, so the cache behind it
//! does not know which encoding fed it. The messages below declare only the fields the
//! operator reads ([`WatchedNode`]), with the field numbers of Kubernetes' `generated.proto`
//! (`k8s.io/api/core/v1`, `k8s.io/apimachinery/pkg/apis/meta/v1`, `.../runtime`); protobuf
//! skips every other field without allocating it.
//!
//! The watch follows client-go's reflector with watch-list and kube's watcher: the initial
//! state is streamed as `ADDED` events ended by a bookmark annotated
//! `k8s.io/initial-events-end` (`sendInitialEvents=true`); the watch then resumes from the last
//! resourceVersion seen (events or bookmarks) whenever the server ends it; a `410 Gone` (or a
//! frame this module cannot read) starts over with a fresh initial stream. Errors are yielded
//! as `watcher::Error`s and the next poll retries, so kube's `StreamBackoff` paces the retries
//! exactly as for a kube watcher.

use std::collections::BTreeMap;

use futures::{Stream, StreamExt, TryStreamExt};
use http_body_util::BodyExt;
use k8s_openapi::api::core::v1::{NodeSpec, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::Client;
use kube::core::Status;
use kube::runtime::watcher;
use prost::Message;
use tokio_util::codec::{FramedRead, LengthDelimitedCodec};
use tokio_util::io::StreamReader;

use super::watched::WatchedNode;

/// The media type of a protobuf watch: length-delimited `WatchEvent` messages.
const WATCH_MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf;stream=watch";
/// Every protobuf-encoded object starts with these bytes, then a `runtime.Unknown`.
const MAGIC: &[u8] = b"k8s\0";
/// Server-side timeout of one watch request, in seconds (kube's watcher uses the same, below
/// its client's read timeout); the watch then resumes from the last resourceVersion.
const WATCH_TIMEOUT_SECONDS: u32 = 290;
/// Largest frame accepted, in bytes: etcd refuses objects over 1.5 MiB, so a Node never comes
/// close.
const MAX_FRAME: usize = 16 * 1024 * 1024;

// ---- Wire messages (only the fields read; numbers from Kubernetes' generated.proto) ----

/// `metav1.WatchEvent`.
#[derive(Clone, PartialEq, Message)]
struct WatchEventPb {
    #[prost(string, tag = "1")]
    type_: String,
    #[prost(message, optional, tag = "2")]
    object: Option<RawExtensionPb>,
}

/// `runtime.RawExtension`.
#[derive(Clone, PartialEq, Message)]
struct RawExtensionPb {
    #[prost(bytes = "vec", tag = "1")]
    raw: Vec<u8>,
}

/// `runtime.Unknown`: the envelope after [`MAGIC`].
#[derive(Clone, PartialEq, Message)]
struct UnknownPb {
    #[prost(message, optional, tag = "1")]
    type_meta: Option<TypeMetaPb>,
    #[prost(bytes = "vec", tag = "2")]
    raw: Vec<u8>,
}

/// `runtime.TypeMeta`.
#[derive(Clone, PartialEq, Message)]
struct TypeMetaPb {
    #[prost(string, tag = "1")]
    api_version: String,
    #[prost(string, tag = "2")]
    kind: String,
}

/// `v1.Node`.
#[derive(Clone, PartialEq, Message)]
struct NodePb {
    #[prost(message, optional, tag = "1")]
    metadata: Option<ObjectMetaPb>,
    #[prost(message, optional, tag = "2")]
    spec: Option<NodeSpecPb>,
    #[prost(message, optional, tag = "3")]
    status: Option<NodeStatusPb>,
}

/// `metav1.ObjectMeta`.
#[derive(Clone, PartialEq, Message)]
struct ObjectMetaPb {
    #[prost(string, optional, tag = "1")]
    name: Option<String>,
    #[prost(string, optional, tag = "5")]
    uid: Option<String>,
    #[prost(string, optional, tag = "6")]
    resource_version: Option<String>,
    #[prost(btree_map = "string, string", tag = "11")]
    labels: BTreeMap<String, String>,
    #[prost(btree_map = "string, string", tag = "12")]
    annotations: BTreeMap<String, String>,
}

/// `v1.NodeSpec`.
#[derive(Clone, PartialEq, Message)]
struct NodeSpecPb {
    #[prost(bool, optional, tag = "4")]
    unschedulable: Option<bool>,
    #[prost(message, repeated, tag = "5")]
    taints: Vec<TaintPb>,
}

/// `v1.Taint`.
#[derive(Clone, PartialEq, Message)]
struct TaintPb {
    #[prost(string, optional, tag = "1")]
    key: Option<String>,
    #[prost(string, optional, tag = "2")]
    value: Option<String>,
    #[prost(string, optional, tag = "3")]
    effect: Option<String>,
    #[prost(message, optional, tag = "4")]
    time_added: Option<TimePb>,
}

/// `metav1.Time`.
#[derive(Clone, PartialEq, Message)]
struct TimePb {
    #[prost(int64, tag = "1")]
    seconds: i64,
    #[prost(int32, tag = "2")]
    nanos: i32,
}

/// `v1.NodeStatus`.
#[derive(Clone, PartialEq, Message)]
struct NodeStatusPb {
    #[prost(message, repeated, tag = "4")]
    conditions: Vec<NodeConditionPb>,
}

/// `v1.NodeCondition`.
#[derive(Clone, PartialEq, Message)]
struct NodeConditionPb {
    #[prost(string, tag = "1")]
    type_: String,
    #[prost(string, tag = "2")]
    status: String,
}

/// `metav1.Status` (the object of an `ERROR` event).
#[derive(Clone, PartialEq, Message)]
struct StatusPb {
    #[prost(string, tag = "2")]
    status: String,
    #[prost(string, tag = "3")]
    message: String,
    #[prost(string, tag = "4")]
    reason: String,
    #[prost(int32, tag = "6")]
    code: i32,
}

// ---- Decoding ----

/// A watch frame that is not what the API server sends for Nodes.
#[derive(Debug, thiserror::Error)]
pub(crate) enum DecodeError {
    /// The bytes are not the message they should be.
    #[error("undecodable protobuf watch frame: {0}")]
    Protobuf(#[from] prost::DecodeError),
    /// An event's object does not start with the protobuf magic number.
    #[error("watch event object without the protobuf magic number")]
    Magic,
    /// An event type this watch does not know.
    #[error("unknown watch event type {0:?}")]
    EventType(String),
}

/// One decoded watch event.
#[derive(Debug)]
pub(crate) enum Frame {
    /// `ADDED` or `MODIFIED`.
    Applied(WatchedNode),
    /// `DELETED`.
    Deleted(WatchedNode),
    /// `BOOKMARK`: its resourceVersion, and whether it ends the initial events.
    Bookmark {
        /// `metadata.resourceVersion`.
        resource_version: String,
        /// Annotated `k8s.io/initial-events-end`.
        initial_events_end: bool,
    },
    /// `ERROR`, with its `Status`.
    Error(Status),
}

/// The object inside an event's `RawExtension`: the bytes after the magic number and the
/// `runtime.Unknown` envelope.
fn unwrap_object(raw: &[u8]) -> Result<Vec<u8>, DecodeError> {
    let body = raw.strip_prefix(MAGIC).ok_or(DecodeError::Magic)?;
    Ok(UnknownPb::decode(body)?.raw)
}

/// Decodes one frame of a protobuf Node watch (without its 4-byte length prefix).
///
/// # Errors
/// [`DecodeError`] when the frame is not a Node watch event.
pub(crate) fn decode_frame(frame: &[u8]) -> Result<Frame, DecodeError> {
    let event = WatchEventPb::decode(frame)?;
    let object = unwrap_object(&event.object.unwrap_or_default().raw)?;
    if event.type_ == "ERROR" {
        let s = StatusPb::decode(object.as_slice())?;
        let mut status = Status::failure(&s.message, &s.reason)
            .with_code(u16::try_from(s.code).unwrap_or_default());
        status.status = Some(if s.status == "Success" {
            kube::core::response::StatusSummary::Success
        } else {
            kube::core::response::StatusSummary::Failure
        });
        return Ok(Frame::Error(status));
    }
    let node = watched_node(NodePb::decode(object.as_slice())?);
    match event.type_.as_str() {
        "ADDED" | "MODIFIED" => Ok(Frame::Applied(node)),
        "DELETED" => Ok(Frame::Deleted(node)),
        "BOOKMARK" => Ok(Frame::Bookmark {
            initial_events_end: node.metadata.annotations.as_ref().is_some_and(|a| {
                a.get("k8s.io/initial-events-end").map(String::as_str) == Some("true")
            }),
            resource_version: node.metadata.resource_version.unwrap_or_default(),
        }),
        other => Err(DecodeError::EventType(other.to_string())),
    }
}

fn non_empty<K, V>(m: BTreeMap<K, V>) -> Option<BTreeMap<K, V>> {
    (!m.is_empty()).then_some(m)
}

/// The same [`WatchedNode`] the JSON path parses from the same object.
fn watched_node(n: NodePb) -> WatchedNode {
    let meta = n.metadata.unwrap_or_default();
    WatchedNode {
        metadata: ObjectMeta {
            name: meta.name,
            uid: meta.uid,
            resource_version: meta.resource_version,
            labels: non_empty(meta.labels),
            annotations: non_empty(meta.annotations),
            ..ObjectMeta::default()
        },
        spec: n.spec.map(|s| NodeSpec {
            // Protobuf carries `false` where JSON omits the field.
            unschedulable: s.unschedulable.filter(|u| *u),
            taints: (!s.taints.is_empty()).then(|| s.taints.into_iter().map(taint).collect()),
            ..NodeSpec::default()
        }),
        lifecycle: n.status.as_ref().is_some_and(|s| {
            super::watched::lifecycle_true(s.conditions.iter().map(|c| (&*c.type_, &*c.status)))
        }),
        shutting_down: n.status.as_ref().is_some_and(|s| {
            crate::node::conditions::shutting_down_in(
                s.conditions.iter().map(|c| (&*c.type_, &*c.status)),
            )
        }),
        ready: n
            .status
            .and_then(|s| s.conditions.into_iter().find(|c| c.type_ == "Ready"))
            .map(|c| c.status),
    }
}

fn taint(t: TaintPb) -> Taint {
    Taint {
        key: t.key.unwrap_or_default(),
        // Protobuf carries an empty value where JSON omits it; the fingerprint must not differ.
        value: t.value.filter(|v| !v.is_empty()),
        effect: t.effect.unwrap_or_default(),
        time_added: t.time_added.and_then(|t| {
            k8s_openapi::jiff::Timestamp::new(t.seconds, t.nanos)
                .ok()
                .map(Time)
        }),
    }
}

// ---- The watch ----

type Frames = std::pin::Pin<Box<dyn Stream<Item = Result<bytes::Bytes, std::io::Error>> + Send>>;

enum State {
    /// Start over: stream the initial state.
    Initial,
    /// The watch ended or failed; reconnect from `rv`.
    Resume { rv: String },
    /// A watch is open, at `at`.
    Open { frames: Frames, at: At },
}

/// Where an open watch stands.
#[derive(Clone, Debug, PartialEq, Eq)]
enum At {
    /// Reading the initial events, until the bookmark that ends them.
    InitialEvents,
    /// Watching; `rv` is where to resume.
    Watching { rv: String },
}

/// One read from an open watch.
// A Read lives for one transition, moved once: boxing its frame would add an allocation per
// event for nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
enum Read {
    /// A decoded frame.
    Frame(Frame),
    /// A frame that is not a Node watch event.
    Undecodable(DecodeError),
    /// The connection failed.
    Failed(std::io::Error),
    /// The server ended the watch.
    Ended,
}

/// Where to go after a read.
#[derive(Debug, PartialEq, Eq)]
enum After {
    /// Open a new watch that streams the initial state.
    Initial,
    /// Open a new watch from `rv`.
    Resume { rv: String },
    /// Keep reading the open watch, now at this point.
    Stay(At),
}

type Item = Result<watcher::Event<WatchedNode>, watcher::Error>;

/// The watch's rule for one read: what to yield, if anything, and where to go. As client-go's
/// reflector: a `410 Gone`, a frame that cannot be read, or a watch that ends or fails before
/// its initial events are complete starts over from the initial state; any other end, failure
/// or error event resumes from the last resourceVersion seen (of an event or a bookmark).
fn on_read(at: At, read: Read) -> (Option<Item>, After) {
    let gone = |s: &Status| s.code == 410;
    match (at, read) {
        (_, Read::Undecodable(e)) => (
            Some(Err(watcher::Error::WatchFailed(read_error(e)))),
            After::Initial,
        ),
        (At::InitialEvents, Read::Frame(frame)) => match frame {
            Frame::Applied(n) => (
                Some(Ok(watcher::Event::InitApply(n))),
                After::Stay(At::InitialEvents),
            ),
            Frame::Bookmark {
                resource_version,
                initial_events_end: true,
            } => (
                Some(Ok(watcher::Event::InitDone)),
                After::Stay(At::Watching {
                    rv: resource_version,
                }),
            ),
            Frame::Bookmark { .. } => (None, After::Stay(At::InitialEvents)),
            // A deletion cannot precede the end of the initial events; start over.
            Frame::Deleted(_) => (None, After::Initial),
            Frame::Error(s) => (
                Some(Err(watcher::Error::WatchError(Box::new(s)))),
                After::Initial,
            ),
        },
        (At::InitialEvents, Read::Failed(e)) => (
            Some(Err(watcher::Error::WatchFailed(kube::Error::ReadEvents(e)))),
            After::Initial,
        ),
        (At::InitialEvents, Read::Ended) => (None, After::Initial),
        (At::Watching { rv }, Read::Frame(frame)) => match frame {
            Frame::Applied(n) => changed(rv, n, watcher::Event::Apply),
            Frame::Deleted(n) => changed(rv, n, watcher::Event::Delete),
            Frame::Bookmark {
                resource_version, ..
            } => {
                let rv = if resource_version.is_empty() {
                    rv
                } else {
                    resource_version
                };
                (None, After::Stay(At::Watching { rv }))
            }
            Frame::Error(s) => {
                let after = if gone(&s) {
                    After::Initial
                } else {
                    After::Resume { rv }
                };
                (Some(Err(watcher::Error::WatchError(Box::new(s)))), after)
            }
        },
        (At::Watching { rv }, Read::Failed(e)) => (
            Some(Err(watcher::Error::WatchFailed(kube::Error::ReadEvents(e)))),
            After::Resume { rv },
        ),
        (At::Watching { rv }, Read::Ended) => (None, After::Resume { rv }),
    }
}

/// Opens a protobuf watch of all Nodes: with the initial state streamed first when `from` is
/// `None`, else from resourceVersion `from`.
/// A node changed while watching: the event, and the node's resourceVersion to resume from
/// (the last one when it has none).
fn changed(
    rv: String,
    n: WatchedNode,
    event: fn(WatchedNode) -> watcher::Event<WatchedNode>,
) -> (Option<Item>, After) {
    let rv = n.metadata.resource_version.clone().unwrap_or(rv);
    (Some(Ok(event(n))), After::Stay(At::Watching { rv }))
}

async fn open(client: &Client, from: Option<&str>) -> Result<Frames, kube::Error> {
    let common =
        format!("watch=true&allowWatchBookmarks=true&timeoutSeconds={WATCH_TIMEOUT_SECONDS}");
    let query = match from {
        None => format!("{common}&sendInitialEvents=true&resourceVersionMatch=NotOlderThan"),
        // A resourceVersion is an opaque token the server gave; it needs no escaping.
        Some(rv) => format!("{common}&resourceVersion={rv}"),
    };
    let request = http::Request::get(format!("/api/v1/nodes?{query}"))
        .header(http::header::ACCEPT, WATCH_MEDIA_TYPE)
        // A compressed watch would be buffered by the decompression layer; kube's own watches
        // opt out the same way.
        .header(http::header::ACCEPT_ENCODING, "identity")
        .body(kube::client::Body::empty())
        .map_err(kube::Error::HttpError)?;
    let response = client.send(request).await?;
    let code = response.status();
    if !code.is_success() {
        // An error body comes in the negotiated encoding (protobuf): its text is kept as far as
        // it is readable, and the code, which is what the watch decides on.
        let body = response.into_body().collect().await.map(|b| b.to_bytes());
        let text = body
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default();
        let text: String = text.chars().filter(|c| !c.is_control()).collect();
        return Err(kube::Error::Api(
            Status::failure(text.trim(), code.canonical_reason().unwrap_or("Unknown"))
                .with_code(code.as_u16())
                .boxed(),
        ));
    }
    let reader = StreamReader::new(
        response
            .into_body()
            .into_data_stream()
            .map_err(std::io::Error::other),
    );
    let codec = LengthDelimitedCodec::builder()
        .length_field_length(4)
        .max_frame_length(MAX_FRAME)
        .new_codec();
    Ok(FramedRead::new(reader, codec)
        .map_ok(bytes::BytesMut::freeze)
        .boxed())
}

fn read_error(e: impl std::fmt::Display) -> kube::Error {
    kube::Error::ReadEvents(std::io::Error::new(
        std::io::ErrorKind::InvalidData,
        e.to_string(),
    ))
}

/// A watch of every Node in protobuf, as a stream of kube watcher events: `Init`, `InitApply`
/// per node, `InitDone`, then `Apply`/`Delete`; after a `410 Gone` or an undecodable frame, the
/// same again from `Init`. Errors are yielded and retried on the next poll (pace them with
/// kube's `WatchStreamExt::backoff`). Needs an API server that streams initial events
/// (Kubernetes 1.32 and later; see `nodes::streams_initial_lists`).
pub(crate) fn watch(
    client: Client,
) -> impl Stream<Item = Result<watcher::Event<WatchedNode>, watcher::Error>> + Send {
    futures::stream::unfold((client, State::Initial), |(client, state)| async move {
        let (item, next) = step(&client, state).await;
        Some((item, (client, next)))
    })
}

/// One step of [`watch`]: opens and reads until there is something to yield.
async fn step(client: &Client, mut state: State) -> (Item, State) {
    loop {
        state = match state {
            State::Initial => match open(client, None).await {
                Ok(frames) => {
                    let at = At::InitialEvents;
                    return (Ok(watcher::Event::Init), State::Open { frames, at });
                }
                Err(e) => return (Err(watcher::Error::WatchStartFailed(e)), State::Initial),
            },
            State::Resume { rv } => match open(client, Some(&rv)).await {
                Ok(frames) => State::Open {
                    frames,
                    at: At::Watching { rv },
                },
                Err(kube::Error::Api(s)) if s.code == 410 => {
                    return (Err(watcher::Error::WatchError(s)), State::Initial);
                }
                Err(e) => {
                    return (
                        Err(watcher::Error::WatchStartFailed(e)),
                        State::Resume { rv },
                    );
                }
            },
            State::Open { mut frames, at } => {
                let read = match frames.next().await {
                    Some(Ok(frame)) => match decode_frame(&frame) {
                        Ok(frame) => Read::Frame(frame),
                        Err(e) => Read::Undecodable(e),
                    },
                    Some(Err(e)) => Read::Failed(e),
                    None => Read::Ended,
                };
                let (item, after) = on_read(at, read);
                let next = match after {
                    After::Initial => State::Initial,
                    After::Resume { rv } => State::Resume { rv },
                    After::Stay(at) => State::Open { frames, at },
                };
                match item {
                    Some(item) => return (item, next),
                    None => next,
                }
            }
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The initial events of a real kube-apiserver (1.36) watch of six kwok nodes, some in
    /// maintenance, in protobuf (`testdata/initial-events.pb`, length-prefixed frames as
    /// received), and a JSON list of the same nodes taken right after (`testdata/nodes.json`).
    const STREAM: &[u8] = include_bytes!("testdata/initial-events.pb");
    const LIST: &str = include_str!("testdata/nodes.json");

    fn frames(mut b: &[u8]) -> Vec<&[u8]> {
        let mut out = Vec::new();
        while !b.is_empty() {
            let n = u32::from_be_bytes(b[..4].try_into().unwrap()) as usize;
            out.push(&b[4..4 + n]);
            b = &b[4 + n..];
        }
        out
    }

    #[test]
    fn protobuf_events_decode_to_what_the_json_path_parses() {
        #[derive(serde::Deserialize)]
        struct List {
            items: Vec<WatchedNode>,
        }
        let json: List = serde_json::from_str(LIST).unwrap();
        let frames = frames(STREAM);
        assert!(frames.len() > 2, "fixture has {} frames", frames.len());
        let mut compared = 0;
        let mut nodes = Vec::new();
        for (i, f) in frames.iter().enumerate() {
            match decode_frame(f).unwrap() {
                Frame::Applied(n) => nodes.push(n),
                Frame::Bookmark {
                    initial_events_end,
                    resource_version,
                } => {
                    assert_eq!(i, frames.len() - 1, "the bookmark ends the initial events");
                    assert!(initial_events_end);
                    assert!(!resource_version.is_empty());
                }
                other => panic!("unexpected frame {other:?}"),
            }
        }
        assert_eq!(nodes.len(), json.items.len());
        for n in &nodes {
            let j = json
                .items
                .iter()
                .find(|j| j.metadata.name == n.metadata.name)
                .unwrap_or_else(|| panic!("{:?} not in the JSON list", n.metadata.name));
            if j.metadata.resource_version != n.metadata.resource_version {
                continue; // changed between the two reads
            }
            assert_eq!(format!("{n:?}"), format!("{j:?}"));
            compared += 1;
        }
        // The fixture was taken while maintenances ran: cordoned nodes with the maintenance
        // taints, a control-plane node, and nodes with annotations.
        assert!(
            compared >= 4,
            "only {compared} nodes unchanged between the reads"
        );
        assert!(
            nodes
                .iter()
                .any(|n| n.spec.as_ref().and_then(|s| s.unschedulable) == Some(true))
        );
        assert!(nodes.iter().any(|n| {
            n.spec
                .as_ref()
                .and_then(|s| s.taints.as_ref())
                .is_some_and(|t| {
                    t.iter()
                        .any(|t| t.key == "medik8s.io/drain" && t.effect == "NoSchedule")
                })
        }));
        assert!(nodes.iter().all(|n| n.ready.as_deref() == Some("True")));
    }

    #[test]
    fn a_true_lifecycle_condition_is_seen_as_the_json_path_sees_it() {
        let status = |conditions: &[(&str, &str)]| NodePb {
            metadata: None,
            spec: None,
            status: Some(NodeStatusPb {
                conditions: conditions
                    .iter()
                    .map(|(t, s)| NodeConditionPb {
                        type_: t.to_string(),
                        status: s.to_string(),
                    })
                    .collect(),
            }),
        };
        for (conditions, lifecycle) in [
            (
                &[("Ready", "True"), ("MaintenancePlanned", "True")][..],
                true,
            ),
            (&[("Drained", "True")][..], true),
            (
                &[("Ready", "True"), ("MaintenancePlanned", "False")][..],
                false,
            ),
            (
                &[("Ready", "True"), ("NetworkUnavailable", "True")][..],
                false,
            ),
        ] {
            let pb = watched_node(status(conditions));
            let json: WatchedNode = serde_json::from_value(serde_json::json!({
                "status": {"conditions": conditions.iter()
                    .map(|(t, s)| serde_json::json!({"type": t, "status": s}))
                    .collect::<Vec<_>>()}
            }))
            .unwrap();
            assert_eq!(
                (pb.lifecycle, json.lifecycle),
                (lifecycle, lifecycle),
                "{conditions:?}"
            );
        }
        // A node going down (the admin's or the kubelet's condition), seen alike on both paths.
        for (conditions, down) in [
            (
                &[
                    ("Ready", "True"),
                    ("GracefulNodeShutdownInProgress", "True"),
                ][..],
                true,
            ),
            (&[("GracefulNodeShutdownInProgress", "False")][..], false),
            (&[("GracefulNodeShutdownInProgress", "Unknown")][..], false),
            (&[("Ready", "True")][..], false),
        ] {
            let pb = watched_node(status(conditions));
            let json: WatchedNode = serde_json::from_value(serde_json::json!({
                "status": {"conditions": conditions.iter()
                    .map(|(t, s)| serde_json::json!({"type": t, "status": s}))
                    .collect::<Vec<_>>()}
            }))
            .unwrap();
            assert_eq!(
                (pb.shutting_down, json.shutting_down),
                (down, down),
                "{conditions:?}"
            );
            assert_eq!(
                maintenance_fingerprint_differs(&pb, &watched_node(status(&[]))),
                down,
                "{conditions:?}"
            );
        }
    }

    /// Whether `a` and `b` differ in what a maintenance reads (their fingerprints).
    fn maintenance_fingerprint_differs(a: &WatchedNode, b: &WatchedNode) -> bool {
        super::super::maintenance_fingerprint(a) != super::super::maintenance_fingerprint(b)
    }

    #[test]
    fn an_error_event_carries_its_status() {
        let status = StatusPb {
            status: "Failure".into(),
            message: "too old resource version: 1 (2)".into(),
            reason: "Expired".into(),
            code: 410,
        };
        let mut raw = MAGIC.to_vec();
        UnknownPb {
            type_meta: Some(TypeMetaPb {
                api_version: "v1".into(),
                kind: "Status".into(),
            }),
            raw: status.encode_to_vec(),
        }
        .encode(&mut raw)
        .unwrap();
        let frame = WatchEventPb {
            type_: "ERROR".into(),
            object: Some(RawExtensionPb { raw }),
        }
        .encode_to_vec();
        match decode_frame(&frame).unwrap() {
            Frame::Error(s) => {
                assert_eq!(s.code, 410);
                assert_eq!(s.reason, "Expired");
                assert_eq!(s.message, "too old resource version: 1 (2)");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        assert!(decode_frame(b"\xff\xff\xff").is_err());
        let no_magic = WatchEventPb {
            type_: "ADDED".into(),
            object: Some(RawExtensionPb {
                raw: b"{\"kind\":\"Node\"}".to_vec(),
            }),
        }
        .encode_to_vec();
        assert!(matches!(decode_frame(&no_magic), Err(DecodeError::Magic)));
    }

    fn node(rv: Option<&str>) -> WatchedNode {
        WatchedNode {
            metadata: ObjectMeta {
                name: Some("n1".into()),
                resource_version: rv.map(str::to_string),
                ..ObjectMeta::default()
            },
            ..WatchedNode::default()
        }
    }

    fn status(code: u16) -> Status {
        Status::failure("gone or not", "Reason").with_code(code)
    }

    fn bookmark(rv: &str, end: bool) -> Read {
        Read::Frame(Frame::Bookmark {
            resource_version: rv.into(),
            initial_events_end: end,
        })
    }

    fn watching(rv: &str) -> At {
        At::Watching { rv: rv.into() }
    }

    /// What a read yields, in a word, for comparing whole tables of transitions.
    fn yielded(item: &Option<Item>) -> &'static str {
        match item {
            None => "nothing",
            Some(Ok(watcher::Event::Init)) => "Init",
            Some(Ok(watcher::Event::InitApply(_))) => "InitApply",
            Some(Ok(watcher::Event::InitDone)) => "InitDone",
            Some(Ok(watcher::Event::Apply(_))) => "Apply",
            Some(Ok(watcher::Event::Delete(_))) => "Delete",
            Some(Err(watcher::Error::WatchError(_))) => "WatchError",
            Some(Err(watcher::Error::WatchFailed(_))) => "WatchFailed",
            Some(Err(_)) => "other error",
        }
    }

    #[test]
    fn each_read_yields_and_moves_as_client_gos_reflector_does() {
        let undecodable = || Read::Undecodable(DecodeError::EventType("WHATEVER".into()));
        let failed = || Read::Failed(std::io::Error::other("connection reset"));
        let stay_initial = After::Stay(At::InitialEvents);
        let cases: Vec<(&str, At, Read, &str, After)> = vec![
            // The initial events, up to the bookmark that ends them.
            (
                "initial node",
                At::InitialEvents,
                Read::Frame(Frame::Applied(node(Some("5")))),
                "InitApply",
                After::Stay(At::InitialEvents),
            ),
            (
                "progress bookmark",
                At::InitialEvents,
                bookmark("6", false),
                "nothing",
                stay_initial,
            ),
            (
                "end bookmark",
                At::InitialEvents,
                bookmark("7", true),
                "InitDone",
                After::Stay(watching("7")),
            ),
            // Anything that breaks the initial events starts over.
            (
                "deletion before the end",
                At::InitialEvents,
                Read::Frame(Frame::Deleted(node(Some("8")))),
                "nothing",
                After::Initial,
            ),
            (
                "error event",
                At::InitialEvents,
                Read::Frame(Frame::Error(status(500))),
                "WatchError",
                After::Initial,
            ),
            (
                "undecodable frame",
                At::InitialEvents,
                undecodable(),
                "WatchFailed",
                After::Initial,
            ),
            (
                "connection failed",
                At::InitialEvents,
                failed(),
                "WatchFailed",
                After::Initial,
            ),
            (
                "ended early",
                At::InitialEvents,
                Read::Ended,
                "nothing",
                After::Initial,
            ),
            // Watching: every event and bookmark moves the resume point.
            (
                "change",
                watching("7"),
                Read::Frame(Frame::Applied(node(Some("9")))),
                "Apply",
                After::Stay(watching("9")),
            ),
            (
                "change without resourceVersion",
                watching("7"),
                Read::Frame(Frame::Applied(node(None))),
                "Apply",
                After::Stay(watching("7")),
            ),
            (
                "deletion",
                watching("9"),
                Read::Frame(Frame::Deleted(node(Some("10")))),
                "Delete",
                After::Stay(watching("10")),
            ),
            (
                "bookmark",
                watching("10"),
                bookmark("12", false),
                "nothing",
                After::Stay(watching("12")),
            ),
            (
                "bookmark without resourceVersion",
                watching("12"),
                bookmark("", false),
                "nothing",
                After::Stay(watching("12")),
            ),
            // Ends and failures resume from there; only 410 or an unreadable frame start over.
            (
                "server ended the watch",
                watching("12"),
                Read::Ended,
                "nothing",
                After::Resume { rv: "12".into() },
            ),
            (
                "connection failed",
                watching("12"),
                failed(),
                "WatchFailed",
                After::Resume { rv: "12".into() },
            ),
            (
                "error event",
                watching("12"),
                Read::Frame(Frame::Error(status(500))),
                "WatchError",
                After::Resume { rv: "12".into() },
            ),
            (
                "410 Gone",
                watching("12"),
                Read::Frame(Frame::Error(status(410))),
                "WatchError",
                After::Initial,
            ),
            (
                "undecodable frame",
                watching("12"),
                undecodable(),
                "WatchFailed",
                After::Initial,
            ),
        ];
        for (what, at, read, want_item, want_after) in cases {
            let context = format!("{what} at {at:?}");
            let (item, after) = on_read(at, read);
            assert_eq!(yielded(&item), want_item, "{context}");
            assert_eq!(after, want_after, "{context}");
        }
    }
}
