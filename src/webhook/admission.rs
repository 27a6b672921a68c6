//! One `admission.k8s.io/v1` AdmissionReview in, its response out: no I/O.
//! A Pod CREATE goes through [`crate::inject::guard`]; its patch is returned
//! as a base64 JSON Patch. Everything else is allowed as it is.
//!
//! A Pod the agent cannot understand is **admitted unchanged**, never
//! guessed at and never blocked (a platform team's etcd must not stop
//! starting because of the guard): the response carries a warning
//! (`kubectl` prints it to whoever created the Pod), and [`Reviewed::unguarded`]
//! says what the server must also do about it: an Event where people look and
//! a metric to alert on, so an unguarded member is never silent.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::inject::{guard, Options, Outcome};

/// The AdmissionReview envelope (only what is read).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Review {
    api_version: String,
    kind: String,
    request: Option<Request>,
}

/// `group`, `version` and `kind` (or `resource`) of the request.
#[derive(Debug, Deserialize, Default)]
struct Gvk {
    #[serde(default)]
    group: String,
    #[serde(default)]
    kind: String,
    #[serde(default)]
    resource: String,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Request {
    uid: String,
    #[serde(default)]
    kind: Gvk,
    #[serde(default)]
    resource: Gvk,
    #[serde(default)]
    sub_resource: String,
    #[serde(default)]
    namespace: String,
    #[serde(default)]
    name: String,
    #[serde(default)]
    operation: String,
    #[serde(default)]
    object: Option<Value>,
    #[serde(default)]
    dry_run: bool,
}

/// Why a body is not an AdmissionReview this webhook can answer (HTTP 400:
/// the API server applies the webhook's `failurePolicy`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not an admission.k8s.io/v1 AdmissionReview request: {0}")]
pub struct BadReview(pub String);

/// What became of a review, for the metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Verdict {
    /// Guarded: a patch was returned.
    Injected,
    /// An etcd Pod left alone on purpose, or a Pod without etcd.
    Skipped,
    /// An etcd Pod the agent cannot understand, admitted unguarded.
    Unguarded,
    /// Not a Pod CREATE.
    Ignored,
}

impl Verdict {
    /// The metric's label value.
    pub fn label(self) -> &'static str {
        match self {
            Verdict::Injected => "injected",
            Verdict::Skipped => "skipped",
            Verdict::Unguarded => "unguarded",
            Verdict::Ignored => "ignored",
        }
    }
}

/// The object an Event about an unguarded Pod is attached to: the Pod's
/// controller when it has one (what `kubectl describe statefulset` shows and
/// what outlives one Pod), else the Pod (which does not exist yet).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subject {
    /// `apiVersion` of the object.
    pub api_version: String,
    /// Its kind.
    pub kind: String,
    /// Its namespace.
    pub namespace: String,
    /// Its name (`generateName` when the Pod has no name yet).
    pub name: String,
    /// Its UID, when known (a Pod being created has none).
    pub uid: Option<String>,
}

/// An etcd Pod admitted unguarded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unguarded {
    /// What the Event is attached to.
    pub subject: Subject,
    /// The Pod, for the message (`namespace/name`).
    pub pod: String,
    /// What could not be understood, in full.
    pub message: String,
    /// The request's UID (one Event per admission).
    pub request_uid: String,
    /// A dry run: no Event (the webhook declares `sideEffects: NoneOnDryRun`).
    pub dry_run: bool,
}

/// A review answered.
#[derive(Debug, Clone, PartialEq)]
pub struct Reviewed {
    /// The AdmissionReview to send back.
    pub response: Value,
    /// What became of it.
    pub verdict: Verdict,
    /// Set when an etcd Pod is admitted unguarded.
    pub unguarded: Option<Unguarded>,
}

/// The longest warning the API server passes on untruncated.
const MAX_WARNING: usize = 256;

fn cut(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    let mut end = max - 3;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &s[..end])
}

/// Answers one AdmissionReview body.
pub fn review(body: &[u8], opts: &Options) -> Result<Reviewed, BadReview> {
    let review: Review =
        serde_json::from_slice(body).map_err(|e| BadReview(format!("the body is not one: {e}")))?;
    if review.api_version != "admission.k8s.io/v1" || review.kind != "AdmissionReview" {
        return Err(BadReview(format!(
            "got {} {}",
            review.api_version, review.kind
        )));
    }
    let request = review
        .request
        .ok_or_else(|| BadReview("no request".to_owned()))?;
    let allow = |patch: Option<String>, warnings: Vec<String>| {
        let mut response = json!({"uid": request.uid, "allowed": true});
        if let Some(p) = patch {
            response["patchType"] = json!("JSONPatch");
            response["patch"] = json!(p);
        }
        if !warnings.is_empty() {
            response["warnings"] = json!(warnings);
        }
        json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response})
    };
    let is_pod_create = request.operation == "CREATE"
        && request.kind.group.is_empty()
        && request.kind.kind == "Pod"
        && request.resource.resource == "pods"
        && request.sub_resource.is_empty();
    let object = match (is_pod_create, request.object.as_ref()) {
        (true, Some(o)) if o.is_object() => o,
        _ => {
            return Ok(Reviewed {
                response: allow(None, Vec::new()),
                verdict: Verdict::Ignored,
                unguarded: None,
            })
        }
    };
    match guard(object, opts) {
        Outcome::Injected(i) => {
            let patch = serde_json::to_vec(&i.patch)
                .map_err(|e| BadReview(format!("cannot encode the patch: {e}")))?;
            Ok(Reviewed {
                response: allow(Some(STANDARD.encode(&patch)), Vec::new()),
                verdict: Verdict::Injected,
                unguarded: None,
            })
        }
        Outcome::Skipped(_) => Ok(Reviewed {
            response: allow(None, Vec::new()),
            verdict: Verdict::Skipped,
            unguarded: None,
        }),
        Outcome::Unresolvable(e) => {
            let name = Some(request.name.as_str())
                .filter(|n| !n.is_empty())
                .or_else(|| object.pointer("/metadata/name").and_then(Value::as_str))
                .map(str::to_owned)
                .or_else(|| {
                    object
                        .pointer("/metadata/generateName")
                        .and_then(Value::as_str)
                        .map(|g| format!("{g}<generated>"))
                })
                .unwrap_or_else(|| "<unnamed>".to_owned());
            let namespace = Some(request.namespace.as_str())
                .filter(|n| !n.is_empty())
                .or_else(|| {
                    object
                        .pointer("/metadata/namespace")
                        .and_then(Value::as_str)
                })
                .unwrap_or("default")
                .to_owned();
            let owner = object
                .pointer("/metadata/ownerReferences")
                .and_then(Value::as_array)
                .and_then(|o| o.iter().find(|r| r.get("controller") == Some(&json!(true))));
            let subject = match owner {
                Some(o) => Subject {
                    api_version: o["apiVersion"].as_str().unwrap_or_default().to_owned(),
                    kind: o["kind"].as_str().unwrap_or_default().to_owned(),
                    namespace: namespace.clone(),
                    name: o["name"].as_str().unwrap_or_default().to_owned(),
                    uid: o["uid"].as_str().map(str::to_owned),
                },
                None => Subject {
                    api_version: "v1".to_owned(),
                    kind: "Pod".to_owned(),
                    namespace: namespace.clone(),
                    name: name.clone(),
                    uid: None,
                },
            };
            let message = format!("etcd Pod {namespace}/{name} is not guarded: {e}");
            let warning = cut(
                &format!("etcd-member-agent: this etcd Pod is NOT guarded: {e}"),
                MAX_WARNING,
            );
            Ok(Reviewed {
                response: allow(None, vec![warning]),
                verdict: Verdict::Unguarded,
                unguarded: Some(Unguarded {
                    subject,
                    pod: format!("{namespace}/{name}"),
                    message,
                    request_uid: request.uid.clone(),
                    dry_run: request.dry_run,
                }),
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts() -> Options {
        Options {
            image: "agent:1".into(),
            image_pull_policy: None,
            kube: true,
            version: "0.1.0".into(),
            extra_env: Vec::new(),
        }
    }

    fn body(object: Value, operation: &str) -> Vec<u8> {
        serde_json::to_vec(&json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
                "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "resource": {"group": "", "version": "v1", "resource": "pods"},
                "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
                "requestResource": {"group": "", "version": "v1", "resource": "pods"},
                "namespace": "tenant-a",
                "operation": operation,
                "userInfo": {"username": "system:serviceaccount:kube-system:statefulset-controller"},
                "object": object,
                "oldObject": null,
                "dryRun": false,
                "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
            }
        }))
        .unwrap()
    }

    fn etcd_pod(command: Value) -> Value {
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "etcd-0", "namespace": "tenant-a",
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "etcd", "uid": "u-1", "controller": true}]},
            "spec": {"securityContext": {"runAsUser": 65532}, "containers": [{
                "name": "etcd", "image": "quay.io/coreos/etcd:v3.6.11", "command": command,
                "volumeMounts": [{"name": "data", "mountPath": "/var/lib/etcd"}]}]}
        })
    }

    fn decode(b64: &str) -> Vec<u8> {
        STANDARD.decode(b64).unwrap()
    }

    #[test]
    fn a_pod_create_gets_the_guards_patch() {
        let pod = etcd_pod(json!([
            "etcd",
            "--name=$(POD_NAME)",
            "--data-dir=/var/lib/etcd"
        ]));
        let r = review(&body(pod.clone(), "CREATE"), &opts()).unwrap();
        assert_eq!(r.verdict, Verdict::Injected);
        let resp = &r.response["response"];
        assert_eq!(resp["uid"], "705ab4f5-6393-11e8-b7cc-42010a800002");
        assert_eq!(resp["allowed"], true);
        assert_eq!(resp["patchType"], "JSONPatch");
        let patch: Vec<Value> =
            serde_json::from_slice(&decode(resp["patch"].as_str().unwrap())).unwrap();
        assert!(patch.iter().all(|op| op["op"] == "add"));
        assert!(patch.iter().any(|op| op["path"] == "/spec/initContainers"));
    }

    #[test]
    fn an_unreadable_etcd_pod_is_admitted_with_a_warning() {
        let pod = etcd_pod(json!([
            "etcd",
            "--name=x",
            "--config-file=/etc/etcd/etcd.yaml"
        ]));
        let r = review(&body(pod, "CREATE"), &opts()).unwrap();
        assert_eq!(r.verdict, Verdict::Unguarded);
        let resp = &r.response["response"];
        assert_eq!(resp["allowed"], true);
        assert!(resp.get("patch").is_none());
        let w = resp["warnings"][0].as_str().unwrap();
        assert!(
            w.contains("NOT guarded") && w.contains("--config-file"),
            "{w}"
        );
        assert!(w.len() <= MAX_WARNING);
        let u = r.unguarded.unwrap();
        assert_eq!(u.subject.kind, "StatefulSet");
        assert_eq!(u.subject.name, "etcd");
        assert_eq!(u.pod, "tenant-a/etcd-0");
        assert!(!u.dry_run);
    }

    #[test]
    fn anything_but_a_pod_create_is_allowed_untouched() {
        let pod = etcd_pod(json!(["etcd"]));
        let r = review(&body(pod, "UPDATE"), &opts()).unwrap();
        assert_eq!(r.verdict, Verdict::Ignored);
        assert!(r.response["response"].get("patch").is_none());
        let web = json!({"kind": "Pod", "metadata": {"name": "w"}, "spec": {"containers": [{"name": "n", "image": "nginx"}]}});
        assert_eq!(
            review(&body(web, "CREATE"), &opts()).unwrap().verdict,
            Verdict::Skipped
        );
    }

    #[test]
    fn what_is_not_a_v1_review_is_refused() {
        assert!(review(b"not json", &opts()).is_err());
        assert!(review(br#"{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview","request":{"uid":"x"}}"#, &opts()).is_err());
        assert!(review(
            br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#,
            &opts()
        )
        .is_err());
    }

    proptest::proptest! {
        #[test]
        fn any_bytes_are_answered_or_refused_never_a_panic(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..400)) {
            let _ = review(&bytes, &opts());
        }
    }
}
