//! The HTTP and AdmissionReview envelope around a [`Validator`].
//!
//! Well-formed reviews always get HTTP 200 with an AdmissionReview whose `response.uid` echoes the
//! request, whatever the validator decides. Requests that are not a usable AdmissionReview get a
//! 4xx with a `metav1.Status`-shaped JSON body that says what is wrong; the API server reports
//! that as a failed webhook call, which is the honest answer for input it should never send.

use std::any::Any;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use http::{HeaderMap, StatusCode, header};
use http_body_util::{BodyExt, LengthLimitError};
use kube::Resource;
use kube::core::TypeMeta;
use kube::core::admission::{AdmissionRequest, AdmissionResponse};
use serde::de::{DeserializeOwned, DeserializeSeed, IgnoredAny, MapAccess, Visitor};
use serde_json::Value;
use serde_json::value::RawValue;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::limit::RequestBodyLimitLayer;
use tower_http::timeout::{RequestBodyDeadlineLayer, TimeoutError};

/// API group/version of the AdmissionReview kind the API server sends (`admissionReviewVersions:
/// [v1]`). `v1beta1` is accepted too, as controller-runtime does, and echoed back.
pub const ADMISSION_V1: &str = "admission.k8s.io/v1";
/// The legacy review version, accepted for parity with controller-runtime.
pub const ADMISSION_V1BETA1: &str = "admission.k8s.io/v1beta1";

/// Default limit of a request body: 3 MiB (bytes), the API server's own request size limit.
pub const DEFAULT_MAX_BODY_BYTES: usize = 3 * 1024 * 1024;
/// Default time allowed to receive a whole request body once its headers arrived.
pub const DEFAULT_BODY_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// Decides on admission requests for one object kind.
///
/// The envelope has already checked that the review is well formed, that `uid` is not empty and
/// that `object`/`oldObject` (when present) are of kind [`Validator::Object`], and deserialized
/// them. The returned response's `uid` is forced to the request's uid.
pub trait Validator: Send + Sync + 'static {
    /// The kind this validator admits; `object` and `oldObject` must carry its apiVersion and kind.
    type Object: DeserializeOwned + Resource<DynamicType = ()> + Send + Sync + 'static;

    /// Returns the decision. Build it with [`allow`] or [`deny`] (403 Forbidden, as
    /// controller-runtime's `admission.Denied`).
    fn validate(
        &self,
        req: AdmissionRequest<Self::Object>,
    ) -> impl Future<Output = AdmissionResponse> + Send;

    /// Called when a request is rejected before it reaches [`Validator::validate`] (4xx), e.g. to
    /// count it in a metric. `operation` is the review's `request.operation` when it could be read.
    fn rejected(&self, operation: Option<&str>, error: &EnvelopeError) {
        let _ = (operation, error);
    }
}

/// Limits applied while reading a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EnvelopeLimits {
    /// Largest accepted body in bytes; larger bodies get 413.
    pub max_body_bytes: usize,
    /// Time allowed to receive the whole body after the headers; a stalled body gets 408.
    pub body_read_timeout: Duration,
}

impl Default for EnvelopeLimits {
    fn default() -> Self {
        Self {
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            body_read_timeout: DEFAULT_BODY_READ_TIMEOUT,
        }
    }
}

/// Why a request was not a usable AdmissionReview. Each variant maps to one HTTP status
/// ([`EnvelopeError::status`]); the display text is the message sent to the client.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum EnvelopeError {
    /// The body is larger than [`EnvelopeLimits::max_body_bytes`] (413).
    #[error("request body exceeds the limit of {limit} bytes")]
    BodyTooLarge {
        /// The limit in bytes.
        limit: usize,
    },
    /// The body did not arrive within [`EnvelopeLimits::body_read_timeout`] (408).
    #[error("request body not received within {seconds} s")]
    BodyTimeout {
        /// The timeout in seconds.
        seconds: f64,
    },
    /// The connection failed while the body was read (400).
    #[error("cannot read the request body: {0}")]
    BodyRead(String),
    /// `Content-Type` is set and is not JSON (400; controller-runtime's wording).
    #[error("contentType={0}, expected application/json")]
    ContentType(String),
    /// The body is not JSON, or not a JSON object (400).
    #[error("malformed AdmissionReview JSON: {0}")]
    MalformedJson(String),
    /// `apiVersion`/`kind` of the review are not an AdmissionReview (400).
    #[error(
        "expected kind AdmissionReview with apiVersion {ADMISSION_V1}, got apiVersion {api_version:?} kind {kind:?}"
    )]
    WrongReviewType {
        /// The apiVersion that was sent.
        api_version: String,
        /// The kind that was sent.
        kind: String,
    },
    /// The review has no `request` (400).
    #[error("AdmissionReview has no request")]
    MissingRequest,
    /// `request.uid` is missing or empty (400).
    #[error("request.uid is missing or empty")]
    EmptyUid,
    /// `object` or `oldObject` is not of the validator's kind (400; upstream's
    /// `expected a NodeMaintenance but got a %T`).
    #[error("expected a {expected} but got a {got} in request.{field}")]
    WrongObjectKind {
        /// `object` or `oldObject`.
        field: &'static str,
        /// Kind the validator handles.
        expected: String,
        /// `apiVersion/kind` found (empty parts when absent).
        got: String,
    },
    /// The request does not deserialize (missing fields, wrong types, invalid object) (400).
    #[error("invalid admission request: {0}")]
    InvalidRequest(String),
}

impl EnvelopeError {
    /// HTTP status of the rejection: 413, 408 or 400.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::BodyTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            Self::BodyTimeout { .. } => StatusCode::REQUEST_TIMEOUT,
            _ => StatusCode::BAD_REQUEST,
        }
    }

    /// `metav1.StatusReason` matching [`EnvelopeError::status`].
    fn reason(&self) -> &'static str {
        match self {
            Self::BodyTooLarge { .. } => "RequestEntityTooLarge",
            Self::BodyTimeout { .. } => "Timeout",
            _ => "BadRequest",
        }
    }
}

/// A `metav1.Status` failure body with `code` and `message`.
fn status_response(code: StatusCode, reason: &str, message: &str) -> Response {
    let body = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Status",
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code.as_u16(),
    });
    (code, axum::Json(body)).into_response()
}

impl IntoResponse for EnvelopeError {
    fn into_response(self) -> Response {
        status_response(self.status(), self.reason(), &self.to_string())
    }
}

/// An allowing response for `req` (uid echoed, `status.code` 200 as controller-runtime's
/// `admission.Allowed`).
pub fn allow<T: Resource>(req: &AdmissionRequest<T>) -> AdmissionResponse {
    let mut resp = AdmissionResponse::from(req);
    resp.result.code = 200;
    resp
}

/// A denying response for `req`: allowed=false, `status.code` 403, `status.reason` `Forbidden`,
/// `status.message` = `msg`, exactly as controller-runtime's `admission.Denied(msg)`; kubectl then
/// prints `admission webhook "<name>" denied the request: <msg>`.
pub fn deny<T: Resource>(req: &AdmissionRequest<T>, msg: impl ToString) -> AdmissionResponse {
    let mut resp = AdmissionResponse::from(req).deny(msg);
    resp.result.code = 403;
    resp.result.reason = "Forbidden".to_string();
    resp
}

/// Decodes a review body into the request for kind `K`, checking in order: UTF-8 JSON object,
/// review apiVersion/kind, presence of `request`, non-empty `uid`, kind of `object`/`oldObject`,
/// full deserialization. The returned request carries the review's TypeMeta so the response
/// echoes it.
///
/// Members outside `request` that no check reads are checked for JSON syntax only (not for
/// lone surrogate escapes, number range or nesting depth), and the request is deserialized
/// from its text, so a field given twice inside it is refused as [`EnvelopeError::InvalidRequest`]
/// (serde's derive), a string a check reads that is not valid text reads as "", and a body
/// that is not an object is reported as such even when it is not valid JSON either. The API
/// server sends none of these.
///
/// # Errors
/// The first [`EnvelopeError`] found; never panics on any input.
pub fn decode_review<K>(body: &[u8]) -> Result<AdmissionRequest<K>, EnvelopeError>
where
    K: DeserializeOwned + Resource<DynamicType = ()>,
{
    // One validating scan of the body keeps borrowed slices of the few members the checks read;
    // the request is then deserialized once, straight into its typed form, never through a
    // `serde_json::Value` tree (this is the hot path: the API server posts every NodeMaintenance
    // write here).
    let body = std::str::from_utf8(body)
        .map_err(|e| EnvelopeError::MalformedJson(format!("the body is not UTF-8 text: {e}")))?;
    let [api_version, kind, request] =
        members(body, ["apiVersion", "kind", "request"]).map_err(|e| {
            EnvelopeError::MalformedJson(match e.classify() {
                // Members are kept raw or skipped, so the only type error is the body's own.
                serde_json::error::Category::Data => "the body is not a JSON object".into(),
                _ => e.to_string(),
            })
        })?;
    let (api_version, kind) = (text(api_version), text(kind));
    if kind != "AdmissionReview"
        || (api_version != ADMISSION_V1 && api_version != ADMISSION_V1BETA1)
    {
        return Err(EnvelopeError::WrongReviewType { api_version, kind });
    }
    let request = match request.map(RawValue::get) {
        None | Some("null") => return Err(EnvelopeError::MissingRequest),
        Some(raw) if !raw.starts_with('{') => {
            return Err(EnvelopeError::InvalidRequest(
                "request is not a JSON object".into(),
            ));
        }
        Some(raw) => raw,
    };
    let [uid, object, old_object] = members(request, ["uid", "object", "oldObject"])
        .map_err(|e| EnvelopeError::InvalidRequest(e.to_string()))?;
    if text(uid).is_empty() {
        return Err(EnvelopeError::EmptyUid);
    }
    let expected_api_version = K::api_version(&());
    let expected_kind = K::kind(&());
    for (field, obj) in [("object", object), ("oldObject", old_object)] {
        let Some(obj) = obj.map(RawValue::get).filter(|o| *o != "null") else {
            continue;
        };
        // Anything but an object has neither member: it reads as "/".
        let [got_av, got_kind] = members(obj, ["apiVersion", "kind"])
            .map(|m| m.map(text))
            .unwrap_or_default();
        if got_av != expected_api_version || got_kind != expected_kind {
            return Err(EnvelopeError::WrongObjectKind {
                field,
                expected: expected_kind.to_string(),
                got: format!("{got_av}/{got_kind}"),
            });
        }
    }
    let mut req: AdmissionRequest<K> =
        serde_json::from_str(request).map_err(|e| EnvelopeError::InvalidRequest(e.to_string()))?;
    req.types = TypeMeta { api_version, kind };
    Ok(req)
}

/// The text of a JSON string member; anything else (absent, a number, an object) reads as "".
fn text(raw: Option<&RawValue>) -> String {
    raw.and_then(|r| serde_json::from_str::<String>(r.get()).ok())
        .unwrap_or_default()
}

/// The raw JSON of the members `names` of the object `json`, by position in `names` (`None`
/// when absent); other members are skipped unparsed but checked for syntax, as is the whole
/// input. A member given twice keeps its last value, as `serde_json::Value` does.
///
/// # Errors
/// A syntax error, trailing characters, or a `Category::Data` error when `json` is valid JSON
/// but not an object.
fn members<'a, const N: usize>(
    json: &'a str,
    names: [&'static str; N],
) -> serde_json::Result<[Option<&'a RawValue>; N]> {
    let mut de = serde_json::Deserializer::from_str(json);
    let members = Members(names).deserialize(&mut de)?;
    de.end()?;
    Ok(members)
}

/// Seed of [`members`]: the names of the members to keep.
struct Members<const N: usize>([&'static str; N]);

impl<'de, const N: usize> DeserializeSeed<'de> for Members<N> {
    type Value = [Option<&'de RawValue>; N];

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de, const N: usize> Visitor<'de> for Members<N> {
    type Value = [Option<&'de RawValue>; N];

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut found = [None; N];
        while let Some(position) = map.next_key_seed(KeyPosition(&self.0))? {
            match position {
                Some(i) => found[i] = Some(map.next_value::<&'de RawValue>()?),
                None => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(found)
    }
}

/// Seed of one member name: its position among the wanted names, read without copying it.
struct KeyPosition<'n>(&'n [&'static str]);

impl<'de> DeserializeSeed<'de> for KeyPosition<'_> {
    type Value = Option<usize>;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for KeyPosition<'_> {
    type Value = Option<usize>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a member name")
    }

    fn visit_str<E: serde::de::Error>(self, key: &str) -> Result<Self::Value, E> {
        Ok(self.0.iter().position(|n| *n == key))
    }
}

fn peek_operation(body: &[u8]) -> Option<String> {
    let v: Value = serde_json::from_slice(body).ok()?;
    v.get("request")?
        .get("operation")?
        .as_str()
        .map(str::to_string)
}

struct RouteState<V> {
    validator: Arc<V>,
    limits: EnvelopeLimits,
}

/// A router serving `POST path` with `validator` and the default [`EnvelopeLimits`]. Other
/// methods on `path` get 405.
pub fn admission_route<V: Validator>(path: &str, validator: Arc<V>) -> Router {
    admission_route_with(path, validator, EnvelopeLimits::default())
}

/// As [`admission_route`] with explicit limits.
///
/// The limits are tower-http's layers: `RequestBodyLimit` (a declared `Content-Length` over the
/// limit is answered before the handler runs, a streamed body is cut at the limit) and
/// `RequestBodyDeadline` (the whole body within the time, counted from the headers). Their
/// outcomes are answered here as `metav1.Status` and reported to [`Validator::rejected`].
pub fn admission_route_with<V: Validator>(
    path: &str,
    validator: Arc<V>,
    limits: EnvelopeLimits,
) -> Router {
    let state = Arc::new(RouteState { validator, limits });
    Router::new()
        .route(path, axum::routing::post(handle::<V>))
        .with_state(state.clone())
        .layer(RequestBodyDeadlineLayer::new(limits.body_read_timeout))
        .layer(RequestBodyLimitLayer::new(limits.max_body_bytes))
        .layer(axum::middleware::map_response_with_state(
            state,
            declared_too_large::<V>,
        ))
}

/// tower-http answers a declared `Content-Length` over the limit itself, with a plain-text 413
/// (`length limit exceeded`); every 413 of ours is JSON. That one is re-phrased as our
/// `metav1.Status` and counted, so a client sees one shape whichever way the body was too large.
async fn declared_too_large<V: Validator>(
    State(state): State<Arc<RouteState<V>>>,
    response: Response,
) -> Response {
    let plain = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|ct| ct.as_bytes().starts_with(b"text/plain"));
    if response.status() == StatusCode::PAYLOAD_TOO_LARGE && plain {
        let e = EnvelopeError::BodyTooLarge {
            limit: state.limits.max_body_bytes,
        };
        return reject(&*state.validator, None, e);
    }
    response
}

async fn handle<V: Validator>(
    State(state): State<Arc<RouteState<V>>>,
    request: Request,
) -> Response {
    let (parts, body) = request.into_parts();
    let bytes = match read_body(&parts.headers, body, state.limits).await {
        Ok(bytes) => bytes,
        Err(e) => return reject(&*state.validator, None, e),
    };
    let req = match decode_review::<V::Object>(&bytes) {
        Ok(req) => req,
        Err(e) => {
            let op = peek_operation(&bytes);
            return reject(&*state.validator, op.as_deref(), e);
        }
    };
    let uid = req.uid.clone();
    let types = req.types.clone();
    // Boxed: a validator's future is large (the operator's holds kube request futures), and
    // inline it would make this handler's future as large, which every layer between hyper and
    // here (body limit, deadline, catch-panic, axum's routing) moves by value once per request.
    // One allocation instead of those copies: about 5 % fewer instructions per admission
    // request of the operator (callgrind, the real rules).
    let mut resp = Box::pin(state.validator.validate(req)).await;
    resp.uid = uid;
    resp.types = types;
    (StatusCode::OK, axum::Json(resp.into_review())).into_response()
}

fn reject<V: Validator>(validator: &V, operation: Option<&str>, e: EnvelopeError) -> Response {
    tracing::warn!(error = %e, status = e.status().as_u16(), "rejected an admission request");
    validator.rejected(operation, &e);
    e.into_response()
}

async fn read_body(
    headers: &HeaderMap,
    body: Body,
    limits: EnvelopeLimits,
) -> Result<bytes::Bytes, EnvelopeError> {
    if let Some(ct) = headers.get(header::CONTENT_TYPE) {
        let ct = String::from_utf8_lossy(ct.as_bytes()).to_string();
        let essence = ct.split(';').next().unwrap_or_default().trim();
        if !essence.eq_ignore_ascii_case("application/json") {
            return Err(EnvelopeError::ContentType(ct));
        }
    }
    match body.collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) => {
            let e: axum::BoxError = e.into_inner();
            if caused_by::<LengthLimitError>(&*e) {
                Err(EnvelopeError::BodyTooLarge {
                    limit: limits.max_body_bytes,
                })
            } else if caused_by::<TimeoutError>(&*e) {
                Err(EnvelopeError::BodyTimeout {
                    seconds: limits.body_read_timeout.as_secs_f64(),
                })
            } else {
                Err(EnvelopeError::BodyRead(e.to_string()))
            }
        }
    }
}

/// Whether `e` or an error in its source chain is a `T`.
fn caused_by<T: std::error::Error + 'static>(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(e);
    while let Some(e) = next {
        if e.is::<T>() {
            return true;
        }
        next = e.source();
    }
    false
}

/// tower-http's catch-panic layer, answering a panic in a handler with a 500 `metav1.Status`
/// instead of a dropped connection. [`crate::WebhookServer`] puts it around every router it
/// serves, once. The handlers are written not to panic; this is the backstop.
pub(crate) fn catch_panic_layer() -> CatchPanicLayer<fn(Box<dyn Any + Send + 'static>) -> Response>
{
    CatchPanicLayer::custom(panic_response as fn(Box<dyn Any + Send + 'static>) -> Response)
}

fn panic_response(panic: Box<dyn Any + Send + 'static>) -> Response {
    let what = panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into());
    tracing::error!(panic = %what, "request handler panicked");
    status_response(
        StatusCode::INTERNAL_SERVER_ERROR,
        "InternalError",
        "internal error while handling the request",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;

    fn decode(body: &str) -> Result<AdmissionRequest<ConfigMap>, EnvelopeError> {
        decode_review(body.as_bytes())
    }

    const REQUEST: &str = r#"{"uid":"u1","kind":{"group":"","version":"v1","kind":"ConfigMap"},"resource":{"group":"","version":"v1","resource":"configmaps"},"operation":"CREATE","userInfo":{},"object":{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a"}}}"#;

    #[test]
    fn members_are_found_by_their_json_names_whatever_the_spelling_or_order() {
        // Escaped names and any member order decode like plain ones.
        let body = format!(
            r#"{{"request":{REQUEST},"ki\u006ed":"AdmissionReview","apiVersion":"admission.k8s.io/v1"}}"#
        );
        let req = decode(&body).unwrap();
        assert_eq!(req.uid, "u1");
        assert_eq!(req.types.kind, "AdmissionReview");
        assert_eq!(
            req.object.unwrap().metadata.name.as_deref(),
            Some("a"),
            "the object is decoded in full"
        );
    }

    #[test]
    fn a_member_given_twice_keeps_its_last_value() {
        let body = format!(
            r#"{{"apiVersion":"admission.k8s.io/v1","kind":"Pod","kind":"AdmissionReview","request":{REQUEST}}}"#
        );
        assert!(decode(&body).is_ok());
    }

    #[test]
    fn bytes_that_are_not_text_and_repeated_request_fields_are_refused() {
        let mut body = format!(
            r#"{{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","x":"?","request":{REQUEST}}}"#
        )
        .into_bytes();
        let at = body.iter().position(|b| *b == b'?').unwrap();
        body[at] = 0xff;
        let err = decode_review::<ConfigMap>(&body).unwrap_err();
        assert!(
            matches!(&err, EnvelopeError::MalformedJson(m) if m.contains("not UTF-8")),
            "{err}"
        );

        let twice = REQUEST.replacen(r#""uid":"u1","#, r#""uid":"u0","uid":"u1","#, 1);
        let body = format!(
            r#"{{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{twice}}}"#
        );
        let err = decode(&body).unwrap_err();
        assert!(
            matches!(&err, EnvelopeError::InvalidRequest(m) if m.contains("duplicate field")),
            "{err}"
        );
    }

    #[test]
    fn what_is_not_an_admission_review_is_named() {
        for (body, want) in [
            ("[1,2]", "the body is not a JSON object"),
            ("42", "the body is not a JSON object"),
            (r#"{"kind":"AdmissionReview"} x"#, "trailing characters"),
            (r#"{"kind":"#, "EOF while parsing"),
        ] {
            let err = decode(body).unwrap_err().to_string();
            assert!(err.contains(want), "{body}: {err}");
        }
        let review = |request: &str| {
            format!(
                r#"{{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{request}}}"#
            )
        };
        assert_eq!(
            decode(&review("null")).unwrap_err(),
            EnvelopeError::MissingRequest
        );
        assert_eq!(
            decode(&review("[]")).unwrap_err(),
            EnvelopeError::InvalidRequest("request is not a JSON object".into())
        );
        assert_eq!(
            decode(&review(r#"{"uid":7}"#)).unwrap_err(),
            EnvelopeError::EmptyUid
        );
        assert_eq!(
            decode(&review(r#"{"uid":"u","object":"text"}"#)).unwrap_err(),
            EnvelopeError::WrongObjectKind {
                field: "object",
                expected: "ConfigMap".into(),
                got: "/".into()
            }
        );
        assert_eq!(
            decode(&review(
                r#"{"uid":"u","oldObject":{"apiVersion":"v1","kind":"Secret"}}"#
            ))
            .unwrap_err(),
            EnvelopeError::WrongObjectKind {
                field: "oldObject",
                expected: "ConfigMap".into(),
                got: "v1/Secret".into()
            }
        );
    }
}
