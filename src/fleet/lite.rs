//! The objects as `fleet` parses them: only the fields it reads. A list page of
//! 500 member Pods is megabytes of JSON, and most of it is what `fleet` never
//! looks at: the Pods' env and volumes, and every object's `managedFields`,
//! which `k8s-openapi`'s `ObjectMeta` keeps as a `serde_json::Value` tree (ten
//! times its JSON in memory). Parsed through these types, serde skips them
//! without building anything, so a page costs about its own bytes.
//!
//! Each type is a [`kube::Resource`] of its own, so the one client lists and
//! watches it like the generated types; `metadata` is still an `ObjectMeta`,
//! filled with the fields read ([`Meta`]).

use std::borrow::Cow;
use std::collections::BTreeMap;

use ::kube::api::ApiResource;
use ::kube::core::{DynamicResourceScope, NamespaceResourceScope};
use ::kube::Resource;
use k8s_openapi::api::coordination::v1::LeaseSpec;
use k8s_openapi::api::core::v1::{EventSeries, ObjectReference, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, OwnerReference, Time};
use serde::{Deserialize, Deserializer};

use super::facts::PodSpecLite;

/// The metadata `fleet` reads; `managedFields` and the rest are skipped.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Meta {
    name: Option<String>,
    namespace: Option<String>,
    uid: Option<String>,
    resource_version: Option<String>,
    creation_timestamp: Option<Time>,
    deletion_timestamp: Option<Time>,
    labels: Option<BTreeMap<String, String>>,
    annotations: Option<BTreeMap<String, String>>,
    owner_references: Option<Vec<OwnerReference>>,
}

impl Meta {
    fn into_meta(self, annotations: bool) -> ObjectMeta {
        ObjectMeta {
            name: self.name,
            namespace: self.namespace,
            uid: self.uid,
            resource_version: self.resource_version,
            creation_timestamp: self.creation_timestamp,
            deletion_timestamp: self.deletion_timestamp,
            labels: self.labels,
            annotations: if annotations { self.annotations } else { None },
            owner_references: self.owner_references,
            ..ObjectMeta::default()
        }
    }
}

/// Metadata without annotations (a Pod's can hold a whole manifest).
fn slim<'de, D: Deserializer<'de>>(d: D) -> Result<ObjectMeta, D::Error> {
    Ok(Option::<Meta>::deserialize(d)?
        .unwrap_or_default()
        .into_meta(false))
}

/// Metadata with annotations (a witness Lease's facts are annotations).
fn annotated<'de, D: Deserializer<'de>>(d: D) -> Result<ObjectMeta, D::Error> {
    Ok(Option::<Meta>::deserialize(d)?
        .unwrap_or_default()
        .into_meta(true))
}

macro_rules! core_resource {
    ($ty:ty, $kind:literal, $group:literal, $version:literal, $plural:literal) => {
        impl Resource for $ty {
            type DynamicType = ();
            type Scope = NamespaceResourceScope;

            fn kind(_: &()) -> Cow<'_, str> {
                Cow::Borrowed($kind)
            }

            fn group(_: &()) -> Cow<'_, str> {
                Cow::Borrowed($group)
            }

            fn version(_: &()) -> Cow<'_, str> {
                Cow::Borrowed($version)
            }

            fn plural(_: &()) -> Cow<'_, str> {
                Cow::Borrowed($plural)
            }

            fn meta(&self) -> &ObjectMeta {
                &self.metadata
            }

            fn meta_mut(&mut self) -> &mut ObjectMeta {
                &mut self.metadata
            }
        }
    };
}

/// A Pod: metadata, the spec's node and containers, the status.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct PodLite {
    /// Metadata (no annotations).
    #[serde(default, deserialize_with = "slim")]
    pub metadata: ObjectMeta,
    /// The spec's few fields.
    #[serde(default)]
    pub spec: PodSpecLite,
    /// The whole status.
    #[serde(default)]
    pub status: Option<PodStatus>,
}

core_resource!(PodLite, "Pod", "", "v1", "pods");

/// A Lease: metadata with its annotations, and its spec.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct LeaseLite {
    /// Metadata, annotations included.
    #[serde(default, deserialize_with = "annotated")]
    pub metadata: ObjectMeta,
    /// The spec.
    #[serde(default)]
    pub spec: Option<LeaseSpec>,
}

core_resource!(LeaseLite, "Lease", "coordination.k8s.io", "v1", "leases");

/// A core/v1 Event: what it is about, its reason, message and times.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EventLite {
    /// Metadata (no annotations).
    #[serde(default, deserialize_with = "slim")]
    pub metadata: ObjectMeta,
    /// The object it is about.
    #[serde(default)]
    pub involved_object: ObjectReference,
    /// `reason`.
    #[serde(default)]
    pub reason: Option<String>,
    /// `message`.
    #[serde(default)]
    pub message: Option<String>,
    /// `count`.
    #[serde(default)]
    pub count: Option<i32>,
    /// `firstTimestamp`.
    #[serde(default)]
    pub first_timestamp: Option<Time>,
    /// `lastTimestamp`.
    #[serde(default)]
    pub last_timestamp: Option<Time>,
    /// `eventTime` (events.k8s.io writers).
    #[serde(default)]
    pub event_time: Option<MicroTime>,
    /// `series` (events.k8s.io writers).
    #[serde(default)]
    pub series: Option<EventSeries>,
}

core_resource!(EventLite, "Event", "", "v1", "events");

/// One of the operator's records: metadata, and `spec`/`status` as JSON for
/// [`crate::evidence::kube`]'s parsers.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct RecordLite {
    /// Metadata (no annotations).
    #[serde(default, deserialize_with = "slim")]
    pub metadata: ObjectMeta,
    /// `kind`.
    #[serde(default)]
    pub kind: Option<String>,
    /// `spec`.
    #[serde(default)]
    pub spec: Option<serde_json::Value>,
    /// `status`.
    #[serde(default)]
    pub status: Option<serde_json::Value>,
}

impl RecordLite {
    /// The record as one JSON document, as the parsers read it.
    pub fn document(&self) -> serde_json::Value {
        let mut doc = serde_json::Map::new();
        if let Some(kind) = &self.kind {
            doc.insert("kind".into(), serde_json::Value::String(kind.clone()));
        }
        doc.insert(
            "metadata".into(),
            serde_json::json!({ "name": self.metadata.name, "uid": self.metadata.uid }),
        );
        for (key, value) in [("spec", &self.spec), ("status", &self.status)] {
            if let Some(v) = value {
                doc.insert(key.into(), v.clone());
            }
        }
        serde_json::Value::Object(doc)
    }
}

impl Resource for RecordLite {
    type DynamicType = ApiResource;
    type Scope = DynamicResourceScope;

    fn kind(dt: &ApiResource) -> Cow<'_, str> {
        Cow::Borrowed(&dt.kind)
    }

    fn group(dt: &ApiResource) -> Cow<'_, str> {
        Cow::Borrowed(&dt.group)
    }

    fn version(dt: &ApiResource) -> Cow<'_, str> {
        Cow::Borrowed(&dt.version)
    }

    fn api_version(dt: &ApiResource) -> Cow<'_, str> {
        Cow::Borrowed(&dt.api_version)
    }

    fn plural(dt: &ApiResource) -> Cow<'_, str> {
        Cow::Borrowed(&dt.plural)
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn managed_fields_and_a_pods_annotations_are_not_kept() {
        let pod: PodLite = serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "n", "uid": "u",
                "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{...}"},
                "managedFields": [{"manager": "kubelet", "fieldsV1": {"f:status": {"f:conditions": {}}}}],
                "labels": {"a": "b"}},
            "spec": {"containers": [{"name": "etcd", "env": [{"name": "X", "value": "y"}]}]},
        }))
        .unwrap();
        assert_eq!(pod.metadata.name.as_deref(), Some("p"));
        assert_eq!(pod.metadata.labels.as_ref().map(|l| l.len()), Some(1));
        assert!(pod.metadata.annotations.is_none() && pod.metadata.managed_fields.is_none());
        let lease: LeaseLite = serde_json::from_value(json!({
            "metadata": {"name": "etcd-witness-m", "annotations": {"k": "v"},
                         "managedFields": [{"manager": "x"}]},
            "spec": {"holderIdentity": "m"},
        }))
        .unwrap();
        assert_eq!(lease.metadata.annotations.map(|a| a.len()), Some(1));
        assert_eq!(
            lease.spec.and_then(|s| s.holder_identity).as_deref(),
            Some("m")
        );
        let record: RecordLite = serde_json::from_value(json!({
            "kind": "EtcdMember", "metadata": {"name": "m", "uid": "u-1", "managedFields": []},
            "spec": {"clusterName": "etcd"}, "status": {"memberID": "1"},
        }))
        .unwrap();
        assert_eq!(
            record.document(),
            json!({"kind": "EtcdMember", "metadata": {"name": "m", "uid": "u-1"},
                   "spec": {"clusterName": "etcd"}, "status": {"memberID": "1"}})
        );
    }
}
