//! Refusals and hazards as Kubernetes Events on the Pod (docs/commands.md § serve): what
//! `kubectl describe pod` shows, since the operator reads neither
//! init-container statuses nor termination messages.
//!
//! One core/v1 Event per verdict per Pod: its name is derived from the Pod's
//! UID and the verdict ([`event_name`]), so a second report of the same
//! verdict for the same Pod (a restarted init container, the next pod-check)
//! is a 409 AlreadyExists — already reported — and never a second Event. A
//! new Pod (a new UID) reports again.
//!
//! Writing an Event is never evidence and never changes an outcome: callers
//! log a failure and go on.

use ::kube::api::{Api, ObjectMeta, PostParams};
use ::kube::Client;
use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde::Serialize;
use sha1::{Digest, Sha1};
use tokio::time::Instant;

use super::client::{call_verb, ApiError, ApiKind};

/// The component named in `source` and `reportingComponent`.
pub const COMPONENT: &str = "etcd-member-agent";
/// Longest message written (the reason is cut at a character boundary).
pub const MAX_MESSAGE: usize = 1024;

/// The kind written here, as errors name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub struct EventKind;

impl std::fmt::Display for EventKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Event")
    }
}

impl ApiKind for EventKind {
    fn rbac_resource(self) -> String {
        "events".to_owned()
    }

    fn not_served(self) -> String {
        "events/v1".to_owned()
    }

    fn rbac_needed(self) -> &'static str {
        "a Role with create on events"
    }
}

/// The Pod an Event is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodRef {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// UID (`POD_UID`).
    pub uid: String,
}

/// What [`report`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reported {
    /// A new Event was created.
    Created,
    /// This verdict was already reported for this Pod (409).
    AlreadyReported,
}

/// `<pod>.<16 hex digits of sha1(uid/key)>`: the same for every report of
/// `key` (a verdict's name; a hazard's kind and subject) on this Pod, another
/// for another Pod of the same name.
pub fn event_name(pod: &PodRef, key: &str) -> String {
    let digest = Sha1::digest(format!("{}/{key}", pod.uid).as_bytes());
    let hash: String = digest.iter().take(8).map(|b| format!("{b:02x}")).collect();
    // A Pod name is at most 253 characters, like an Event's; keep room for
    // the suffix.
    let prefix: String = pod.name.chars().take(253 - 17).collect();
    format!("{prefix}.{hash}")
}

fn cut(message: &str) -> String {
    if message.len() <= MAX_MESSAGE {
        return message.to_owned();
    }
    let mut end = MAX_MESSAGE - 3;
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &message[..end])
}

/// Creates the Warning Event `reason` (the verdict's name) with `message` on
/// `pod`, once per Pod and `key` (for a verdict, its name), by `deadline`.
#[tracing::instrument(level = "debug", skip(client, pod, message, deadline), fields(pod = %pod.name))]
pub async fn report(
    client: &Client,
    pod: &PodRef,
    reason: &str,
    key: &str,
    message: &str,
    deadline: Instant,
) -> Result<Reported, ApiError<EventKind>> {
    let name = event_name(pod, key);
    let now = k8s_openapi::jiff::Timestamp::now();
    let event = Event {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: Some(pod.namespace.clone()),
            ..ObjectMeta::default()
        },
        involved_object: ObjectReference {
            api_version: Some("v1".to_owned()),
            kind: Some("Pod".to_owned()),
            name: Some(pod.name.clone()),
            namespace: Some(pod.namespace.clone()),
            uid: Some(pod.uid.clone()),
            ..ObjectReference::default()
        },
        reason: Some(reason.to_owned()),
        message: Some(cut(message)),
        type_: Some("Warning".to_owned()),
        count: Some(1),
        first_timestamp: Some(Time(now)),
        last_timestamp: Some(Time(now)),
        reporting_component: Some(COMPONENT.to_owned()),
        reporting_instance: Some(pod.name.chars().take(128).collect()),
        source: Some(EventSource {
            component: Some(COMPONENT.to_owned()),
            host: None,
        }),
        ..Event::default()
    };
    let api: Api<Event> = Api::namespaced(client.clone(), &pod.namespace);
    let pp = PostParams::default();
    match call_verb("create", EventKind, &pod.namespace, &name, deadline, || {
        api.create(&pp, &event)
    })
    .await
    {
        Ok(_) => Ok(Reported::Created),
        Err(ApiError::Api { code: 409, .. }) => Ok(Reported::AlreadyReported),
        Err(e) => Err(e),
    }
}

/// Creates the Warning Event `reason` with `message` about `object` (any
/// kind; its namespace is where the Event goes), reported by `component`,
/// named `<object name>.<16 hex digits of sha1(key)>`: once per `key` (409 =
/// already reported), by `deadline`. For objects that are not this Pod (the
/// webhook reports on the StatefulSet whose Pod it could not guard).
#[tracing::instrument(level = "debug", skip(client, object, message, deadline), fields(object = ?object.name))]
pub async fn report_object(
    client: &Client,
    object: &ObjectReference,
    component: &str,
    reason: &str,
    key: &str,
    message: &str,
    deadline: Instant,
) -> Result<Reported, ApiError<EventKind>> {
    let namespace = object.namespace.clone().unwrap_or_default();
    let subject = object.name.clone().unwrap_or_default();
    let digest = Sha1::digest(key.as_bytes());
    let hash: String = digest.iter().take(8).map(|b| format!("{b:02x}")).collect();
    let prefix: String = subject
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .take(253 - 17)
        .collect();
    let name = format!("{}.{hash}", prefix.trim_matches(['-', '.']));
    let now = k8s_openapi::jiff::Timestamp::now();
    let event = Event {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: Some(namespace.clone()),
            ..ObjectMeta::default()
        },
        involved_object: object.clone(),
        reason: Some(reason.to_owned()),
        message: Some(cut(message)),
        type_: Some("Warning".to_owned()),
        count: Some(1),
        first_timestamp: Some(Time(now)),
        last_timestamp: Some(Time(now)),
        reporting_component: Some(component.to_owned()),
        reporting_instance: Some(component.to_owned()),
        source: Some(EventSource {
            component: Some(component.to_owned()),
            host: None,
        }),
        ..Event::default()
    };
    let api: Api<Event> = Api::namespaced(client.clone(), &namespace);
    let pp = PostParams::default();
    match call_verb("create", EventKind, &namespace, &name, deadline, || {
        api.create(&pp, &event)
    })
    .await
    {
        Ok(_) => Ok(Reported::Created),
        Err(ApiError::Api { code: 409, .. }) => Ok(Reported::AlreadyReported),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(uid: &str) -> PodRef {
        PodRef {
            namespace: "tenant-a".into(),
            name: "etcd-x7k2p".into(),
            uid: uid.into(),
        }
    }

    #[test]
    fn one_name_per_pod_and_verdict() {
        let a = event_name(&pod("u1"), "refuse-empty-formed");
        assert_eq!(a, event_name(&pod("u1"), "refuse-empty-formed"));
        assert!(a.starts_with("etcd-x7k2p."), "{a}");
        assert_eq!(a.len(), "etcd-x7k2p.".len() + 16);
        assert_ne!(a, event_name(&pod("u2"), "refuse-empty-formed"));
        assert_ne!(a, event_name(&pod("u1"), "refuse-foreign"));
        let long = PodRef {
            name: "x".repeat(253),
            ..pod("u1")
        };
        assert!(event_name(&long, "v").len() <= 253);
    }

    #[test]
    fn a_long_message_is_cut_at_a_character_boundary() {
        let m = cut(&"é".repeat(2000));
        assert!(m.len() <= MAX_MESSAGE && m.ends_with("..."), "{}", m.len());
    }
}
