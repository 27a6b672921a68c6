//! Push mode: the agent as a client of the operator's `IdentityCollector`.
//!
//! One report on startup, one on every change of the identity (a new sequence),
//! and a heartbeat after `--report-interval` without change, so a collector that
//! restarted learns the current state within one interval. A failed call is
//! retried with the newest identity after an exponential backoff (capped at
//! [`MAX_BACKOFF`], with jitter so a fleet of agents does not reconnect in step);
//! every call, connection included, is bounded by `--report-timeout`. The channel
//! is lazy and reconnects by itself, so a collector that goes away and comes back
//! costs nothing but the failed attempts in between.

use std::time::Duration;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tonic::transport::{Channel, Endpoint};

use super::config::ReportConfig;
use super::identity::Identity;
use super::metrics::{Metrics, Outcome};
use super::proto;
use super::proto::identity_collector_client::IdentityCollectorClient;
use super::tls::{self, TlsError};

/// The first pause after a failed report.
pub const FIRST_BACKOFF: Duration = Duration::from_millis(250);
/// The longest pause between attempts.
pub const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// Why push mode cannot start.
#[derive(Debug, thiserror::Error)]
pub enum ReportSetupError {
    /// `--report-to` is not a usable URL.
    #[error("--report-to {url:?} is not a usable URL: {detail}")]
    Url {
        /// The URL as given.
        url: String,
        /// Why.
        detail: String,
    },
    /// A TLS file or combination is wrong.
    #[error(transparent)]
    Tls(#[from] TlsError),
}

/// A prepared reporter: the lazy channel and what to send.
pub struct Reporter {
    client: IdentityCollectorClient<Channel>,
    conf: ReportConfig,
}

impl Reporter {
    /// Checks the URL and reads the TLS files; connects lazily.
    pub fn new(conf: ReportConfig) -> Result<Reporter, ReportSetupError> {
        let url_error = |detail: String| ReportSetupError::Url {
            url: conf.url.clone(),
            detail,
        };
        if !(conf.url.starts_with("http://") || conf.url.starts_with("https://")) {
            return Err(url_error("use http:// or https://".to_owned()));
        }
        let mut endpoint = Endpoint::from_shared(conf.url.clone())
            .map_err(|e| url_error(e.to_string()))?
            .connect_timeout(conf.timeout)
            .timeout(conf.timeout)
            .tcp_nodelay(true)
            .http2_keep_alive_interval(Duration::from_secs(30))
            .keep_alive_timeout(Duration::from_secs(10));
        if let Some(tls) = tls::client_config(&conf)? {
            endpoint = endpoint
                .tls_config(tls)
                .map_err(|e| url_error(e.to_string()))?;
        }
        let client = IdentityCollectorClient::new(endpoint.connect_lazy())
            .max_decoding_message_size(64 * 1024)
            .max_encoding_message_size(super::grpc::MAX_RESPONSE_BYTES);
        Ok(Reporter { client, conf })
    }

    /// Reports until `shutdown`.
    pub async fn run(
        mut self,
        mut identity: watch::Receiver<Identity>,
        metrics: Metrics,
        shutdown: CancellationToken,
    ) {
        // Nothing to say before the first poll.
        tokio::select! {
            () = shutdown.cancelled() => return,
            r = identity.wait_for(|i| i.sequence > 0) => if r.is_err() { return },
        }
        let mut trigger = proto::ReportTrigger::Startup;
        let mut backoff = FIRST_BACKOFF;
        let mut failing = false;
        loop {
            let current = proto::Identity::from(&*identity.borrow_and_update());
            let sequence = current.sequence;
            let request = proto::IdentityReport {
                identity: Some(current),
                trigger: trigger.into(),
                pod_name: self.conf.pod_name.clone(),
                namespace: self.conf.namespace.clone(),
            };
            let call = tokio::time::timeout(self.conf.timeout, self.client.report(request));
            let result = tokio::select! {
                () = shutdown.cancelled() => return,
                r = call => r,
            };
            let failure = match result {
                Ok(Ok(_)) => None,
                Ok(Err(status)) if status.code() == tonic::Code::DeadlineExceeded => {
                    Some((Outcome::timeout, status.to_string()))
                }
                Ok(Err(status)) => Some((Outcome::error, describe_status(&status))),
                Err(_) => Some((
                    Outcome::timeout,
                    "no answer before --report-timeout".to_owned(),
                )),
            };
            match failure {
                None => {
                    Metrics::count(&metrics.reports, Outcome::ok);
                    if failing {
                        tracing::info!(url = %self.conf.url, sequence, "reporting to the collector again");
                    }
                    failing = false;
                    backoff = FIRST_BACKOFF;
                    trigger = tokio::select! {
                        () = shutdown.cancelled() => return,
                        r = identity.changed() => match r {
                            Ok(()) => proto::ReportTrigger::Change,
                            Err(_) => return,
                        },
                        () = tokio::time::sleep(self.conf.interval) => proto::ReportTrigger::Heartbeat,
                    };
                }
                Some((outcome, why)) => {
                    Metrics::count(&metrics.reports, outcome);
                    if !failing {
                        tracing::warn!(url = %self.conf.url, error = %why, "report failed; retrying with backoff");
                    } else {
                        tracing::debug!(url = %self.conf.url, error = %why, ?backoff, "report failed again");
                    }
                    failing = true;
                    tokio::select! {
                        () = shutdown.cancelled() => return,
                        () = tokio::time::sleep(jitter(backoff)) => {}
                    }
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                    // What is sent next is whatever is newest; say whether it is news.
                    if identity.has_changed().unwrap_or(false) {
                        trigger = proto::ReportTrigger::Change;
                    }
                }
            }
        }
    }
}

/// A tonic status with its transport cause (the status alone says "transport error").
fn describe_status(status: &tonic::Status) -> String {
    crate::error::chain_onto(
        format!("{}: {}", status.code(), status.message()),
        std::error::Error::source(status),
    )
}

/// 75–100 % of `d`, so agents that lost the collector together do not return in step.
fn jitter(d: Duration) -> Duration {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |t| t.subsec_nanos());
    let fraction = 0.75 + 0.25 * f64::from(nanos % 1000) / 1000.0;
    d.mul_f64(fraction)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jitter_stays_within_a_quarter_below() {
        for _ in 0..100 {
            let j = jitter(Duration::from_secs(4));
            assert!(
                j >= Duration::from_secs(3) && j <= Duration::from_secs(4),
                "{j:?}"
            );
        }
    }

    fn conf(url: &str) -> ReportConfig {
        ReportConfig {
            url: url.to_owned(),
            interval: Duration::from_secs(30),
            timeout: Duration::from_secs(5),
            ca: None,
            cert: None,
            key: None,
            pod_name: String::new(),
            namespace: String::new(),
        }
    }

    #[tokio::test]
    async fn urls_are_checked_up_front() {
        assert!(Reporter::new(conf("http://127.0.0.1:9000")).is_ok());
        assert!(matches!(
            Reporter::new(conf("127.0.0.1:9000")),
            Err(ReportSetupError::Url { .. })
        ));
        assert!(matches!(
            Reporter::new(conf("https://collector:9000")),
            Err(ReportSetupError::Tls(_))
        ));
    }
}
