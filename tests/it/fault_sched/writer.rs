//! Clients writing unique keys continuously while faults happen, recording which
//! writes etcd acknowledged.
//!
//! Each writer task puts `w/<tag>/<seq>` = `<tag>:<seq>` through one member after
//! another (round robin over every member's client URL, frozen and dead ones
//! included, as a client behind a Service would). A put that returns OK is
//! **acknowledged**: etcd promised it is committed. A put that fails or exceeds its
//! deadline is **indeterminate**: it may or may not have been committed, and the
//! checker never holds it against anyone.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// How long one put may take before it counts as indeterminate.
pub const PUT_TIMEOUT: Duration = Duration::from_millis(1500);
/// Writer tasks running at once.
pub const WRITERS: usize = 4;
/// Pause between one writer's puts: up to about 150 puts/s in all when etcd keeps up,
/// enough to have writes in flight at every fault without flooding 2 cores.
const WRITE_GAP: Duration = Duration::from_millis(20);

/// What the writers did.
#[derive(Clone, Debug, Default)]
pub struct WriteLog {
    /// Acknowledged writes: key → value.
    pub acked: BTreeMap<String, String>,
    /// Puts that failed or timed out (may or may not have been committed).
    pub indeterminate: usize,
}

/// Writers running on their own thread until [`Writer::stop`].
pub struct Writer {
    stop: Arc<AtomicBool>,
    log: Arc<Mutex<WriteLog>>,
    thread: Option<JoinHandle<()>>,
}

impl Writer {
    /// Starts writing keys under `w/<tag>/` through `client_urls`.
    pub fn start(tag: &str, client_urls: Vec<String>) -> Writer {
        let stop = Arc::new(AtomicBool::new(false));
        let log = Arc::new(Mutex::new(WriteLog::default()));
        let thread = {
            let (stop, log, tag) = (stop.clone(), log.clone(), tag.to_string());
            std::thread::Builder::new()
                .name(format!("writer-{tag}"))
                .spawn(move || write_until_stopped(&tag, client_urls, stop, log))
                .expect("spawn the writer thread")
        };
        Writer {
            stop,
            log,
            thread: Some(thread),
        }
    }

    /// How many writes etcd has acknowledged so far.
    pub fn acked(&self) -> usize {
        self.log
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .acked
            .len()
    }

    /// Stops the writers, waits for puts in flight (each bounded by
    /// [`PUT_TIMEOUT`]) and returns what they did.
    pub fn stop(mut self) -> WriteLog {
        self.halt();
        std::mem::take(&mut *self.log.lock().unwrap_or_else(|e| e.into_inner()))
    }

    fn halt(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        self.halt();
    }
}

fn write_until_stopped(
    tag: &str,
    urls: Vec<String>,
    stop: Arc<AtomicBool>,
    log: Arc<Mutex<WriteLog>>,
) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime for the writers");
    runtime.block_on(async {
        let clients: Arc<Vec<tokio::sync::Mutex<Option<etcd_client::Client>>>> =
            Arc::new(urls.iter().map(|_| tokio::sync::Mutex::new(None)).collect());
        let urls = Arc::new(urls);
        let tasks: Vec<_> = (0..WRITERS)
            .map(|w| {
                let (stop, log, clients, urls) =
                    (stop.clone(), log.clone(), clients.clone(), urls.clone());
                let tag = tag.to_string();
                tokio::spawn(async move {
                    let mut seq = w;
                    while !stop.load(Ordering::SeqCst) {
                        let target = seq % urls.len();
                        let key = format!("w/{tag}/{seq:07}");
                        let value = format!("{tag}:{seq}");
                        let ok = put(&clients[target], &urls[target], &key, &value).await;
                        {
                            let mut log = log.lock().unwrap_or_else(|e| e.into_inner());
                            if ok {
                                log.acked.insert(key, value);
                            } else {
                                log.indeterminate += 1;
                            }
                        }
                        seq += WRITERS;
                        tokio::time::sleep(if ok { WRITE_GAP } else { WRITE_GAP * 3 }).await;
                    }
                })
            })
            .collect();
        for task in tasks {
            let _ = task.await;
        }
    });
}

/// One put with a deadline; true only when etcd acknowledged it.
async fn put(
    slot: &tokio::sync::Mutex<Option<etcd_client::Client>>,
    url: &str,
    key: &str,
    value: &str,
) -> bool {
    let attempt = async {
        let mut client = {
            let mut slot = slot.lock().await;
            if slot.is_none() {
                let options = etcd_client::ConnectOptions::new()
                    .with_connect_timeout(Duration::from_millis(500))
                    .with_timeout(PUT_TIMEOUT);
                *slot = etcd_client::Client::connect([url], Some(options))
                    .await
                    .ok();
            }
            slot.clone()?
        };
        client.put(key, value, None).await.ok()
    };
    let ok = matches!(
        tokio::time::timeout(PUT_TIMEOUT, attempt).await,
        Ok(Some(_))
    );
    if !ok {
        // Reconnect next time: the member may have been killed and restarted.
        *slot.lock().await = None;
    }
    ok
}
