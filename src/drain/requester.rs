//! Readiness to be a KEP-4563 eviction requester (`docs/design.md` §2b): which version of
//! `lifecycle.k8s.io` serves the EvictionRequest API (`evictionrequests`; Kubernetes 1.37 serves
//! `v1alpha1` behind the `EvictionRequestAPI` gate). Checked once at start-up and logged; the
//! drain asks the Eviction API either way until the evictionrequest controller that turns
//! requests into evictions ships (1.37 has the API, not the controller).

use kube::Client;

/// The API group of EvictionRequest and Eviction (KEP-4563, as merged in Kubernetes 1.37).
pub(crate) const GROUP: &str = "lifecycle.k8s.io";
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
/// the group, preferred first, each bounded by the drain's read deadline); `None` when none
/// does or discovery fails (the Eviction API is the fallback either way).
pub(crate) async fn discover(client: &Client) -> Option<String> {
    let timeout = super::consts::READ_TIMEOUT;
    let groups = tokio::time::timeout(timeout, client.list_api_groups())
        .await
        .ok()?
        .ok()?;
    let group = groups.groups.into_iter().find(|g| g.name == GROUP)?;
    let mut listed = Vec::new();
    let preferred = group
        .preferred_version
        .as_ref()
        .map(|p| p.group_version.clone());
    let mut versions = group.versions;
    versions.sort_by_key(|v| Some(&v.group_version) != preferred.as_ref());
    for v in &versions {
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
            serving([("lifecycle.k8s.io/v1beta1", vec!["somethingelse"])]),
            None
        );
        assert_eq!(
            serving([
                ("lifecycle.k8s.io/v1beta1", vec!["somethingelse"]),
                (
                    "lifecycle.k8s.io/v1alpha1",
                    vec![
                        "evictionrequests",
                        "evictionrequests/status",
                        "evictions",
                        "evictions/status"
                    ]
                ),
            ]),
            Some("lifecycle.k8s.io/v1alpha1")
        );
    }
}
