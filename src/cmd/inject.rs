//! `inject`: manifests in (files or stdin, YAML or JSON, any number of
//! documents, Lists), the same manifests out with every etcd Pod template
//! guarded by [`crate::inject::guard`], everything else as it was, byte for
//! byte: the change is written into the text where it lands
//! ([`crate::inject::yaml`]), and a document that cannot be edited in place is
//! written anew (said on stderr: its comments are lost).
//!
//! A Pod the agent cannot understand stops the command: nothing is written to
//! stdout (a pipe into `kubectl apply` must not apply half a cluster
//! unguarded), every problem is named on stderr, and the exit code is 2.
//! `--dry-run` prints a unified diff instead.

use std::io::{IsTerminal, Read, Write};
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::cli::InjectArgs;
use crate::error::{Error, Result};
use crate::exit::Exit;
use crate::inject::yaml::{emit_document, Stream};
use crate::inject::{diff, guard, objects, Options, Outcome};

/// The most a manifest may weigh (a generous bound: a `kubectl get -o yaml`
/// of every Pod of a large cluster is well below).
const MAX_INPUT: u64 = 64 * 1024 * 1024;

/// One input: its name for messages and its text.
struct Input {
    name: String,
    text: String,
}

/// Reads one input, at most [`MAX_INPUT`] bytes, within `timeout` (a hung
/// volume or a producer that never ends its pipe fails the run, naming it).
fn read_input(path: Option<&Path>, timeout: std::time::Duration) -> Result<Input> {
    if path.is_none() && std::io::stdin().is_terminal() {
        return Err(Error::usage(
            "inject: no files given and stdin is a terminal; pass manifests as files or pipe them in (`-` reads stdin)",
        ));
    }
    let name = path.map_or_else(|| "<stdin>".to_owned(), |p| p.display().to_string());
    let owned = path.map(Path::to_path_buf);
    let (tx, rx) = std::sync::mpsc::channel();
    // Opening and reading off this thread: both may hang on a dead volume.
    std::thread::spawn(move || {
        let read = || -> std::io::Result<Vec<u8>> {
            let mut reader: Box<dyn Read> = match &owned {
                None => Box::new(std::io::stdin()),
                Some(p) => Box::new(std::fs::File::open(p)?),
            };
            let mut bytes = Vec::new();
            reader
                .by_ref()
                .take(MAX_INPUT + 1)
                .read_to_end(&mut bytes)?;
            Ok(bytes)
        };
        let _ = tx.send(read());
    });
    let bytes = match rx.recv_timeout(timeout) {
        Ok(Ok(bytes)) => bytes,
        Ok(Err(e)) => return Err(Error::usage(format!("inject: cannot read {name}: {e}"))),
        Err(_) => {
            return Err(Error::usage(format!(
                "inject: reading {name} took longer than {timeout:?} (--read-timeout)"
            )))
        }
    };
    if bytes.len() as u64 > MAX_INPUT {
        return Err(Error::usage(format!(
            "inject: {name} is larger than {} MiB",
            MAX_INPUT / 1024 / 1024
        )));
    }
    let text = String::from_utf8(bytes)
        .map_err(|e| Error::usage(format!("inject: {name} is not UTF-8 text: {e}")))?;
    Ok(Input { name, text })
}

/// What became of one input.
struct Done {
    output: String,
    problems: Vec<String>,
}

fn process(input: &Input, opts: &Options, err: &mut impl Write) -> Result<Done> {
    let mut problems = Vec::new();
    let stream = match Stream::parse(&input.text) {
        Ok(s) => s,
        Err(e) => {
            // JSON a YAML reader refuses (tabs as indentation): read as JSON,
            // written anew.
            let Ok(value) = serde_json::from_str::<Value>(&input.text) else {
                return Err(Error::usage(format!(
                    "inject: {}: not YAML or JSON: {e}",
                    input.name
                )));
            };
            return process_value(input, value, opts, err);
        }
    };
    let mut replaced = Vec::new();
    for (i, doc) in stream.docs.iter().enumerate() {
        let (ops, found) = guard_document(&input.name, &doc.value, opts, err, &mut problems);
        if ops.is_empty() || !found {
            continue;
        }
        match stream.patch(i, &ops) {
            Ok(text) => replaced.push((i, text)),
            Err(e) => {
                let mut value = doc.value.clone();
                crate::inject::patch::apply(&mut value, &ops)
                    .map_err(|e| Error::internal("applying the guard's own patch", &e))?;
                let _ = writeln!(
                    err,
                    "{}: document {} written anew ({e}); its comments and layout are not kept",
                    input.name,
                    i + 1
                );
                let mut text = emit_document(&value, doc.is_flow());
                // Keep the document's separator line.
                let original = &input.text[doc.range.clone()];
                if original.starts_with("---") {
                    let line = original.lines().next().unwrap_or("---");
                    text = format!("{line}\n{text}");
                }
                replaced.push((i, text));
            }
        }
    }
    Ok(Done {
        output: stream.with_documents(replaced),
        problems,
    })
}

/// Input that only a JSON reader takes: guarded and written anew as JSON.
fn process_value(
    input: &Input,
    mut value: Value,
    opts: &Options,
    err: &mut impl Write,
) -> Result<Done> {
    let mut problems = Vec::new();
    let (ops, _) = guard_document(&input.name, &value, opts, err, &mut problems);
    if ops.is_empty() {
        return Ok(Done {
            output: input.text.clone(),
            problems,
        });
    }
    crate::inject::patch::apply(&mut value, &ops)
        .map_err(|e| Error::internal("applying the guard's own patch", &e))?;
    let _ = writeln!(err, "{}: written anew as JSON", input.name);
    Ok(Done {
        output: emit_document(&value, true),
        problems,
    })
}

/// Guards every Pod template of one document; the ops (paths from the
/// document's root) and whether any template was found.
fn guard_document(
    name: &str,
    doc: &Value,
    opts: &Options,
    err: &mut impl Write,
    problems: &mut Vec<String>,
) -> (Vec<crate::inject::patch::Op>, bool) {
    let mut ops = Vec::new();
    let templates = objects::templates(doc);
    for t in &templates {
        let Some(template) = doc.pointer(&t.pointer) else {
            continue;
        };
        match guard(template, opts) {
            Outcome::Injected(i) => {
                let _ = writeln!(
                    err,
                    "{name}: {}: guarded (container {}, member {}, data dir {}, {} peer endpoint{}, TLS {})",
                    t.object,
                    i.container,
                    i.member,
                    i.data_dir,
                    i.peers,
                    if i.peers == 1 { "" } else { "s" },
                    if i.tls { "on" } else { "off" }
                );
                for n in &i.notes {
                    let _ = writeln!(err, "{name}: {}:   note: {n}", t.object);
                }
                ops.extend(i.patch_at(&t.pointer));
            }
            Outcome::Skipped(why) => {
                let _ = writeln!(err, "{name}: {}: unchanged: {why}", t.object);
            }
            Outcome::Unresolvable(e) => {
                let line = format!("{name}: {}: cannot guard: {e}", t.object);
                let _ = writeln!(err, "{line}");
                problems.push(line);
            }
        }
    }
    (ops, !templates.is_empty())
}

/// Runs `inject`.
pub fn run(args: &InjectArgs) -> Result<Exit> {
    let image = args
        .image
        .clone()
        .filter(|i| !i.trim().is_empty())
        .ok_or_else(|| Error::usage("inject: --image (AGENT_INJECT_IMAGE) is required: the agent's image, as your registry serves it"))?;
    let opts = Options {
        image,
        image_pull_policy: args.image_pull_policy.clone(),
        kube: args.kube_api,
        version: env!("CARGO_PKG_VERSION").to_owned(),
        extra_env: args.agent_env.clone(),
    };
    let paths: Vec<Option<PathBuf>> = if args.files.is_empty() {
        vec![None]
    } else {
        args.files
            .iter()
            .map(|p| (p.as_os_str() != "-").then(|| p.clone()))
            .collect()
    };
    let mut stderr = std::io::stderr().lock();
    let mut outputs = Vec::new();
    let mut problems = Vec::new();
    for path in &paths {
        let input = read_input(path.as_deref(), args.read_timeout)?;
        let done = process(&input, &opts, &mut stderr)?;
        problems.extend(done.problems);
        outputs.push((input, done.output));
    }
    if !problems.is_empty() {
        let _ = writeln!(
            stderr,
            "inject: {} Pod template{} could not be guarded; nothing was written (see above)",
            problems.len(),
            if problems.len() == 1 { "" } else { "s" }
        );
        return Ok(Exit::Usage);
    }
    let mut stdout = std::io::stdout().lock();
    let mut write = |s: &str| match stdout.write_all(s.as_bytes()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other,
    };
    let many = outputs.len() > 1;
    for (i, (input, output)) in outputs.iter().enumerate() {
        let result = if args.dry_run {
            write(&diff::unified(
                &input.name,
                &input.name,
                &input.text,
                output,
            ))
        } else {
            let sep = if many && i > 0 && !output.trim_start().starts_with("---") {
                "---\n"
            } else {
                ""
            };
            let end = if many && !output.is_empty() && !output.ends_with('\n') {
                "\n"
            } else {
                ""
            };
            write(&format!("{sep}{output}{end}"))
        };
        result.map_err(|e| Error::internal("writing the manifests to stdout", &e))?;
    }
    Ok(Exit::Ok)
}
