//! Certificate files and the rustls server configuration.
//!
//! The serving config is always built here, never by axum-server's `from_pem*` helpers: those put
//! `h2` into ALPN unconditionally, which breaks every HTTP/2-capable client once the server is
//! HTTP/1.1 only (docs/design.md §8).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::ServerConfig;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use crate::ServeError;
use crate::policy::TlsPolicy;

/// Name of the certificate file in controller-runtime's default serving directory.
pub const DEFAULT_CERT_NAME: &str = "tls.crt";
/// Name of the key file in controller-runtime's default serving directory.
pub const DEFAULT_KEY_NAME: &str = "tls.key";

/// ALPN protocol id of HTTP/1.1.
pub const ALPN_HTTP1: &[u8] = b"http/1.1";
/// ALPN protocol id of HTTP/2.
pub const ALPN_H2: &[u8] = b"h2";

/// The certificate and key files the server loads and watches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CertPaths {
    /// Directory that holds both files; the hot-reload watch is put on it.
    pub dir: PathBuf,
    /// File name of the PEM certificate chain inside `dir` (leaf first).
    pub cert_name: String,
    /// File name of the PEM private key inside `dir` (PKCS#8, PKCS#1 or SEC1).
    pub key_name: String,
}

impl CertPaths {
    /// Full path of the certificate chain file.
    pub fn cert(&self) -> PathBuf {
        self.dir.join(&self.cert_name)
    }

    /// Full path of the private key file.
    pub fn key(&self) -> PathBuf {
        self.dir.join(&self.key_name)
    }
}

/// controller-runtime's default serving directory: `<temp dir>/k8s-webhook-server/serving-certs`,
/// where the temp dir is `$TMPDIR` or the system default (Go `os.TempDir()`, which
/// [`std::env::temp_dir`] matches).
pub fn default_cert_dir() -> PathBuf {
    std::env::temp_dir()
        .join("k8s-webhook-server")
        .join("serving-certs")
}

/// Chooses the certificate pair to serve, as upstream NMO does (docs/compat.md §8).
///
/// If both `<cert_dir>/<cert_name>` and `<cert_dir>/<key_name>` exist (the OLM-injected pair
/// upstream) they are used. Otherwise the controller-runtime default
/// `<temp dir>/k8s-webhook-server/serving-certs/tls.crt|tls.key` is used and
/// `OLM injected certs for webhooks not found` is logged.
///
/// # Errors
/// [`ServeError::CertsNotFound`] when neither pair is complete (the message names every path
/// tried); [`ServeError::CertRead`] when a chosen file exists but cannot be read.
pub fn resolve_cert_paths(
    cert_dir: &Path,
    cert_name: &str,
    key_name: &str,
) -> Result<CertPaths, ServeError> {
    let requested = CertPaths {
        dir: cert_dir.to_path_buf(),
        cert_name: cert_name.to_string(),
        key_name: key_name.to_string(),
    };
    let fallback = CertPaths {
        dir: default_cert_dir(),
        cert_name: DEFAULT_CERT_NAME.to_string(),
        key_name: DEFAULT_KEY_NAME.to_string(),
    };
    let chosen = if pair_exists(&requested) {
        requested
    } else {
        tracing::info!(
            cert = %requested.cert().display(),
            key = %requested.key().display(),
            fallback = %fallback.dir.display(),
            "OLM injected certs for webhooks not found"
        );
        if !pair_exists(&fallback) {
            return Err(ServeError::CertsNotFound {
                tried: vec![
                    requested.cert(),
                    requested.key(),
                    fallback.cert(),
                    fallback.key(),
                ],
            });
        }
        fallback
    };
    // Readability is checked here so that a permission problem is reported as such rather than as
    // a confusing PEM error later.
    for path in [chosen.cert(), chosen.key()] {
        std::fs::File::open(&path).map_err(|source| ServeError::CertRead {
            path: path.clone(),
            source,
        })?;
    }
    Ok(chosen)
}

fn pair_exists(paths: &CertPaths) -> bool {
    // `exists` follows symlinks, so a dangling `tls.crt -> ..data/tls.crt` counts as absent.
    paths.cert().exists() && paths.key().exists()
}

/// The raw bytes of one certificate pair, read together so a reload never mixes generations
/// more than the filesystem itself does (a mismatched pair is rejected by [`build_server_config`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PemPair {
    /// PEM certificate chain.
    pub cert: Vec<u8>,
    /// PEM private key.
    pub key: Vec<u8>,
}

impl PemPair {
    /// Reads both files.
    ///
    /// # Errors
    /// [`ServeError::CertRead`] naming the file that could not be read.
    pub fn read(paths: &CertPaths) -> Result<Self, ServeError> {
        let read = |path: PathBuf| {
            std::fs::read(&path).map_err(|source| ServeError::CertRead { path, source })
        };
        Ok(Self {
            cert: read(paths.cert())?,
            key: read(paths.key())?,
        })
    }
}

/// ALPN protocols the server offers: `http/1.1` only by default (upstream's
/// `--enable-http2=false`), `h2, http/1.1` when HTTP/2 is enabled.
pub fn alpn_protocols(enable_http2: bool) -> Vec<Vec<u8>> {
    if enable_http2 {
        vec![ALPN_H2.to_vec(), ALPN_HTTP1.to_vec()]
    } else {
        vec![ALPN_HTTP1.to_vec()]
    }
}

/// TLS versions the server accepts: 1.3 and 1.2 (rustls implements nothing older).
pub static PROTOCOL_VERSIONS: &[&rustls::SupportedProtocolVersion] =
    &[&rustls::version::TLS13, &rustls::version::TLS12];

/// Builds the serving config from a PEM pair with the ring provider (independent of any
/// process-wide default provider), TLS 1.2/1.3 with every ring suite ([`TlsPolicy::default`])
/// and the ALPN list of [`alpn_protocols`].
///
/// # Errors
/// As [`build_server_config_with`].
pub fn build_server_config(pair: &PemPair, enable_http2: bool) -> Result<ServerConfig, ServeError> {
    build_server_config_with(pair, enable_http2, &TlsPolicy::default())
}

/// As [`build_server_config`], offering the versions and suites of `policy`.
///
/// # Errors
/// [`ServeError::InvalidCert`] when the chain has no certificate, the key is missing or
/// unparsable, or the key does not belong to the leaf certificate (rustls checks the SPKI), so a
/// half-rotated pair is never served.
pub fn build_server_config_with(
    pair: &PemPair,
    enable_http2: bool,
    policy: &TlsPolicy,
) -> Result<ServerConfig, ServeError> {
    let invalid = |reason: String| ServeError::InvalidCert { reason };
    let chain = CertificateDer::pem_slice_iter(&pair.cert)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| invalid(format!("certificate PEM: {e}")))?;
    if chain.is_empty() {
        return Err(invalid(
            "certificate file holds no CERTIFICATE block".into(),
        ));
    }
    let key = PrivateKeyDer::from_pem_slice(&pair.key)
        .map_err(|e| invalid(format!("private key PEM: {e}")))?;
    let mut config = ServerConfig::builder_with_provider(Arc::new(policy.provider()))
        .with_protocol_versions(&policy.protocol_versions())
        .map_err(|e| invalid(format!("protocol versions: {e}")))?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|e| invalid(format!("certificate and key: {e}")))?;
    config.alpn_protocols = alpn_protocols(enable_http2);
    Ok(config)
}
