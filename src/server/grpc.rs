//! `MemberAgent` over tonic, with the standard health service and server
//! reflection beside it.
//!
//! Limits a sidecar needs because any Pod in the cluster may be its client:
//! requests are tiny, so anything over [`MAX_REQUEST_BYTES`] is refused before it
//! is decoded; at most `--max-watchers` WatchIdentity streams are open at once
//! (RESOURCE_EXHAUSTED beyond, while unary calls go on being served); each stream
//! holds one small buffer and skips to the newest identity when its client is
//! slow; and every stream ends when the agent shuts down, so a graceful shutdown
//! never waits on a watcher.

use std::sync::Arc;

use tokio::sync::{mpsc, watch, OwnedSemaphorePermit, Semaphore};
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status};

use super::identity::Identity;
use super::metrics::Metrics;
use super::proto;
use super::proto::member_agent_server::{MemberAgent, MemberAgentServer};

/// The largest request accepted (every request message is empty today).
pub const MAX_REQUEST_BYTES: usize = 16 * 1024;
/// The largest response sent.
pub const MAX_RESPONSE_BYTES: usize = 4 * 1024 * 1024;

/// The `MemberAgent` implementation.
#[derive(Clone)]
pub struct AgentService {
    identity: watch::Receiver<Identity>,
    watchers: Arc<Semaphore>,
    max_watchers: usize,
    metrics: Metrics,
    shutdown: CancellationToken,
}

impl AgentService {
    /// A service answering from `identity`.
    pub fn new(
        identity: watch::Receiver<Identity>,
        max_watchers: usize,
        metrics: Metrics,
        shutdown: CancellationToken,
    ) -> Self {
        AgentService {
            identity,
            watchers: Arc::new(Semaphore::new(max_watchers)),
            max_watchers,
            metrics,
            shutdown,
        }
    }

    /// Wrapped as a tonic service with the message size limits.
    pub fn into_server(self) -> MemberAgentServer<AgentService> {
        MemberAgentServer::new(self)
            .max_decoding_message_size(MAX_REQUEST_BYTES)
            .max_encoding_message_size(MAX_RESPONSE_BYTES)
    }
}

/// Holds a watcher slot; frees it (and the gauge) when the stream ends.
struct WatcherSlot {
    _permit: OwnedSemaphorePermit,
    metrics: Metrics,
}

impl Drop for WatcherSlot {
    fn drop(&mut self) {
        self.metrics.watchers.dec();
    }
}

#[tonic::async_trait]
impl MemberAgent for AgentService {
    #[tracing::instrument(level = "trace", skip_all)]
    async fn get_identity(
        &self,
        _request: Request<proto::GetIdentityRequest>,
    ) -> Result<Response<proto::Identity>, Status> {
        let identity = self.identity.borrow();
        if identity.sequence == 0 {
            return Err(Status::unavailable(
                "the local member has not been polled yet; retry in a moment",
            ));
        }
        Ok(Response::new(proto::Identity::from(&*identity)))
    }

    type WatchIdentityStream = ReceiverStream<Result<proto::Identity, Status>>;

    #[tracing::instrument(level = "trace", skip_all)]
    async fn watch_identity(
        &self,
        _request: Request<proto::WatchIdentityRequest>,
    ) -> Result<Response<Self::WatchIdentityStream>, Status> {
        let permit = Arc::clone(&self.watchers)
            .try_acquire_owned()
            .map_err(|_| {
                Status::resource_exhausted(format!(
                    "{} WatchIdentity streams are open, the most this agent serves (--max-watchers); use GetIdentity or retry later",
                    self.max_watchers
                ))
            })?;
        self.metrics.watchers.inc();
        let slot = WatcherSlot {
            _permit: permit,
            metrics: self.metrics.clone(),
        };
        let mut identity = self.identity.clone();
        let shutdown = self.shutdown.clone();
        let (tx, rx) = mpsc::channel(2);
        tokio::spawn(async move {
            let _slot = slot;
            // The current identity first, then one message per new sequence.
            let mut sent = 0u64;
            loop {
                let next = {
                    let current = identity.borrow_and_update();
                    (current.sequence > sent)
                        .then(|| (current.sequence, proto::Identity::from(&*current)))
                };
                if let Some((sequence, message)) = next {
                    tokio::select! {
                        () = shutdown.cancelled() => return,
                        r = tx.send(Ok(message)) => if r.is_err() { return },
                    }
                    sent = sequence;
                }
                tokio::select! {
                    () = shutdown.cancelled() => return,
                    () = tx.closed() => return,
                    r = identity.changed() => if r.is_err() { return },
                }
            }
        });
        Ok(Response::new(ReceiverStream::new(rx)))
    }
}
