//! Kubernetes' `$(VAR)` references, as the kubelet expands them in a
//! container's `command`, `args`, `env[].value` and `volumeMounts[].subPathExpr`
//! (`k8s.io/kubernetes/third_party/forked/golang/expansion`): `$(NAME)` is the
//! value of `NAME` when the container defines it and stays `$(NAME)` verbatim
//! otherwise, `$$` is one `$`, and any other `$` is itself.
//!
//! An [`Expr`] keeps references apart from text, so that a value can be moved
//! into another container without freezing what differs per replica:
//! `--name=$(POD_NAME)` in a StatefulSet's template is `etcd-0` in one Pod and
//! `etcd-1` in the next, and the agent's `ETCD_MEMBER_NAME` must be
//! `$(POD_NAME)` too, with `POD_NAME` defined from the same downward-API field.
//! Text is escaped (`$` → `$$`) when written back, so a literal `$(X)` etcd saw
//! stays literal in the agent.

use std::fmt;

/// One piece of an expression.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    /// Text, after escapes (`$$` already one `$`).
    Text(String),
    /// A reference `$(NAME)` the kubelet resolves in the container's env.
    Ref(String),
}

/// A string with references, as the kubelet sees it before expansion.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Expr(Vec<Piece>);

impl Expr {
    /// Text without references.
    pub fn text(s: &str) -> Expr {
        let mut e = Expr::default();
        e.push_text(s);
        e
    }

    /// A reference alone.
    pub fn reference(name: &str) -> Expr {
        Expr(vec![Piece::Ref(name.to_owned())])
    }

    /// Reads `raw` as the kubelet does (see the module docs).
    pub fn parse(raw: &str) -> Expr {
        let bytes = raw.as_bytes();
        let mut e = Expr::default();
        let mut checkpoint = 0;
        let mut cursor = 0;
        while cursor < bytes.len() {
            if bytes[cursor] == b'$' && cursor + 1 < bytes.len() {
                e.push_text(&raw[checkpoint..cursor]);
                let rest = &raw[cursor + 1..];
                match bytes[cursor + 1] {
                    b'$' => {
                        e.push_text("$");
                        cursor += 1;
                    }
                    b'(' => match rest.find(')') {
                        Some(close) => {
                            e.0.push(Piece::Ref(rest[1..close].to_owned()));
                            cursor += close + 1;
                        }
                        None => {
                            // An unclosed reference is text to the end.
                            e.push_text(&raw[cursor..]);
                            cursor = bytes.len() - 1;
                        }
                    },
                    _ => {
                        // A lone `$`: itself (the next byte is copied as
                        // text with what follows).
                        e.push_text("$");
                    }
                }
                checkpoint = cursor + 1;
            }
            cursor += 1;
        }
        if checkpoint < raw.len() {
            e.push_text(&raw[checkpoint..]);
        }
        e
    }

    fn push_text(&mut self, s: &str) {
        if s.is_empty() {
            return;
        }
        if let Some(Piece::Text(last)) = self.0.last_mut() {
            last.push_str(s);
        } else {
            self.0.push(Piece::Text(s.to_owned()));
        }
    }

    /// Appends `other`.
    pub fn push(&mut self, other: &Expr) {
        for p in &other.0 {
            match p {
                Piece::Text(t) => self.push_text(t),
                Piece::Ref(r) => self.0.push(Piece::Ref(r.clone())),
            }
        }
    }

    /// `self` followed by `other`.
    pub fn concat(mut self, other: &Expr) -> Expr {
        self.push(other);
        self
    }

    /// The pieces.
    pub fn pieces(&self) -> &[Piece] {
        &self.0
    }

    /// The names referenced, in order.
    pub fn refs(&self) -> impl Iterator<Item = &str> {
        self.0.iter().filter_map(|p| match p {
            Piece::Ref(r) => Some(r.as_str()),
            Piece::Text(_) => None,
        })
    }

    /// The text when there is no reference.
    pub fn as_literal(&self) -> Option<String> {
        let mut s = String::new();
        for p in &self.0 {
            match p {
                Piece::Text(t) => s.push_str(t),
                Piece::Ref(_) => return None,
            }
        }
        Some(s)
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Replaces every reference with what `f` gives for it.
    pub fn map_refs(&self, mut f: impl FnMut(&str) -> Expr) -> Expr {
        let mut out = Expr::default();
        for p in &self.0 {
            match p {
                Piece::Text(t) => out.push_text(t),
                Piece::Ref(r) => out.push(&f(r)),
            }
        }
        out
    }

    /// Splits at every `sep` in the text (never inside a reference).
    pub fn split(&self, sep: char) -> Vec<Expr> {
        let mut parts = vec![Expr::default()];
        for p in &self.0 {
            match p {
                Piece::Ref(r) => {
                    if let Some(last) = parts.last_mut() {
                        last.0.push(Piece::Ref(r.clone()));
                    }
                }
                Piece::Text(t) => {
                    let mut chunks = t.split(sep);
                    if let (Some(first), Some(last)) = (chunks.next(), parts.last_mut()) {
                        last.push_text(first);
                    }
                    for chunk in chunks {
                        parts.push(Expr::text(chunk));
                    }
                }
            }
        }
        parts
    }

    /// Splits at the first `sep` in the text.
    pub fn split_once(&self, sep: &str) -> Option<(Expr, Expr)> {
        let mut before = Expr::default();
        for (i, p) in self.0.iter().enumerate() {
            match p {
                Piece::Ref(r) => before.0.push(Piece::Ref(r.clone())),
                Piece::Text(t) => {
                    if let Some(at) = t.find(sep) {
                        before.push_text(&t[..at]);
                        let mut after = Expr::text(&t[at + sep.len()..]);
                        after.push(&Expr(self.0[i + 1..].to_vec()));
                        return Some((before, after));
                    }
                    before.push_text(t);
                }
            }
        }
        None
    }

    /// Splits at the last `sep` in the text.
    pub fn rsplit_once(&self, sep: &str) -> Option<(Expr, Expr)> {
        for (i, p) in self.0.iter().enumerate().rev() {
            if let Piece::Text(t) = p {
                if let Some(at) = t.rfind(sep) {
                    let mut before = Expr(self.0[..i].to_vec());
                    before.push_text(&t[..at]);
                    let mut after = Expr::text(&t[at + sep.len()..]);
                    after.push(&Expr(self.0[i + 1..].to_vec()));
                    return Some((before, after));
                }
            }
        }
        None
    }

    /// The text before the first reference.
    pub fn literal_prefix(&self) -> &str {
        match self.0.first() {
            Some(Piece::Text(t)) => t,
            _ => "",
        }
    }

    /// Trims ASCII whitespace from both ends of the text.
    pub fn trim(&self) -> Expr {
        let mut pieces = self.0.clone();
        if let Some(Piece::Text(t)) = pieces.first_mut() {
            *t = t.trim_start().to_owned();
        }
        if let Some(Piece::Text(t)) = pieces.last_mut() {
            *t = t.trim_end().to_owned();
        }
        Expr(
            pieces
                .into_iter()
                .filter(|p| !matches!(p, Piece::Text(t) if t.is_empty()))
                .collect(),
        )
    }

    /// As written into an env value or an argument: `$` in text doubled, references as `$(NAME)`.
    pub fn to_kube(&self) -> String {
        let mut s = String::new();
        for p in &self.0 {
            match p {
                Piece::Text(t) => s.push_str(&t.replace('$', "$$")),
                Piece::Ref(r) => {
                    s.push_str("$(");
                    s.push_str(r);
                    s.push(')');
                }
            }
        }
        s
    }
}

/// For messages: references as `$(NAME)`, text as it is.
impl fmt::Display for Expr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for p in &self.0 {
            match p {
                Piece::Text(t) => f.write_str(t)?,
                Piece::Ref(r) => write!(f, "$({r})")?,
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn expand(raw: &str, env: &[(&str, &str)]) -> String {
        Expr::parse(raw)
            .map_refs(|r| match env.iter().find(|(k, _)| *k == r) {
                Some((_, v)) => Expr::text(v),
                None => Expr::text(&format!("$({r})")),
            })
            .as_literal()
            .unwrap()
    }

    /// The cases of the kubelet's own expansion tests (`expand_test.go`).
    #[test]
    fn expands_as_the_kubelet_does() {
        let env = [("VAR_A", "A"), ("VAR_B", "B"), ("VAR_EMPTY", "")];
        for (raw, want) in [
            ("$(VAR_A)", "A"),
            ("___$(VAR_B)___", "___B___"),
            ("$(VAR_A)-$(VAR_A)", "A-A"),
            ("f000-$$VAR_A", "f000-$VAR_A"),
            ("foo\\$(VAR_A)bar", "foo\\Abar"),
            ("$(VAR_EMPTY)", ""),
            ("$(VAR_DNE)", "$(VAR_DNE)"),
            ("$$(VAR_A)", "$(VAR_A)"),
            ("$$$$(VAR_A)", "$$(VAR_A)"),
            ("$$$(VAR_A)", "$A"),
            ("$(VAR_A", "$(VAR_A"),
            ("$VAR_A", "$VAR_A"),
            ("$", "$"),
            ("foo$", "foo$"),
            ("$()", "$()"),
            ("$(VAR_A)$", "A$"),
            ("$(VAR_A)$(", "A$("),
            ("é$(VAR_A)é", "éAé"),
            ("$é", "$é"),
        ] {
            assert_eq!(expand(raw, &env), want, "{raw}");
        }
    }

    #[test]
    fn writing_back_keeps_literals_literal() {
        for raw in ["$$(X)", "a$(X)b", "$(X", "$", "$$$(X)", "plain"] {
            let e = Expr::parse(raw);
            assert_eq!(Expr::parse(&e.to_kube()), e, "{raw}");
        }
        assert_eq!(Expr::text("$(X)").to_kube(), "$$(X)");
    }

    #[test]
    fn splits_never_cut_a_reference() {
        let e = Expr::parse("a=$(S)://x.$(N):2380,b=http://y:2380");
        let parts = e.split(',');
        assert_eq!(parts.len(), 2);
        assert_eq!(parts[0].to_string(), "a=$(S)://x.$(N):2380");
        let (name, url) = parts[0].split_once("=").unwrap();
        assert_eq!(name.as_literal().as_deref(), Some("a"));
        let (host, port) = url.rsplit_once(":").unwrap();
        assert_eq!(host.to_string(), "$(S)://x.$(N)");
        assert_eq!(port.as_literal().as_deref(), Some("2380"));
    }

    proptest::proptest! {
        #[test]
        fn parsing_never_panics_and_round_trips(raw in "[$()a-z:/,é]{0,40}") {
            let e = Expr::parse(&raw);
            proptest::prop_assert_eq!(Expr::parse(&e.to_kube()), e);
        }
    }
}
