//! Readiness to be a KEP-4563 eviction requester (`docs/design.md` §2b): whether the API server
//! serves the EvictionRequest API (`evictionrequests.coordination.k8s.io`, in a version other
//! than `v1`, which holds only Leases). Checked once at start-up and logged; the drain asks the
//! Eviction API either way until a served version exists on the test control plane.

use kube::Client;

/// The API group of EvictionRequest (KEP-4563), shared with Leases.
pub(crate) const GROUP: &str = "coordination.k8s.io";
/// Its resource name.
pub(crate) const RESOURCE: &str = "evictionrequests";

/// The group version that serves EvictionRequests, from the group's versions and each
/// version's resources (`(groupVersion, resource names)`, as discovery lists them): the first
/// that lists [`RESOURCE`]; `None` when none does.
pub(crate) fn serving<'a>(
    versions: impl IntoIterator<Item = (&'a str, Vec<&'a str>)>,
) -> Option<&'a str> {
    versions
        .into_iter()
        .find(|(_, resources)| resources.contains(&RESOURCE))
        .map(|(gv, _)| gv)
}

/// Asks discovery which version of [`GROUP`] serves EvictionRequests (one call per version of
/// the group besides `v1`, each bounded by the drain's read deadline); `None` when none does or
/// discovery fails (the Eviction API is the fallback either way).
pub(crate) async fn discover(client: &Client) -> Option<String> {
    let timeout = super::act::READ_TIMEOUT;
    let groups = tokio::time::timeout(timeout, client.list_api_groups())
        .await
        .ok()?
        .ok()?;
    let group = groups.groups.into_iter().find(|g| g.name == GROUP)?;
    let mut listed = Vec::new();
    for v in group.versions.iter().filter(|v| v.version != "v1") {
        let call = client.list_api_group_resources(&v.group_version);
        if let Ok(Ok(list)) = tokio::time::timeout(timeout, call).await {
            let names: Vec<String> = list.resources.into_iter().map(|r| r.name).collect();
            listed.push((v.group_version.clone(), names));
        }
    }
    serving(
        listed
            .iter()
            .map(|(gv, names)| (gv.as_str(), names.iter().map(String::as_str).collect())),
    )
    .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_version_that_lists_evictionrequests_serves_them() {
        assert_eq!(serving([]), None);
        assert_eq!(
            serving([("coordination.k8s.io/v1beta1", vec!["leasecandidates"])]),
            None
        );
        assert_eq!(
            serving([
                ("coordination.k8s.io/v1beta1", vec!["leasecandidates"]),
                (
                    "coordination.k8s.io/v1alpha1",
                    vec!["evictionrequests", "evictionrequests/status"]
                ),
            ]),
            Some("coordination.k8s.io/v1alpha1")
        );
    }
}
