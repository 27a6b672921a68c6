//! A member of a cluster as etcd stores it, wherever the directory records it:
//! the v2 store in a `.snap` file (`/0/members/<hex>/…`), the backend's
//! `members` bucket, and the member JSON in a ConfChange entry's context
//! (etcd's `membership.Member`). One shape for the three; what only one of
//! them holds (a ConfChange's `isPromote`) stays with it.

use serde::Serialize;

use super::ids::MemberId;

/// One member. Missing fields are their defaults.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Member {
    /// Member ID.
    pub id: MemberId,
    /// Member name; empty until the member has published its attributes.
    pub name: String,
    /// Peer URLs.
    pub peer_urls: Vec<String>,
    /// Client URLs (etcd 3.5.1 leaves them out of the backend; 3.4 keeps them).
    pub client_urls: Vec<String>,
    /// A raft learner.
    pub is_learner: bool,
}
