//! The import direction of `docs/architecture.md`, checked on the sources: a
//! test fails when a module reaches into a part it must not know.
//!
//! The parts and what each may not import:
//!
//! | part | must not import |
//! |---|---|
//! | `disk` (offline, sync) | any other part of the crate; the network, async runtimes |
//! | `verdict` (pure) | anything doing I/O: files, sockets, processes, runtimes, the other parts but `disk` and `exit` |
//! | `evidence` (network, no decisions) | `verdict`, `cmd`, `server`, `restore` |
//! | `restore` (the restore steps) | `cmd`, `server` |
//! | `cmd` (one-shot commands) | `server` (the long-running part: `main` starts it) |
//! | `server` (the sidecar) | `cmd`, `restore` |
//! | `report` (the preflight report, written and read) | `cmd`, `server`, `restore`, anything doing I/O |
//! | `fleet` (the fleet view; long-running with `--watch`/`--serve`) | `cmd`, `restore`, `verdict` |
//! | leaves: `exit`, `error`, `duration`, `child`, `output` | `cmd`, `server`, `restore`, `evidence`, `verdict` |
//!
//! Comments and string literals are not imports; everything else that names a
//! path (`use`, a qualified call, an attribute such as `#[serde(with = "…")]`) is.

/// What `part` may not name: crate modules (as `crate::<m>`) and other paths
/// (as written, e.g. `tokio::`).
fn forbidden(part: &str) -> &'static [&'static str] {
    match part {
        "disk" => &[
            "crate::cli",
            "crate::cmd",
            "crate::child",
            "crate::error",
            "crate::evidence",
            "crate::exit",
            "crate::output",
            "crate::restore",
            "crate::server",
            "crate::verdict",
            "tokio::",
            "tonic::",
            "kube::",
            "reqwest::",
            "etcd_client::",
            "axum::",
            "object_store::",
            "std::net",
        ],
        "verdict" => &[
            "crate::cli",
            "crate::cmd",
            "crate::child",
            "crate::evidence",
            "crate::output",
            "crate::restore",
            "crate::server",
            "std::fs",
            "std::net",
            "std::process",
            "std::thread",
            "tokio::",
            "tonic::",
            "kube::",
            "reqwest::",
            "etcd_client::",
        ],
        "evidence" => &[
            "crate::cmd",
            "crate::restore",
            "crate::server",
            "crate::verdict",
        ],
        "restore" => &["crate::cmd", "crate::server"],
        "report" => &[
            "crate::cmd",
            "crate::server",
            "crate::restore",
            "std::fs",
            "std::net",
            "std::process",
            "tokio::",
        ],
        "cmd" => &["crate::server"],
        "server" => &["crate::cmd", "crate::restore"],
        "fleet" => &["crate::cmd", "crate::restore", "crate::verdict"],
        "exit" | "error" | "duration" | "child" | "output" => &[
            "crate::cmd",
            "crate::evidence",
            "crate::restore",
            "crate::server",
            "crate::verdict",
        ],
        _ => &[],
    }
}

/// The part a source file (relative to `src/`) belongs to.
fn part_of(rel: &str) -> &str {
    let first = rel.split('/').next().unwrap_or(rel);
    first.strip_suffix(".rs").unwrap_or(first)
}

/// The source without comments and string literals (a forbidden path in a doc
/// comment or a message is not an import). `#[serde(with = "…")]` names a path
/// inside a string, so attribute strings are kept.
fn code_only(src: &str) -> String {
    let mut out = String::with_capacity(src.len());
    for line in src.lines() {
        let attribute = line.trim_start().starts_with("#[");
        let mut in_str = false;
        let mut chars = line.chars().peekable();
        while let Some(c) = chars.next() {
            if !in_str && c == '/' && chars.peek() == Some(&'/') {
                break;
            }
            if c == '"' {
                in_str = !in_str;
                out.push(' ');
                continue;
            }
            if c == '\\' && in_str {
                chars.next();
                continue;
            }
            if !in_str || attribute {
                out.push(c);
            }
        }
        out.push('\n');
    }
    out
}

/// Every forbidden path the file names, as `(line, path)`.
fn violations(rel: &str, src: &str) -> Vec<(usize, &'static str)> {
    let part = part_of(rel);
    let code = code_only(src);
    let mut found = Vec::new();
    for (n, line) in code.lines().enumerate() {
        for f in forbidden(part) {
            let hit = line.match_indices(f).any(|(i, _)| {
                let before = line[..i].chars().next_back();
                let after = line[i + f.len()..].chars().next();
                let starts = !before.is_some_and(|c| c.is_alphanumeric() || c == '_');
                let ends =
                    f.ends_with("::") || !after.is_some_and(|c| c.is_alphanumeric() || c == '_');
                starts && ends
            });
            if hit {
                found.push((n + 1, *f));
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn sources(dir: &Path, root: &Path, out: &mut Vec<(String, String)>) {
        let mut entries: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        entries.sort();
        for p in entries {
            if p.is_dir() {
                sources(&p, root, out);
            } else if p.extension().is_some_and(|e| e == "rs") {
                let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
                out.push((rel, std::fs::read_to_string(&p).unwrap()));
            }
        }
    }

    #[test]
    fn every_module_imports_only_what_its_part_may_know() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut files = Vec::new();
        sources(&root, &root, &mut files);
        assert!(files.len() > 40, "read {} sources under src/", files.len());
        let mut report = Vec::new();
        for (rel, src) in &files {
            if rel == "architecture.rs" {
                continue;
            }
            for (line, path) in violations(rel, src) {
                report.push(format!("src/{rel}:{line}: {} imports {path}", part_of(rel)));
            }
        }
        assert!(
            report.is_empty(),
            "imports against docs/architecture.md:\n{}",
            report.join("\n")
        );
    }

    #[test]
    fn a_new_violation_is_found() {
        assert_eq!(
            violations("disk/wal/mod.rs", "use crate::server::Config;\n"),
            vec![(1, "crate::server")]
        );
        assert_eq!(
            violations("disk/x.rs", "    #[serde(with = \"crate::output::hex\")]\n"),
            vec![(1, "crate::output")]
        );
        assert_eq!(
            violations("cmd/serve.rs", "fn f() { crate::server::run(); }\n"),
            vec![(1, "crate::server")]
        );
        assert_eq!(
            violations("verdict.rs", "let f = std::fs::read(p);\n"),
            vec![(1, "std::fs")]
        );
        assert_eq!(
            violations("report.rs", "use crate::server::boot;\n"),
            vec![(1, "crate::server")]
        );
        assert_eq!(
            violations("evidence/kube.rs", "use crate::verdict::Verdict;\n"),
            vec![(1, "crate::verdict")]
        );
    }

    #[test]
    fn comments_and_messages_are_not_imports() {
        let src = "//! composed by [`crate::cmd::restore`]\n\
                   let m = \"see crate::server\"; // crate::cmd\n\
                   use crate::disk::ids;\n";
        assert!(violations("restore/mod.rs", src).is_empty());
        // A name that merely starts like a forbidden one.
        assert!(violations("cmd/x.rs", "use crate::server_like::X;\n").is_empty());
    }
}
