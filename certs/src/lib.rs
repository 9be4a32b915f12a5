//! Certificates for local clusters, tests and the demo.
//!
//! One ECDSA P-256 CA signs everything a local control plane needs: the kube-apiserver serving
//! pair, the admin client pair (group `system:masters`), and serving pairs for the operator's
//! webhook. This mirrors what controller-runtime's envtest generates (its `TinyCA`), with one CA
//! instead of three because a test cluster has no trust boundaries between them. Certificates
//! name their IP addresses as SANs: rustls, and Go since 1.15, ignore the common name.
//!
//! Production certificates come from OLM or cert-manager (see `manifests/`), never from here.

use std::net::IpAddr;

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};

pub use rcgen::Error;

/// A PEM-encoded certificate and its PKCS#8 private key.
#[derive(Clone, Debug)]
pub struct Pair {
    /// The leaf certificate, PEM.
    pub cert_pem: String,
    /// Its private key, PKCS#8 PEM.
    pub key_pem: String,
}

/// A certificate authority that issues leaf pairs. Validity is rcgen's default (1975 to 4096),
/// which suits throw-away local clusters.
pub struct Ca {
    issuer: Issuer<'static, KeyPair>,
    cert_pem: String,
}

impl Ca {
    /// Creates a new self-signed CA named `common_name`.
    ///
    /// # Errors
    /// Key generation or signing failed (rcgen's error).
    pub fn new(common_name: &str) -> Result<Self, Error> {
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.distinguished_name = name(common_name, None);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let key = KeyPair::generate()?;
        let cert = params.self_signed(&key)?;
        Ok(Self {
            cert_pem: cert.pem(),
            issuer: Issuer::new(params, key),
        })
    }

    /// The CA certificate, PEM: what clients trust (`certificate-authority-data`, a webhook's
    /// `caBundle`).
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// Issues a serving pair for `dns_names` and `ips` (all become SANs; the first DNS name, else
    /// the first IP, is the common name).
    ///
    /// # Errors
    /// A DNS name rcgen cannot encode, or a signing failure.
    pub fn issue_server(&self, dns_names: &[&str], ips: &[IpAddr]) -> Result<Pair, Error> {
        let mut sans: Vec<String> = dns_names.iter().map(|s| s.to_string()).collect();
        sans.extend(ips.iter().map(|ip| ip.to_string()));
        let cn = sans.first().cloned().unwrap_or_else(|| "server".into());
        let mut params = CertificateParams::new(sans)?;
        params.distinguished_name = name(&cn, None);
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        self.sign(params)
    }

    /// Issues a client pair for user `common_name` in `group` (the organisation, which Kubernetes
    /// reads as the user's group, e.g. `system:masters`).
    ///
    /// # Errors
    /// A signing failure.
    pub fn issue_client(&self, common_name: &str, group: Option<&str>) -> Result<Pair, Error> {
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.distinguished_name = name(common_name, group);
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        self.sign(params)
    }

    fn sign(&self, params: CertificateParams) -> Result<Pair, Error> {
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, &self.issuer)?;
        Ok(Pair {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }
}

/// A key pair for signing service-account tokens: `(private PEM, public PEM)` for the API
/// server's `--service-account-signing-key-file` and `--service-account-key-file`.
///
/// # Errors
/// Key generation failed.
pub fn service_account_keys() -> Result<(String, String), Error> {
    let key = KeyPair::generate()?;
    Ok((key.serialize_pem(), key.public_key_pem()))
}

fn name(common_name: &str, organisation: Option<&str>) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    if let Some(o) = organisation {
        dn.push(DnType::OrganizationName, o);
    }
    dn.push(DnType::CommonName, common_name);
    dn
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issues_pem_pairs_signed_by_the_ca() {
        let ca = Ca::new("test-ca").unwrap();
        let server = ca
            .issue_server(&["localhost"], &["127.0.0.1".parse().unwrap()])
            .unwrap();
        let client = ca.issue_client("admin", Some("system:masters")).unwrap();
        for pair in [&server, &client] {
            assert!(pair.cert_pem.starts_with("-----BEGIN CERTIFICATE-----"));
            assert!(pair.key_pem.starts_with("-----BEGIN PRIVATE KEY-----"));
        }
        assert_ne!(server.cert_pem, ca.cert_pem());
        let (private, public) = service_account_keys().unwrap();
        assert!(private.contains("PRIVATE KEY") && public.contains("PUBLIC KEY"));
    }

    /// openssl, when present, proves the chain and the SANs, not just the PEM framing.
    #[test]
    fn openssl_verifies_the_chain_and_sans() {
        if std::process::Command::new("openssl")
            .arg("version")
            .output()
            .is_err()
        {
            eprintln!("openssl not installed; chain verification skipped");
            return;
        }
        let dir = tempfile_dir();
        let ca = Ca::new("test-ca").unwrap();
        let server = ca
            .issue_server(&["localhost"], &["127.0.0.1".parse().unwrap()])
            .unwrap();
        std::fs::write(dir.join("ca.crt"), ca.cert_pem()).unwrap();
        std::fs::write(dir.join("s.crt"), &server.cert_pem).unwrap();
        let verify = std::process::Command::new("openssl")
            .args(["verify", "-CAfile"])
            .arg(dir.join("ca.crt"))
            .arg(dir.join("s.crt"))
            .output()
            .unwrap();
        assert!(
            verify.status.success(),
            "{}",
            String::from_utf8_lossy(&verify.stderr)
        );
        let text = std::process::Command::new("openssl")
            .args(["x509", "-noout", "-text", "-in"])
            .arg(dir.join("s.crt"))
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&text.stdout);
        assert!(
            text.contains("IP Address:127.0.0.1") && text.contains("DNS:localhost"),
            "{text}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    fn tempfile_dir() -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("nmo-certs-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }
}
