//! The API server's clock, as its answers give it: every HTTP response carries a `Date` header
//! (an RFC 9110 HTTP-date in whole seconds, which Go's `net/http` server always sets).
//! Decisions that compare a time with one the API server stamped (a pod's `creationTimestamp`
//! or `deletionTimestamp`) take "now" from here, so both times come from one clock whatever the
//! operator's own clock says (`docs/drain-contract.md` §2).

use http::HeaderMap;
use http_body_util::BodyExt;
use kube::Client;
use kube::core::Status;
use serde::de::DeserializeOwned;

/// The time of an answer's `Date` header, whole seconds of the API server's clock; `None` when
/// it is missing or not an HTTP-date.
pub(crate) fn date_of(headers: &HeaderMap) -> Option<jiff::Timestamp> {
    let value = headers.get(http::header::DATE)?.to_str().ok()?;
    jiff::fmt::rfc2822::DateTimeParser::new()
        .parse_timestamp(value)
        .ok()
}

/// Sends `request` and decodes its JSON answer, with the time the API server answered
/// ([`date_of`]). Like `kube::Client::request`, a 4xx or 5xx answer is `kube::Error::Api` with the
/// API server's `Status` (or one made from the body's text when it is not a `Status`).
///
/// # Errors
/// `kube::Error`: the request could not be sent, the API server refused it, or the body is not
/// the JSON of `T`.
pub(crate) async fn request_dated<T: DeserializeOwned>(
    client: &Client,
    request: http::Request<Vec<u8>>,
) -> Result<(T, Option<jiff::Timestamp>), kube::Error> {
    let response = client.send(request.map(kube::client::Body::from)).await?;
    let date = date_of(response.headers());
    let code = response.status();
    let body = response.into_body().collect().await?.to_bytes();
    if code.is_client_error() || code.is_server_error() {
        let status = serde_json::from_slice::<Status>(&body).unwrap_or_else(|_| {
            Status::failure(
                String::from_utf8_lossy(&body).trim(),
                "Failed to parse error data",
            )
            .with_code(code.as_u16())
        });
        return Err(kube::Error::Api(status.boxed()));
    }
    let value = serde_json::from_slice(&body).map_err(kube::Error::SerdeError)?;
    Ok((value, date))
}

/// `now` with the 1 s precision of `metav1.Time`, so a value read back compares equal.
pub(crate) fn now_time(
    now: jiff::Timestamp,
) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::Time {
    k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        jiff::Timestamp::from_second(now.as_second()).unwrap_or(now),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_http_date_is_read_in_whole_seconds_and_anything_else_is_none() {
        let mut h = HeaderMap::new();
        assert_eq!(date_of(&h), None);
        h.insert(
            http::header::DATE,
            "Tue, 01 Dec 2026 21:10:50 GMT".parse().unwrap(),
        );
        assert_eq!(
            date_of(&h),
            Some("2026-12-01T21:10:50Z".parse::<jiff::Timestamp>().unwrap())
        );
        h.insert(http::header::DATE, "yesterday".parse().unwrap());
        assert_eq!(date_of(&h), None);
    }
}
