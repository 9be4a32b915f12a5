//! Creating a NodeMaintenance as kubectl does: the admission warnings printed (kube's typed API
//! drops the `Warning` headers), a refusal sorted by [`crate::failure::from_status`].

use kube::api::PostParams;
use node_maintenance_operator::api::{NodeMaintenance, Stage};
use node_maintenance_operator::policy::STAGE_ANNOTATION;

use crate::failure::{Failure, from_status};

/// Sets `stage` as `spec.stage` and as its annotation (which wins, and which upstream's CRD
/// keeps where it prunes the field).
pub(crate) fn set_stage(nm: &mut NodeMaintenance, stage: Stage) {
    nm.spec.knobs.stage = Some(stage);
    nm.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(STAGE_ANNOTATION.into(), stage.to_string());
}

/// Creates `nm` and returns the admission warnings of the answer (its `Warning` headers, which
/// kube's typed API drops), as kubectl prints them, and the object created.
///
/// # Errors
/// The API server's refusal as [`from_status`] sorts it (a denial at admission
/// [`crate::EXIT_REFUSED`], an unreachable webhook or a 5xx [`crate::EXIT_UNAVAILABLE`]).
pub(crate) async fn create(
    client: &kube::Client,
    nm: &NodeMaintenance,
) -> Result<(Vec<String>, NodeMaintenance), Failure> {
    use kube::Resource;
    let body = serde_json::to_vec(nm).map_err(Failure::error)?;
    let request = kube::core::Request::new(NodeMaintenance::url_path(&(), None))
        .create(&PostParams::default(), body)
        .map_err(Failure::error)?
        .map(kube::client::Body::from);
    let response = client.send(request).await?;
    let warnings: Vec<String> = response
        .headers()
        .get_all(http::header::WARNING)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .map(warning_text)
        .collect();
    let ok = response.status().is_success();
    let code = response.status().as_u16();
    let bytes = response.into_body().collect_bytes().await?;
    if ok {
        let created = serde_json::from_slice(&bytes)
            .map_err(|e| Failure::error(format!("reading the created object: {e}")))?;
        return Ok((warnings, created));
    }
    // Not every refusal is a `Status` (a resource the API server does not serve answers a bare
    // `404 page not found`): kube's stand-in for it, so both are sorted alike.
    let status = serde_json::from_slice::<kube::core::Status>(&bytes).unwrap_or_else(|_| {
        kube::core::Status::failure(
            String::from_utf8_lossy(&bytes).trim(),
            "Failed to parse error data",
        )
        .with_code(code)
    });
    Err(from_status(&status))
}

/// The text of a `Warning` header as the API server writes it (RFC 7234: `299 - "<text>"`, `"`
/// and `\` escaped); the header as it is when it has another shape.
fn warning_text(header: &str) -> String {
    let Some(quoted) = header
        .strip_prefix("299 - \"")
        .and_then(|r| r.strip_suffix('"'))
    else {
        return header.to_string();
    };
    let mut text = String::with_capacity(quoted.len());
    let mut chars = quoted.chars();
    while let Some(c) = chars.next() {
        text.push(if c == '\\' {
            chars.next().unwrap_or(c)
        } else {
            c
        });
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warning_headers_read_as_kubectl_prints_them() {
        assert_eq!(
            warning_text(r#"299 - "budget \"db\" holds, see C:\\x""#),
            r#"budget "db" holds, see C:\x"#
        );
        assert_eq!(warning_text("199 other"), "199 other");
    }

    #[test]
    fn a_stage_goes_in_the_spec_and_the_annotation_that_upstream_keeps() {
        let mut nm = NodeMaintenance::new("nm", Default::default());
        set_stage(&mut nm, Stage::Preflight);
        let v = serde_json::to_value(&nm).unwrap();
        assert_eq!(v["spec"]["stage"], "Preflight");
        assert_eq!(
            v["metadata"]["annotations"]["nodemaintenance.medik8s.io/stage"],
            "Preflight"
        );
    }
}
