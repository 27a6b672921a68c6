//! The operator's records: the `EtcdMember` named like this Pod and its
//! `EtcdCluster` (group `etcd-operator.cozystack.io`, version `v1alpha2`).
//!
//! Read as `DynamicObject`s rather than generated types: the agent needs a
//! handful of fields, must not break when the operator adds others, and must say
//! exactly which field was missing or of the wrong type when a record is not
//! what it expects (a `Malformed` error names the field), rather than a serde
//! error about a struct the operator never published.
//!
//! Errors keep what an SRE needs apart: the record does not exist (`NotFound`),
//! the group is not served at all (`NotServed`: CRDs not installed), the service
//! account lacks RBAC (`Forbidden`, naming the verb and resource), the API failed
//! (`Api`), nothing answered in time (`Timeout`), or no server could be reached
//! (`Unreachable`). Transient answers (429, 503, 504, connection failures) are
//! retried with backoff until the deadline; the last one is reported.

use std::path::PathBuf;
use std::time::Duration;

use ::kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use ::kube::Client;
use serde::Serialize;
use serde_json::Value;
use tokio::time::Instant;

use super::client::{call, ApiError, ApiKind, ConfigError};
use crate::disk::ids::{ClusterId, HexIdError, MemberId};

/// API group of the operator's resources.
pub const GROUP: &str = "etcd-operator.cozystack.io";
/// API version of the operator's resources.
pub const VERSION: &str = "v1alpha2";

/// Which record to read and how to reach the API server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KubeTarget {
    /// Namespace of the Pod and its records (`POD_NAMESPACE`).
    pub namespace: String,
    /// Name of the `EtcdMember`: the Pod's name (and etcd's `--name`).
    pub member_name: String,
    /// A kubeconfig file; `None` means the in-cluster service account.
    pub kubeconfig: Option<PathBuf>,
}

/// The operator's resource kinds this module reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum Kind {
    /// `etcdmembers.etcd-operator.cozystack.io`
    EtcdMember,
    /// `etcdclusters.etcd-operator.cozystack.io`
    EtcdCluster,
}

impl Kind {
    /// The kind's name as the API spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::EtcdMember => "EtcdMember",
            Kind::EtcdCluster => "EtcdCluster",
        }
    }

    /// The plural resource name, as RBAC rules name it.
    pub fn plural(self) -> &'static str {
        match self {
            Kind::EtcdMember => "etcdmembers",
            Kind::EtcdCluster => "etcdclusters",
        }
    }

    fn resource(self) -> ApiResource {
        ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(GROUP, VERSION, self.as_str()),
            self.plural(),
        )
    }
}

impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What the operator recorded about this member.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EtcdMemberRecord {
    /// `metadata.name` (= the Pod name, etcd's `--name`).
    pub name: String,
    /// `spec.clusterName`: the owning `EtcdCluster`.
    pub cluster_name: String,
    /// `spec.bootstrap`: this member is the seed that formed the cluster.
    pub bootstrap: bool,
    /// `status.memberID`: latched once the member was Ready; `None` while empty.
    pub member_id: Option<MemberId>,
    /// `spec.initialCluster`, frozen at creation; `None` while empty.
    pub initial_cluster: Option<String>,
    /// `spec.clusterToken`; `None` while empty.
    pub cluster_token: Option<String>,
    /// `spec.dormant`: the cluster is scaled to zero and this member parked.
    pub dormant: bool,
    /// `status.podUID`: the Pod the operator last saw for this member.
    pub pod_uid: Option<String>,
    /// `status.isVoter`: `Some(false)` for a learner; `None` until the
    /// operator first wrote it.
    pub is_voter: Option<bool>,
}

/// What the operator recorded about the cluster.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EtcdClusterRecord {
    /// `metadata.name`.
    pub name: String,
    /// `status.clusterID`: latched once the cluster formed; `None` while empty.
    pub cluster_id: Option<ClusterId>,
    /// `status.clusterToken`; `None` while empty.
    pub cluster_token: Option<String>,
    /// `spec.replicas` (0 pauses the cluster); `None` when absent.
    pub replicas: Option<i64>,
    /// `metadata.uid`: this incarnation of the cluster (a cluster deleted and
    /// created again under the same name gets a new one).
    pub uid: Option<String>,
}

/// Both records, as read in one [`fetch`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OperatorRecord {
    /// The `EtcdMember` named like this Pod.
    pub member: EtcdMemberRecord,
    /// Its `EtcdCluster`.
    pub cluster: EtcdClusterRecord,
}

/// Why the operator's records could not be read.
#[derive(Debug, thiserror::Error)]
pub enum KubeEvidenceError {
    /// No usable client configuration.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A read failed (not found, forbidden, timeout, unreachable, …).
    #[error(transparent)]
    Api(#[from] ApiError<Kind>),
    /// The record does not have the shape the operator writes.
    #[error("{kind} {name}: field {field} is malformed: {detail}")]
    Malformed {
        /// The kind of the record.
        kind: Kind,
        /// Its name.
        name: String,
        /// The JSON path of the offending field (`status.memberID`).
        field: String,
        /// What is wrong with it.
        detail: String,
    },
}

impl KubeEvidenceError {
    /// The deadline passed before an answer.
    pub fn is_timeout(&self) -> bool {
        matches!(self, KubeEvidenceError::Api(ApiError::Timeout { .. }))
    }
}

impl ApiKind for Kind {
    fn rbac_resource(self) -> String {
        format!("{}.{GROUP}", self.plural())
    }

    fn not_served(self) -> String {
        format!(
            "{}.{GROUP}/{VERSION} (is the operator's CRD installed?)",
            self.plural()
        )
    }

    fn rbac_needed(self) -> &'static str {
        "a Role with get on etcdmembers and etcdclusters"
    }
}

/// A client for `target` (its kubeconfig, else the in-cluster service
/// account): [`super::client::client`].
pub async fn client(
    target: &KubeTarget,
    request_timeout: Duration,
) -> Result<Client, KubeEvidenceError> {
    Ok(super::client::client(target.kubeconfig.as_ref(), request_timeout).await?)
}

/// The client a long-running loop keeps in `cache`: built on first use, and
/// again on the next call after building failed.
pub async fn cached_client(
    cache: &mut Option<Client>,
    target: &KubeTarget,
    request_timeout: Duration,
) -> Result<Client, KubeEvidenceError> {
    if let Some(c) = cache {
        return Ok(c.clone());
    }
    let c = client(target, request_timeout).await?;
    *cache = Some(c.clone());
    Ok(c)
}

/// Reads the `EtcdMember` named `target.member_name`, then its `EtcdCluster`.
/// Returns by `deadline`.
#[tracing::instrument(skip(client), fields(namespace = %target.namespace, member = %target.member_name))]
pub async fn fetch(
    client: &Client,
    target: &KubeTarget,
    deadline: Instant,
) -> Result<OperatorRecord, KubeEvidenceError> {
    let member_obj = get(
        client,
        Kind::EtcdMember,
        &target.namespace,
        &target.member_name,
        deadline,
    )
    .await?;
    let member = parse_member(&target.member_name, &member_obj)?;
    let cluster_obj = get(
        client,
        Kind::EtcdCluster,
        &target.namespace,
        &member.cluster_name,
        deadline,
    )
    .await?;
    let cluster = parse_cluster(&member.cluster_name, &cluster_obj)?;
    Ok(OperatorRecord { member, cluster })
}

/// One GET, retried on transient failures until the deadline.
async fn get(
    client: &Client,
    kind: Kind,
    namespace: &str,
    name: &str,
    deadline: Instant,
) -> Result<Value, KubeEvidenceError> {
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &kind.resource());
    let obj = call(kind, namespace, name, deadline, || api.get(name)).await?;
    Ok(object_to_value(obj))
}

/// Back to one JSON object, so parsing sees the document as the API sent it.
fn object_to_value(obj: DynamicObject) -> Value {
    let mut value = match obj.data {
        Value::Object(map) => Value::Object(map),
        other => return other,
    };
    if let Some(map) = value.as_object_mut() {
        if let Some(types) = obj.types {
            map.insert("apiVersion".into(), Value::String(types.api_version));
            map.insert("kind".into(), Value::String(types.kind));
        }
        if let Ok(meta) = serde_json::to_value(&obj.metadata) {
            map.insert("metadata".into(), meta);
        }
    }
    value
}

/// Reads the fields the agent needs from an `EtcdMember` document.
pub fn parse_member(name: &str, doc: &Value) -> Result<EtcdMemberRecord, KubeEvidenceError> {
    let f = Fields::new(Kind::EtcdMember, name, doc)?;
    let cluster_name = f.string("spec.clusterName")?.unwrap_or_default();
    if cluster_name.is_empty() {
        return Err(f.malformed("spec.clusterName", "missing or empty".to_owned()));
    }
    Ok(EtcdMemberRecord {
        name: f.object_name(),
        cluster_name,
        bootstrap: f.bool("spec.bootstrap")?.unwrap_or(false),
        member_id: f.etcd_id("status.memberID", MemberId::parse_recorded)?,
        initial_cluster: f.non_empty_string("spec.initialCluster")?,
        cluster_token: f.non_empty_string("spec.clusterToken")?,
        dormant: f.bool("spec.dormant")?.unwrap_or(false),
        pod_uid: f.non_empty_string("status.podUID")?,
        is_voter: f.bool("status.isVoter")?,
    })
}

/// Reads the fields the agent needs from an `EtcdCluster` document.
pub fn parse_cluster(name: &str, doc: &Value) -> Result<EtcdClusterRecord, KubeEvidenceError> {
    let f = Fields::new(Kind::EtcdCluster, name, doc)?;
    Ok(EtcdClusterRecord {
        name: f.object_name(),
        cluster_id: f.etcd_id("status.clusterID", ClusterId::parse_recorded)?,
        cluster_token: f.non_empty_string("status.clusterToken")?,
        replicas: f.int("spec.replicas")?,
        uid: f.non_empty_string("metadata.uid")?,
    })
}

/// Typed access to dotted paths of one document, with errors naming the field.
struct Fields<'a> {
    kind: Kind,
    name: &'a str,
    doc: &'a Value,
}

impl<'a> Fields<'a> {
    fn new(kind: Kind, name: &'a str, doc: &'a Value) -> Result<Self, KubeEvidenceError> {
        let f = Fields { kind, name, doc };
        if !doc.is_object() {
            return Err(f.malformed(
                "(body)",
                format!("expected an object, got {}", type_name(doc)),
            ));
        }
        if let Some(found) = f.string("kind")? {
            if found != kind.as_str() {
                return Err(f.malformed("kind", format!("expected {kind}, got {found:?}")));
            }
        }
        // spec and status are objects when present (status is absent before the
        // operator's first status write).
        for section in ["spec", "status"] {
            match doc.get(section) {
                None | Some(Value::Null) | Some(Value::Object(_)) => {}
                Some(other) => {
                    return Err(f.malformed(
                        section,
                        format!("expected an object, got {}", type_name(other)),
                    ))
                }
            }
        }
        Ok(f)
    }

    fn malformed(&self, field: &str, detail: String) -> KubeEvidenceError {
        KubeEvidenceError::Malformed {
            kind: self.kind,
            name: self.name.to_owned(),
            field: field.to_owned(),
            detail,
        }
    }

    /// The value at a dotted path; `None` when any step is absent or null.
    fn lookup(&self, path: &str) -> Option<&'a Value> {
        let mut current = self.doc;
        for step in path.split('.') {
            current = current.get(step)?;
        }
        (!current.is_null()).then_some(current)
    }

    fn object_name(&self) -> String {
        self.lookup("metadata.name")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
            .unwrap_or(self.name)
            .to_owned()
    }

    fn string(&self, path: &str) -> Result<Option<String>, KubeEvidenceError> {
        match self.lookup(path) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(other) => {
                Err(self.malformed(path, format!("expected a string, got {}", type_name(other))))
            }
        }
    }

    fn non_empty_string(&self, path: &str) -> Result<Option<String>, KubeEvidenceError> {
        Ok(self.string(path)?.filter(|s| !s.is_empty()))
    }

    fn bool(&self, path: &str) -> Result<Option<bool>, KubeEvidenceError> {
        match self.lookup(path) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(other) => Err(self.malformed(
                path,
                format!("expected a boolean, got {}", type_name(other)),
            )),
        }
    }

    fn int(&self, path: &str) -> Result<Option<i64>, KubeEvidenceError> {
        match self.lookup(path) {
            None => Ok(None),
            Some(v) => v
                .as_i64()
                .map(Some)
                .ok_or_else(|| self.malformed(path, format!("expected an integer, got {v}"))),
        }
    }

    fn etcd_id<T>(
        &self,
        path: &str,
        parse: fn(&str) -> Result<Option<T>, HexIdError>,
    ) -> Result<Option<T>, KubeEvidenceError> {
        match self.string(path)? {
            None => Ok(None),
            Some(s) => parse(&s).map_err(|e| self.malformed(path, e.to_string())),
        }
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn member(spec: Value, status: Value) -> Value {
        json!({
            "apiVersion": "etcd-operator.cozystack.io/v1alpha2",
            "kind": "EtcdMember",
            "metadata": {"name": "etcd-x7k2p", "namespace": "tenant-a"},
            "spec": spec,
            "status": status,
        })
    }

    #[test]
    fn a_started_member_parses_with_its_id() {
        let doc = member(
            json!({"clusterName": "etcd", "bootstrap": true, "initialCluster": "etcd-x7k2p=https://etcd-x7k2p.etcd.tenant-a.svc:2380", "clusterToken": "tenant-a-etcd-1"}),
            json!({"memberID": "ae36f238164a08ad", "podUID": "0d6f"}),
        );
        let rec = parse_member("etcd-x7k2p", &doc).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(rec.name, "etcd-x7k2p");
        assert_eq!(rec.cluster_name, "etcd");
        assert!(rec.bootstrap);
        assert!(!rec.dormant);
        assert_eq!(rec.member_id, Some(MemberId::new(0xae36f238164a08ad)));
        assert_eq!(rec.cluster_token.as_deref(), Some("tenant-a-etcd-1"));
        assert_eq!(rec.pod_uid.as_deref(), Some("0d6f"));
    }

    #[test]
    fn absent_and_empty_fields_are_none_and_false() {
        let doc = member(
            json!({"clusterName": "etcd", "initialCluster": "", "clusterToken": ""}),
            json!({"memberID": ""}),
        );
        let rec = parse_member("etcd-x7k2p", &doc).unwrap_or_else(|e| panic!("{e}"));
        assert!(!rec.bootstrap);
        assert_eq!(rec.member_id, None);
        assert_eq!(rec.initial_cluster, None);
        assert_eq!(rec.cluster_token, None);
        assert_eq!(rec.pod_uid, None);

        let mut no_status = member(json!({"clusterName": "etcd"}), Value::Null);
        if let Some(map) = no_status.as_object_mut() {
            map.remove("status");
        }
        let rec = parse_member("etcd-x7k2p", &no_status).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(rec.member_id, None);
    }

    fn malformed_field(result: Result<EtcdMemberRecord, KubeEvidenceError>) -> String {
        match result {
            Err(KubeEvidenceError::Malformed { field, .. }) => field,
            other => panic!("expected Malformed, got {other:?}"),
        }
    }

    #[test]
    fn wrong_shapes_name_the_field() {
        let cases = [
            (member(json!({}), json!({})), "spec.clusterName"),
            (
                member(json!({"clusterName": 7}), json!({})),
                "spec.clusterName",
            ),
            (
                member(
                    json!({"clusterName": "etcd", "bootstrap": "true"}),
                    json!({}),
                ),
                "spec.bootstrap",
            ),
            (
                member(
                    json!({"clusterName": "etcd"}),
                    json!({"memberID": "not-hex"}),
                ),
                "status.memberID",
            ),
            (
                member(json!({"clusterName": "etcd"}), json!({"memberID": 12345})),
                "status.memberID",
            ),
            (
                member(json!({"clusterName": "etcd", "dormant": 1}), json!({})),
                "spec.dormant",
            ),
            (member(json!("spec as a string"), json!({})), "spec"),
            (json!([1, 2]), "(body)"),
        ];
        for (doc, field) in cases {
            assert_eq!(malformed_field(parse_member("m", &doc)), field, "{doc}");
        }
        let mut wrong_kind = member(json!({"clusterName": "etcd"}), json!({}));
        wrong_kind["kind"] = json!("EtcdCluster");
        assert_eq!(malformed_field(parse_member("m", &wrong_kind)), "kind");
    }

    #[test]
    fn cluster_fields_parse() {
        let doc = json!({
            "kind": "EtcdCluster",
            "metadata": {"name": "etcd"},
            "spec": {"replicas": 3},
            "status": {"clusterID": "769f1c9e0d723d0b", "clusterToken": "tenant-a-etcd-uid"},
        });
        let rec = parse_cluster("etcd", &doc).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(rec.cluster_id, Some(ClusterId::new(0x769f1c9e0d723d0b)));
        assert_eq!(rec.cluster_token.as_deref(), Some("tenant-a-etcd-uid"));
        assert_eq!(rec.replicas, Some(3));

        let bad = json!({"kind": "EtcdCluster", "spec": {"replicas": "three"}, "status": {}});
        assert!(matches!(
            parse_cluster("etcd", &bad),
            Err(KubeEvidenceError::Malformed { ref field, .. }) if field == "spec.replicas"
        ));
    }

    #[test]
    fn records_serialize_ids_as_hex() {
        let rec = EtcdClusterRecord {
            name: "etcd".into(),
            cluster_id: Some(ClusterId::new(0x769f1c9e0d723d0b)),
            cluster_token: None,
            replicas: Some(3),
            uid: Some("0c5e".into()),
        };
        let v = serde_json::to_value(&rec).unwrap_or_default();
        assert_eq!(v["cluster_id"], "769f1c9e0d723d0b");
    }
}
