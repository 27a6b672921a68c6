//! The serving certificate, from two PEM files, reloaded when they change.
//!
//! cert-manager (or a person) rotates the Secret; the kubelet swaps the
//! mounted files (a symlink flip, so a reader sees either the old pair or the
//! new one, but may read the certificate of one and the key of the other
//! while the flip happens). The files are read every `--cert-reload-interval`;
//! a pair that changed is taken only when it parses and the key matches the
//! certificate, else the current one keeps serving and the failure is logged
//! and counted (the next read, after the flip completes, succeeds). Every
//! handshake takes the pair current at that moment ([`Reloading`]).

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tokio_util::sync::CancellationToken;

/// Why a certificate pair cannot serve.
#[derive(Debug, thiserror::Error)]
pub enum CertError {
    /// A file cannot be read.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The certificate file holds no certificate.
    #[error("{} holds no PEM certificate", path.display())]
    NoCertificate {
        /// The file.
        path: PathBuf,
    },
    /// The key file holds no usable private key.
    #[error("{} holds no usable PEM private key: {why}", path.display())]
    NoKey {
        /// The file.
        path: PathBuf,
        /// What the parser said.
        why: String,
    },
    /// The key is not the certificate's.
    #[error("the key in {} does not match the certificate in {}: {why}", key.display(), cert.display())]
    Mismatch {
        /// The certificate file.
        cert: PathBuf,
        /// The key file.
        key: PathBuf,
        /// What rustls said.
        why: String,
    },
}

/// Where the pair lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertFiles {
    /// PEM certificate chain (leaf first).
    pub cert: PathBuf,
    /// PEM private key.
    pub key: PathBuf,
}

fn read(path: &Path) -> Result<Vec<u8>, CertError> {
    std::fs::read(path).map_err(|source| CertError::Read {
        path: path.to_owned(),
        source,
    })
}

/// Reads and checks the pair (the bytes read, to see later whether they changed).
fn load(files: &CertFiles) -> Result<(Arc<CertifiedKey>, Vec<u8>), CertError> {
    let cert_pem = read(&files.cert)?;
    let key_pem = read(&files.key)?;
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&cert_pem)
        .filter_map(Result::ok)
        .collect();
    if chain.is_empty() {
        return Err(CertError::NoCertificate {
            path: files.cert.clone(),
        });
    }
    let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| CertError::NoKey {
        path: files.key.clone(),
        why: e.to_string(),
    })?;
    let provider = rustls::crypto::ring::default_provider();
    let certified =
        CertifiedKey::from_der(chain, key, &provider).map_err(|e| CertError::Mismatch {
            cert: files.cert.clone(),
            key: files.key.clone(),
            why: e.to_string(),
        })?;
    let mut seen = cert_pem;
    seen.extend_from_slice(&key_pem);
    Ok((Arc::new(certified), seen))
}

/// The current pair, swapped in place when the files change.
#[derive(Debug)]
pub struct Reloading {
    files: CertFiles,
    current: RwLock<(Arc<CertifiedKey>, Vec<u8>)>,
}

/// What one look at the files did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reload {
    /// The files are the ones serving.
    Unchanged,
    /// A new pair serves from now on.
    Reloaded,
    /// The files changed but cannot serve: the old pair keeps serving.
    Failed,
}

impl Reloading {
    /// Loads the pair; an unusable pair at start is a configuration error.
    pub fn new(files: CertFiles) -> Result<Reloading, CertError> {
        let current = load(&files)?;
        Ok(Reloading {
            files,
            current: RwLock::new(current),
        })
    }

    /// Looks at the files once.
    pub fn reload(&self) -> Reload {
        let changed = {
            let cur = self.current.read().unwrap_or_else(|p| p.into_inner());
            let (cert, key) = (
                std::fs::read(&self.files.cert),
                std::fs::read(&self.files.key),
            );
            match (cert, key) {
                (Ok(mut c), Ok(k)) => {
                    c.extend_from_slice(&k);
                    c != cur.1
                }
                // Unreadable for a moment (the flip): try again later.
                _ => true,
            }
        };
        if !changed {
            return Reload::Unchanged;
        }
        match load(&self.files) {
            Ok(next) => {
                *self.current.write().unwrap_or_else(|p| p.into_inner()) = next;
                Reload::Reloaded
            }
            Err(e) => {
                tracing::warn!(error = %e, "the serving certificate changed but cannot be used; the previous one keeps serving");
                Reload::Failed
            }
        }
    }

    /// Re-reads the files every `every` until `shutdown`; `on` is told each result.
    pub async fn watch(
        self: Arc<Self>,
        every: Duration,
        shutdown: CancellationToken,
        on: impl Fn(Reload) + Send,
    ) {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                () = shutdown.cancelled() => return,
            }
            let this = self.clone();
            // File reads off the runtime's workers, bounded in time.
            let result = tokio::time::timeout(
                every.max(Duration::from_secs(1)),
                tokio::task::spawn_blocking(move || this.reload()),
            )
            .await;
            match result {
                Ok(Ok(r)) => {
                    if r == Reload::Reloaded {
                        tracing::info!(cert = %self.files.cert.display(), "serving a new certificate");
                    }
                    on(r);
                }
                _ => {
                    tracing::warn!(cert = %self.files.cert.display(), "reading the certificate files did not finish in time");
                    on(Reload::Failed);
                }
            }
        }
    }
}

impl ResolvesServerCert for Reloading {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(
            self.current
                .read()
                .unwrap_or_else(|p| p.into_inner())
                .0
                .clone(),
        )
    }
}

/// The rustls configuration serving `resolver`'s pair, HTTP/1.1 only.
pub fn server_config(resolver: Arc<Reloading>) -> Result<rustls::ServerConfig, rustls::Error> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_cert_resolver(resolver);
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(dir: &Path, name: &str) -> (String, String) {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec![name.to_owned()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let _ = dir;
        (cert.pem(), key.serialize_pem())
    }

    #[test]
    fn a_rotated_pair_serves_and_a_broken_one_never_does() {
        let dir = tempfile::tempdir().unwrap();
        let files = CertFiles {
            cert: dir.path().join("tls.crt"),
            key: dir.path().join("tls.key"),
        };
        let (c1, k1) = pair(dir.path(), "one");
        std::fs::write(&files.cert, &c1).unwrap();
        std::fs::write(&files.key, &k1).unwrap();
        let r = Reloading::new(files.clone()).unwrap();
        let serving = |r: &Reloading| r.current.read().unwrap().0.cert[0].clone();
        let first = serving(&r);
        assert_eq!(r.reload(), Reload::Unchanged);

        // Half-way through a flip: the new certificate with the old key.
        let (c2, k2) = pair(dir.path(), "two");
        std::fs::write(&files.cert, &c2).unwrap();
        assert_eq!(r.reload(), Reload::Failed);
        assert_eq!(serving(&r), first, "the old pair keeps serving");

        std::fs::write(&files.key, &k2).unwrap();
        assert_eq!(r.reload(), Reload::Reloaded);
        assert_ne!(serving(&r), first);
        assert_eq!(r.reload(), Reload::Unchanged);

        std::fs::write(&files.key, "not a key").unwrap();
        assert_eq!(r.reload(), Reload::Failed);
        assert!(matches!(
            Reloading::new(files.clone()),
            Err(CertError::NoKey { .. })
        ));
        std::fs::remove_file(&files.cert).unwrap();
        assert!(matches!(Reloading::new(files), Err(CertError::Read { .. })));
    }
}
