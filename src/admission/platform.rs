//! The platform the quorum rule is chosen by, detected once at start-up with one discovery
//! call, as upstream does (`docs/compat.md §6`).

use kube::Client;

use super::quorum::OPENSHIFT_CONFIG_GROUP_VERSION;

/// The platform's quorum guard, detected once at start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Platform {
    /// `config.openshift.io/v1` is served: upstream's etcd-guard PDB rule.
    OpenShift,
    /// Anything else: the etcd member majority rule.
    Kubernetes,
}

/// Errors of starting admission: only the platform detection ([`detect_platform`]) can fail.
#[derive(Debug, thiserror::Error)]
pub enum AdmissionError {
    /// API discovery failed; upstream treats this as fatal at startup.
    #[error("could not detect whether the cluster is OpenShift: {0}")]
    Discovery(#[source] kube::Error),
}

/// Detects the platform with one discovery call: OpenShift when `config.openshift.io/v1` is
/// served, as upstream does at start-up.
///
/// # Errors
/// [`AdmissionError::Discovery`] when discovery fails.
pub(crate) async fn detect_platform(client: &Client) -> Result<Platform, AdmissionError> {
    let groups = client
        .list_api_groups()
        .await
        .map_err(AdmissionError::Discovery)?;
    let openshift = groups.groups.iter().any(|g| {
        g.versions
            .iter()
            .any(|v| v.group_version == OPENSHIFT_CONFIG_GROUP_VERSION)
    });
    Ok(if openshift {
        Platform::OpenShift
    } else {
        tracing::info!(
            "Cluster does not have etcd quorum PDB; using the etcd member majority rule for control-plane nodes"
        );
        Platform::Kubernetes
    })
}
