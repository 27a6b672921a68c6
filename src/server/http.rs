//! The HTTP side for the kubelet and Prometheus: `/livez` (the process runs),
//! `/readyz` (identity-aware readiness) and `/metrics`.
//!
//! `/readyz` is the point of the sidecar: etcd's own `/health` says 200 for a
//! member that re-bootstrapped a fresh one-member cluster, because that cluster
//! is healthy — it is just not *this* cluster. Here 200 means the published
//! identity is consistent (the member answers, has a leader, and has the expected
//! member and cluster IDs) and fresh; otherwise 503 with one line per reason, so
//! `kubectl describe pod` shows why.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use prometheus_client::registry::Registry;
use tokio::sync::watch;

use super::identity::Identity;
use super::metrics;

/// What the handlers read.
#[derive(Clone)]
pub struct HttpState {
    /// The published identity.
    pub identity: watch::Receiver<Identity>,
    /// The metrics registry.
    pub registry: Arc<Registry>,
    /// An identity older than this is stale (the poller is not keeping up).
    pub stale_after: Duration,
}

/// The router.
pub fn router(state: HttpState) -> Router {
    Router::new()
        .route("/livez", get(livez))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(state)
}

async fn livez() -> &'static str {
    "ok\n"
}

/// Readiness and why, as `/readyz` answers it.
pub fn readiness(identity: &Identity, stale_after: Duration, now: SystemTime) -> (bool, String) {
    if identity.sequence == 0 {
        return (
            false,
            "not ready:\n- the local member has not been polled yet\n".to_owned(),
        );
    }
    let age = now
        .duration_since(identity.observed_at)
        .unwrap_or(Duration::ZERO);
    let f = &identity.facts;
    let mut reasons = f.reasons.clone();
    if age > stale_after {
        reasons.push(format!(
            "the identity was last observed {:.1}s ago (the poller is not keeping up)",
            age.as_secs_f64()
        ));
    }
    if reasons.is_empty() {
        let body = match &f.member {
            Some(m) => format!(
                "ready: member {} ({}) of cluster {}, leader {}, raft term {}, index {}\n",
                m.member_id,
                m.name,
                m.cluster_id,
                m.leader_id.map(|id| id.to_string()).unwrap_or_default(),
                m.raft_term,
                m.raft_index
            ),
            None => "ready\n".to_owned(),
        };
        return (true, body);
    }
    let mut body = String::from("not ready:\n");
    for r in reasons {
        body.push_str("- ");
        body.push_str(&r);
        body.push('\n');
    }
    (false, body)
}

#[tracing::instrument(level = "trace", skip_all)]
async fn readyz(State(state): State<HttpState>) -> Response {
    let (ready, body) = {
        let identity = state.identity.borrow();
        readiness(&identity, state.stale_after, SystemTime::now())
    };
    let code = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (code, [(header::CACHE_CONTROL, "no-store")], body).into_response()
}

/// The `Content-Type` of OpenMetrics text.
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// True when the scraper's `Accept` prefers OpenMetrics text to the Prometheus
/// text format (it names `application/openmetrics-text` with a q-value above 0
/// and at least that of `text/plain` and `*/*`). No `Accept`, or anything else:
/// Prometheus text, which every scraper reads.
pub fn wants_openmetrics(accept: Option<&str>) -> bool {
    let Some(accept) = accept else {
        return false;
    };
    let (mut om, mut text) = (0.0f32, 0.0f32);
    for range in accept.split(',') {
        let mut parts = range.split(';').map(str::trim);
        let media = parts.next().unwrap_or_default().to_ascii_lowercase();
        let q = parts
            .filter_map(|p| p.strip_prefix("q=").or_else(|| p.strip_prefix("Q=")))
            .find_map(|q| q.trim().parse::<f32>().ok())
            .unwrap_or(1.0);
        match media.as_str() {
            "application/openmetrics-text" => om = om.max(q),
            "text/plain" | "text/*" | "*/*" => text = text.max(q),
            _ => {}
        }
    }
    om > 0.0 && om >= text
}

#[tracing::instrument(level = "trace", skip_all)]
async fn metrics(State(state): State<HttpState>, headers: header::HeaderMap) -> Response {
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok());
    let (rendered, content_type) = if wants_openmetrics(accept) {
        (metrics::render(&state.registry), OPENMETRICS)
    } else {
        (
            metrics::render_prometheus(&state.registry),
            prometheus_client::encoding::prometheus_text::CONTENT_TYPE,
        )
    };
    match rendered {
        Ok(text) => (StatusCode::OK, [(header::CONTENT_TYPE, content_type)], text).into_response(),
        Err(_) => (StatusCode::INTERNAL_SERVER_ERROR, "cannot encode metrics\n").into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::poller::initial_identity;

    #[test]
    fn metrics_follow_the_accept_header() {
        assert!(!wants_openmetrics(None));
        assert!(!wants_openmetrics(Some("*/*")));
        assert!(!wants_openmetrics(Some("text/plain;version=0.0.4")));
        assert!(wants_openmetrics(Some("application/openmetrics-text")));
        // What Prometheus sends by default.
        assert!(wants_openmetrics(Some(
            "application/openmetrics-text;version=1.0.0;q=0.5,application/openmetrics-text;version=0.0.1;q=0.4,text/plain;version=0.0.4;q=0.3,*/*;q=0.2"
        )));
        assert!(!wants_openmetrics(Some(
            "text/plain;version=0.0.4;q=0.9,application/openmetrics-text;q=0.5"
        )));
        assert!(!wants_openmetrics(Some("application/openmetrics-text;q=0")));
    }

    #[test]
    fn not_polled_is_not_ready() {
        let id = initial_identity("http://127.0.0.1:2379", SystemTime::now());
        let (ready, body) = readiness(&id, Duration::from_secs(10), SystemTime::now());
        assert!(!ready);
        assert!(body.contains("not been polled"));
    }

    #[test]
    fn a_stale_identity_is_not_ready() {
        let then = SystemTime::UNIX_EPOCH + Duration::from_secs(1000);
        let mut id = initial_identity("http://127.0.0.1:2379", then);
        id.sequence = 1;
        id.facts.consistent = true;
        id.facts.reasons.clear();
        let (ready, _) = readiness(&id, Duration::from_secs(10), then + Duration::from_secs(5));
        assert!(ready);
        let (ready, body) = readiness(&id, Duration::from_secs(10), then + Duration::from_secs(60));
        assert!(!ready);
        assert!(body.contains("last observed 60.0s ago"), "{body}");
    }
}
