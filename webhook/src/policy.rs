//! The TLS protocol policy of a server: the lowest TLS version and the cipher suites it offers,
//! and the mapping from the names Go, OpenSSL and OpenShift use onto what rustls implements.
//!
//! rustls (ring provider) implements TLS 1.2 and 1.3 only, and for TLS 1.2 only ECDHE key
//! exchange with AEAD ciphers: no CBC mode, no RSA key exchange, no finite-field DHE, no 3DES or
//! RC4. A name of such a suite is recognised and reported as not offered; a name that is no TLS
//! suite at all is reported as unknown. Which one a caller treats as an error is its choice
//! (docs/design.md §8).
//!
//! TLS 1.3 suites follow Go's `crypto/tls`, which upstream runs on: Go ignores TLS 1.3 suites in
//! its configuration and always offers all three. Here a list that names TLS 1.3 suites offers
//! exactly those; a list that names none offers all three, as Go would, so a TLS 1.2-only list
//! never switches TLS 1.3 off.

use rustls::SupportedCipherSuite;
use rustls::crypto::ring::cipher_suite as ring;

/// A TLS protocol version a policy may set as the lowest one served.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum TlsVersion {
    /// TLS 1.2 (the lowest rustls implements).
    Tls12,
    /// TLS 1.3.
    Tls13,
}

impl TlsVersion {
    /// Go's and OpenShift's spelling: `VersionTLS12`, `VersionTLS13`.
    pub fn go_name(self) -> &'static str {
        match self {
            TlsVersion::Tls12 => "VersionTLS12",
            TlsVersion::Tls13 => "VersionTLS13",
        }
    }
}

/// What a server offers in its TLS handshakes. [`Default`] is what the servers offered before
/// policies existed: TLS 1.2 and 1.3 with every suite of rustls' ring provider.
#[derive(Clone, Debug)]
pub struct TlsPolicy {
    min_version: TlsVersion,
    /// Never empty for a version that is offered (checked by [`map_settings`]).
    suites: Vec<SupportedCipherSuite>,
}

impl Default for TlsPolicy {
    fn default() -> Self {
        Self {
            min_version: TlsVersion::Tls12,
            suites: rustls::crypto::ring::DEFAULT_CIPHER_SUITES.to_vec(),
        }
    }
}

impl PartialEq for TlsPolicy {
    fn eq(&self, other: &Self) -> bool {
        self.min_version == other.min_version && self.suite_names() == other.suite_names()
    }
}

impl Eq for TlsPolicy {}

impl TlsPolicy {
    /// The lowest version served.
    pub fn min_version(&self) -> TlsVersion {
        self.min_version
    }

    /// The suites offered, in preference order.
    pub fn suites(&self) -> &[SupportedCipherSuite] {
        &self.suites
    }

    /// The IANA names of [`TlsPolicy::suites`] (for logs and tests).
    pub fn suite_names(&self) -> Vec<&'static str> {
        self.suites
            .iter()
            .map(|s| s.suite().as_str().unwrap_or("unknown"))
            .collect()
    }

    /// The protocol versions to enable: TLS 1.3, and TLS 1.2 when the minimum allows it and a
    /// TLS 1.2 suite is left.
    pub fn protocol_versions(&self) -> Vec<&'static rustls::SupportedProtocolVersion> {
        let mut versions = vec![&rustls::version::TLS13];
        let tls12_suite = self.suites.iter().any(|s| s.tls13().is_none());
        if self.min_version == TlsVersion::Tls12 && tls12_suite {
            versions.push(&rustls::version::TLS12);
        }
        versions
    }

    /// The ring provider restricted to this policy's suites.
    pub fn provider(&self) -> rustls::crypto::CryptoProvider {
        rustls::crypto::CryptoProvider {
            cipher_suites: self.suites.clone(),
            ..rustls::crypto::ring::default_provider()
        }
    }
}

/// The suites rustls offers, each under its IANA name (Go's spelling, also used by
/// `--tls-cipher-suites`) and its OpenSSL name (OpenShift's profiles), TLS 1.3 first.
fn offered() -> [(&'static str, &'static str, SupportedCipherSuite); 9] {
    [
        (
            "TLS_AES_128_GCM_SHA256",
            "TLS_AES_128_GCM_SHA256",
            ring::TLS13_AES_128_GCM_SHA256,
        ),
        (
            "TLS_AES_256_GCM_SHA384",
            "TLS_AES_256_GCM_SHA384",
            ring::TLS13_AES_256_GCM_SHA384,
        ),
        (
            "TLS_CHACHA20_POLY1305_SHA256",
            "TLS_CHACHA20_POLY1305_SHA256",
            ring::TLS13_CHACHA20_POLY1305_SHA256,
        ),
        (
            "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
            "ECDHE-ECDSA-AES128-GCM-SHA256",
            ring::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
        ),
        (
            "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
            "ECDHE-RSA-AES128-GCM-SHA256",
            ring::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
        ),
        (
            "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
            "ECDHE-ECDSA-AES256-GCM-SHA384",
            ring::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
        ),
        (
            "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
            "ECDHE-RSA-AES256-GCM-SHA384",
            ring::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
        ),
        (
            "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256",
            "ECDHE-ECDSA-CHACHA20-POLY1305",
            ring::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
        ),
        (
            "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
            "ECDHE-RSA-CHACHA20-POLY1305",
            ring::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
        ),
    ]
}

/// Go's short aliases of the two CHACHA20 suites (`crypto/tls` constants without `_SHA256`).
const GO_ALIASES: &[(&str, &str)] = &[
    (
        "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305",
        "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256",
    ),
    (
        "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305",
        "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
    ),
];

/// Whether `name` is a real TLS suite that rustls does not implement: the OpenSSL names of
/// OpenShift's Old profile and the IANA names of the same families (CBC, RSA key exchange,
/// finite-field DHE, 3DES, RC4).
fn known_not_offered(name: &str) -> bool {
    if let Some(iana) = name.strip_prefix("TLS_") {
        return iana.starts_with("RSA_WITH_")
            || iana.starts_with("DHE_")
            || iana.contains("_CBC_")
            || iana.contains("3DES")
            || iana.contains("RC4");
    }
    // OpenSSL spelling: DHE key exchange, plain RSA key exchange (no prefix), or a CBC suite
    // (an ECDHE suite named after its MAC rather than GCM/POLY1305).
    name.starts_with("DHE-")
        || name.starts_with("EDH-")
        || name.starts_with("AES")
        || name.starts_with("DES-")
        || name.starts_with("RC4-")
        || (name.starts_with("ECDHE-")
            && !name.contains("-GCM-")
            && !name.contains("CHACHA20")
            && (name.ends_with("-SHA") || name.ends_with("-SHA256") || name.ends_with("-SHA384")))
}

/// The outcome of [`map_settings`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mapping {
    /// What the server will offer.
    pub policy: TlsPolicy,
    /// Names of real TLS suites that rustls cannot offer (dropped).
    pub not_offered: Vec<String>,
    /// Names that are no TLS suite known here (dropped).
    pub unknown: Vec<String>,
    /// Set when the requested minimum is below TLS 1.2, which rustls does not implement: the
    /// requested name (`VersionTLS10`, `VersionTLS11`).
    pub raised_min_version: Option<String>,
}

/// Why [`map_settings`] could not produce a policy.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    /// The minimum version is not one of `VersionTLS10` .. `VersionTLS13`.
    #[error(
        "unknown TLS version {0:?}; expected VersionTLS10, VersionTLS11, VersionTLS12 or VersionTLS13"
    )]
    UnknownVersion(String),
}

/// Parses Go's and OpenShift's version names: `VersionTLS10` .. `VersionTLS13`. Versions below
/// 1.2 come back as [`TlsVersion::Tls12`] with `true` (raised).
///
/// # Errors
/// [`PolicyError::UnknownVersion`].
pub fn parse_min_version(name: &str) -> Result<(TlsVersion, bool), PolicyError> {
    match name {
        "VersionTLS10" | "VersionTLS11" => Ok((TlsVersion::Tls12, true)),
        "VersionTLS12" => Ok((TlsVersion::Tls12, false)),
        "VersionTLS13" => Ok((TlsVersion::Tls13, false)),
        other => Err(PolicyError::UnknownVersion(other.to_string())),
    }
}

/// Maps a minimum version and a cipher list (IANA or OpenSSL names, mixed freely) onto a
/// [`TlsPolicy`]. `ciphers` empty means rustls' defaults for the version (as Go's nil list).
///
/// The TLS 1.2 suites offered are the named ones rustls implements, in the given order; the
/// TLS 1.3 suites are the named ones, or all three when none is named (see the module doc).
/// When no TLS 1.2 suite is left, TLS 1.2 is not offered at all, whatever the minimum.
///
/// # Errors
/// [`PolicyError::UnknownVersion`].
pub fn map_settings(min_version: &str, ciphers: &[String]) -> Result<Mapping, PolicyError> {
    let (min, raised) = parse_min_version(min_version)?;
    let mut mapping = Mapping {
        policy: TlsPolicy {
            min_version: min,
            suites: Vec::new(),
        },
        not_offered: Vec::new(),
        unknown: Vec::new(),
        raised_min_version: raised.then(|| min_version.to_string()),
    };
    if ciphers.is_empty() {
        mapping.policy.suites = TlsPolicy::default().suites;
    }
    for name in ciphers {
        let name = name.trim();
        let iana = GO_ALIASES
            .iter()
            .find(|(alias, _)| *alias == name)
            .map_or(name, |(_, full)| full);
        match offered().iter().find(|(i, o, _)| *i == iana || *o == name) {
            Some((_, _, suite)) => {
                let code = suite.suite();
                if !mapping.policy.suites.iter().any(|s| s.suite() == code) {
                    mapping.policy.suites.push(*suite);
                }
            }
            None if known_not_offered(name) => mapping.not_offered.push(name.to_string()),
            None => mapping.unknown.push(name.to_string()),
        }
    }
    if !mapping.policy.suites.iter().any(|s| s.tls13().is_some()) {
        let all = offered();
        let tls13 = all.iter().filter(|(_, _, s)| s.tls13().is_some());
        let mut suites: Vec<_> = tls13.map(|(_, _, s)| *s).collect();
        suites.append(&mut mapping.policy.suites);
        mapping.policy.suites = suites;
    }
    if min == TlsVersion::Tls13 {
        mapping.policy.suites.retain(|s| s.tls13().is_some());
    }
    Ok(mapping)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_default_is_what_the_servers_offered_before() {
        let p = TlsPolicy::default();
        assert_eq!(p.min_version(), TlsVersion::Tls12);
        assert_eq!(p.suites().len(), 9);
        assert_eq!(p.protocol_versions().len(), 2);
        // No list: the defaults for the version.
        let m = map_settings("VersionTLS12", &[]).unwrap();
        assert_eq!(m.policy, p);
        assert!(m.not_offered.is_empty() && m.unknown.is_empty());
    }

    #[test]
    fn openssl_and_iana_names_map_to_the_same_suite() {
        let a = map_settings("VersionTLS12", &names(&["ECDHE-RSA-AES128-GCM-SHA256"])).unwrap();
        let b = map_settings(
            "VersionTLS12",
            &names(&["TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"]),
        )
        .unwrap();
        assert_eq!(a.policy, b.policy);
        let c = map_settings(
            "VersionTLS12",
            &names(&["TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305"]),
        )
        .unwrap();
        assert!(
            c.policy
                .suite_names()
                .contains(&"TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256")
        );
    }

    #[test]
    fn a_tls12_only_list_keeps_all_tls13_suites_as_go_does() {
        let m = map_settings("VersionTLS12", &names(&["ECDHE-ECDSA-AES256-GCM-SHA384"])).unwrap();
        assert_eq!(
            m.policy.suite_names(),
            [
                "TLS13_AES_128_GCM_SHA256",
                "TLS13_AES_256_GCM_SHA384",
                "TLS13_CHACHA20_POLY1305_SHA256",
                "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384"
            ]
        );
        // Named TLS 1.3 suites are taken literally.
        let m = map_settings("VersionTLS13", &names(&["TLS_AES_256_GCM_SHA384"])).unwrap();
        assert_eq!(m.policy.suite_names(), ["TLS13_AES_256_GCM_SHA384"]);
        assert_eq!(m.policy.protocol_versions(), [&rustls::version::TLS13]);
    }

    #[test]
    fn cbc_rsa_dhe_and_3des_are_named_as_not_offered_and_typos_as_unknown() {
        let m = map_settings(
            "VersionTLS10",
            &names(&[
                "DHE-RSA-AES128-GCM-SHA256",
                "ECDHE-RSA-AES128-SHA",
                "ECDHE-ECDSA-AES256-SHA384",
                "AES128-GCM-SHA256",
                "DES-CBC3-SHA",
                "TLS_RSA_WITH_AES_128_GCM_SHA256",
                "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA",
                "TLS_ECDHE_RSA_WITH_3DES_EDE_CBC_SHA",
                "ECDHE-RSA-AES128-GCM-SHA256",
                "ECDHE-RSA-AES128-GCM-SHA265",
            ]),
        )
        .unwrap();
        assert_eq!(m.not_offered.len(), 8, "{:?}", m.not_offered);
        assert_eq!(m.unknown, ["ECDHE-RSA-AES128-GCM-SHA265"]);
        assert_eq!(m.raised_min_version.as_deref(), Some("VersionTLS10"));
        assert_eq!(m.policy.min_version(), TlsVersion::Tls12);
        assert_eq!(m.policy.suites().len(), 4);
    }

    #[test]
    fn without_a_tls12_suite_tls12_is_not_offered() {
        let m = map_settings("VersionTLS12", &names(&["DES-CBC3-SHA"])).unwrap();
        assert_eq!(m.policy.protocol_versions(), [&rustls::version::TLS13]);
        let m = map_settings("VersionTLS13", &names(&["ECDHE-RSA-AES128-GCM-SHA256"])).unwrap();
        assert_eq!(m.policy.protocol_versions(), [&rustls::version::TLS13]);
        assert_eq!(m.policy.suites().len(), 3);
    }

    #[test]
    fn unknown_versions_are_refused() {
        assert_eq!(
            map_settings("TLS1.2", &[]).unwrap_err(),
            PolicyError::UnknownVersion("TLS1.2".into())
        );
    }
}
