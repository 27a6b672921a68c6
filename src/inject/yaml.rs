//! Applying a JSON Patch to YAML or JSON *text*, leaving every byte the patch
//! does not touch as it was: comments, key order, quoting, blank lines, other
//! documents of the stream.
//!
//! The text is read once into a tree of positions (granit-parser's events carry
//! byte spans; [`Stream::parse`]); each `add` becomes one insertion or
//! replacement at a position of the *original* text (the guard's ops target
//! nodes of the original object and never each other's results), written in
//! the style of the place it lands: block YAML at that place's indentation,
//! JSON inside flow collections (pretty-printed when the collection spans
//! lines). [`Stream::patch`] then re-reads the result and checks it is exactly
//! the patched value; anything this editor does not handle (anchors in the
//! way, a layout it misreads) is caught there and the caller falls back to
//! writing the document anew ([`emit_document`]).

use std::ops::Range;

use granit_parser::{Event, Parser, StructureStyle};
use serde_json::Value;

use super::patch::{self, Op};

/// Why text could not be read or edited in place.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EditError {
    /// Not YAML (or JSON): the parser's message, with the line.
    #[error("line {line}: {message}")]
    Syntax {
        /// 1-based line.
        line: usize,
        /// What the parser said.
        message: String,
    },
    /// The document's value could not be read.
    #[error("{0}")]
    Value(String),
    /// This editor cannot place the change in this layout.
    #[error("cannot edit in place: {0}")]
    Layout(&'static str),
}

#[derive(Debug, Clone)]
enum Kind {
    Map(Vec<Entry>),
    Seq(Vec<Node>),
    Scalar,
    Alias,
}

#[derive(Debug, Clone)]
struct Node {
    kind: Kind,
    start: usize,
    /// The end of the node's last content byte (its last scalar, or the
    /// closing bracket of a flow collection).
    end: usize,
    flow: bool,
    /// Flow collections: the byte of `{`/`[` and of `}`/`]`.
    open: usize,
    close: usize,
}

#[derive(Debug, Clone)]
struct Entry {
    key: String,
    key_start: usize,
    key_end: usize,
    value: Node,
}

/// One document of a stream.
#[derive(Debug, Clone)]
pub struct Document {
    /// Its bytes in the stream (from its first event to its end).
    pub range: Range<usize>,
    root: Option<Node>,
    /// Its value (`Null` for an empty document).
    pub value: Value,
}

impl Document {
    /// True when the document is JSON-shaped (its root is a flow collection).
    pub fn is_flow(&self) -> bool {
        self.root.as_ref().is_some_and(|r| r.flow)
    }
}

/// A YAML (or JSON) stream and its documents.
#[derive(Debug, Clone)]
pub struct Stream<'a> {
    text: &'a str,
    /// The documents, in order.
    pub docs: Vec<Document>,
    newline: &'static str,
}

enum Frame {
    Map(Node, Option<(String, usize, usize)>),
    Seq(Node),
}

fn frame_node(f: &mut Frame) -> &mut Node {
    match f {
        Frame::Map(n, _) | Frame::Seq(n) => n,
    }
}

impl<'a> Stream<'a> {
    /// Reads `text`: positions from the event parser, values through serde.
    pub fn parse(text: &'a str) -> Result<Stream<'a>, EditError> {
        let mut docs = Vec::new();
        let mut stack: Vec<Frame> = Vec::new();
        let mut root: Option<Node> = None;
        let mut doc_start: Option<usize> = None;
        let syntax = |e: granit_parser::ScanError| EditError::Syntax {
            line: e.marker().line(),
            message: e.info().to_owned(),
        };
        for ev in Parser::new_from_str(text) {
            let (event, span) = ev.map_err(syntax)?;
            let r = span
                .byte_range()
                .ok_or(EditError::Layout("a span without byte offsets"))?;
            match event {
                Event::DocumentStart(..) => {
                    doc_start = Some(r.start);
                    root = None;
                }
                Event::DocumentEnd => {
                    let start = doc_start.take().unwrap_or(r.start);
                    let end = r.end.max(root.as_ref().map_or(start, |n| n.end));
                    let body = &text[start..end];
                    let value = if root.is_some() {
                        serde_saphyr::from_str::<Value>(body)
                            .map_err(|e| EditError::Value(e.to_string()))?
                    } else {
                        Value::Null
                    };
                    docs.push(Document {
                        range: start..end,
                        root: root.take(),
                        value,
                    });
                }
                Event::MappingStart(style, ..) | Event::SequenceStart(style, ..) => {
                    let flow = style == StructureStyle::Flow;
                    let node = Node {
                        kind: if matches!(event, Event::MappingStart(..)) {
                            Kind::Map(Vec::new())
                        } else {
                            Kind::Seq(Vec::new())
                        },
                        start: r.start,
                        end: r.end,
                        flow,
                        open: r.start,
                        close: r.start,
                    };
                    if let Some(Frame::Map(_, None)) = stack.last() {
                        return Err(EditError::Layout("a collection as a mapping key"));
                    }
                    stack.push(match node.kind {
                        Kind::Map(_) => Frame::Map(node, None),
                        _ => Frame::Seq(node),
                    });
                }
                Event::MappingEnd | Event::SequenceEnd => {
                    let mut frame = stack.pop().ok_or(EditError::Layout("unbalanced events"))?;
                    let node = frame_node(&mut frame);
                    if node.flow {
                        node.close = r.start;
                        node.end = r.end;
                    }
                    let node = node.clone();
                    attach(&mut stack, &mut root, node)?;
                }
                Event::Scalar(value, ..) => {
                    if let Some(Frame::Map(n, pending @ None)) = stack.last_mut() {
                        *pending = Some((value.into_owned(), r.start, r.end));
                        n.end = n.end.max(r.end);
                        continue;
                    }
                    let node = Node {
                        kind: Kind::Scalar,
                        start: r.start,
                        end: r.end,
                        flow: false,
                        open: r.start,
                        close: r.start,
                    };
                    attach(&mut stack, &mut root, node)?;
                }
                Event::Alias(_) | Event::UnresolvedAlias(_) => {
                    if let Some(Frame::Map(_, None)) = stack.last() {
                        return Err(EditError::Layout("an alias as a mapping key"));
                    }
                    let node = Node {
                        kind: Kind::Alias,
                        start: r.start,
                        end: r.end,
                        flow: false,
                        open: r.start,
                        close: r.start,
                    };
                    attach(&mut stack, &mut root, node)?;
                }
                _ => {}
            }
        }
        let newline = if text.contains("\r\n") { "\r\n" } else { "\n" };
        Ok(Stream {
            text,
            docs,
            newline,
        })
    }

    /// The new text of document `doc` (its [`Document::range`]) with `ops`
    /// applied in place (paths from its root; see the module docs), checked:
    /// it must read back as exactly the patched value.
    pub fn patch(&self, doc: usize, ops: &[Op]) -> Result<String, EditError> {
        let d = self
            .docs
            .get(doc)
            .ok_or(EditError::Layout("no such document"))?;
        let root = d
            .root
            .as_ref()
            .ok_or(EditError::Layout("an empty document"))?;
        let style = BlockStyle {
            seq_indent: self.seq_indent(root),
            newline: self.newline,
        };
        let mut edits: Vec<(usize, usize, usize, usize, String)> = Vec::new();
        for (i, op) in ops.iter().enumerate() {
            let (start, end, text) = self.edit_for(root, op, &style)?;
            if start < d.range.start || end > d.range.end {
                return Err(EditError::Layout("a change outside its document"));
            }
            let depth = op.path.matches('/').count();
            edits.push((start - d.range.start, end - d.range.start, depth, i, text));
        }
        // From the end, so earlier positions stay valid. Where two changes land
        // at one position (the end of a collection that is the last value of
        // its parent), the deeper one's text comes first, so that it stays in
        // its collection; then ops in their order.
        edits.sort_by(|a, b| b.0.cmp(&a.0).then(a.2.cmp(&b.2)).then(b.3.cmp(&a.3)));
        let mut out = self.text[d.range.clone()].to_owned();
        let mut last_start = usize::MAX;
        for (start, end, _, _, text) in edits {
            if end > last_start {
                return Err(EditError::Layout("two changes overlap"));
            }
            out.replace_range(start..end, &text);
            last_start = start;
        }
        let mut want = d.value.clone();
        patch::apply(&mut want, ops).map_err(|e| EditError::Value(e.to_string()))?;
        let again = Stream::parse(&out)?;
        match again.docs.as_slice() {
            [one] if one.value == want => Ok(out),
            _ => Err(EditError::Layout(
                "the edited text does not read back as the patched value",
            )),
        }
    }

    /// The stream with the text of some documents replaced (`(doc, text)`).
    pub fn with_documents(&self, mut replaced: Vec<(usize, String)>) -> String {
        replaced.sort_by_key(|r| std::cmp::Reverse(r.0));
        let mut out = self.text.to_owned();
        for (doc, text) in replaced {
            if let Some(d) = self.docs.get(doc) {
                out.replace_range(d.range.clone(), &text);
            }
        }
        out
    }

    fn node_at<'n>(&self, root: &'n Node, toks: &[String]) -> Result<&'n Node, EditError> {
        let mut at = root;
        for t in toks {
            at = match &at.kind {
                Kind::Map(entries) => {
                    &entries
                        .iter()
                        .rev()
                        .find(|e| &e.key == t)
                        .ok_or(EditError::Layout("a path through a missing key"))?
                        .value
                }
                Kind::Seq(items) => {
                    let i: usize = t.parse().map_err(|_| EditError::Layout("not an index"))?;
                    items
                        .get(i)
                        .ok_or(EditError::Layout("an index out of range"))?
                }
                _ => return Err(EditError::Layout("a path through a scalar or alias")),
            };
        }
        Ok(at)
    }

    /// One op as `(start, end, text)`: replace `start..end` with `text`.
    fn edit_for(
        &self,
        root: &Node,
        op: &Op,
        style: &BlockStyle,
    ) -> Result<(usize, usize, String), EditError> {
        let toks = patch::tokens(&op.path).ok_or(EditError::Layout("not a JSON pointer"))?;
        let (last, parents) = toks
            .split_last()
            .ok_or(EditError::Layout("the document root"))?;
        let parent = self.node_at(root, parents)?;
        match &parent.kind {
            Kind::Map(entries) => match entries.iter().rev().find(|e| &e.key == last) {
                Some(e) => self.replace_value(parent, e, &op.value, style),
                None => self.add_member(parent, entries, last, &op.value, style),
            },
            Kind::Seq(items) => {
                let at = if last == "-" {
                    items.len()
                } else {
                    last.parse()
                        .map_err(|_| EditError::Layout("not an index"))?
                };
                self.insert_item(parent, items, at, &op.value, style)
            }
            _ => Err(EditError::Layout("a parent that is not a collection")),
        }
    }

    fn col(&self, pos: usize) -> usize {
        pos - self.line_start(pos)
    }

    fn line_start(&self, pos: usize) -> usize {
        self.text[..pos].rfind('\n').map_or(0, |i| i + 1)
    }

    fn line_end(&self, pos: usize) -> usize {
        if pos > 0 && self.text.as_bytes().get(pos - 1) == Some(&b'\n') {
            // A block scalar's content ends with its line break.
            return pos - 1 - usize::from(pos >= 2 && self.text.as_bytes()[pos - 2] == b'\r');
        }
        let rest = &self.text[pos..];
        pos + rest.find(['\r', '\n']).unwrap_or(rest.len())
    }

    /// The indentation of a block sequence's items (the column of `-`) for a
    /// sequence that is the value of a key at column `key_col`.
    fn seq_indent(&self, root: &Node) -> usize {
        fn find(s: &Stream<'_>, n: &Node) -> Option<usize> {
            match &n.kind {
                Kind::Map(entries) => entries.iter().find_map(|e| match &e.value.kind {
                    Kind::Seq(items) if !e.value.flow && !items.is_empty() => {
                        let dash = s.dash_col(items[0].start)?;
                        Some(dash.saturating_sub(s.col(e.key_start)))
                    }
                    _ => find(s, &e.value),
                }),
                Kind::Seq(items) => items.iter().find_map(|i| find(s, i)),
                _ => None,
            }
        }
        find(self, root).unwrap_or(2)
    }

    /// The column of the `-` before a block sequence item starting at `item`.
    fn dash_col(&self, item: usize) -> Option<usize> {
        let ls = self.line_start(item);
        let before = &self.text[ls..item];
        let dash = before.rfind('-')?;
        before[..dash]
            .chars()
            .all(|c| c == ' ' || c == '-')
            .then_some(dash)
    }

    fn add_member(
        &self,
        map: &Node,
        entries: &[Entry],
        key: &str,
        value: &Value,
        style: &BlockStyle,
    ) -> Result<(usize, usize, String), EditError> {
        if map.flow {
            let member = format!("{}: ", json_string(key));
            return Ok(self.flow_append(map, entries.last().map(|e| e.value.end), &member, value));
        }
        let first = entries
            .first()
            .ok_or(EditError::Layout("an empty block mapping"))?;
        let indent = self.col(first.key_start);
        let at = self.line_end(map.end);
        let text = format!(
            "{}{}{}",
            self.newline,
            " ".repeat(indent),
            style.member(key, value, indent)
        );
        Ok((at, at, text))
    }

    fn replace_value(
        &self,
        map: &Node,
        entry: &Entry,
        value: &Value,
        style: &BlockStyle,
    ) -> Result<(usize, usize, String), EditError> {
        let v = &entry.value;
        if map.flow || v.flow {
            return Ok((v.start, v.end, json_compact(value)));
        }
        // From just after the key's colon to the end of the old value.
        let colon = self.text[entry.key_end..]
            .find(':')
            .map(|i| entry.key_end + i)
            .ok_or(EditError::Layout("no colon after a key"))?;
        let start = colon + 1;
        let end = v.end.max(start);
        let indent = self.col(entry.key_start);
        let rendered = style.member(&entry.key, value, indent);
        let after_key = rendered
            .split_once(':')
            .map(|(_, rest)| rest.to_owned())
            .ok_or(EditError::Layout("an unwritable key"))?;
        Ok((start, end, after_key))
    }

    fn insert_item(
        &self,
        seq: &Node,
        items: &[Node],
        at: usize,
        value: &Value,
        style: &BlockStyle,
    ) -> Result<(usize, usize, String), EditError> {
        if at > items.len() {
            return Err(EditError::Layout("an index out of range"));
        }
        if seq.flow {
            if at == items.len() {
                return Ok(self.flow_append(seq, items.last().map(|i| i.end), "", value));
            }
            let next = &items[at];
            let multi = self.text[seq.open..next.start].contains('\n');
            let sep = if multi {
                format!(",{}{}", self.newline, " ".repeat(self.col(next.start)))
            } else {
                ", ".to_owned()
            };
            let indent = self.col(next.start);
            let text = format!("{}{sep}", self.json(value, multi, indent));
            return Ok((next.start, next.start, text));
        }
        let first = items
            .first()
            .ok_or(EditError::Layout("an empty block sequence"))?;
        let dash = self.dash_col(first.start).ok_or(EditError::Layout(
            "a sequence item not at the start of its line",
        ))?;
        let item = style.item(value, dash + 2);
        if at == items.len() {
            let pos = self.line_end(seq.end);
            Ok((
                pos,
                pos,
                format!("{}{}- {item}", self.newline, " ".repeat(dash)),
            ))
        } else {
            let next = &items[at];
            if self.dash_col(next.start) != Some(dash) {
                return Err(EditError::Layout(
                    "a sequence item not at the start of its line",
                ));
            }
            let pos = self.line_start(next.start);
            Ok((
                pos,
                pos,
                format!("{}- {item}{}", " ".repeat(dash), self.newline),
            ))
        }
    }

    /// Appends `prefix` + `value` to a flow collection after its last child
    /// (ending at `last_end`), pretty when the collection spans lines.
    fn flow_append(
        &self,
        node: &Node,
        last_end: Option<usize>,
        prefix: &str,
        value: &Value,
    ) -> (usize, usize, String) {
        match last_end {
            None => {
                let at = node.open + 1;
                (at, at, format!("{prefix}{}", json_compact(value)))
            }
            Some(end) => {
                let multi = self.text[node.open..end].contains('\n');
                if multi {
                    // The indentation of the collection's children.
                    let first_line = self.text[node.open..end]
                        .find('\n')
                        .map(|i| node.open + i + 1)
                        .unwrap_or(node.open);
                    let indent = self.text[first_line..]
                        .chars()
                        .take_while(|c| *c == ' ')
                        .count();
                    let text = format!(
                        ",{}{}{prefix}{}",
                        self.newline,
                        " ".repeat(indent),
                        self.json(value, true, indent)
                    );
                    (end, end, text)
                } else {
                    (end, end, format!(", {prefix}{}", json_compact(value)))
                }
            }
        }
    }

    /// JSON for a flow context: pretty at `indent` (with the unit the
    /// document uses) or compact.
    fn json(&self, value: &Value, pretty: bool, indent: usize) -> String {
        if !pretty {
            return json_compact(value);
        }
        json_ordered(value, Some((self.json_indent_unit(), indent, self.newline)))
    }

    /// The indentation step of a pretty-printed JSON document (kubectl uses 4).
    fn json_indent_unit(&self) -> usize {
        self.text
            .lines()
            .map(|l| l.chars().take_while(|c| *c == ' ').count())
            .filter(|n| *n > 0)
            .min()
            .unwrap_or(2)
    }
}

fn attach(stack: &mut [Frame], root: &mut Option<Node>, node: Node) -> Result<(), EditError> {
    match stack.last_mut() {
        None => {
            *root = Some(node);
            Ok(())
        }
        Some(Frame::Seq(parent)) => {
            parent.end = parent.end.max(node.end);
            if let Kind::Seq(items) = &mut parent.kind {
                items.push(node);
            }
            Ok(())
        }
        Some(Frame::Map(parent, pending)) => {
            let (key, key_start, key_end) = pending
                .take()
                .ok_or(EditError::Layout("a mapping value without a key"))?;
            parent.end = parent.end.max(node.end);
            if let Kind::Map(entries) = &mut parent.kind {
                entries.push(Entry {
                    key,
                    key_start,
                    key_end,
                    value: node,
                });
            }
            Ok(())
        }
    }
}

/// Keys in the order Kubernetes manifests are written: a few that lead
/// (`name` first), then the rest alphabetically.
fn ordered(m: &serde_json::Map<String, Value>) -> Vec<(&String, &Value)> {
    const LEADING: &[&str] = &[
        "name",
        "image",
        "imagePullPolicy",
        "restartPolicy",
        "command",
        "args",
        "env",
        "ports",
        "volumeMounts",
    ];
    let mut v: Vec<(&String, &Value)> = m.iter().collect();
    v.sort_by_key(|(k, _)| {
        (
            LEADING.iter().position(|l| l == k).unwrap_or(LEADING.len()),
            k.as_str(),
        )
    });
    v
}

/// JSON with keys [`ordered`]: compact, or pretty with `unit` spaces per
/// level, continuation lines starting at column `indent`.
fn json_ordered(value: &Value, pretty: Option<(usize, usize, &str)>) -> String {
    let mut s = String::new();
    write_json(&mut s, value, pretty, 0);
    s
}

fn write_json(s: &mut String, value: &Value, pretty: Option<(usize, usize, &str)>, level: usize) {
    let (open, close, items): (char, char, Vec<(Option<&String>, &Value)>) = match value {
        Value::Object(m) if !m.is_empty() => (
            '{',
            '}',
            ordered(m).into_iter().map(|(k, v)| (Some(k), v)).collect(),
        ),
        Value::Array(a) if !a.is_empty() => ('[', ']', a.iter().map(|v| (None, v)).collect()),
        other => {
            s.push_str(&other.to_string());
            return;
        }
    };
    s.push(open);
    for (i, (k, v)) in items.iter().enumerate() {
        if i > 0 {
            s.push(',');
        }
        if let Some((unit, indent, newline)) = pretty {
            s.push_str(newline);
            s.push_str(&" ".repeat(indent + unit * (level + 1)));
        }
        if let Some(k) = k {
            s.push_str(&json_string(k));
            s.push_str(if pretty.is_some() { ": " } else { ":" });
        }
        write_json(s, v, pretty, level + 1);
    }
    if let Some((unit, indent, newline)) = pretty {
        s.push_str(newline);
        s.push_str(&" ".repeat(indent + unit * level));
    }
    s.push(close);
}

/// How block YAML is written where it is inserted.
struct BlockStyle {
    /// Columns a block sequence's `-` sits right of its key.
    seq_indent: usize,
    newline: &'static str,
}

const STEP: usize = 2;

impl BlockStyle {
    /// `key: value` for a key at column `col`, continuation lines indented.
    fn member(&self, key: &str, value: &Value, col: usize) -> String {
        let key = scalar(&Value::String(key.to_owned()));
        match value {
            Value::Object(m) if !m.is_empty() => {
                let inner = col + STEP;
                let mut s = format!("{key}:");
                for (k, v) in ordered(m) {
                    s.push_str(self.newline);
                    s.push_str(&" ".repeat(inner));
                    s.push_str(&self.member(k, v, inner));
                }
                s
            }
            Value::Array(a) if !a.is_empty() => {
                let dash = col + self.seq_indent;
                let mut s = format!("{key}:");
                for v in a {
                    s.push_str(self.newline);
                    s.push_str(&" ".repeat(dash));
                    s.push_str("- ");
                    s.push_str(&self.item(v, dash + 2));
                }
                s
            }
            v => format!("{key}: {}", scalar(v)),
        }
    }

    /// A sequence item's content after `- `, which sits at column `col`.
    fn item(&self, value: &Value, col: usize) -> String {
        match value {
            Value::Object(m) if !m.is_empty() => {
                let mut s = String::new();
                for (i, (k, v)) in ordered(m).into_iter().enumerate() {
                    if i > 0 {
                        s.push_str(self.newline);
                        s.push_str(&" ".repeat(col));
                    }
                    s.push_str(&self.member(k, v, col));
                }
                s
            }
            Value::Array(a) if !a.is_empty() => {
                let mut s = String::new();
                for (i, v) in a.iter().enumerate() {
                    if i > 0 {
                        s.push_str(self.newline);
                        s.push_str(&" ".repeat(col));
                    }
                    s.push_str("- ");
                    s.push_str(&self.item(v, col + 2));
                }
                s
            }
            v => scalar(v),
        }
    }
}

/// A document written anew as block YAML (JSON when `flow`), for when the
/// text cannot be edited in place. Comments are lost; the caller says so.
pub fn emit_document(value: &Value, flow: bool) -> String {
    if flow {
        let mut s = json_ordered(value, Some((2, 0, "\n")));
        s.push('\n');
        return s;
    }
    let style = BlockStyle {
        seq_indent: 2,
        newline: "\n",
    };
    let mut s = match value {
        Value::Object(m) if !m.is_empty() => ordered(m)
            .into_iter()
            .map(|(k, v)| style.member(k, v, 0))
            .collect::<Vec<_>>()
            .join("\n"),
        Value::Array(a) if !a.is_empty() => a
            .iter()
            .map(|v| format!("- {}", style.item(v, 2)))
            .collect::<Vec<_>>()
            .join("\n"),
        v => scalar(v),
    };
    s.push('\n');
    s
}

fn json_compact(value: &Value) -> String {
    json_ordered(value, None)
}

fn json_string(s: &str) -> String {
    Value::String(s.to_owned()).to_string()
}

/// Words YAML 1.1 or 1.2 reads as something other than a string.
const RESERVED: &[&str] = &[
    "true", "false", "yes", "no", "on", "off", "y", "n", "null", "~", "",
];

/// A scalar as plain YAML when that reads back as the same string in every
/// YAML version Kubernetes tools use, double-quoted (JSON escapes) otherwise;
/// collections (empty ones only reach here) as JSON.
fn scalar(v: &Value) -> String {
    match v {
        Value::String(s) => {
            let plain = s
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '/')
                && s.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "_./:=@-".contains(c))
                && !s.ends_with(':')
                && !RESERVED.contains(&s.to_ascii_lowercase().as_str());
            if plain {
                s.clone()
            } else {
                json_string(s)
            }
        }
        other => json_compact(other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn patched(text: &str, ops: &[Op]) -> String {
        let s = Stream::parse(text).unwrap();
        let doc = s.patch(0, ops).unwrap();
        s.with_documents(vec![(0, doc)])
    }

    #[test]
    fn block_mappings_and_sequences_keep_everything_else() {
        let text = "\
# a comment that stays
kind: Pod   # so does this one
metadata:
  name: x
  annotations:
    a: \"1\"
spec:
  containers:
  - name: etcd # c
    image: e
  volumes:
    - name: data
      emptyDir: {}

  # trailing
";
        let out = patched(
            text,
            &[
                Op::add("/metadata/annotations/b~1c", json!("two words")),
                Op::add(
                    "/spec/containers/0",
                    json!({"name": "first", "args": ["serve"]}),
                ),
                Op::add("/spec/containers/-", json!({"name": "last"})),
                Op::add(
                    "/spec/volumes/-",
                    json!({"name": "run", "emptyDir": {"medium": "Memory"}}),
                ),
                Op::add("/spec/initContainers", json!([{"name": "i"}])),
            ],
        );
        assert_eq!(
            out,
            "\
# a comment that stays
kind: Pod   # so does this one
metadata:
  name: x
  annotations:
    a: \"1\"
    b/c: \"two words\"
spec:
  containers:
  - name: first
    args:
    - serve
  - name: etcd # c
    image: e
  - name: last
  volumes:
    - name: data
      emptyDir: {}
    - name: run
      emptyDir:
        medium: Memory
  initContainers:
  - name: i

  # trailing
"
        );
    }

    #[test]
    fn changes_at_one_position_stay_in_their_collections() {
        // `volumes` is the last value of `spec`: its new item and spec's new
        // member land at the same byte.
        let text = "spec:\n  containers:\n  - name: etcd\n  volumes:\n  - name: data\n";
        let out = patched(
            text,
            &[
                Op::add("/spec/initContainers", json!([{"name": "i"}])),
                Op::add("/spec/volumes/-", json!({"name": "run"})),
                Op::add("/spec/volumes/-", json!({"name": "token"})),
            ],
        );
        assert_eq!(
            out,
            "spec:\n  containers:\n  - name: etcd\n  volumes:\n  - name: data\n  - name: run\n  - name: token\n  initContainers:\n  - name: i\n"
        );
    }

    #[test]
    fn null_and_existing_values_are_replaced_in_place() {
        let text = "metadata:\n  annotations:\nspec:\n  probe:\n    tcp: 1\n  x: 2\n";
        let out = patched(
            text,
            &[
                Op::add("/metadata/annotations", json!({"k": "v"})),
                Op::add("/spec/probe", json!({"http": {"port": 9466}})),
            ],
        );
        assert_eq!(
            out,
            "metadata:\n  annotations:\n    k: v\nspec:\n  probe:\n    http:\n      port: 9466\n  x: 2\n"
        );
    }

    #[test]
    fn json_stays_json_in_its_own_indentation() {
        let text = "{\n    \"kind\": \"Pod\",\n    \"spec\": {\n        \"volumes\": [\n            {\"name\": \"a\"}\n        ]\n    }\n}\n";
        let out = patched(
            text,
            &[
                Op::add("/spec/volumes/-", json!({"name": "b"})),
                Op::add("/spec/initContainers", json!([])),
                Op::add("/metadata", json!({"annotations": {"k": "v"}})),
            ],
        );
        let v: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(
            v,
            json!({"kind": "Pod", "spec": {"volumes": [{"name": "a"}, {"name": "b"}], "initContainers": []}, "metadata": {"annotations": {"k": "v"}}})
        );
        assert!(out.starts_with("{\n    \"kind\": \"Pod\",\n    \"spec\": {\n        \"volumes\": [\n            {\"name\": \"a\"},\n            {\n                \"name\": \"b\"\n            }\n        ],\n"), "{out}");
    }

    #[test]
    fn other_documents_are_untouched_byte_for_byte() {
        let text = "a: 1\n---\n# second\nkind: Pod\nspec:\n  x: [1,2]\n---\nc:   3 # odd spacing\n";
        let s = Stream::parse(text).unwrap();
        assert_eq!(s.docs.len(), 3);
        let doc = s.patch(1, &[Op::add("/spec/x/0", json!(0))]).unwrap();
        let out = s.with_documents(vec![(1, doc)]);
        assert_eq!(
            out,
            "a: 1\n---\n# second\nkind: Pod\nspec:\n  x: [0, 1,2]\n---\nc:   3 # odd spacing\n"
        );
    }

    #[test]
    fn what_reads_back_wrong_is_refused_not_written() {
        // An alias in the way: the value read back would differ.
        let text = "base: &b\n  - 1\nspec:\n  list: *b\n";
        let s = Stream::parse(text).unwrap();
        assert!(s.patch(0, &[Op::add("/spec/list/-", json!(2))]).is_err());
    }

    #[test]
    fn scalars_are_quoted_when_plain_would_read_otherwise() {
        for (s, want) in [
            ("etcd-agent", "etcd-agent"),
            ("https://127.0.0.1:2379", "https://127.0.0.1:2379"),
            ("$(POD_NAME)", "\"$(POD_NAME)\""),
            ("true", "\"true\""),
            ("no", "\"no\""),
            ("3.6.11", "\"3.6.11\""),
            ("10m", "\"10m\""),
            ("a: b", "\"a: b\""),
            ("", "\"\""),
            ("line\nbreak", "\"line\\nbreak\""),
        ] {
            assert_eq!(scalar(&json!(s)), want);
        }
    }

    #[test]
    fn a_document_written_anew_reads_back_the_same() {
        let v = json!({"a": [1, {"b": "x y", "c": []}, [2, 3]], "d": {}, "e": null, "f": "yes"});
        let text = emit_document(&v, false);
        let back: Value = serde_saphyr::from_str(&text).unwrap();
        assert_eq!(back, v, "{text}");
    }

    proptest::proptest! {
        #[test]
        fn parsing_arbitrary_text_never_panics(text in "\\PC{0,200}") {
            let _ = Stream::parse(&text);
        }

        #[test]
        fn parsing_yaml_like_text_never_panics(text in "([a-z]{1,3}|[ \n:\\-\\[\\]{},#&*!|>'\"]){0,80}") {
            if let Ok(s) = Stream::parse(&text) {
                for i in 0..s.docs.len() {
                    let _ = s.patch(i, &[Op::add("/x", serde_json::json!({"k": [1]}))]);
                    let _ = s.patch(i, &[Op::add("/0", serde_json::json!("v"))]);
                }
            }
        }
    }
}
