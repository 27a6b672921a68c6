//! Downloading a snapshot from S3 or an S3-compatible store (MinIO, Ceph RGW,
//! SeaweedFS, …) with the operator's settings (`S3_ENDPOINT`, `S3_BUCKET`,
//! `S3_KEY`, `S3_REGION`, `S3_FORCE_PATH_STYLE`, `AWS_ACCESS_KEY_ID`,
//! `AWS_SECRET_ACCESS_KEY`, and `AWS_CA_BUNDLE` for a private CA, as the AWS SDKs
//! name it).
//!
//! **Why `object_store`.** It is the Apache Arrow project's object-store client:
//! actively maintained, used in production by DataFusion, Delta-rs and others, and
//! small next to `aws-sdk-s3` (no Smithy runtime, a fraction of the build time).
//! It speaks to S3-compatible endpoints with path-style addressing
//! (`with_endpoint` + `with_virtual_hosted_style_request(false)`, `with_allow_http`),
//! signs with SigV4, and exposes every bound an init container needs: connect
//! timeout, a per-read idle timeout, a whole-request timeout and a bounded retry
//! policy. Its signing and TLS providers are selectable (features `aws-base` +
//! `ring`, and reqwest's `rustls-no-provider`), so it builds on `reqwest` +
//! `rustls` with `ring` — the provider the rest of this crate already uses — and
//! no second crypto stack (`aws-lc-rs`, a C build) enters the static binary.
//! `rust-s3`, the other small candidate, exposes one request timeout (no separate
//! connect and idle-read bounds) and a smaller community; `aws-sdk-s3` is the
//! reference client but brings the Smithy runtime and a far larger tree for one
//! HEAD and one GET.
//!
//! The builder is configured explicitly, never from the environment: without
//! credentials the requests go unsigned (public buckets) instead of falling back to
//! instance metadata (IMDS), which inside a Pod is at best a slow timeout.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use object_store::aws::{AmazonS3, AmazonS3Builder};
use object_store::path::Path as ObjectPath;
use object_store::{
    BackoffConfig, Certificate, ClientOptions, GetOptions, ObjectStore, ObjectStoreExt, RetryConfig,
};

use super::fetch::{FetchError, Fetched, SourceError, StagedSnapshot};

/// Where the snapshot lives and how to reach it. `Debug` never shows the secret.
#[derive(Clone)]
pub struct S3Location {
    /// Endpoint URL of an S3-compatible store; `None` for AWS.
    pub endpoint: Option<String>,
    /// Bucket.
    pub bucket: String,
    /// Object key.
    pub key: String,
    /// Region (signing scope).
    pub region: String,
    /// Path-style requests (`<endpoint>/<bucket>/<key>`).
    pub path_style: bool,
    /// Access key ID and secret; `None` sends unsigned requests.
    pub credentials: Option<(String, String)>,
    /// Session token for temporary credentials.
    pub session_token: Option<String>,
    /// Extra PEM CA bundle for an https endpoint.
    pub ca_bundle: Option<std::path::PathBuf>,
}

impl std::fmt::Debug for S3Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3Location")
            .field("endpoint", &self.endpoint)
            .field("bucket", &self.bucket)
            .field("key", &self.key)
            .field("region", &self.region)
            .field("path_style", &self.path_style)
            .field(
                "access_key_id",
                &self.credentials.as_ref().map(|(id, _)| id),
            )
            .field(
                "secret_access_key",
                &self.credentials.as_ref().map(|_| "<redacted>"),
            )
            .field(
                "session_token",
                &self.session_token.as_ref().map(|_| "<redacted>"),
            )
            .field("ca_bundle", &self.ca_bundle)
            .finish()
    }
}

impl S3Location {
    /// `s3://bucket/key`, with the endpoint when there is one (for messages).
    pub fn describe(&self) -> String {
        match &self.endpoint {
            Some(e) => format!("s3://{}/{} at {e}", self.bucket, self.key),
            None => format!("s3://{}/{}", self.bucket, self.key),
        }
    }
}

/// The bounds on every request.
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    /// TCP (and TLS) connect.
    pub connect: Duration,
    /// Longest silence while waiting for headers or body bytes.
    pub idle: Duration,
    /// The whole fetch, HEAD and download together.
    pub total: Duration,
}

/// Whether requests to `endpoint` must be path-style whatever was asked: an IP
/// address or `localhost` cannot carry the bucket as a host label.
pub fn needs_path_style(endpoint: &str) -> bool {
    let rest = endpoint.split_once("://").map_or(endpoint, |(_, r)| r);
    let authority = rest.split('/').next().unwrap_or_default();
    let host = if let Some(v6) = authority.strip_prefix('[') {
        v6.split(']').next().unwrap_or_default()
    } else {
        authority.rsplit_once(':').map_or(authority, |(h, _)| h)
    };
    host.eq_ignore_ascii_case("localhost")
        || host.parse::<std::net::IpAddr>().is_ok()
        || authority.starts_with('[')
}

/// The endpoint `object_store` should use. With a custom endpoint and
/// virtual-hosted style, the bucket becomes the first label of the host, as the
/// AWS SDKs do it (`http://minio:9000` → `http://bucket.minio:9000`).
pub fn effective_endpoint(endpoint: &str, bucket: &str, path_style: bool) -> String {
    let endpoint = endpoint.trim_end_matches('/');
    if path_style || needs_path_style(endpoint) {
        return endpoint.to_string();
    }
    match endpoint.split_once("://") {
        Some((scheme, rest)) if !rest.starts_with(&format!("{bucket}.")) => {
            format!("{scheme}://{bucket}.{rest}")
        }
        _ => endpoint.to_string(),
    }
}

fn remote(location: &S3Location, e: object_store::Error) -> SourceError {
    if let object_store::Error::NotFound { .. } = e {
        return SourceError::NotFound {
            location: location.describe(),
        };
    }
    let message = crate::error::chain(&e);
    SourceError::Remote {
        location: location.describe(),
        message,
    }
}

/// Builds the client. Fails only on a malformed configuration.
pub fn client(location: &S3Location, bounds: Bounds) -> Result<AmazonS3, SourceError> {
    // reqwest's rustls has no built-in provider here (ring is chosen for the whole
    // crate); installing it twice is harmless.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut options = ClientOptions::new()
        .with_connect_timeout(bounds.connect)
        .with_read_timeout(bounds.idle)
        .with_timeout(bounds.total)
        .with_allow_http(
            location
                .endpoint
                .as_deref()
                .is_some_and(|e| e.starts_with("http://")),
        );
    if let Some(path) = &location.ca_bundle {
        let pem = std::fs::read(path).map_err(|source| SourceError::Read {
            location: format!("CA bundle {}", path.display()),
            source,
        })?;
        let certs = Certificate::from_pem_bundle(&pem).map_err(|e| SourceError::Remote {
            location: location.describe(),
            message: format!("CA bundle {}: {e}", path.display()),
        })?;
        for cert in certs {
            options = options.with_root_certificate(cert);
        }
    }
    let retry = RetryConfig {
        backoff: BackoffConfig {
            init_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(2),
            base: 2.0,
        },
        max_retries: 2,
        retry_timeout: bounds.total.min(Duration::from_secs(60)),
    };
    let path_style =
        location.path_style || location.endpoint.as_deref().is_some_and(needs_path_style);
    let mut b = AmazonS3Builder::new()
        .with_bucket_name(&location.bucket)
        .with_region(&location.region)
        .with_client_options(options)
        .with_retry(retry)
        .with_virtual_hosted_style_request(!path_style);
    if let Some(endpoint) = &location.endpoint {
        b = b.with_endpoint(effective_endpoint(
            endpoint,
            &location.bucket,
            location.path_style,
        ));
    }
    match &location.credentials {
        Some((id, secret)) => {
            b = b.with_access_key_id(id).with_secret_access_key(secret);
            if let Some(token) = &location.session_token {
                b = b.with_token(token);
            }
        }
        None => b = b.with_skip_signature(true),
    }
    b.build().map_err(|e| remote(location, e))
}

fn object_path(location: &S3Location) -> Result<ObjectPath, SourceError> {
    ObjectPath::parse(&location.key).map_err(|e| SourceError::Remote {
        location: location.describe(),
        message: format!("invalid object key: {e}"),
    })
}

/// What HEAD said about the object.
#[derive(Debug, Clone)]
pub struct Head {
    /// Size in bytes.
    pub size: u64,
    /// The ETag, so the download gets the same object.
    pub e_tag: Option<String>,
}

/// HEAD of the snapshot object.
pub async fn head(
    store: &Arc<AmazonS3>,
    location: &S3Location,
    idle: Duration,
) -> Result<Head, SourceError> {
    let path = object_path(location)?;
    // The client's read timeout bounds each attempt; this bounds them together.
    let bound = idle * 4 + Duration::from_secs(5);
    let meta = tokio::time::timeout(bound, store.head(&path))
        .await
        .map_err(|_| SourceError::Stalled {
            location: location.describe(),
            idle,
        })?
        .map_err(|e| remote(location, e))?;
    if meta.size == 0 {
        return Err(SourceError::Empty {
            location: location.describe(),
        });
    }
    Ok(Head {
        size: meta.size,
        e_tag: meta.e_tag,
    })
}

/// Downloads the object into `staged`, failing when no byte arrives for `idle`.
pub async fn download(
    store: &Arc<AmazonS3>,
    location: &S3Location,
    head: &Head,
    mut staged: StagedSnapshot,
    idle: Duration,
) -> Result<Fetched, FetchError> {
    let path = object_path(location)?;
    let stalled = || SourceError::Stalled {
        location: location.describe(),
        idle,
    };
    let options = GetOptions {
        if_match: head.e_tag.clone(),
        ..Default::default()
    };
    let result = tokio::time::timeout(idle * 4 + Duration::from_secs(5), async {
        store.get_opts(&path, options).await
    })
    .await
    .map_err(|_| stalled())?
    .map_err(|e| remote(location, e))?;
    let mut stream = result.into_stream();
    loop {
        match tokio::time::timeout(idle, stream.next()).await {
            Err(_) => return Err(stalled().into()),
            Ok(None) => break,
            Ok(Some(Err(e))) => return Err(remote(location, e).into()),
            Ok(Some(Ok(bytes))) => staged.write(&bytes)?,
        }
    }
    staged.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn virtual_hosted_style_puts_the_bucket_in_the_host() {
        assert_eq!(
            effective_endpoint("http://minio:9000/", "snaps", false),
            "http://snaps.minio:9000"
        );
        assert_eq!(
            effective_endpoint("https://snaps.s3.example", "snaps", false),
            "https://snaps.s3.example"
        );
        assert_eq!(
            effective_endpoint("http://127.0.0.1:9000", "snaps", true),
            "http://127.0.0.1:9000"
        );
    }

    #[test]
    fn ip_and_localhost_endpoints_are_always_path_style() {
        for e in [
            "http://127.0.0.1:9000",
            "http://localhost:9000/",
            "https://[::1]:9000",
            "http://10.0.0.7",
        ] {
            assert!(needs_path_style(e), "{e}");
            assert_eq!(
                effective_endpoint(e, "snaps", false),
                e.trim_end_matches('/')
            );
        }
        assert!(!needs_path_style("https://minio.storage.svc:9000"));
    }
}
