//! How commands speak: a human summary on stderr, and with `-o json` exactly one
//! JSON document on stdout whatever the exit code. A closed stdout (`| head`) is
//! not an error.

use std::io::Write;

/// The output format chosen with `-o`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Format {
    /// Human-readable summary on stderr.
    #[default]
    Text,
    /// One JSON document on stdout (the summary still goes to stderr).
    Json,
}

/// Prints the human summary to stderr and, for `-o json`, the document to stdout.
pub fn emit<T: serde::Serialize>(format: Format, human: &str, doc: &T) -> std::io::Result<()> {
    let mut err = std::io::stderr().lock();
    let _ = err.write_all(human.as_bytes());
    if !human.ends_with('\n') {
        let _ = err.write_all(b"\n");
    }
    if format == Format::Json {
        let mut out = std::io::stdout().lock();
        let text = serde_json::to_string_pretty(doc).map_err(std::io::Error::other)?;
        let r = out
            .write_all(text.as_bytes())
            .and_then(|_| out.write_all(b"\n"))
            .and_then(|_| out.flush());
        match r {
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return Ok(()),
            other => other?,
        }
    }
    Ok(())
}

/// Formats an ID the way etcd and the operator do: 16 lowercase hex digits.
pub fn hex_id(id: u64) -> String {
    format!("{id:016x}")
}

/// Serde helpers so IDs are hex strings in every JSON document.
pub mod serde_hex {
    use serde::Serializer;

    /// Serializes a `u64` ID as 16 lowercase hex digits.
    pub fn serialize<S: Serializer>(id: &u64, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&super::hex_id(*id))
    }

    /// The same for optional IDs (`null` when absent).
    pub mod option {
        use serde::Serializer;

        /// Serializes `Some(id)` as hex, `None` as null.
        pub fn serialize<S: Serializer>(id: &Option<u64>, s: S) -> Result<S::Ok, S::Error> {
            match id {
                Some(id) => s.serialize_str(&super::super::hex_id(*id)),
                None => s.serialize_none(),
            }
        }
    }

    /// The same for lists of IDs.
    pub mod vec {
        use serde::ser::SerializeSeq;
        use serde::Serializer;

        /// Serializes each ID as hex.
        pub fn serialize<S: Serializer>(ids: &[u64], s: S) -> Result<S::Ok, S::Error> {
            let mut seq = s.serialize_seq(Some(ids.len()))?;
            for id in ids {
                seq.serialize_element(&super::super::hex_id(*id))?;
            }
            seq.end()
        }
    }
}
