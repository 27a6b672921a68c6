//! Unit tests of restore: the gate, the plan, the halts.

use super::*;

/// preflight's report of `row` giving `verdict`, with `answered` the
/// sources that answered.
fn report(row: Row, verdict: Verdict, answered: &[Source]) -> PreflightReport<(), ()> {
    PreflightReport {
        verdict,
        row,
        exit_code: verdict.exit().code(),
        reason: String::new(),
        remedy: String::new(),
        warnings: Vec::new(),
        member: serde_json::Value::Null,
        evidence: answered
            .iter()
            .map(|&source| EvidenceEntry {
                source,
                answered: true,
                error: None,
                said: serde_json::Value::Null,
                elapsed_ms: 0,
            })
            .collect(),
        data_dir: (),
        upgrade_check: None,
        elapsed_ms: 0,
        decided_at_unix: 0,
        pod_uid: None,
        boot_id: None,
        witness: Default::default(),
    }
}

/// The exit code and verdict name the gate's refusal ends the run with.
fn refused(pre: &PreflightReport<(), ()>) -> (Exit, &'static str) {
    let halt = match gate(pre) {
        Gate::Formed => Halt::Formed {
            verdict: pre.verdict,
            reason: String::new(),
        },
        Gate::Refuse(verdict) => Halt::Refused {
            verdict,
            reason: String::new(),
            remedy: String::new(),
        },
        g => panic!("{:?} is not refused: {g:?}", pre.row),
    };
    (halt.exit(), halt.verdict())
}

/// Every row of the table, with each verdict it can give: the gate
/// restores only a first bootstrap, never over a cluster that formed, and
/// passes preflight's own refusals on with their exit code and name.
#[test]
fn the_gate_restores_only_a_first_bootstrap() {
    use Source::{Env, Etcd, Kube};
    let formed = (Exit::RestoreFormed, "refuse-formed");
    for row in Row::ALL {
        for &verdict in row.verdicts() {
            for answered in [&[][..], &[Kube], &[Env], &[Etcd, Kube]] {
                let pre = report(row, verdict, answered);
                let what = format!("{row:?} {verdict:?} {answered:?}");
                match (verdict, row) {
                    (Verdict::Start, _) => {
                        assert_eq!(gate(&pre), Gate::AlreadyInitialized, "{what}")
                    }
                    (Verdict::Bootstrap, _) => assert_eq!(gate(&pre), Gate::Proceed, "{what}"),
                    (Verdict::Join, Row::AllowedWithoutEvidence) if answered.is_empty() => {
                        assert_eq!(gate(&pre), Gate::Proceed, "{what}")
                    }
                    (Verdict::Join | Verdict::RefuseEmptyFormed, _)
                    | (Verdict::PhaseUnknown, Row::JoinUntrusted | Row::NotListed) => {
                        assert_eq!(refused(&pre), formed, "{what}")
                    }
                    (v, _) => assert_eq!(refused(&pre), (v.exit(), v.name()), "{what}"),
                }
            }
        }
    }
}

/// The reasons composed from several pieces read as the `format!` that
/// composed them before the halt was typed.
#[test]
fn the_composed_reasons_read_as_before() {
    let m: MemberId = "8e9e05c52164694d".parse().unwrap();
    let c: ClusterId = "cdf818194e3a8c32".parse().unwrap();
    let m2: MemberId = "0000000000000001".parse().unwrap();
    let h = Halt::NotThisRestore {
        member: Some(m2),
        cluster: None,
        expected_member: m,
        expected_cluster: c,
    };
    assert_eq!(
        h.to_string(),
        format!(
            "the directory holds member {} of cluster {}, not the {} of {} this restore would produce: it was not created by this restore; nothing touched",
            Some(m2).map(|id| id.to_string()).unwrap_or_default(),
            None::<ClusterId>.map(|id| id.to_string()).unwrap_or_default(),
            m,
            c
        )
    );
    let h = Halt::Formed {
        verdict: Verdict::Join,
        reason: "r".into(),
    };
    assert_eq!(h.to_string(), format!("refusing to restore: the cluster already formed ({}: {}). A restore would boot a new cluster with this member's and the cluster's IDs over it", Verdict::Join.name(), "r"));
    assert_eq!(h.remedy(), REMEDY_FORMED);
    let h = Halt::Refused {
        verdict: Verdict::RefusePartial,
        reason: "r".into(),
        remedy: "fix it".into(),
    };
    assert_eq!(h.to_string(), "refusing to restore: r");
    assert_eq!(h.remedy(), "fix it");
    let (existing, snapshot) = (
        Content {
            revision: 1,
            keys: 2,
            kv_hash: 3,
        },
        Content {
            revision: 4,
            keys: 5,
            kv_hash: 6,
        },
    );
    assert_eq!(
        Halt::BootstrappedEmpty { existing, snapshot }.to_string(),
        format!(
            "the data dir holds this restore's member and cluster IDs but not the snapshot's data: its backend is at revision {} ({} keys), the snapshot at revision {} ({} keys). etcd bootstrapped it empty instead of restoring; nothing touched",
            existing.revision, existing.keys, snapshot.revision, snapshot.keys
        )
    );
    let source = SourcePlan::File("/snap/db".into());
    let size = 1000;
    assert_eq!(
        no_trailer(&source, size).to_string(),
        format!(
            "the snapshot {} has no SHA-256 trailer ({size} bytes, size % 512 != 32): it is not `etcdctl snapshot save` output",
            source.describe()
        )
    );
    let (expected, computed) = ("ab".to_string(), "cd".to_string());
    assert_eq!(
        Halt::HashMismatch { location: source.describe(), expected: expected.clone(), computed: computed.clone() }.to_string(),
        format!("the snapshot {} fails its SHA-256 check: the trailer says {expected}, the content hashes to {computed}", source.describe())
    );
    let (expected, received) = (10u64, 7u64);
    assert_eq!(
        Halt::SourceChanged { location: source.describe(), announced: expected, received }.to_string(),
        format!("the snapshot {} changed while it was fetched: {expected} bytes announced, {received} received", source.describe())
    );
    let (fs_path, needed, available) = (PathBuf::from("/var/lib/etcd"), 5000u64, 10u64);
    assert_eq!(
        Halt::TooLittleSpace { purpose: SpaceFor::Restore, path: fs_path.clone(), size, needed, available }.to_string(),
        format!(
            "not enough free space on {}: a restore of a {size}-byte snapshot needs {needed} bytes (2 × the snapshot, for the staged copy and the restored db, plus the two {WAL_SEGMENT_BYTES}-byte WAL segments etcd preallocates, plus 1048576 bytes of margin), but {available} are available",
            fs_path.display()
        )
    );
    assert_eq!(
        Halt::TooLittleSpace { purpose: SpaceFor::Compare, path: fs_path.clone(), size, needed, available }.to_string(),
        format!(
            "not enough free space on {}: comparing this member with a {size}-byte snapshot needs {needed} bytes (the staged copy, plus 1048576 bytes of margin), but {available} are available",
            fs_path.display()
        )
    );
    let e = VerifyError {
        dir: "/d".into(),
        problems: vec!["a".into(), "b".into()],
    };
    let text = e.to_string();
    assert_eq!(
        Halt::PublishedIdentity(e).to_string(),
        format!("after publishing: {text}")
    );
    let e = Error::internal("reading", &std::io::Error::other("boom"));
    let text = format!("gathering evidence failed: {e:#}");
    assert_eq!(Halt::Evidence(e).to_string(), text);
    let e = Error::usage("bad flag");
    let text = e.to_string();
    assert_eq!(Halt::Usage(text.clone()).to_string(), text);
}

/// Each typed error passed through reads as the error itself did.
#[test]
fn a_wrapped_error_reads_as_itself() {
    let io = || std::io::Error::from_raw_os_error(nix::libc::ENOSPC);
    let stage = || StageError {
        op: "rename",
        path: "/d/member".into(),
        source: io(),
    };
    let text = stage().to_string();
    let h = Halt::from(stage());
    assert_eq!(
        (h.exit(), h.verdict(), h.to_string()),
        (Exit::RestoreSpace, "no-space", text)
    );
    let eacces = StageError {
        op: "create",
        path: "/d".into(),
        source: std::io::Error::from_raw_os_error(nix::libc::EACCES),
    };
    let text = eacces.to_string();
    let h = Halt::from(eacces);
    assert_eq!(
        (h.exit(), h.verdict(), h.to_string()),
        (Exit::Unreadable, "data-dir-unwritable", text)
    );
    let write = FetchError::Write {
        path: "/d/.restore-staging/snapshot".into(),
        source: io(),
    };
    let text = write.to_string();
    let h = Halt::from(write);
    assert_eq!(
        (h.exit(), h.verdict(), h.to_string()),
        (Exit::RestoreSpace, "no-space", text)
    );
    assert_eq!(h.remedy(), "give the data volume more room, then retry");
    let gone = FetchError::Source(SourceError::NotFound {
        location: "/snap".into(),
    });
    let text = gone.to_string();
    let h = Halt::from(gone);
    assert_eq!(
        (h.exit(), h.verdict(), h.to_string()),
        (Exit::RestoreSource, "source-failed", text)
    );
}

/// A crashed restore leaves its staging directory; the inspector must treat
/// it as debris (the directory stays `empty`), or the rerun that would finish
/// the job is refused as `partial`.
#[test]
fn the_inspector_treats_a_leftover_staging_dir_as_debris() {
    let dir = tempfile::tempdir().unwrap();
    let staging = Staging::of(dir.path());
    staging.create().unwrap();
    std::fs::create_dir_all(staging.restored().join("member/snap")).unwrap();
    std::fs::write(staging.restored().join("member/snap/db"), b"x").unwrap();
    std::fs::write(staging.snapshot(), b"partial").unwrap();
    let ins = layout::inspect(&Paths::new(dir.path(), None), Options::default());
    assert_eq!(ins.kind(), crate::disk::layout::DirKind::Empty);
    let entry = ins
        .unexpected
        .iter()
        .find(|e| e.path.ends_with(stage::STAGING_DIR))
        .expect("the staging dir is reported");
    assert!(entry.note.contains("restore"), "{}", entry.note);
}

#[test]
fn the_termination_message_fits_in_4_kib() {
    let mut r = RestoreReport::new(None);
    r.reason = "é".repeat(5000);
    r.remedy = "x".repeat(9000);
    let msg = termination_message(&r);
    assert!(msg.len() <= output::TERMINATION_MESSAGE_MAX);
    let v: serde_json::Value = serde_json::from_str(&msg).unwrap();
    assert_eq!(v["verdict"], "usage-error");
}

#[test]
fn auto_bump_takes_the_highest_revision_of_every_members_witness() {
    let mut notes = Vec::new();
    let leases = vec![
        ("etcd-witness-m0".to_owned(), Ok(Some(500))),
        ("etcd-witness-m1".to_owned(), Ok(Some(9_000))),
        ("etcd-witness-m2".to_owned(), Ok(None)),
    ];
    // Every member computes the same: its own witness is one of them.
    for own in [Some(500), None, Some(9_000)] {
        let seen = highest_seen(own, leases.clone(), &mut notes).ok().flatten();
        assert_eq!(seen, Some(9_000));
    }
    assert!(notes
        .iter()
        .any(|n| n.contains("etcd-witness-m1 recorded revision 9000")));
    // A witness of this member's Pod only (the file) above every Lease.
    assert_eq!(
        highest_seen(Some(12_000), leases.clone(), &mut notes)
            .ok()
            .flatten(),
        Some(12_000)
    );
    // One Lease unreadable: no guess, a halt naming it.
    let mut unreadable = leases;
    unreadable[2].1 = Err("403 Forbidden".to_owned());
    let halt = highest_seen(Some(500), unreadable, &mut notes).err();
    assert!(
        matches!(&halt, Some(h @ Halt::AutoBumpUnread { .. }) if h.exit() == Exit::PhaseUnknown && h.to_string().contains("etcd-witness-m2 cannot be read: 403")),
        "{halt:?}"
    );
}

#[test]
fn auto_bump_puts_the_snapshot_above_what_the_witness_saw() {
    assert_eq!(auto_bump(None, 40), 0);
    assert_eq!(auto_bump(Some(55), 40), 15 + AUTO_BUMP_MARGIN);
    // A snapshot newer than the witness's last renewal: the margin alone.
    assert_eq!(auto_bump(Some(30), 40), AUTO_BUMP_MARGIN);
    assert_eq!(
        auto_bump(Some(i64::MAX), i64::MIN),
        i64::MAX as u64 + AUTO_BUMP_MARGIN
    );
}
