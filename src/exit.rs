//! The exit codes of every subcommand: one enum, stable numbers, documented in
//! `docs/exit-codes.md` (a test keeps the two in agreement). Operators branch on
//! these numbers, so a number never changes meaning once released.

use std::process::ExitCode;

/// Why the process ended. `main` maps every outcome to exactly one of these.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Exit {
    /// Success, or: etcd may proceed.
    Ok,
    /// Internal error (a bug).
    Internal,
    /// Usage or configuration error.
    Usage,
    /// The data dir cannot be read; fails closed.
    Unreadable,
    /// Refuse: the data dir is empty but this member started before.
    RefuseEmptyFormed,
    /// Refuse: the data dir belongs to another member or cluster.
    RefuseForeign,
    /// Refuse: the data dir is corrupt.
    RefuseCorrupt,
    /// Refuse: the data dir is partially initialized.
    RefusePartial,
    /// Refuse: the cluster's phase cannot be established.
    PhaseUnknown,
    /// Refuse: etcd is running on this data dir.
    RefuseRunning,
    /// Refuse: the etcd version about to start would refuse or panic on this data dir.
    RefuseVersion,
    /// Refuse: the data dir's log went backwards (it ends behind what this
    /// member is known to have reached, or its backend applied past it).
    RefuseRolledBack,
    /// Wipe incomplete: entries remain.
    WipeIncomplete,
    /// Restore: the snapshot source is missing, unreadable or fails its hash.
    RestoreSource,
    /// Restore: not enough free space.
    RestoreSpace,
    /// Restore: the restore tool is missing or failed.
    RestoreTool,
    /// Restore: the restored directory failed verification.
    RestoreVerify,
    /// Restore: refused because the cluster already formed.
    RestoreFormed,
    /// pod-check: hazards found.
    Hazards,
    /// pod-check: the Pod could not be checked (API error, timeout); never "clean".
    PodCheckFailed,
    /// fleet: something needs a person (a refused member, a cluster condition).
    FleetAttention,
    /// fleet: part of the fleet could not be read, and nothing read needs a person.
    FleetIncomplete,
}

impl Exit {
    /// Every variant, in code order.
    pub const ALL: [Exit; 22] = [
        Exit::Ok,
        Exit::Internal,
        Exit::Usage,
        Exit::Unreadable,
        Exit::RefuseEmptyFormed,
        Exit::RefuseForeign,
        Exit::RefuseCorrupt,
        Exit::RefusePartial,
        Exit::PhaseUnknown,
        Exit::RefuseRunning,
        Exit::RefuseVersion,
        Exit::RefuseRolledBack,
        Exit::WipeIncomplete,
        Exit::RestoreSource,
        Exit::RestoreSpace,
        Exit::RestoreTool,
        Exit::RestoreVerify,
        Exit::RestoreFormed,
        Exit::Hazards,
        Exit::PodCheckFailed,
        Exit::FleetAttention,
        Exit::FleetIncomplete,
    ];

    /// The process exit status.
    pub const fn code(self) -> u8 {
        match self {
            Exit::Ok => 0,
            Exit::Internal => 1,
            Exit::Usage => 2,
            Exit::Unreadable => 3,
            Exit::RefuseEmptyFormed => 10,
            Exit::RefuseForeign => 11,
            Exit::RefuseCorrupt => 12,
            Exit::RefusePartial => 13,
            Exit::PhaseUnknown => 14,
            Exit::RefuseRunning => 15,
            Exit::RefuseVersion => 16,
            Exit::RefuseRolledBack => 17,
            Exit::WipeIncomplete => 20,
            Exit::RestoreSource => 30,
            Exit::RestoreSpace => 31,
            Exit::RestoreTool => 32,
            Exit::RestoreVerify => 33,
            Exit::RestoreFormed => 34,
            Exit::Hazards => 40,
            Exit::PodCheckFailed => 41,
            Exit::FleetAttention => 50,
            Exit::FleetIncomplete => 51,
        }
    }

    /// One line, as in the table of `docs/exit-codes.md`.
    pub const fn meaning(self) -> &'static str {
        match self {
            Exit::Ok => "success / may proceed",
            Exit::Internal => "internal error (a bug)",
            Exit::Usage => "usage or configuration error",
            Exit::Unreadable => "data dir unreadable (fails closed)",
            Exit::RefuseEmptyFormed => "refuse: empty data dir but this member started before",
            Exit::RefuseForeign => "refuse: data dir belongs to another member or cluster",
            Exit::RefuseCorrupt => "refuse: data dir corrupt",
            Exit::RefusePartial => "refuse: data dir partially initialized",
            Exit::PhaseUnknown => "refuse: cannot establish the cluster's phase",
            Exit::RefuseRunning => "refuse: etcd is running on this data dir",
            Exit::RefuseVersion => {
                "refuse: the etcd version about to start would refuse or panic on this data dir"
            }
            Exit::RefuseRolledBack => {
                "refuse: the data dir's log went backwards (behind what this member is known to have reached)"
            }
            Exit::WipeIncomplete => "wipe incomplete",
            Exit::RestoreSource => "restore: snapshot source missing, unreadable or hash mismatch",
            Exit::RestoreSpace => "restore: not enough free space",
            Exit::RestoreTool => "restore: restore tool missing or failed",
            Exit::RestoreVerify => "restore: restored directory failed verification",
            Exit::RestoreFormed => "restore: refused because the cluster already formed",
            Exit::Hazards => "pod-check: hazards found",
            Exit::PodCheckFailed => {
                "pod-check: the Pod could not be checked (API error or timeout)"
            }
            Exit::FleetAttention => {
                "fleet: something needs a person (a refused member, a cluster condition)"
            }
            Exit::FleetIncomplete => {
                "fleet: part of the fleet could not be read; nothing read needs a person"
            }
        }
    }
}

impl From<Exit> for ExitCode {
    fn from(e: Exit) -> ExitCode {
        ExitCode::from(e.code())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn codes_are_unique_and_ordered() {
        let codes: Vec<u8> = Exit::ALL.iter().map(|e| e.code()).collect();
        let set: HashSet<u8> = codes.iter().copied().collect();
        assert_eq!(set.len(), codes.len());
        assert!(codes.windows(2).all(|w| w[0] < w[1]));
    }

    /// `docs/exit-codes.md` holds a table `| code | meaning |`; it must list exactly
    /// the enum's codes with the enum's meanings.
    #[test]
    fn docs_table_agrees_with_the_enum() {
        let doc = include_str!("../docs/exit-codes.md");
        let mut rows = Vec::new();
        for line in doc.lines() {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            if cells.len() >= 4 {
                if let Ok(code) = cells[1].trim_matches('`').parse::<u8>() {
                    rows.push((code, cells[2].to_string()));
                }
            }
        }
        let want: Vec<(u8, String)> = Exit::ALL
            .iter()
            .map(|e| (e.code(), e.meaning().to_string()))
            .collect();
        assert_eq!(rows, want);
    }
}
