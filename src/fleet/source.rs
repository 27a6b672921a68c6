//! Reading the fleet from the Kubernetes API: for each resource and scope one
//! paginated list (server-side label and field selectors, `--chunk-size`
//! objects a page, each page turned into facts before the next is asked for),
//! then, with `--watch` or `--serve`, one watch from the list's
//! `resourceVersion`. Never a GET per member.
//!
//! | resource | selector |
//! |---|---|
//! | Pods | `-l` (default `etcd-operator.cozystack.io/cluster`) |
//! | Leases (`coordination.k8s.io`) | `app.kubernetes.io/name=etcd-member-agent,app.kubernetes.io/component=witness` |
//! | Events (the agent's) | field `source=etcd-member-agent` |
//! | Events (readiness probes) | field `reason=Unhealthy` |
//! | EtcdClusters, EtcdMembers | none (a few per tenant) |
//!
//! Every list call is bounded by the client's request timeout and the first
//! view's deadline, and retried on 429/503/504 ([`call_verb`]); a continue
//! token that expired mid-list (410) starts the list over. A watch asks the
//! server to end it after [`WATCH_SECS`] and its client reads with a bound
//! above that, so a silently dropped connection is noticed; a watch whose
//! `resourceVersion` is too old (410) lists again, and any other failure lists
//! again after a back-off. Each outcome reaches the store as a [`Change`].

use std::fmt::Debug;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ::kube::api::{Api, ApiResource, GroupVersionKind, ListParams, WatchParams};
use ::kube::core::WatchEvent;
use ::kube::Client;
use futures::StreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ListMeta, ObjectMeta};
use serde::de::{
    DeserializeOwned, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor,
};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::facts::{self, EventSource, Key, WITNESS_PREFIX, WITNESS_SELECTOR};
use super::lite::{EventLite, LeaseLite, PodLite, RecordLite};
use super::store::{Fact, ReadState, Resource, Scope};
use crate::evidence::client::{call_verb, ApiError, ApiKind};
use crate::evidence::events::COMPONENT;
use crate::evidence::kube::{GROUP, VERSION};

/// How long a watch lasts before the server ends it (and it is renewed).
pub const WATCH_SECS: u32 = 60;
/// The first pause before a failed read is tried again (doubled up to [`MAX_BACKOFF`]).
pub const FIRST_BACKOFF: Duration = Duration::from_millis(500);
/// The longest pause between two tries of a failing read.
pub const MAX_BACKOFF: Duration = Duration::from_secs(30);

impl ApiKind for Resource {
    fn rbac_resource(self) -> String {
        self.rbac().to_owned()
    }

    fn not_served(self) -> String {
        if self.optional() {
            format!("{} (the operator's CRDs are not installed)", self.rbac())
        } else {
            self.rbac().to_owned()
        }
    }

    fn rbac_needed(self) -> &'static str {
        "list and watch, as the ClusterRole etcd-member-agent-fleet of deploy/fleet grants"
    }
}

/// What one read did, for the store.
#[derive(Debug)]
pub enum Change {
    /// A whole list of `resource` in `scope`, replacing what was there.
    Listed(Resource, Scope, Vec<Fact>),
    /// One object added or changed.
    Upsert(Box<Fact>),
    /// One object deleted.
    Remove(Resource, Key),
    /// A read failed (the facts last read stay).
    Failed(Resource, Scope, ReadState),
}

/// How many objects each read has seen so far, for a progress line on a slow API.
#[derive(Debug, Default)]
pub struct Progress {
    counts: Mutex<Vec<(Resource, Scope, usize, bool)>>,
}

impl Progress {
    fn add(&self, resource: Resource, scope: &Scope, items: usize, done: bool) {
        let mut counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        match counts
            .iter_mut()
            .find(|(r, s, _, _)| *r == resource && s == scope)
        {
            Some(entry) => {
                entry.2 += items;
                entry.3 = done;
            }
            None => counts.push((resource, scope.clone(), items, done)),
        }
    }

    fn restart(&self, resource: Resource, scope: &Scope) {
        let mut counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        counts.retain(|(r, s, _, _)| !(*r == resource && s == scope));
    }

    /// `pods 1500…, leases 3000, …`: objects read per resource, `…` while a
    /// list is still paging.
    pub fn line(&self) -> String {
        let counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = Vec::new();
        for r in Resource::ALL {
            let mine: Vec<_> = counts.iter().filter(|(x, _, _, _)| *x == r).collect();
            if mine.is_empty() {
                continue;
            }
            let n: usize = mine.iter().map(|(_, _, n, _)| n).sum();
            let done = mine.iter().all(|(_, _, _, d)| *d);
            out.push(format!("{r} {n}{}", if done { "" } else { "…" }));
        }
        out.join(", ")
    }
}

/// Reads the fleet: one client for lists, one for watches (whose read
/// timeout is longer than a watch's quiet), and the selectors.
#[derive(Clone)]
pub struct Reader {
    /// For lists.
    pub lists: Client,
    /// For watches.
    pub watches: Client,
    /// `-l`.
    pub pod_selector: Option<String>,
    /// `--cluster-label`.
    pub cluster_label: String,
    /// `--chunk-size`.
    pub chunk: u32,
    /// Objects read so far.
    pub progress: Arc<Progress>,
}

fn resource_of(kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(GROUP, VERSION, kind), plural)
}

fn api_for<K>(client: &Client, scope: &Scope, ar: &ApiResource) -> Api<K>
where
    K: ::kube::Resource<DynamicType = ApiResource, Scope = ::kube::core::DynamicResourceScope>,
{
    match scope {
        Scope::All => Api::all_with(client.clone(), ar),
        Scope::Namespace(ns) => Api::namespaced_with(client.clone(), ns, ar),
    }
}

fn typed<K>(client: &Client, scope: &Scope) -> Api<K>
where
    K: ::kube::Resource<Scope = ::kube::core::NamespaceResourceScope>,
    <K as ::kube::Resource>::DynamicType: Default,
{
    match scope {
        Scope::All => Api::all(client.clone()),
        Scope::Namespace(ns) => Api::namespaced(client.clone(), ns),
    }
}

fn name_key(meta: &ObjectMeta) -> Option<Key> {
    Some((meta.namespace.clone()?, meta.name.clone()?))
}

fn lease_key(meta: &ObjectMeta) -> Option<Key> {
    let member = meta.name.as_deref()?.strip_prefix(WITNESS_PREFIX)?;
    Some((meta.namespace.clone()?, member.to_owned()))
}

/// How an object becomes a fact (`None`: not one `fleet` keeps).
type Convert<K> = Arc<dyn Fn(&K) -> Option<Fact> + Send + Sync>;

/// How the reads of one resource are made: its API, selectors, and how an
/// object becomes a fact.
struct Plan<K> {
    api: Api<K>,
    labels: Option<String>,
    fields: Option<String>,
    convert: Convert<K>,
    key: fn(&ObjectMeta) -> Option<Key>,
}

impl Reader {
    /// Lists `resource` in `scope` by `deadline`, then (with `watch`) follows
    /// it until the receiver of `tx` is gone, relisting when a watch cannot go
    /// on. Every outcome is sent to `tx`.
    pub async fn follow(
        &self,
        resource: Resource,
        scope: Scope,
        deadline: Instant,
        watch: bool,
        tx: mpsc::Sender<Change>,
    ) {
        match resource {
            Resource::Pods => {
                let label = self.cluster_label.clone();
                let plan = Plan::<PodLite> {
                    api: typed(&self.lists, &scope),
                    labels: self.pod_selector.clone(),
                    fields: None,
                    convert: Arc::new(move |p| Some(Fact::Pod(facts::pod(p, &label)))),
                    key: name_key,
                };
                let watches = typed(&self.watches, &scope);
                self.run(resource, scope, plan, watches, deadline, watch, tx)
                    .await
            }
            Resource::Leases => {
                let plan = Plan::<LeaseLite> {
                    api: typed(&self.lists, &scope),
                    labels: Some(WITNESS_SELECTOR.to_owned()),
                    fields: None,
                    convert: Arc::new(|l| facts::lease(l).map(Fact::Lease)),
                    key: lease_key,
                };
                let watches = typed(&self.watches, &scope);
                self.run(resource, scope, plan, watches, deadline, watch, tx)
                    .await
            }
            Resource::AgentEvents | Resource::ProbeEvents => {
                let (source, fields) = if resource == Resource::AgentEvents {
                    (EventSource::Agent, format!("source={COMPONENT}"))
                } else {
                    (EventSource::Probe, "reason=Unhealthy".to_owned())
                };
                let plan = Plan::<EventLite> {
                    api: typed(&self.lists, &scope),
                    labels: None,
                    fields: Some(fields),
                    convert: Arc::new(move |e| {
                        let name = e.metadata.name.clone()?;
                        facts::event(e, source).map(|f| Fact::Event(source, name, f))
                    }),
                    key: name_key,
                };
                let watches = typed(&self.watches, &scope);
                self.run(resource, scope, plan, watches, deadline, watch, tx)
                    .await
            }
            Resource::EtcdClusters | Resource::EtcdMembers => {
                let ar = if resource == Resource::EtcdClusters {
                    resource_of("EtcdCluster", "etcdclusters")
                } else {
                    resource_of("EtcdMember", "etcdmembers")
                };
                let clusters = resource == Resource::EtcdClusters;
                let plan = Plan::<RecordLite> {
                    api: api_for(&self.lists, &scope, &ar),
                    labels: None,
                    fields: None,
                    convert: Arc::new(move |o| {
                        Some(if clusters {
                            Fact::Cluster(facts::cluster_record(o))
                        } else {
                            Fact::Member(facts::member_record(o))
                        })
                    }),
                    key: name_key,
                };
                let watches = api_for(&self.watches, &scope, &ar);
                self.run(resource, scope, plan, watches, deadline, watch, tx)
                    .await
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    async fn run<K>(
        &self,
        resource: Resource,
        scope: Scope,
        plan: Plan<K>,
        watches: Api<K>,
        first_deadline: Instant,
        watch: bool,
        tx: mpsc::Sender<Change>,
    ) where
        K: ::kube::Resource + Clone + DeserializeOwned + Debug + Send + 'static,
    {
        let mut deadline = first_deadline;
        let mut backoff = FIRST_BACKOFF;
        loop {
            let listed = self.list(resource, &scope, &plan, deadline).await;
            let version = match listed {
                Ok((facts, version)) => {
                    if tx
                        .send(Change::Listed(resource, scope.clone(), facts))
                        .await
                        .is_err()
                    {
                        return;
                    }
                    backoff = FIRST_BACKOFF;
                    version
                }
                Err(e) => {
                    tracing::debug!(%resource, %scope, error = %e, "list failed");
                    let state = match &e {
                        ApiError::NotServed { message, .. } => {
                            ReadState::NotServed(message.clone())
                        }
                        other => ReadState::Failed {
                            error: other.name(),
                            message: other.to_string(),
                        },
                    };
                    if tx
                        .send(Change::Failed(resource, scope.clone(), state))
                        .await
                        .is_err()
                        || !watch
                    {
                        return;
                    }
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                    deadline = Instant::now() + self.relist_budget();
                    continue;
                }
            };
            if !watch {
                return;
            }
            match self
                .watch(resource, &scope, &plan, &watches, version, &tx)
                .await
            {
                WatchEnd::Closed => return,
                WatchEnd::Relist => {}
                WatchEnd::Failed(e) => {
                    tracing::debug!(%resource, %scope, error = %e, "watch failed; listing again");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                }
            }
            deadline = Instant::now() + self.relist_budget();
        }
    }

    /// The budget of a list after the first view (a relist).
    fn relist_budget(&self) -> Duration {
        Duration::from_secs(120)
    }

    /// Every page of one list; the facts and the list's `resourceVersion`.
    async fn list<K>(
        &self,
        resource: Resource,
        scope: &Scope,
        plan: &Plan<K>,
        deadline: Instant,
    ) -> Result<(Vec<Fact>, String), ApiError<Resource>>
    where
        K: ::kube::Resource + Clone + DeserializeOwned + Debug + 'static,
    {
        // Errors name the list as `pods tenant-a/*` (or `*/*`).
        let ns = scope.namespace().unwrap_or("*");
        let mut params = ListParams::default().limit(self.chunk);
        params.label_selector = plan.labels.clone();
        params.field_selector = plan.fields.clone();
        let mut out = Vec::new();
        let mut token: Option<String> = None;
        let mut expired = 0;
        self.progress.restart(resource, scope);
        loop {
            let mut page_params = params.clone();
            page_params.continue_token = token.clone();
            let page = call_verb("list", resource, ns, "*", deadline, || {
                page(
                    self.lists.clone(),
                    plan.api.resource_url().to_owned(),
                    page_params.clone(),
                    plan.convert.clone(),
                )
            })
            .await;
            let page = match page {
                Ok(page) => page,
                // The continue token expired mid-list: start over, a few times.
                Err(ApiError::Api { code: 410, .. }) if token.is_some() && expired < 3 => {
                    expired += 1;
                    out.clear();
                    token = None;
                    self.progress.restart(resource, scope);
                    continue;
                }
                Err(e) => return Err(e),
            };
            out.extend(page.facts);
            token = page.meta.continue_.filter(|t| !t.is_empty());
            self.progress
                .add(resource, scope, page.items, token.is_none());
            if token.is_none() {
                return Ok((out, page.meta.resource_version.unwrap_or_default()));
            }
        }
    }

    /// Follows one watch from `version` until it must be listed again.
    async fn watch<K>(
        &self,
        resource: Resource,
        scope: &Scope,
        plan: &Plan<K>,
        api: &Api<K>,
        mut version: String,
        tx: &mpsc::Sender<Change>,
    ) -> WatchEnd
    where
        K: ::kube::Resource + Clone + DeserializeOwned + Debug + Send + 'static,
    {
        let mut params = WatchParams::default().timeout(WATCH_SECS);
        params.label_selector = plan.labels.clone();
        params.field_selector = plan.fields.clone();
        loop {
            let stream = match api.watch(&params, &version).await {
                Ok(stream) => stream,
                Err(e) => return WatchEnd::Failed(e.to_string()),
            };
            let mut stream = std::pin::pin!(stream);
            while let Some(event) = stream.next().await {
                let change = match event {
                    Err(e) => return WatchEnd::Failed(e.to_string()),
                    Ok(WatchEvent::Bookmark(b)) => {
                        version = b.metadata.resource_version;
                        continue;
                    }
                    Ok(WatchEvent::Error(status)) if status.code == 410 => {
                        return WatchEnd::Relist;
                    }
                    Ok(WatchEvent::Error(status)) => {
                        return WatchEnd::Failed(format!(
                            "HTTP {} {}: {}",
                            status.code, status.reason, status.message
                        ))
                    }
                    Ok(WatchEvent::Added(o)) | Ok(WatchEvent::Modified(o)) => {
                        if let Some(v) = o.meta().resource_version.clone() {
                            version = v;
                        }
                        match (plan.convert)(&o) {
                            Some(f) => Change::Upsert(Box::new(f)),
                            // No longer one of ours (say, a Lease renamed): gone.
                            None => match (plan.key)(o.meta()) {
                                Some(key) => Change::Remove(resource, key),
                                None => continue,
                            },
                        }
                    }
                    Ok(WatchEvent::Deleted(o)) => {
                        if let Some(v) = o.meta().resource_version.clone() {
                            version = v;
                        }
                        match (plan.key)(o.meta()) {
                            Some(key) => Change::Remove(resource, key),
                            None => continue,
                        }
                    }
                };
                if tx.send(change).await.is_err() {
                    return WatchEnd::Closed;
                }
            }
            tracing::trace!(%resource, %scope, "watch ended by the server; renewing");
        }
    }
}

/// One list page, decoded.
struct Page {
    facts: Vec<Fact>,
    meta: ListMeta,
    items: usize,
}

/// Fetches one list page and decodes it as it arrives, on a blocking thread:
/// each item is parsed, turned into facts and dropped before the next, so
/// neither the page's text nor its objects are ever whole in memory.
async fn page<K>(
    client: Client,
    url: String,
    params: ListParams,
    convert: Convert<K>,
) -> Result<Page, ::kube::Error>
where
    K: DeserializeOwned + 'static,
{
    let request = ::kube::core::Request::new(url)
        .list(&params)
        .map_err(::kube::Error::BuildRequest)?;
    let body = client.request_stream(request).await?;
    let decoded = tokio::task::spawn_blocking(move || {
        let reader = std::io::BufReader::with_capacity(64 << 10, Blocking(Box::pin(body)));
        let mut de = serde_json::Deserializer::from_reader(reader);
        let mut facts = Vec::new();
        let mut items = 0;
        let meta = ListSeed::<K> {
            convert: &*convert,
            facts: &mut facts,
            items: &mut items,
        }
        .deserialize(&mut de)
        .and_then(|meta| de.end().map(|()| meta))
        .map_err(|e| {
            if e.is_io() {
                ::kube::Error::ReadEvents(std::io::Error::from(e))
            } else {
                ::kube::Error::SerdeError(e)
            }
        })?;
        Ok(Page { facts, meta, items })
    })
    .await;
    match decoded {
        Ok(page) => page,
        Err(e) => Err(::kube::Error::Service(Box::new(e))),
    }
}

/// An async body read from a blocking thread.
struct Blocking<R>(std::pin::Pin<Box<R>>);

impl<R: futures::AsyncRead> std::io::Read for Blocking<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        futures::executor::block_on(futures::AsyncReadExt::read(&mut self.0, buf))
    }
}

/// A list document (`{"metadata": …, "items": […]}`) whose items are
/// converted one by one into `facts`; yields the list's metadata.
struct ListSeed<'a, K> {
    convert: &'a (dyn Fn(&K) -> Option<Fact> + Send + Sync),
    facts: &'a mut Vec<Fact>,
    items: &'a mut usize,
}

impl<'de, K: DeserializeOwned> DeserializeSeed<'de> for ListSeed<'_, K> {
    type Value = ListMeta;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<ListMeta, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de, K: DeserializeOwned> Visitor<'de> for ListSeed<'_, K> {
    type Value = ListMeta;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a Kubernetes list")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ListMeta, A::Error> {
        let mut meta = ListMeta::default();
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "metadata" => meta = map.next_value()?,
                "items" => map.next_value_seed(Items::<K> {
                    convert: self.convert,
                    facts: &mut *self.facts,
                    items: &mut *self.items,
                })?,
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(meta)
    }
}

/// The `items` of a list (see [`ListSeed`]).
struct Items<'a, K> {
    convert: &'a (dyn Fn(&K) -> Option<Fact> + Send + Sync),
    facts: &'a mut Vec<Fact>,
    items: &'a mut usize,
}

impl<'de, K: DeserializeOwned> DeserializeSeed<'de> for Items<'_, K> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de, K: DeserializeOwned> Visitor<'de> for Items<'_, K> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a list's items")
    }

    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while let Some(item) = seq.next_element::<K>()? {
            *self.items += 1;
            if let Some(fact) = (self.convert)(&item) {
                self.facts.push(fact);
            }
        }
        Ok(())
    }
}

/// Why a watch stopped.
enum WatchEnd {
    /// Nobody listens any more.
    Closed,
    /// The server no longer has the version watched from (410): list again.
    Relist,
    /// The watch failed: list again after a back-off.
    Failed(String),
}
