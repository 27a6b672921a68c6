//! Step six: what the directory records of its cluster's members (the
//! backend's `members` bucket, the `.snap`, the WAL's membership changes after
//! it), and the [`Initialized`] report assembled from every step.

use std::collections::BTreeMap;

use super::super::bbolt::Backend;
use super::super::raftpb::ConfChangeKind;
use super::super::snap::SnapFile;
use super::super::wal::Wal;
use super::snapshot::Start;
use super::{BackendRead, FoundingMember, Initialized, Log, MemberSource, RecordedMember};
use crate::disk::ids::MemberId;

/// The report of an initialized directory, from the WAL (`wal`, `log`), the
/// start snapshot and the backend.
pub(super) fn initialized(wal: &Wal, log: Log, start: Start, backend: BackendRead) -> Initialized {
    let Start {
        point: snapshot,
        file: snap_file,
    } = start;
    let summary = match &backend {
        BackendRead::Read { summary, .. } => Some(summary),
        BackendRead::Unread(_) => None,
    };
    let membership = membership(wal, snap_file.as_ref(), summary);
    let own = membership.iter().find(|m| m.id == wal.member_id);
    let self_peer_urls = own.map(|m| m.peer_urls.clone());
    let self_name = own.map(|m| m.name.clone()).filter(|n| !n.is_empty());
    let removed = removed(wal, snap_file.as_ref(), summary);
    let added_with_peer_urls = wal
        .conf_changes
        .iter()
        .filter(|c| c.node_id == wal.member_id && c.kind != ConfChangeKind::RemoveNode)
        .find_map(|c| c.member.as_ref().filter(|m| !m.is_promote))
        .map(|m| m.member.peer_urls.clone())
        .filter(|u| !u.is_empty());
    let learner_flag_stale = summary
        .map(|b| stale_learner_flags(wal, snap_file.as_ref(), b))
        .unwrap_or_default();
    let formation = formation(wal);
    let restored = !formation.is_empty()
        && wal
            .snapshots
            .iter()
            .any(|s| s.index == formation.len() as u64 && s.term == 1)
        && summary.is_some_and(|b| b.revision.unwrap_or(0) > 1);
    Initialized {
        self_removed: removed.contains(&wal.member_id),
        removed_ids: removed,
        added_with_peer_urls,
        formation,
        restored,
        empty_log: wal.last_index == 0
            && wal.snapshots.iter().all(|s| s.index == 0)
            && snapshot.index == 0,
        v2_replay: wal.v2.replay(snapshot.index, wal.hard_state.commit),
        v2_custom: snap_file
            .as_ref()
            .map(|f| f.v2_custom.clone())
            .unwrap_or_default(),
        snap_cluster_version: snap_file.as_ref().and_then(|f| f.cluster_version.clone()),
        snap_member_roles: snap_file
            .iter()
            .flat_map(|f| {
                f.members
                    .iter()
                    .map(|m| (m.id, m.is_learner || f.learners.contains(&m.id)))
            })
            .collect(),
        learner_flag_stale,
        membership,
        self_peer_urls,
        self_name,
        snapshot,
        backend,
        log,
    }
}

/// The member IDs any record of the directory gives as removed, sorted.
fn removed(wal: &Wal, snap: Option<&SnapFile>, backend: Option<&Backend>) -> Vec<MemberId> {
    let mut removed: Vec<MemberId> = backend
        .iter()
        .flat_map(|b| b.removed_members.iter().copied())
        .chain(snap.iter().flat_map(|f| f.removed.iter().copied()))
        .chain(
            wal.conf_changes
                .iter()
                .filter(|c| c.kind == ConfChangeKind::RemoveNode)
                .map(|c| c.node_id),
        )
        .collect();
    removed.sort_unstable();
    removed.dedup();
    removed
}

/// The membership recorded in the directory: the backend's `members` bucket, then
/// the `.snap` in use, then ConfChange entries after it, each later source
/// overriding an earlier one for the same ID (3.4's backend can lag its `.snap`
/// after a restore; the WAL's conf changes are the newest word), except a
/// learner's promotion, which carries no URLs.
fn membership(
    wal: &Wal,
    snap: Option<&SnapFile>,
    backend: Option<&Backend>,
) -> Vec<RecordedMember> {
    let mut by_id: BTreeMap<MemberId, RecordedMember> = BTreeMap::new();
    for m in backend.iter().flat_map(|b| &b.members) {
        by_id.insert(
            m.id,
            RecordedMember {
                id: m.id,
                name: m.name.clone(),
                peer_urls: m.peer_urls.clone(),
                source: MemberSource::Backend,
            },
        );
    }
    for id in backend.iter().flat_map(|b| &b.removed_members) {
        by_id.remove(id);
    }
    let snap_index = snap.map_or(0, |s| s.index);
    if let Some(s) = snap {
        for m in &s.members {
            by_id.insert(
                m.id,
                RecordedMember {
                    id: m.id,
                    name: m.name.clone(),
                    peer_urls: m.peer_urls.clone(),
                    source: MemberSource::Snap,
                },
            );
        }
        for id in &s.removed {
            by_id.remove(id);
        }
    }
    for cc in wal.conf_changes.iter().filter(|c| c.index > snap_index) {
        match cc.kind {
            ConfChangeKind::RemoveNode => {
                by_id.remove(&cc.node_id);
            }
            // A promotion's context names the member by ID only (3.5+
            // `ConfigChangeContext{isPromote}`, no peer URLs): it turns a
            // learner into a voter and changes nothing this list records.
            _ if cc.member.as_ref().is_some_and(|m| m.is_promote) => {}
            _ => {
                if let Some(m) = &cc.member {
                    let name = by_id
                        .get(&cc.node_id)
                        .map(|e| e.name.clone())
                        .unwrap_or_default();
                    by_id.insert(
                        cc.node_id,
                        RecordedMember {
                            id: cc.node_id,
                            name: if m.member.name.is_empty() {
                                name
                            } else {
                                m.member.name.clone()
                            },
                            peer_urls: m.member.peer_urls.clone(),
                            source: MemberSource::Wal,
                        },
                    );
                }
            }
        }
    }
    by_id.into_values().collect()
}

/// The founding members of the WAL's cluster (see [`Initialized::formation`]);
/// empty when the WAL no longer starts at index 1 or the entries do not hash
/// to its cluster ID.
fn formation(wal: &Wal) -> Vec<FoundingMember> {
    let mut founding = Vec::new();
    for (expect, c) in (1u64..).zip(&wal.conf_changes) {
        if c.index != expect || c.term != 1 || c.kind != ConfChangeKind::AddNode {
            break;
        }
        match &c.member {
            Some(m)
                if m.member.id == c.node_id && !m.member.peer_urls.is_empty() && !m.is_promote =>
            {
                founding.push(FoundingMember {
                    id: m.member.id,
                    peer_urls: m.member.peer_urls.clone(),
                });
            }
            _ => return Vec::new(),
        }
    }
    let ids: Vec<MemberId> = founding.iter().map(|m| m.id).collect();
    if founding.is_empty() || crate::disk::ids::cluster_id(&ids) != wal.cluster_id {
        return Vec::new();
    }
    founding
}

/// The members whose backend learner flag disagrees with the v2 membership: the
/// `.snap`'s learners (without a `.snap`, none: the whole WAL then says), then
/// the WAL's membership changes after it (a learner added, a learner promoted
/// by `AddNode`, a member removed). Only members both sides know are compared.
fn stale_learner_flags(wal: &Wal, snap: Option<&SnapFile>, backend: &Backend) -> Vec<MemberId> {
    let mut learner: BTreeMap<MemberId, bool> = snap
        .iter()
        .flat_map(|s| {
            s.members
                .iter()
                .map(|m| (m.id, m.is_learner || s.learners.contains(&m.id)))
        })
        .collect();
    let after = snap.map_or(0, |s| s.index);
    for cc in wal.conf_changes.iter().filter(|c| c.index > after) {
        match cc.kind {
            ConfChangeKind::AddLearnerNode => {
                learner.insert(cc.node_id, true);
            }
            ConfChangeKind::AddNode => {
                learner.insert(cc.node_id, false);
            }
            ConfChangeKind::RemoveNode => {
                learner.remove(&cc.node_id);
            }
            ConfChangeKind::UpdateNode | ConfChangeKind::Other(_) => {}
        }
    }
    backend
        .members
        .iter()
        .filter(|m| learner.get(&m.id).is_some_and(|&l| l != m.is_learner))
        .map(|m| m.id)
        .collect()
}
