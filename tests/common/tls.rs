//! TLS handshakes from outside, as a scraper or the API server would make them: which version a
//! server agrees to and which certificate it presents.

use std::net::TcpStream;
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};

/// What one completed handshake showed.
#[derive(Debug)]
pub(crate) struct Handshake {
    /// The negotiated version.
    pub(crate) version: rustls::ProtocolVersion,
    /// DER of the certificate the server presented first (its leaf).
    pub(crate) leaf: Vec<u8>,
}

/// Why a handshake did not complete.
#[derive(Debug)]
pub(crate) enum HandshakeError {
    /// TLS itself failed: the server's alert (`AlertReceived`), or what the client refused.
    Tls(rustls::Error),
    /// Anything else: the connection, a socket error, a handshake without a certificate.
    Other(String),
}

impl HandshakeError {
    /// Whether the server refused the offered versions: its `protocol_version` alert (RFC 8446
    /// section 6.2: "the protocol version the peer has attempted to negotiate is recognized but not
    /// supported"), not any other failure of the handshake.
    pub(crate) fn is_protocol_version_refusal(&self) -> bool {
        matches!(
            self,
            HandshakeError::Tls(rustls::Error::AlertReceived(
                rustls::AlertDescription::ProtocolVersion
            ))
        )
    }
}

impl std::fmt::Display for HandshakeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HandshakeError::Tls(e) => write!(f, "handshake: {e}"),
            HandshakeError::Other(e) => f.write_str(e),
        }
    }
}

/// One TLS handshake with 127.0.0.1:`port`, trusting only `ca_pem` and offering only
/// `versions`. `Err` says what failed: the TLS error (a refused handshake is the server's
/// alert), or what else did.
pub(crate) fn handshake(
    port: u16,
    ca_pem: &str,
    versions: &[&'static rustls::SupportedProtocolVersion],
) -> Result<Handshake, HandshakeError> {
    let other = |e: String| HandshakeError::Other(e);
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_protocol_versions(versions)
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let name = ServerName::try_from("127.0.0.1").unwrap();
    let mut conn = rustls::ClientConnection::new(Arc::new(config), name).unwrap();
    let mut sock =
        TcpStream::connect(("127.0.0.1", port)).map_err(|e| other(format!("connect: {e}")))?;
    sock.set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    while conn.is_handshaking() {
        conn.complete_io(&mut sock).map_err(|e| {
            // rustls hands its own error back inside the io::Error of complete_io.
            match e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) {
                Some(tls) => HandshakeError::Tls(tls.clone()),
                None => other(format!("handshake: {e}")),
            }
        })?;
    }
    let leaf = conn
        .peer_certificates()
        .and_then(|c| c.first())
        .map(|c| c.to_vec())
        .ok_or_else(|| other("no server certificate".into()))?;
    Ok(Handshake {
        version: conn
            .protocol_version()
            .ok_or_else(|| other("no version".into()))?,
        leaf,
    })
}

/// DER of the first certificate of a PEM chain.
pub(crate) fn leaf_der(pem: &str) -> Vec<u8> {
    CertificateDer::pem_slice_iter(pem.as_bytes())
        .next()
        .expect("a certificate")
        .expect("valid PEM")
        .to_vec()
}
