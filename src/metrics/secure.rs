//! `--metrics-secure`: `/metrics` over HTTPS, served only to clients whose bearer token the API
//! server authenticates (TokenReview) and authorizes for `get` on the non-resource URL of the
//! request (SubjectAccessReview), as controller-runtime's `WithAuthenticationAndAuthorization`
//! filter does for upstream (`docs/compat.md §10`).
//!
//! Answers, with controller-runtime's texts: no or malformed `Authorization: Bearer` header, or a
//! token the API server does not authenticate: 401 `Unauthorized`; authenticated but not
//! allowed: 403 `Authorization denied for user <name>`; a review that could not be made: 500.
//! Results are cached as controller-runtime's delegating authenticator and authorizer cache them
//! (token answers 1 min, allowed 5 min, denied 30 s), so a scrape every few seconds costs the API
//! server two reviews per scraper and cache period, not per scrape.
//!
//! The serving pair is read from `--metrics-cert-path` (`tls.crt`, `tls.key`) and re-read when
//! it changes, or, as controller-runtime does without a certificate directory, generated
//! self-signed. It is served by `nmo-webhook`'s TLS server, the same one as the webhook, with the
//! same certificate reload, TLS settings and timeouts (`docs/design.md §8`).

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::Client;
use kube::api::{Api, PostParams};

/// Name of the certificate file in `--metrics-cert-path`.
pub(crate) const CERT_NAME: &str = "tls.crt";
/// Name of the key file in `--metrics-cert-path`.
pub(crate) const KEY_NAME: &str = "tls.key";

const TOKEN_TTL: Duration = Duration::from_secs(60);
const ALLOWED_TTL: Duration = Duration::from_secs(300);
const DENIED_TTL: Duration = Duration::from_secs(30);
/// Entries kept per cache; expired ones are dropped first, then the cache is emptied.
const CACHE_LIMIT: usize = 1024;

/// The pair the secure metrics server starts with and the files to watch for new ones: the pair
/// in `cert_dir` (watched), else a self-signed one for `localhost` and `pod_name`
/// (`--pod-name`/`POD_NAME`) when given (never changes).
///
/// # Errors
/// One line naming the file that cannot be read, or why a self-signed pair could not be
/// generated.
pub(crate) fn serving_pair(
    cert_dir: Option<&Path>,
    pod_name: Option<&str>,
) -> Result<(nmo_webhook::PemPair, Option<nmo_webhook::CertPaths>), String> {
    match cert_dir {
        Some(dir) => {
            let paths = nmo_webhook::CertPaths {
                dir: dir.to_path_buf(),
                cert_name: CERT_NAME.into(),
                key_name: KEY_NAME.into(),
            };
            let read = |path: std::path::PathBuf| {
                std::fs::read(&path).map_err(|e| {
                    format!(
                        "cannot read metrics certificate file {}: {e}",
                        path.display()
                    )
                })
            };
            let pair = nmo_webhook::PemPair {
                cert: read(paths.cert())?,
                key: read(paths.key())?,
            };
            Ok((pair, Some(paths)))
        }
        None => {
            let mut hosts = vec!["localhost".to_string()];
            hosts.extend(pod_name.map(str::to_owned));
            let generated = rcgen::generate_simple_self_signed(hosts)
                .map_err(|e| format!("cannot generate a self-signed metrics certificate: {e}"))?;
            let pair = nmo_webhook::PemPair {
                cert: generated.cert.pem().into_bytes(),
                key: generated.signing_key.serialize_pem().into_bytes(),
            };
            Ok((pair, None))
        }
    }
}

/// Who a token belongs to, from the TokenReview.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct User {
    name: String,
    uid: Option<String>,
    groups: Vec<String>,
    extra: BTreeMap<String, Vec<String>>,
}

struct Cache<K, V> {
    entries: Mutex<HashMap<K, (Instant, V)>>,
}

impl<K: std::hash::Hash + Eq, V: Clone> Cache<K, V> {
    fn new() -> Self {
        Self {
            entries: Mutex::new(HashMap::new()),
        }
    }

    fn get(&self, key: &K) -> Option<V> {
        let entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries
            .get(key)
            .filter(|(expires, _)| *expires > Instant::now())
            .map(|(_, v)| v.clone())
    }

    fn put(&self, key: K, value: V, ttl: Duration) {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        if entries.len() >= CACHE_LIMIT {
            entries.retain(|_, (expires, _)| *expires > now);
            if entries.len() >= CACHE_LIMIT {
                entries.clear();
            }
        }
        entries.insert(key, (now + ttl, value));
    }
}

/// Authenticates and authorizes requests against the API server.
pub(crate) struct Gate {
    client: Client,
    tokens: Cache<String, Option<User>>,
    decisions: Cache<(User, String, String), bool>,
}

/// The outcome of [`Gate::check`].
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Decision {
    /// Authenticated and allowed.
    Allow,
    /// 401: no usable bearer token, or the API server did not authenticate it.
    Unauthorized,
    /// 403: the user may not `verb` the path; the response text.
    Forbidden(String),
    /// 500: a review could not be made; the response text and the cause (logged).
    Failed {
        /// What the client is told.
        response: String,
        /// Why, for the log.
        cause: String,
    },
}

/// The bearer token of an `Authorization` header value, if it is one.
pub(crate) fn bearer_token(header: Option<&str>) -> Option<&str> {
    let value = header?;
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

impl Gate {
    /// A gate that reviews with `client` (which needs `create` on `tokenreviews` and
    /// `subjectaccessreviews`).
    pub(crate) fn new(client: Client) -> Self {
        Self {
            client,
            tokens: Cache::new(),
            decisions: Cache::new(),
        }
    }

    async fn authenticate(&self, token: &str) -> Result<Option<User>, String> {
        if let Some(cached) = self.tokens.get(&token.to_string()) {
            return Ok(cached);
        }
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: token.to_string(),
                ..TokenReviewSpec::default()
            },
            ..TokenReview::default()
        };
        let answer = Api::<TokenReview>::all(self.client.clone())
            .create(&PostParams::default(), &review)
            .await
            .map_err(|e| format!("TokenReview failed: {e}"))?;
        let status = answer.status.unwrap_or_default();
        let user = if status.authenticated == Some(true) {
            status.user.map(|u| User {
                name: u.username.unwrap_or_default(),
                uid: u.uid,
                groups: u.groups.unwrap_or_default(),
                extra: u.extra.unwrap_or_default(),
            })
        } else {
            if let Some(e) = status.error {
                tracing::debug!(error = %e, "metrics client token not authenticated");
            }
            None
        };
        self.tokens.put(token.to_string(), user.clone(), TOKEN_TTL);
        Ok(user)
    }

    async fn authorize(&self, user: &User, path: &str, verb: &str) -> Result<bool, String> {
        let key = (user.clone(), path.to_string(), verb.to_string());
        if let Some(cached) = self.decisions.get(&key) {
            return Ok(cached);
        }
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(user.name.clone()),
                uid: user.uid.clone(),
                groups: Some(user.groups.clone()),
                extra: Some(user.extra.clone()),
                non_resource_attributes: Some(NonResourceAttributes {
                    path: Some(path.to_string()),
                    verb: Some(verb.to_string()),
                }),
                ..SubjectAccessReviewSpec::default()
            },
            ..SubjectAccessReview::default()
        };
        let answer = Api::<SubjectAccessReview>::all(self.client.clone())
            .create(&PostParams::default(), &review)
            .await
            .map_err(|e| format!("SubjectAccessReview failed: {e}"))?;
        let allowed = answer.status.is_some_and(|s| s.allowed);
        let ttl = if allowed { ALLOWED_TTL } else { DENIED_TTL };
        self.decisions.put(key, allowed, ttl);
        Ok(allowed)
    }

    /// Decides one request from its `Authorization` header, path and (lower-case) verb.
    pub(crate) async fn check(
        &self,
        authorization: Option<&str>,
        path: &str,
        verb: &str,
    ) -> Decision {
        let Some(token) = bearer_token(authorization) else {
            return Decision::Unauthorized;
        };
        let user = match self.authenticate(token).await {
            Ok(Some(user)) => user,
            Ok(None) => return Decision::Unauthorized,
            Err(cause) => {
                return Decision::Failed {
                    response: "Authentication failed".into(),
                    cause,
                };
            }
        };
        match self.authorize(&user, path, verb).await {
            Ok(true) => Decision::Allow,
            Ok(false) => {
                Decision::Forbidden(format!("Authorization denied for user {}", user.name))
            }
            Err(cause) => Decision::Failed {
                response: format!("Authorization for user {} failed", user.name),
                cause,
            },
        }
    }
}

async fn gate(State(gate): State<Arc<Gate>>, request: Request, next: Next) -> Response {
    let authorization = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let verb = request.method().as_str().to_lowercase();
    let path = request.uri().path().to_string();
    match gate.check(authorization.as_deref(), &path, &verb).await {
        Decision::Allow => next.run(request).await,
        Decision::Unauthorized => (StatusCode::UNAUTHORIZED, "Unauthorized").into_response(),
        Decision::Forbidden(why) => {
            tracing::debug!(%path, %verb, "{why}");
            (StatusCode::FORBIDDEN, why).into_response()
        }
        Decision::Failed { response, cause } => {
            tracing::warn!(%path, error = %cause, "{response}");
            (StatusCode::INTERNAL_SERVER_ERROR, response).into_response()
        }
    }
}

/// `router` behind the TokenReview/SubjectAccessReview gate.
pub(crate) fn authenticated(router: Router, client: Client) -> Router {
    router.layer(axum::middleware::from_fn_with_state(
        Arc::new(Gate::new(client)),
        gate,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_bearer_header_carries_a_token() {
        assert_eq!(bearer_token(Some("Bearer abc")), Some("abc"));
        assert_eq!(bearer_token(Some("bearer  abc ")), Some("abc"));
        assert_eq!(bearer_token(Some("Basic abc")), None);
        assert_eq!(bearer_token(Some("Bearer ")), None);
        assert_eq!(bearer_token(Some("Bearer")), None);
        assert_eq!(bearer_token(None), None);
    }

    #[test]
    fn a_self_signed_pair_is_generated_and_a_missing_directory_named() {
        for pod in [None, Some("nmo-0")] {
            let (pair, watched) = serving_pair(None, pod).unwrap();
            assert!(nmo_webhook::build_server_config(&pair, false).is_ok());
            assert_eq!(watched, None, "a generated pair has no files to watch");
        }
        let err = serving_pair(Some(Path::new("/no/such/metrics-certs")), None).unwrap_err();
        assert!(err.contains("/no/such/metrics-certs/tls.crt"), "{err}");
    }

    #[test]
    fn cache_entries_expire() {
        let c: Cache<&str, bool> = Cache::new();
        c.put("a", true, Duration::from_secs(60));
        c.put("b", false, Duration::ZERO);
        assert_eq!(c.get(&"a"), Some(true));
        assert_eq!(c.get(&"b"), None);
    }
}
