//! What to do about each refusal: the remedies of docs/decision-table.md and
//! docs/runbook.md, in the words the report carries.

use super::position::Reached;
use super::Recorded;

pub(super) const REMEDY_EMPTY_FORMED: &str =
    "this member's data is gone; do not start it on an empty directory. \
Remove the member (etcdctl member remove <id>) and add it again (etcdctl member add), then start it \
with the flags member add prints (--initial-cluster-state=existing and that --initial-cluster), so it \
joins as a new member and receives the data from the others; with the operator, delete the EtcdMember \
so the operator replaces it. If no other member holds the data, restore the cluster from a backup.";

pub(super) const REMEDY_JOIN_FLAGS: &str =
    "start etcd with --initial-cluster-state=existing and the --initial-cluster that etcdctl member add \
printed (it names the other members): recreate the Pod with those flags. With the operator, delete the \
EtcdMember so the operator replaces it with a member created for the formed cluster.";

pub(super) const REMEDY_FOREIGN: &str = "check which volume is mounted here (a swapped or reused PVC); do not start etcd on it. If this member's own data is lost, remove and re-add the member so it joins fresh";

pub(super) const REMEDY_INCARNATION_TOKEN: &str = "this volume holds the data of a cluster formed with another --initial-cluster-token, such as an earlier cluster of the same name whose volume a new one inherited; do not start etcd on it. Keep it if that cluster's data matters, otherwise wipe it (etcd-member-agent wipe) or give the member a new volume and add it again. If it is this cluster's own data and only the token in this member's flags was changed since the cluster formed, set ETCD_INITIAL_CLUSTER_TOKEN back to the token it was formed with";

pub(super) const REMEDY_INCARNATION: &str = "this volume holds the data of an earlier cluster (another --initial-cluster-token or member set) that a new cluster of the same name inherited; do not start etcd on it. Keep it if that cluster's data matters, otherwise wipe it (etcd-member-agent wipe) or give the member a new volume, and let it bootstrap or restore afresh";

pub(super) const REMEDY_REMOVED: &str = "this member was removed from the cluster and etcd would exit on this directory (\"the member has been permanently removed\"); remove the data (etcd-member-agent wipe) and add the member again (etcdctl member add, then start it with the flags member add prints; if the live list already shows it added again and unstarted, only remove the data), or with the operator delete the EtcdMember so it is replaced";

pub(super) const REMEDY_FORK: &str = "do not wipe this directory: it may hold the only copy of the cluster's data. Another history answers under this cluster ID — a member that re-bootstrapped a fresh cluster with the same IDs (a wiped seed started with =new, a restore re-run) or a restored cluster. Find that member (its member list names few members, its raft term and index are low), stop it, and start the members whose directories are intact; then remove and re-add the re-bootstrapped one";

pub(super) const REMEDY_APPLIED_PAST_LOG: &str = "keep the directory (its backend holds data its WAL lost). Either bring back the members that hold the cluster's data: once the leader and a majority answer with a commit at or past the backend's index, and a quorum of the voters other than this member answer at or past the leader's commit, this member starts by itself and catches up (the kubelet retries preflight); or remove and re-add this member (etcdctl member remove, wipe, member add; with the operator, delete the EtcdMember). For a cluster of this one member, make a snapshot of its own backend and restore it (copy member/snap/db, then etcdutl snapshot restore <copy> --skip-hash-check with this member's name, --initial-cluster and token): that rebuilds a WAL that holds what the backend applied";

pub(super) fn remedy_rolled_back(w: &Reached, rec: &Recorded) -> String {
    let clear = w.witness.map(|w| w.clear.clone()).unwrap_or_default();
    format!(
        "do not wipe it. Either bring back the members that hold the newer data (their directories are intact): once the leader and a majority of cluster {} answer with a commit at or past {}, and a quorum of the voters other than this member answer at or past the leader's commit, this member starts by itself and catches up (the kubelet retries preflight); or, if this member's newer data is lost for good and the others hold the cluster's data, remove and re-add it (etcdctl member remove {}, wipe, member add; with the operator, delete the EtcdMember). If every member was put back to older copies on purpose (a rollback of the whole cluster), acknowledge it by removing each member's witness ({clear}, and the same for the others), or restore them instead with etcdutl snapshot restore --bump-revision N --mark-compacted, the same N on every member, landing above revision {} and above every other member's witness (etcd-member-agent restore --bump-revision auto reads every member's Lease; restore them all before any starts), so clients' watches never see revisions go backwards",
        rec.cluster_id,
        w.index,
        rec.member_id,
        w.revision.map_or("the one the witness recorded".into(), |r| r.to_string()),
    )
}

pub(super) fn remedy_restored(w: &Reached, revision: Option<i64>) -> String {
    let clear = w.witness.map(|w| w.clear.clone()).unwrap_or_default();
    format!(
        "if only this member was restored while the others kept the cluster running, never start it into that cluster: remove and re-add it (it receives the data from the others). If every member was restored on purpose, either acknowledge the rollback by removing each member's witness ({clear}, and the same for the others), or restore again with etcdutl snapshot restore --bump-revision N --mark-compacted, the same N on every member, where N takes the revision above {} and above every other member's witness (this directory is at {}; etcd-member-agent restore --bump-revision auto reads every member's Lease and chooses N; restore them all before any starts), so clients' watches never see revisions go backwards",
        w.revision.map_or("the one the witness recorded".into(), |r| r.to_string()),
        revision.map_or("an unknown revision".into(), |r| r.to_string()),
    )
}

/// Row 6h: a member left out of a restore (or of a re-formed cluster).
pub(super) fn remedy_other_history(
    member: crate::disk::ids::MemberId,
    name: Option<&str>,
    peer_urls: &[String],
) -> String {
    let name = name.unwrap_or("<name>");
    let urls = if peer_urls.is_empty() {
        "<peer-url>".to_owned()
    } else {
        peer_urls.join(",")
    };
    format!(
        "do not start this member, and do not wipe this directory until you have chosen which history to keep: it holds the history before the restore, possibly with writes acknowledged after the backup the other members were restored from. To keep the restored history: copy this directory off if its data may matter, then remove the member and add it again (etcdctl member remove {member}; etcdctl member add {name} --peer-urls={urls}), empty the directory (etcd-member-agent wipe) and restart the Pod: it joins the restored history as a new member (row 8); with the operator, delete the EtcdMember so it is replaced. To keep this directory's history instead, and only when you know it is the one to keep (the restore was a mistake, or this copy was taken after the backup and holds writes you need): stop the restored members and restore every member from this directory's data (a copy of member/snap/db, etcdutl snapshot restore <copy> --skip-hash-check --bump-revision N --mark-compacted). A backend damaged in place differs from the others' keyspace the same way, and restoring from it would spread the damage: when in doubt, keep the restored history"
    )
}

pub(super) fn remedy_symlink(link: &str) -> String {
    format!(
        "{link} is a symlink; the agent never follows symlinks inside the data dir. This is a configuration matter, not damage: keep the data, and pass the symlink's target as etcd's --wal-dir and the agent's --wal-dir (ETCD_WAL_DIR), or mount the volume at the path etcd expects"
    )
}

pub(super) const REMEDY_OTHER_HISTORY_SPLIT: &str = "do not wipe this directory and do not start etcd on it by hand; every voter answered, so waiting brings no one else: tell which side is wrong (docs/runbook.md, row 6j: etcdctl endpoint status --cluster and etcdctl endpoint hashkv --cluster; etcd-member-agent inspect --hash on this directory). If the other member is the inconsistent one, replace it (with quorum lost, restore every member from a copy of this directory's member/snap/db with etcdutl snapshot restore --bump-revision); if this directory is a copy from before a restore, keep the restored history: copy it off, etcdctl member remove and member add this member, empty the directory (etcd-member-agent wipe) and restart the Pod (row 8)";

pub(super) const REMEDY_OTHER_HISTORY_WAIT: &str = "bring back the other members: with a majority of the voters answering, preflight either starts this member (the same history) or refuses it (row 6h, whose remedy says which history to keep); the kubelet retries the init container meanwhile";

pub(super) const REMEDY_UNREADABLE: &str = "check the volume's ownership and mode: the agent runs as the etcd user (uid 65532) and must be able to read the data dir; a volume that does not answer (a hung network mount) also ends here";

pub(super) const REMEDY_RUNNING: &str = "another etcd is running on this volume; stop it before starting a second one (two processes on one data dir corrupt it)";

pub(super) const REMEDY_CORRUPT: &str = "keep the directory for analysis; remove and re-add the member so it starts on a fresh directory, or restore from a backup";

pub(super) const REMEDY_PARTIAL: &str = "an earlier start or restore was interrupted; wipe the directory (etcd-member-agent wipe) and let the member join again (member remove + member add)";

pub(super) const REMEDY_JOIN_UNTRUSTED_CLUSTERS: &str =
    "point ETCD_PEER_ENDPOINTS at this cluster's members only, then restart the Pod";

pub(super) const REMEDY_JOIN_UNTRUSTED: &str = "list every member's client URL in ETCD_PEER_ENDPOINTS (a single Service URL is one voice) and make the leader and half of the members reachable, then restart the Pod; while the cluster has lost quorum, restore quorum first (start the members whose data is intact) — see docs/decision-table.md, row 8b";

pub(super) const REMEDY_NOT_LISTED: &str =
    "add the member first (etcdctl member add <name> --peer-urls=<url>), then restart the Pod";

pub(super) const REMEDY_EARLIER_POD: &str = "find out whether the earlier Pod formed the cluster (its logs, the other members, the operator's events); if it did, treat this as a wiped member (remove and re-add it); if it never started etcd, clear EtcdMember.status.podUID and restart the Pod";

pub(super) const REMEDY_WITNESS_UNREAD: &str = "let the agent read its witness Lease (RBAC get on leases.coordination.k8s.io, see deploy/base/role.yaml) and retry; if this member never started, that read answers 404 and it bootstraps";

pub(super) const REMEDY_NO_EVIDENCE: &str = "make the live cluster (ETCD_PEER_ENDPOINTS) or the Kubernetes API reachable and retry; for a deployment without an operator that is bootstrapping for the first time, pass --allow-bootstrap-without-evidence";
