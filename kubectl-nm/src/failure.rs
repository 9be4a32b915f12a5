//! What `kubectl nm` tells the caller when something other than success happens: the exit
//! status and the one line for stderr, read from the API server's answer.
//!
//! The API server's answers are sorted so a script can act on the status: a denial at admission
//! ([`EXIT_REFUSED`]: fix the request, retrying will not help) apart from an API server that could
//! not reach the webhook or failed itself ([`EXIT_UNAVAILABLE`]: an outage, worth retrying), and
//! a missing CRD named with what to install instead of the 404's raw text.

use kube::core::Status;

use crate::{EXIT_ERROR, EXIT_REFUSED, EXIT_UNAVAILABLE};

/// An outcome other than success: the exit status and the line for stderr.
#[derive(Debug)]
pub(crate) struct Failure(pub(crate) u8, pub(crate) String);

impl Failure {
    /// [`EXIT_ERROR`] with `error: <text>`.
    pub(crate) fn error(text: impl std::fmt::Display) -> Self {
        Failure(EXIT_ERROR, format!("error: {text}"))
    }
}

/// `e` and its sources, `: `-separated: kube's transport errors say only `client error
/// (Connect)`, their sources say why (`tcp connect error: Connection refused`).
fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let next = s.to_string();
        if !text.contains(&next) {
            text = format!("{text}: {next}");
        }
        source = s.source();
    }
    text
}

/// The line printed when the API server does not serve NodeMaintenances.
pub(crate) const CRD_MISSING: &str = "error: the NodeMaintenance CRD \
     (nodemaintenances.nodemaintenance.medik8s.io) is not installed; install manifests/crd.yaml";

impl From<kube::Error> for Failure {
    fn from(e: kube::Error) -> Self {
        match e {
            kube::Error::Api(s) => from_status(&s),
            e => Failure::error(chain(&e)),
        }
    }
}

/// Sorts an API server's refusal (a `Status`, or kube's stand-in for a body that is not one:
/// reason `Failed to parse error data`, the body as message):
///
/// - a 404 that is not a `Status` of reason `NotFound` (the API server's bare `404 page not
///   found` for a resource it does not serve) is the missing CRD, [`CRD_MISSING`];
/// - a 4xx whose message is an admission denial (`admission webhook "<name>" denied the
///   request: ...`, or a ValidatingAdmissionPolicy's `denied request`) is [`EXIT_REFUSED`];
/// - a 5xx, or any answer saying `failed calling webhook` (the API server could not reach the
///   webhook: InternalError 500), is [`EXIT_UNAVAILABLE`];
/// - anything else (AlreadyExists, Forbidden by RBAC, a schema's Invalid) is [`EXIT_ERROR`].
///
/// Each is kubectl's line, `Error from server (<reason>): <message>`, except the missing CRD.
pub(crate) fn from_status(s: &Status) -> Failure {
    if s.code == 404 && s.reason != "NotFound" {
        return Failure(EXIT_ERROR, CRD_MISSING.into());
    }
    let line = format!("Error from server ({}): {}", s.reason, s.message);
    let denied = (s.message.contains("admission webhook")
        && s.message.contains("denied the request"))
        || (s.message.contains("ValidatingAdmissionPolicy")
            && s.message.contains("denied request"));
    let code = if s.message.contains("failed calling webhook") || s.code >= 500 {
        EXIT_UNAVAILABLE
    } else if (400..500).contains(&s.code) && denied {
        EXIT_REFUSED
    } else {
        EXIT_ERROR
    };
    Failure(code, line)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(code: u16, reason: &str, message: &str) -> Status {
        Status::failure(message, reason).with_code(code)
    }

    #[test]
    fn a_webhook_denial_is_3_an_unreachable_webhook_or_a_5xx_is_4_the_rest_1() {
        let denied = status(
            403,
            "Forbidden",
            "admission webhook \"vnodemaintenance.kb.io\" denied the request: no node",
        );
        let f = from_status(&denied);
        assert_eq!(f.0, EXIT_REFUSED);
        assert_eq!(
            f.1,
            "Error from server (Forbidden): admission webhook \"vnodemaintenance.kb.io\" denied \
             the request: no node"
        );
        let unreachable = status(
            500,
            "InternalError",
            "Internal error occurred: failed calling webhook \"x\": Post \"https://127.0.0.1:1\": \
             connection refused",
        );
        assert_eq!(from_status(&unreachable).0, EXIT_UNAVAILABLE);
        assert_eq!(
            from_status(&status(503, "ServiceUnavailable", "try later")).0,
            EXIT_UNAVAILABLE
        );
        assert_eq!(
            from_status(&status(409, "AlreadyExists", "nm-n1 already exists")).0,
            EXIT_ERROR
        );
        assert_eq!(
            from_status(&status(403, "Forbidden", "User cannot create")).0,
            EXIT_ERROR
        );
    }

    #[test]
    fn a_bare_404_names_the_missing_crd() {
        let f = from_status(&status(
            404,
            "Failed to parse error data",
            "404 page not found",
        ));
        assert_eq!((f.0, f.1.as_str()), (EXIT_ERROR, CRD_MISSING));
        let f = from_status(&status(404, "NotFound", "nodemaintenances \"x\" not found"));
        assert!(f.1.contains("not found") && f.1 != CRD_MISSING, "{}", f.1);
    }
}
