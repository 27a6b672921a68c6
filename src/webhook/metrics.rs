//! Metrics of the webhook (`/metrics`), prefixed `etcd_agent_webhook_`: what
//! every admission came to, how long answering took, which namespaces admitted
//! etcd Pods unguarded, and the certificate reloads and Events written.

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// What an admission came to (`result`).
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq, EncodeLabelValue)]
#[allow(non_camel_case_types)]
pub enum Result {
    /// A patch was returned.
    injected,
    /// An etcd Pod left alone on purpose, or no etcd.
    skipped,
    /// An etcd Pod admitted unguarded.
    unguarded,
    /// Not a Pod CREATE.
    ignored,
    /// Not an AdmissionReview (400), too large (413) or too slow (408).
    invalid,
}

/// The `result` label.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabel {
    /// What it came to.
    pub result: Result,
}

/// The `namespace` label.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NamespaceLabel {
    /// The Pod's namespace.
    pub namespace: String,
}

/// `ok` or `error`.
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq, EncodeLabelValue)]
#[allow(non_camel_case_types)]
pub enum Outcome {
    /// It worked.
    ok,
    /// It did not.
    error,
}

/// The `outcome` label.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabel {
    /// How it went.
    pub outcome: Outcome,
}

/// Every metric of the webhook (each an `Arc` inside: cheap to clone).
#[derive(Debug, Clone)]
pub struct Metrics {
    /// Admissions by result.
    pub admissions: Family<ResultLabel, Counter>,
    /// Seconds from a request's head to its answer.
    pub duration: Histogram,
    /// etcd Pods admitted unguarded, by namespace.
    pub unguarded: Family<NamespaceLabel, Counter>,
    /// Certificate reloads (a changed pair taken, or refused).
    pub reloads: Family<OutcomeLabel, Counter>,
    /// Events written about unguarded Pods.
    pub events: Family<OutcomeLabel, Counter>,
}

impl Default for Metrics {
    fn default() -> Metrics {
        Metrics {
            admissions: Family::default(),
            // Around the 5 ms goal, and far enough out to see a stall.
            duration: Histogram::new([0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.1, 0.5, 2.0]),
            unguarded: Family::default(),
            reloads: Family::default(),
            events: Family::default(),
        }
    }
}

impl Metrics {
    /// Registers every metric.
    pub fn register(&self) -> Registry {
        let mut r = Registry::with_prefix("etcd_agent_webhook");
        r.register(
            "admissions",
            "AdmissionReviews answered, by what they came to",
            self.admissions.clone(),
        );
        r.register(
            "admission_duration_seconds",
            "Time from a request's head to its answer",
            self.duration.clone(),
        );
        r.register(
            "unguarded_pods",
            "etcd Pods admitted unguarded because the agent could not understand them, by namespace",
            self.unguarded.clone(),
        );
        r.register(
            "certificate_reloads",
            "Changed serving certificates taken (ok) or refused (error; the previous one keeps serving)",
            self.reloads.clone(),
        );
        r.register(
            "events",
            "Events written about etcd Pods admitted unguarded",
            self.events.clone(),
        );
        r
    }
}
