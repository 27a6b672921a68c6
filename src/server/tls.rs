//! TLS material for both directions (rustls through tonic): the gRPC server's
//! certificate, with an optional client CA for mTLS, and the push client's CA and
//! certificate. Files are read once at startup and checked to hold PEM, so a wrong
//! path is a configuration error naming the flag, not a handshake failure later.

use std::path::{Path, PathBuf};

use tonic::transport::{Certificate, ClientTlsConfig, Identity, ServerTlsConfig};

use super::config::{ReportConfig, ServerTls};

/// A TLS file that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// The file cannot be read.
    #[error("cannot read {flag} {}: {source}", path.display())]
    Read {
        /// The flag that named it.
        flag: &'static str,
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The file holds no PEM block.
    #[error("{flag} {} holds no PEM block", path.display())]
    NotPem {
        /// The flag that named it.
        flag: &'static str,
        /// The file.
        path: PathBuf,
    },
    /// A certificate without its key or the other way round.
    #[error("{0}")]
    Incomplete(&'static str),
}

fn read_pem(flag: &'static str, path: &Path) -> Result<Vec<u8>, TlsError> {
    let bytes = std::fs::read(path).map_err(|source| TlsError::Read {
        flag,
        path: path.to_owned(),
        source,
    })?;
    if !bytes.windows(11).any(|w| w == b"-----BEGIN ") {
        return Err(TlsError::NotPem {
            flag,
            path: path.to_owned(),
        });
    }
    Ok(bytes)
}

/// The gRPC server's TLS configuration.
pub fn server_config(tls: &ServerTls) -> Result<ServerTlsConfig, TlsError> {
    let identity = Identity::from_pem(
        read_pem("--tls-cert", &tls.cert)?,
        read_pem("--tls-key", &tls.key)?,
    );
    let mut config = ServerTlsConfig::new().identity(identity);
    if let Some(ca) = &tls.client_ca {
        // With a client CA, tonic requires a client certificate signed by it.
        config = config.client_ca_root(Certificate::from_pem(read_pem("--tls-client-ca", ca)?));
    }
    Ok(config)
}

/// The push client's TLS configuration; `None` for a plaintext `http://` collector.
pub fn client_config(report: &ReportConfig) -> Result<Option<ClientTlsConfig>, TlsError> {
    let https = report.url.starts_with("https://");
    if !https {
        if report.ca.is_some() || report.cert.is_some() || report.key.is_some() {
            return Err(TlsError::Incomplete(
                "--report-ca/--report-cert/--report-key need an https:// --report-to",
            ));
        }
        return Ok(None);
    }
    let ca = report.ca.as_ref().ok_or(TlsError::Incomplete(
        "an https:// --report-to needs --report-ca (no system roots are built in)",
    ))?;
    let mut config =
        ClientTlsConfig::new().ca_certificate(Certificate::from_pem(read_pem("--report-ca", ca)?));
    match (&report.cert, &report.key) {
        (Some(cert), Some(key)) => {
            config = config.identity(Identity::from_pem(
                read_pem("--report-cert", cert)?,
                read_pem("--report-key", key)?,
            ));
        }
        (None, None) => {}
        _ => {
            return Err(TlsError::Incomplete(
                "--report-cert and --report-key go together",
            ))
        }
    }
    Ok(Some(config))
}
