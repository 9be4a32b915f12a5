//! The TLS settings of the webhook and secure metrics servers (`docs/design.md §8`): from
//! `--tls-min-version` / `--tls-cipher-suites` when either is given, else on OpenShift from the
//! cluster's TLS security profile (`apiservers.config.openshift.io/cluster`
//! `spec.tlsSecurityProfile`, watched, applied without a restart, as upstream's PR #181 applies
//! it to its servers), else rustls' defaults (TLS 1.2 and 1.3, every ring suite).
//!
//! The profile's names are mapped onto rustls by [`nmo_webhook::map_settings`]; what cannot be
//! offered is logged with each applied profile (`docs/compat.md §8`).

use std::time::Duration;

use futures::StreamExt;
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::watcher;
use nmo_webhook::{Mapping, TlsPolicy};
use serde::Deserialize;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// OpenShift's config group and version.
pub(crate) const CONFIG_GROUP_VERSION: &str = "config.openshift.io/v1";
/// The one APIServer object OpenShift reads.
pub(crate) const APISERVER_NAME: &str = "cluster";

/// How long start-up waits for the first read of the profile before serving with the defaults
/// (the watch applies it when it comes).
const FIRST_READ_TIMEOUT: Duration = Duration::from_secs(5);

/// `spec.tlsSecurityProfile` of `config.openshift.io/v1` `APIServer`, the fields read here.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub(crate) struct TlsSecurityProfile {
    /// `Old`, `Intermediate`, `Modern` or `Custom`; absent or empty: OpenShift's default,
    /// Intermediate.
    #[serde(rename = "type", default)]
    pub profile_type: Option<String>,
    /// The settings of `Custom`.
    #[serde(default)]
    pub custom: Option<CustomProfile>,
}

/// `spec.tlsSecurityProfile.custom`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub(crate) struct CustomProfile {
    /// OpenSSL cipher names (IANA names are taken too).
    #[serde(default)]
    pub ciphers: Vec<String>,
    /// `VersionTLS10` .. `VersionTLS13` (`minTLSVersion`).
    #[serde(rename = "minTLSVersion", default)]
    pub min_tls_version: Option<String>,
}

const TLS13: [&str; 3] = [
    "TLS_AES_128_GCM_SHA256",
    "TLS_AES_256_GCM_SHA384",
    "TLS_CHACHA20_POLY1305_SHA256",
];

/// Intermediate after the TLS 1.3 suites (openshift/api `TLSProfiles`).
const INTERMEDIATE_TLS12: [&str; 8] = [
    "ECDHE-ECDSA-AES128-GCM-SHA256",
    "ECDHE-RSA-AES128-GCM-SHA256",
    "ECDHE-ECDSA-AES256-GCM-SHA384",
    "ECDHE-RSA-AES256-GCM-SHA384",
    "ECDHE-ECDSA-CHACHA20-POLY1305",
    "ECDHE-RSA-CHACHA20-POLY1305",
    "DHE-RSA-AES128-GCM-SHA256",
    "DHE-RSA-AES256-GCM-SHA384",
];

/// Old after Intermediate's suites (openshift/api `TLSProfiles`).
const OLD_EXTRA: [&str; 18] = [
    "DHE-RSA-CHACHA20-POLY1305",
    "ECDHE-ECDSA-AES128-SHA256",
    "ECDHE-RSA-AES128-SHA256",
    "ECDHE-ECDSA-AES128-SHA",
    "ECDHE-RSA-AES128-SHA",
    "ECDHE-ECDSA-AES256-SHA384",
    "ECDHE-RSA-AES256-SHA384",
    "ECDHE-ECDSA-AES256-SHA",
    "ECDHE-RSA-AES256-SHA",
    "DHE-RSA-AES128-SHA256",
    "DHE-RSA-AES256-SHA256",
    "AES128-GCM-SHA256",
    "AES256-GCM-SHA384",
    "AES128-SHA256",
    "AES256-SHA256",
    "AES128-SHA",
    "AES256-SHA",
    "DES-CBC3-SHA",
];

/// The profile's name, minimum version and cipher list, as OpenShift defines them
/// (openshift/api `config/v1` `TLSProfiles`; library-go treats a missing profile as
/// Intermediate). `Custom` without `custom` settings, and an unknown type, also mean Intermediate
/// (the second element says so, for the log).
pub(crate) fn profile_settings(
    profile: Option<&TlsSecurityProfile>,
) -> (&'static str, String, Vec<String>, Option<String>) {
    let owned = |list: &[&str]| list.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let intermediate = |fallback: Option<String>| {
        let mut ciphers = owned(&TLS13);
        ciphers.extend(owned(&INTERMEDIATE_TLS12));
        (
            "Intermediate",
            "VersionTLS12".to_string(),
            ciphers,
            fallback,
        )
    };
    let kind = profile
        .and_then(|p| p.profile_type.as_deref())
        .filter(|t| !t.is_empty());
    match kind {
        None | Some("Intermediate") => intermediate(None),
        Some("Modern") => ("Modern", "VersionTLS13".into(), owned(&TLS13), None),
        Some("Old") => {
            let (_, _, mut ciphers, _) = intermediate(None);
            ciphers.extend(owned(&OLD_EXTRA));
            ("Old", "VersionTLS10".into(), ciphers, None)
        }
        Some("Custom") => match profile.and_then(|p| p.custom.as_ref()) {
            Some(custom) => (
                "Custom",
                custom
                    .min_tls_version
                    .clone()
                    .unwrap_or_else(|| "VersionTLS12".into()),
                custom.ciphers.clone(),
                None,
            ),
            None => intermediate(Some("type Custom without custom settings".into())),
        },
        Some(other) => intermediate(Some(format!("unknown profile type {other:?}"))),
    }
}

/// The policy for `profile`, logging what it asks for and cannot get. A profile whose minimum
/// version is unknown keeps `current` (the schema's enum makes that a hand-edited object).
pub(crate) fn policy_for(profile: Option<&TlsSecurityProfile>, current: &TlsPolicy) -> TlsPolicy {
    let (name, min, ciphers, fallback) = profile_settings(profile);
    if let Some(why) = fallback {
        tracing::warn!(reason = %why, "the cluster's TLS security profile is not usable; applying Intermediate");
    }
    match nmo_webhook::map_settings(&min, &ciphers) {
        Ok(mapping) => {
            log_mapping(&format!("the cluster's TLS profile {name}"), &mapping);
            mapping.policy
        }
        Err(e) => {
            tracing::warn!(profile = name, error = %e, "cannot apply the cluster's TLS security profile; the current TLS settings stay");
            current.clone()
        }
    }
}

/// Logs one applied mapping: what is offered, and what was asked for but cannot be.
pub(crate) fn log_mapping(source: &str, m: &Mapping) {
    tracing::info!(
        source,
        min_version = m.policy.min_version().go_name(),
        cipher_suites = ?m.policy.suite_names(),
        "TLS settings"
    );
    if let Some(asked) = &m.raised_min_version {
        tracing::info!(source, asked = %asked, "TLS 1.0 and 1.1 are not implemented by rustls; TLS 1.2 is the lowest version served");
    }
    if !m.not_offered.is_empty() {
        tracing::info!(source, ciphers = ?m.not_offered, "ciphers not offered: rustls implements no CBC, RSA key exchange, DHE or 3DES suites");
    }
    if !m.unknown.is_empty() {
        tracing::warn!(source, ciphers = ?m.unknown, "unknown cipher names ignored");
    }
    if m.policy.protocol_versions().len() == 1
        && m.policy.min_version() < nmo_webhook::TlsVersion::Tls13
    {
        tracing::warn!(
            source,
            "no TLS 1.2 cipher suite left that rustls can offer; only TLS 1.3 is served"
        );
    }
}

fn api_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("config.openshift.io", "v1", "APIServer"),
        "apiservers",
    )
}

fn profile_of(object: &DynamicObject) -> Option<TlsSecurityProfile> {
    let profile = object.data.get("spec")?.get("tlsSecurityProfile")?;
    match serde_json::from_value(profile.clone()) {
        Ok(p) => Some(p),
        Err(e) => {
            tracing::warn!(error = %e, "cannot read spec.tlsSecurityProfile of the APIServer object; applying Intermediate");
            None
        }
    }
}

/// Whether the API server serves `apiservers.config.openshift.io/v1` (OpenShift). One discovery
/// call; any error counts as no, since the profile is then unreadable anyway.
async fn serves_apiservers(client: &Client) -> bool {
    match client.list_api_group_resources(CONFIG_GROUP_VERSION).await {
        Ok(list) => list.resources.iter().any(|r| r.name == "apiservers"),
        Err(_) => false,
    }
}

/// The TLS settings as the process starts, and the watch that keeps them current on OpenShift.
///
/// With `from_flags`, that policy is used and nothing is watched. Otherwise, when the cluster
/// serves `apiservers.config.openshift.io` (`openshift`: the start-up group discovery lists
/// `config.openshift.io/v1`; then one resource discovery confirms `apiservers`), the profile of
/// `cluster` is read once (up to 5 s, so the servers never start with settings the cluster
/// forbids when the API answers) and then watched until `stop`: every change is applied by the
/// servers to new handshakes. On plain Kubernetes no request is sent, nothing is watched and no
/// permission on that group is needed.
pub(crate) async fn start(
    client: Client,
    from_flags: Option<TlsPolicy>,
    openshift: bool,
    stop: CancellationToken,
) -> watch::Receiver<TlsPolicy> {
    if let Some(policy) = from_flags {
        let (tx, rx) = watch::channel(policy);
        // Kept open for the process's life: a closed channel would read as "no more changes"
        // too, but an open one makes the intent plain.
        tokio::spawn(async move {
            stop.cancelled().await;
            drop(tx);
        });
        return rx;
    }
    if !(openshift && serves_apiservers(&client).await) {
        tracing::info!(
            "no OpenShift APIServer configuration (config.openshift.io/v1 apiservers) on this cluster; TLS settings are the defaults"
        );
        return watch::channel(TlsPolicy::default()).1;
    }
    let api: Api<DynamicObject> = Api::all_with(client, &api_resource());
    let first = tokio::time::timeout(FIRST_READ_TIMEOUT, api.get_opt(APISERVER_NAME)).await;
    let initial = match first {
        Ok(Ok(object)) => policy_for(
            object.as_ref().and_then(profile_of).as_ref(),
            &TlsPolicy::default(),
        ),
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "cannot read the cluster's TLS security profile; serving with the defaults until the watch reads it");
            TlsPolicy::default()
        }
        Err(_) => {
            tracing::warn!(
                "reading the cluster's TLS security profile timed out; serving with the defaults until the watch reads it"
            );
            TlsPolicy::default()
        }
    };
    let (tx, rx) = watch::channel(initial);
    tokio::spawn(watch_profile(api, tx, stop));
    rx
}

async fn watch_profile(
    api: Api<DynamicObject>,
    tx: watch::Sender<TlsPolicy>,
    stop: CancellationToken,
) {
    use kube::runtime::WatchStreamExt;
    let config = watcher::Config::default().fields(&format!("metadata.name={APISERVER_NAME}"));
    let mut events = std::pin::pin!(watcher(api, config).default_backoff());
    // The profile last applied, so an unrelated change of the object (status, other spec
    // fields) neither re-logs nor rebuilds the servers' configuration.
    let mut applied: Option<Option<TlsSecurityProfile>> = None;
    let mut last_error: Option<String> = None;
    loop {
        let event = tokio::select! {
            () = stop.cancelled() => return,
            event = events.next() => event,
        };
        let Some(event) = event else { return };
        let profile = match event {
            Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) => profile_of(&o),
            Ok(watcher::Event::Delete(_)) => None,
            Ok(watcher::Event::Init | watcher::Event::InitDone) => continue,
            Err(e) => {
                // The backoff spaces the retries; the same error is logged once.
                let msg = e.to_string();
                if last_error.as_deref() != Some(msg.as_str()) {
                    tracing::warn!(error = %msg, "watch of the cluster's TLS security profile failed; retrying");
                    last_error = Some(msg);
                }
                continue;
            }
        };
        last_error = None;
        if applied.as_ref() == Some(&profile) {
            continue;
        }
        let policy = policy_for(profile.as_ref(), &tx.borrow());
        applied = Some(profile);
        tx.send_if_modified(|current| {
            let changed = *current != policy;
            *current = policy;
            changed
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nmo_webhook::{TlsVersion, map_settings};

    fn profile(json: serde_json::Value) -> TlsSecurityProfile {
        serde_json::from_value(json).unwrap()
    }

    fn mapped(p: Option<&TlsSecurityProfile>) -> Mapping {
        let (_, min, ciphers, _) = profile_settings(p);
        map_settings(&min, &ciphers).unwrap()
    }

    #[test]
    fn intermediate_is_the_default_and_offers_what_the_servers_offered_before() {
        let m = mapped(None);
        assert_eq!(m.policy.min_version(), TlsVersion::Tls12);
        let mut offered = m.policy.suite_names();
        let mut before = TlsPolicy::default().suite_names();
        offered.sort_unstable();
        before.sort_unstable();
        assert_eq!(offered, before);
        assert_eq!(
            m.not_offered,
            ["DHE-RSA-AES128-GCM-SHA256", "DHE-RSA-AES256-GCM-SHA384"]
        );
        assert_eq!(mapped(Some(&profile(serde_json::json!({})))), m);
        let named = profile(serde_json::json!({"type": "Intermediate", "intermediate": {}}));
        assert_eq!(mapped(Some(&named)), m);
    }

    #[test]
    fn modern_is_tls13_only() {
        let m = mapped(Some(&profile(
            serde_json::json!({"type": "Modern", "modern": {}}),
        )));
        assert_eq!(m.policy.min_version(), TlsVersion::Tls13);
        assert_eq!(m.policy.protocol_versions(), [&rustls::version::TLS13]);
        assert_eq!(m.policy.suites().len(), 3);
        assert!(m.not_offered.is_empty() && m.unknown.is_empty());
    }

    #[test]
    fn old_offers_tls12_and_names_what_rustls_lacks() {
        let m = mapped(Some(&profile(
            serde_json::json!({"type": "Old", "old": {}}),
        )));
        assert_eq!(m.policy.min_version(), TlsVersion::Tls12);
        assert_eq!(m.raised_min_version.as_deref(), Some("VersionTLS10"));
        assert_eq!(m.policy.suites().len(), 9);
        // 29 ciphers in the profile: 9 offered, the other 20 named.
        assert_eq!(m.not_offered.len(), 20, "{:?}", m.not_offered);
        assert!(m.not_offered.contains(&"DES-CBC3-SHA".to_string()));
        assert!(m.unknown.is_empty());
    }

    #[test]
    fn custom_takes_its_own_settings() {
        let p = profile(serde_json::json!({
            "type": "Custom",
            "custom": {
                "ciphers": ["ECDHE-ECDSA-CHACHA20-POLY1305", "ECDHE-RSA-AES128-GCM-SHA256", "AES128-SHA"],
                "minTLSVersion": "VersionTLS11"
            }
        }));
        let m = mapped(Some(&p));
        assert_eq!(m.policy.min_version(), TlsVersion::Tls12);
        assert_eq!(
            m.policy.suite_names(),
            [
                "TLS13_AES_128_GCM_SHA256",
                "TLS13_AES_256_GCM_SHA384",
                "TLS13_CHACHA20_POLY1305_SHA256",
                "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256",
                "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"
            ]
        );
        assert_eq!(m.not_offered, ["AES128-SHA"]);
        assert_eq!(m.raised_min_version.as_deref(), Some("VersionTLS11"));
        let p = profile(serde_json::json!({
            "type": "Custom",
            "custom": {"ciphers": ["TLS_AES_256_GCM_SHA384"], "minTLSVersion": "VersionTLS13"}
        }));
        let m = mapped(Some(&p));
        assert_eq!(m.policy.min_version(), TlsVersion::Tls13);
        assert_eq!(m.policy.suite_names(), ["TLS13_AES_256_GCM_SHA384"]);
        // Custom without settings, or an unknown type: Intermediate, with the reason.
        for p in [
            profile(serde_json::json!({"type": "Custom"})),
            profile(serde_json::json!({"type": "Paranoid"})),
        ] {
            let (name, _, _, why) = profile_settings(Some(&p));
            assert_eq!(name, "Intermediate");
            assert!(why.is_some());
        }
    }

    #[test]
    fn an_unusable_minimum_keeps_the_current_policy() {
        let p = profile(serde_json::json!({
            "type": "Custom",
            "custom": {"ciphers": [], "minTLSVersion": "VersionTLS14"}
        }));
        let current = mapped(Some(&profile(serde_json::json!({"type": "Modern"})))).policy;
        assert_eq!(policy_for(Some(&p), &current), current);
    }
}
