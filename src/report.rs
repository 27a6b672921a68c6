//! The document `preflight` prints and writes as the verdict file, and the type
//! its readers parse it back into: the sidecar (`server::boot`) and `restore`'s
//! gate read the same fields the writer wrote, not keys looked up by name.
//!
//! A leaf: it names the types of `disk`, `verdict` and `evidence` a report holds
//! and does no I/O. The readers do not need the whole directory inspection or
//! upgrade check back, so the report is generic over those two fields: the
//! writer fills [`PreflightReport`] with the [`Inspection`] and
//! [`UpgradeCheck`], a reader parses a [`VerdictFile`].

use serde::{Deserialize, Deserializer, Serialize};

use crate::disk::ids::{ClusterId, MemberId};
use crate::disk::layout::Inspection;
use crate::disk::upgrade::UpgradeCheck;
use crate::evidence::mark::WitnessTerms;
use crate::evidence::Source;
use crate::verdict::{Row, Verdict};

/// One source's entry in the report.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EvidenceEntry {
    /// Which source.
    pub source: Source,
    /// The source was asked and answered.
    pub answered: bool,
    /// Why it did not answer, or why it was not asked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// What it said.
    #[serde(default, skip_serializing_if = "serde_json::Value::is_null")]
    pub said: serde_json::Value,
    /// How long asking it took.
    #[serde(default)]
    pub elapsed_ms: u64,
}

/// The JSON document of `preflight` (and the verdict file). `D`: the data
/// directory's document; `U`: the upgrade check's.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PreflightReport<D = Inspection, U = UpgradeCheck> {
    /// The verdict.
    pub verdict: Verdict,
    /// The row of `docs/decision-table.md` the verdict came from.
    pub row: Row,
    /// The exit code (the verdict's).
    pub exit_code: u8,
    /// What was seen.
    #[serde(default, deserialize_with = "null_as_default")]
    pub reason: String,
    /// What to do (empty when etcd may start).
    #[serde(default, deserialize_with = "null_as_default")]
    pub remedy: String,
    /// What does not change the verdict but should be fixed.
    #[serde(default)]
    pub warnings: Vec<String>,
    /// This member as configured.
    #[serde(default)]
    pub member: serde_json::Value,
    /// One entry per source.
    #[serde(default)]
    pub evidence: Vec<EvidenceEntry>,
    /// The inspect document of the data dir.
    #[serde(default)]
    pub data_dir: D,
    /// The upgrade check for the etcd about to start (absent when its version
    /// is unknown or the directory is not initialized).
    #[serde(default = "none")]
    pub upgrade_check: Option<U>,
    /// Wall time of the whole decision.
    #[serde(default)]
    pub elapsed_ms: u64,
    /// When the verdict was reached (seconds since the epoch).
    #[serde(default, deserialize_with = "whole_seconds")]
    pub decided_at_unix: u64,
    /// The Pod this verdict is for (`POD_UID`), so the sidecar never takes a
    /// verdict file of an earlier Pod for this Pod start's.
    #[serde(default)]
    pub pod_uid: Option<String>,
    /// The node's boot (`/proc/sys/kernel/random/boot_id`): a verdict file that
    /// outlived a reboot in a kept emptyDir is not this start's either.
    #[serde(default)]
    pub boot_id: Option<String>,
    /// What the sidecar holds this start to and records in the witnesses.
    #[serde(default)]
    pub witness: WitnessTerms,
}

impl<D, U> PreflightReport<D, U> {
    /// `source` was asked and answered.
    pub fn answered(&self, source: Source) -> bool {
        self.evidence
            .iter()
            .any(|e| e.source == source && e.answered)
    }
}

/// The verdict file as its readers parse it: the directory's IDs, the rest of
/// the inspection and the upgrade check skipped.
pub type VerdictFile = PreflightReport<DirIds, serde::de::IgnoredAny>;

/// What a reader of the verdict file takes from its `data_dir`: the IDs
/// preflight read. An ID that does not parse is unknown rather than failing
/// the whole file: the other fields still say what preflight decided.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct DirIds {
    /// The directory's member ID.
    #[serde(default, deserialize_with = "lenient_id")]
    pub member_id: Option<MemberId>,
    /// The directory's cluster ID.
    #[serde(default, deserialize_with = "lenient_id")]
    pub cluster_id: Option<ClusterId>,
}

impl VerdictFile {
    /// Parses a verdict file's bytes.
    pub fn parse(bytes: &[u8]) -> Result<VerdictFile, serde_json::Error> {
        serde_json::from_slice(bytes)
    }
}

fn none<U>() -> Option<U> {
    None
}

fn null_as_default<'de, De, T>(d: De) -> Result<T, De::Error>
where
    De: Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// Seconds as an integer, or as a number with a fraction (cut to the second).
fn whole_seconds<'de, De: Deserializer<'de>>(d: De) -> Result<u64, De::Error> {
    let v = Option::<serde_json::Number>::deserialize(d)?;
    Ok(v.and_then(|n| {
        n.as_u64().or_else(|| {
            n.as_f64()
                .filter(|f| f.is_finite() && *f >= 0.0)
                .map(|f| f as u64)
        })
    })
    .unwrap_or_default())
}

fn lenient_id<'de, De, Id>(d: De) -> Result<Option<Id>, De::Error>
where
    De: Deserializer<'de>,
    Id: std::str::FromStr,
{
    let s = Option::<serde_json::Value>::deserialize(d)?;
    Ok(s.as_ref()
        .and_then(serde_json::Value::as_str)
        .and_then(|s| s.parse().ok()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_full_verdict_file_is_read() {
        let doc = json!({
            "verdict": "start",
            "row": "5",
            "exit_code": 0,
            "reason": "the directory is this member's",
            "remedy": null,
            "decided_at_unix": 1700000000,
            "evidence": [{"source": "etcd", "answered": true, "elapsed_ms": 3}],
            "data_dir": {"state": "initialized", "member_id": "8e9e05c52164694d", "cluster_id": "cdf818194e3a8c32", "wal": {"segments": []}},
            "upgrade_check": {"target": "3.6.0", "findings": []},
            "some_future_key": {"nested": true}
        });
        let v = VerdictFile::parse(doc.to_string().as_bytes()).unwrap();
        assert_eq!(
            (v.verdict, v.row, v.exit_code),
            (Verdict::Start, Row::Start, 0)
        );
        assert_eq!(v.remedy, "");
        assert_eq!(v.decided_at_unix, 1_700_000_000);
        assert_eq!(
            v.data_dir.member_id,
            Some(MemberId::new(0x8e9e05c52164694d))
        );
        assert_eq!(
            v.data_dir.cluster_id,
            Some(ClusterId::new(0xcdf818194e3a8c32))
        );
        assert!(v.evidence[0].answered);
    }

    #[test]
    fn ids_that_do_not_parse_are_unknown_and_a_fraction_of_a_second_is_cut() {
        let doc = json!({
            "verdict": "refuse-empty-formed", "row": "7", "exit_code": 10,
            "decided_at_unix": 1700000000.5,
            "data_dir": {"member_id": "not hex", "cluster_id": null}
        });
        let v = VerdictFile::parse(doc.to_string().as_bytes()).unwrap();
        assert_eq!(v.decided_at_unix, 1_700_000_000);
        assert_eq!(v.data_dir, DirIds::default());
    }

    #[test]
    fn a_document_without_a_verdict_or_row_is_rejected() {
        for doc in [
            json!({"exit_code": 0, "row": "5"}),
            json!({"verdict": "start", "exit_code": 0}),
            json!({"verdict": "no-such-verdict", "row": "5", "exit_code": 0}),
            json!([1, 2]),
        ] {
            assert!(
                VerdictFile::parse(doc.to_string().as_bytes()).is_err(),
                "{doc}"
            );
        }
    }
}
