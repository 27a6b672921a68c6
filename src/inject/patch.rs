//! JSON Patch (RFC 6902), the one operation the guard needs: `add` (which
//! replaces an existing member of an object), and applying it to a value (for
//! `inject`'s output check and for tests; the API server applies the webhook's).

use serde::Serialize;
use serde_json::Value;

/// One `add` operation.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Op {
    /// Always `add`.
    pub op: &'static str,
    /// A JSON pointer (RFC 6901).
    pub path: String,
    /// The value added.
    pub value: Value,
}

impl Op {
    /// `add` `value` at `path`.
    pub fn add(path: &str, value: Value) -> Op {
        Op {
            op: "add",
            path: path.to_owned(),
            value,
        }
    }
}

/// A key as one JSON pointer token (`/` → `~1`, `~` → `~0`).
pub fn escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

/// The tokens of a JSON pointer, unescaped; `None` when it is not one.
pub fn tokens(pointer: &str) -> Option<Vec<String>> {
    if pointer.is_empty() {
        return Some(Vec::new());
    }
    let rest = pointer.strip_prefix('/')?;
    Some(
        rest.split('/')
            .map(|t| t.replace("~1", "/").replace("~0", "~"))
            .collect(),
    )
}

/// Why a patch does not apply.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot add at {path}: {why}")]
pub struct PatchError {
    /// The operation's path.
    pub path: String,
    /// What is wrong with it.
    pub why: &'static str,
}

/// Applies `ops` in order to `doc`.
pub fn apply(doc: &mut Value, ops: &[Op]) -> Result<(), PatchError> {
    for op in ops {
        let fail = |why| PatchError {
            path: op.path.clone(),
            why,
        };
        let toks = tokens(&op.path).ok_or_else(|| fail("not a JSON pointer"))?;
        let Some((last, parents)) = toks.split_last() else {
            *doc = op.value.clone();
            continue;
        };
        let mut at = &mut *doc;
        for t in parents {
            at = match at {
                Value::Object(m) => m.get_mut(t).ok_or_else(|| fail("a parent is missing"))?,
                Value::Array(a) => {
                    let i: usize = t.parse().map_err(|_| fail("not an array index"))?;
                    a.get_mut(i)
                        .ok_or_else(|| fail("an index is out of range"))?
                }
                _ => return Err(fail("a parent is a scalar")),
            };
        }
        match at {
            Value::Object(m) => {
                m.insert(last.clone(), op.value.clone());
            }
            Value::Array(a) => {
                if last == "-" {
                    a.push(op.value.clone());
                } else {
                    let i: usize = last.parse().map_err(|_| fail("not an array index"))?;
                    if i > a.len() {
                        return Err(fail("an index is out of range"));
                    }
                    a.insert(i, op.value.clone());
                }
            }
            _ => return Err(fail("the parent is a scalar")),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn add_follows_rfc_6902() {
        let mut doc = json!({"a": {"x/y": 1}, "l": [1, 2]});
        apply(
            &mut doc,
            &[
                Op::add("/a/x~1y", json!(2)),
                Op::add("/a/n", json!(null)),
                Op::add("/l/0", json!(0)),
                Op::add("/l/-", json!(3)),
                Op::add("/l/4", json!(4)),
            ],
        )
        .unwrap();
        assert_eq!(
            doc,
            json!({"a": {"x/y": 2, "n": null}, "l": [0, 1, 2, 3, 4]})
        );
        assert!(apply(&mut doc, &[Op::add("/l/9", json!(0))]).is_err());
        assert!(apply(&mut doc, &[Op::add("/missing/x", json!(0))]).is_err());
        assert!(apply(&mut doc, &[Op::add("nope", json!(0))]).is_err());
        assert_eq!(tokens("/a~1b/~0c").unwrap(), ["a/b", "~c"]);
        assert_eq!(escape("a/b~c"), "a~1b~0c");
    }
}
