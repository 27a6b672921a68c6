//! `preflight`: may etcd start on this directory? (docs/commands.md § preflight,
//! docs/decision-table.md)
//!
//! Gathers the evidence — the directory, the live cluster, the operator's record,
//! env hints — within one time budget, hands it to [`verdict::decide`], and writes
//! the answer three ways: the human summary and `-o json`, the verdict file the
//! sidecar reads, and a short termination message the operator reads from the
//! Pod's `initContainerStatuses`. Read-only: the directory is never changed.

use std::fmt::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::cli::PreflightArgs;
use crate::disk::layout::{DirKind, Inspection};
use crate::disk::upgrade::UpgradeCheck;
use crate::disk::warm;
use crate::error::Error;
use crate::evidence::mark::{self, WitnessTerms};
use crate::evidence::{self, Source};
use crate::exit::Exit;
use crate::output::{self, fitted_message, write_atomic, write_termination_message};
use crate::verdict::{self, Answer, Decision, Verdict};

mod config;
mod gather;
mod sources;

pub use config::Config;
pub use gather::{witness_revisions, LeaseRevisions};
use gather::{Gathered, Read};

/// Where the sidecar looks for this Pod start's verdict unless told otherwise.
pub const DEFAULT_VERDICT_FILE: &str = "/run/etcd-agent/preflight.json";
/// Time kept back from the budget for deciding and writing the outputs.
const OUTPUT_RESERVE: Duration = Duration::from_millis(250);

pub use crate::report::{EvidenceEntry, PreflightReport};

/// Runs `preflight`.
pub fn run(args: &PreflightArgs) -> crate::error::Result<Exit> {
    let cfg = match Config::from_args(args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("etcd-member-agent preflight: {e}");
            let (reason, remedy) = (e.to_string(), "fix the configuration");
            let doc = json!({"verdict": null, "exit_code": Exit::Usage.code(), "reason": reason, "remedy": remedy, "evidence": [], "data_dir": null});
            // An init container is seen by the operator only through this message.
            let msg = fitted_message(
                serde_json::Value::Null,
                Exit::Usage.code(),
                [None, None],
                &reason,
                remedy,
            );
            write_termination_message(args.termination_log.as_deref(), &msg);
            output::emit(args.output.format, "", &doc)?;
            return Ok(Exit::Usage);
        }
    };
    let started = Instant::now();
    // Started before the directory is read, so that the backend comes in while
    // the WAL is verified; it decides nothing (crate::disk::warm). Left to the
    // sidecar when it said, for this Pod start, that it reads ahead once the
    // verdict is `start`: then nothing is read ahead here, and the WAL's
    // verification has the disk to itself.
    let reading_ahead = args.read_ahead.then(|| {
        warm::start_unless_handed_off(
            &cfg.paths,
            warm::Memory::of_this_process,
            cfg.verdict_path().with_file_name(warm::HANDOFF_FILE),
            warm::PodStart {
                pod_uid: cfg.me.pod_uid.clone(),
                boot_id: evidence::boot_id(),
            },
        )
    });
    let mut report = decide(&cfg)?;
    let exit = report.verdict.exit();
    tracing::info!(
        verdict = report.verdict.name(),
        exit_code = exit.code(),
        reason = %report.reason,
        elapsed_ms = report.elapsed_ms,
        "preflight verdict"
    );
    if let Err(e) = write_verdict_file(&cfg, &report) {
        // The file only informs the sidecar, which falls back to the WAL. Failing
        // here would turn a refusal's code into 2 and lose the JSON document and
        // the termination message that explain it.
        // Said in the document too (its `warnings`), which the caller and the
        // logs keep; the sidecar shows "waiting for preflight's verdict".
        tracing::error!(error = %e, "the verdict stands, but the sidecar will not see it");
        report.warnings.push(format!(
            "{e}: the verdict stands, but the sidecar (serve) will not see it"
        ));
    }
    write_termination_message(
        cfg.termination_log.as_deref(),
        &termination_message(&report),
    );
    if exit != Exit::Ok {
        cfg.report_event(report.verdict.name(), &report.reason);
    }
    output::emit(args.output.format, &summary(&report), &report)?;
    if let Some(r) = reading_ahead {
        // After the verdict is out: etcd reads these files only when it starts.
        let starts = matches!(report.verdict, Verdict::Start);
        match r.finish(starts, started + cfg.timeout) {
            Some(warm::Warmed {
                skipped: Some(skip),
                ..
            }) if starts => tracing::warn!(
                room_mib = skip.room >> 20,
                need_mib = skip.need >> 20,
                "read-ahead skipped: this container's memory limit leaves {} MiB for page cache, less than the {} MiB of WAL and db etcd reads on start, so what preflight read would be reclaimed before etcd reads it; to let preflight warm etcd's cold start, raise the preflight container's memory limit above that (or remove it)",
                skip.room >> 20,
                skip.need >> 20
            ),
            Some(w) if w.handed_off => tracing::info!(
                "read-ahead left to the sidecar, which reads the backend ahead while etcd starts"
            ),
            Some(w) => tracing::info!(
                files = w.files,
                bytes = w.bytes,
                cached = w.cached,
                stopped = w.stopped,
                "read ahead for etcd"
            ),
            None => tracing::info!("read-ahead cut short by the deadline"),
        }
    }
    Ok(exit)
}

/// Gathers the evidence and decides. Public for the sidecar and tests.
pub fn decide(cfg: &Config) -> crate::error::Result<PreflightReport> {
    let started = Instant::now();
    let deadline = started
        + cfg
            .timeout
            .saturating_sub(OUTPUT_RESERVE)
            .max(Duration::from_millis(50));
    let Read {
        dir,
        mut facts,
        elapsed: dir_elapsed,
        gathered,
    } = gather::read_and_gather(cfg, started, deadline)?;
    let image = gathered.as_ref().and_then(|g| g.etcd_image.as_ref());
    let (upgrade_check, version_warning) =
        gather::upgrade_check(cfg, &dir, &facts, deadline, image);
    facts.set_upgrade(upgrade_check.clone());
    let g = gathered.unwrap_or_else(Gathered::unused);
    let (witness_file, file_warning) = match g.witness_file {
        Ok(w) => (w, None),
        Err(why) => (None, Some(why)),
    };
    let witness_file_unread = file_warning.clone();
    let mut inputs = verdict::Inputs {
        dir: facts,
        me: cfg.me.clone(),
        live: g.live,
        operator: g.operator,
        witness: g.witness,
        witness_file,
        witness_file_unread,
        hint_member_id: cfg.hint_member_id,
        hint_cluster_id: cfg.hint_cluster_id,
        allow_bootstrap_without_evidence: cfg.allow_bootstrap_without_evidence,
    };
    let mut decided = verdict::decide(&inputs);
    let mut live_entry = g.live_entry;
    let behind_with = |live: &Answer<verdict::LiveFacts>| {
        let mut asked = inputs.clone();
        asked.live = live.clone();
        verdict::decide(&asked).row.waits_for_the_leader()
    };
    if let Some((live, entry)) =
        gather::ask_leader_again(cfg, &dir, &decided, &inputs.live, deadline, behind_with)?
    {
        inputs.live = live;
        live_entry = entry;
        decided = verdict::decide(&inputs);
    }
    // Row 6h's keyspace sign: asked only when the directory stands past the
    // leader (or past enough voters to make a majority with those showing
    // a position sign), where the position signs alone cannot see another
    // history.
    if matches!(decided.verdict, Verdict::Start) {
        if let Some(revision) = verdict::keyspace_check_at(&inputs) {
            let (checks, said) = gather::compare_keyspaces(cfg, &dir, revision, deadline)?;
            if let verdict::Answer::Answered(l) = &mut inputs.live {
                for p in &mut l.positions {
                    p.kv_hash = checks
                        .iter()
                        .find(|(m, _)| *m == p.member_id)
                        .map(|(_, c)| *c);
                    // Asked and not compared: unknown, not "of its history".
                    p.kv_unanswered = p.kv_hash.is_none();
                }
            }
            if let serde_json::Value::Object(o) = &mut live_entry.said {
                o.insert("hash_kv".to_owned(), said);
            }
            decided = verdict::decide(&inputs);
        }
    }
    decided.warnings.extend(version_warning);
    decided.warnings.extend(file_warning);
    for w in &decided.warnings {
        tracing::warn!(warning = %w, "preflight");
    }
    let evidence = [
        dir_entry(&dir, dir_elapsed),
        live_entry,
        g.kube_entry,
        env_entry(cfg),
        g.witness_entry,
    ]
    .into_iter()
    .chain(g.witness_file_entry)
    .collect();
    Ok(report(
        cfg,
        &inputs,
        decided,
        evidence,
        dir,
        upgrade_check,
        started,
    ))
}

/// The report of a decision.
fn report(
    cfg: &Config,
    inputs: &verdict::Inputs,
    decided: Decision,
    evidence: Vec<EvidenceEntry>,
    dir: Inspection,
    upgrade_check: Option<UpgradeCheck>,
    started: Instant,
) -> PreflightReport {
    let Decision {
        verdict,
        row,
        reason,
        remedy,
        warnings,
        floor,
        rebase_witness,
    } = decided;
    let witness = WitnessTerms {
        incarnation: mark::Incarnation {
            token_sha256: cfg.me.token_sha256.clone(),
            cluster_uid: match &inputs.operator {
                Answer::Answered(o) => o.cluster_uid.clone(),
                _ => None,
            },
        },
        floor: floor.map(|(raft_index, source)| mark::Floor { raft_index, source }),
        rebase: rebase_witness,
        rebase_by: None,
        seen_revision: inputs
            .witness
            .clone()
            .into_option()
            .flatten()
            .iter()
            .chain(inputs.witness_file.iter())
            .filter_map(|w| w.revision)
            .max(),
    };
    PreflightReport {
        verdict,
        row,
        exit_code: verdict.exit().code(),
        reason,
        remedy,
        warnings,
        member: json!({
            "name": cfg.me.name,
            "peer_urls": cfg.me.peer_urls,
            "seed_shape": cfg.me.self_only_initial_cluster,
        }),
        evidence,
        witness,
        upgrade_check,
        data_dir: dir,
        elapsed_ms: started.elapsed().as_millis() as u64,
        decided_at_unix: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        pod_uid: cfg.me.pod_uid.clone(),
        boot_id: evidence::boot_id(),
    }
}

/// The env hints' entry.
fn env_entry(cfg: &Config) -> EvidenceEntry {
    let hinted = cfg.hint_member_id.is_some() || cfg.hint_cluster_id.is_some();
    EvidenceEntry {
        source: Source::Env,
        answered: hinted,
        error: (!hinted)
            .then(|| "ETCD_MEMBER_ID and ETCD_CLUSTER_ID are empty (proves nothing)".to_string()),
        said: json!({
            "member_id": cfg.hint_member_id.map(|id| id.to_string()),
            "cluster_id": cfg.hint_cluster_id.map(|id| id.to_string()),
        }),
        elapsed_ms: 0,
    }
}

/// The data directory's entry.
fn dir_entry(dir: &Inspection, elapsed: Duration) -> EvidenceEntry {
    EvidenceEntry {
        source: Source::DataDir,
        answered: dir.kind() != DirKind::Unreadable,
        error: dir.problem().map(|p| p.message.clone()),
        said: json!({
            "state": dir.kind(),
            "member_id": dir.member_id().map(|id| id.to_string()),
            "cluster_id": dir.cluster_id().map(|id| id.to_string()),
            "running": dir.running,
        }),
        elapsed_ms: elapsed.as_millis() as u64,
    }
}

fn write_verdict_file(cfg: &Config, report: &PreflightReport) -> crate::error::Result<()> {
    let (path, explicit) = (cfg.verdict_path(), cfg.verdict_file.is_some());
    if !explicit && !path.parent().is_some_and(Path::is_dir) {
        tracing::debug!(path = %path.display(), "no verdict volume mounted; verdict file not written");
        return Ok(());
    }
    let text = serde_json::to_vec_pretty(report)
        .map_err(|e| Error::internal("cannot encode the verdict file", &e))?;
    write_atomic(&path, &text).map_err(|e| {
        Error::internal(
            &format!("cannot write the verdict file {}", path.display()),
            &e,
        )
    })
}

/// The short message Kubernetes shows in `initContainerStatuses[].state.terminated.message`.
pub fn termination_message(report: &PreflightReport) -> String {
    fitted_message(
        json!(report.verdict),
        report.exit_code,
        [
            report.data_dir.member_id().map(|id| id.to_string()),
            report.data_dir.cluster_id().map(|id| id.to_string()),
        ],
        &report.reason,
        &report.remedy,
    )
}

/// The human summary: verdict, reason, remedy, and what each source said.
pub fn summary(r: &PreflightReport) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "preflight: {} (exit {})", r.verdict.name(), r.exit_code);
    let _ = writeln!(s, "  reason: {}", r.reason);
    if !r.remedy.is_empty() {
        let _ = writeln!(s, "  remedy: {}", r.remedy);
    }
    for e in &r.evidence {
        let status = if e.answered {
            "answered".to_string()
        } else {
            e.error.clone().unwrap_or_else(|| "no answer".into())
        };
        let _ = writeln!(
            s,
            "  evidence {}: {} ({} ms)",
            e.source, status, e.elapsed_ms
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::disk::layout::{self, Options, Paths};
    use crate::verdict::{Row, Verdict};

    #[test]
    fn termination_message_fits_in_4_kib() {
        let dir = layout::inspect(
            &Paths::new(Path::new("/nonexistent-agent-test"), None),
            Options::default(),
        );
        let report = PreflightReport {
            verdict: Verdict::RefuseEmptyFormed,
            row: Row::EmptyFormed,
            exit_code: 10,
            reason: "é".repeat(5000),
            remedy: "x".repeat(9000),
            warnings: vec![],
            member: serde_json::Value::Null,
            evidence: vec![],
            data_dir: dir,
            upgrade_check: None,
            elapsed_ms: 0,
            decided_at_unix: 0,
            pod_uid: None,
            boot_id: None,
            witness: Default::default(),
        };
        let msg = termination_message(&report);
        assert!(
            msg.len() <= output::TERMINATION_MESSAGE_MAX,
            "{}",
            msg.len()
        );
        let v: serde_json::Value = serde_json::from_str(&msg).unwrap();
        assert_eq!(v["verdict"], "refuse-empty-formed");
        assert_eq!(v["exit_code"], 10);
    }
}
