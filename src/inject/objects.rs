//! Where the Pod template of an object is: a Pod is its own; the workloads
//! keep one at `spec.template` (a CronJob one level deeper); a `List` (or
//! `PodList`, `DeploymentList`, …) holds objects in `items`. Anything else has
//! none and passes through.

use serde_json::Value;

/// A Pod template inside an object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    /// JSON pointer to the template (`""` for a Pod).
    pub pointer: String,
    /// `Kind/name` of the object that holds it, for messages.
    pub object: String,
}

/// `Kind/name` of an object.
pub fn describe(obj: &Value) -> String {
    let kind = obj.get("kind").and_then(Value::as_str).unwrap_or("?");
    let name = obj
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .or_else(|| {
            obj.pointer("/metadata/generateName")
                .and_then(Value::as_str)
        })
        .unwrap_or("?");
    format!("{kind}/{name}")
}

/// Every Pod template in `obj`, in document order.
pub fn templates(obj: &Value) -> Vec<Template> {
    let mut out = Vec::new();
    collect(obj, "", 0, &mut out);
    out
}

fn collect(obj: &Value, at: &str, depth: usize, out: &mut Vec<Template>) {
    let kind = obj.get("kind").and_then(Value::as_str).unwrap_or_default();
    let inner = match kind {
        "Pod" => Some(""),
        "Deployment"
        | "StatefulSet"
        | "DaemonSet"
        | "ReplicaSet"
        | "ReplicationController"
        | "Job"
        | "PodTemplate" => Some(if kind == "PodTemplate" {
            "/template"
        } else {
            "/spec/template"
        }),
        "CronJob" => Some("/spec/jobTemplate/spec/template"),
        _ => None,
    };
    if let Some(inner) = inner {
        if obj.pointer(inner).is_some_and(Value::is_object) {
            out.push(Template {
                pointer: format!("{at}{inner}"),
                object: describe(obj),
            });
        }
        return;
    }
    // Lists nest only as deep as anyone writes them.
    if kind.ends_with("List") && depth < 4 {
        if let Some(items) = obj.get("items").and_then(Value::as_array) {
            for (i, item) in items.iter().enumerate() {
                collect(item, &format!("{at}/items/{i}"), depth + 1, out);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_workload_kind_and_lists() {
        let pod = json!({"kind": "Pod", "metadata": {"name": "p"}, "spec": {}});
        let sts = json!({"kind": "StatefulSet", "metadata": {"name": "s"}, "spec": {"template": {"spec": {}}}});
        let cron = json!({"kind": "CronJob", "metadata": {"name": "c"}, "spec": {"jobTemplate": {"spec": {"template": {"spec": {}}}}}});
        let svc = json!({"kind": "Service", "metadata": {"name": "x"}, "spec": {}});
        assert_eq!(templates(&pod)[0].pointer, "");
        assert_eq!(templates(&sts)[0].pointer, "/spec/template");
        assert_eq!(
            templates(&cron)[0].pointer,
            "/spec/jobTemplate/spec/template"
        );
        assert!(templates(&svc).is_empty());
        let list =
            json!({"kind": "List", "items": [svc, pod, {"kind": "PodList", "items": [sts]}]});
        let t = templates(&list);
        assert_eq!(
            t.iter().map(|t| t.pointer.as_str()).collect::<Vec<_>>(),
            ["/items/1", "/items/2/items/0/spec/template"]
        );
        assert_eq!(t[1].object, "StatefulSet/s");
    }
}
