//! The offline reader: everything the agent learns from a data directory without
//! etcd running, without the network, and without changing a byte.
//!
//! Synchronous on purpose: it runs in init containers before etcd and in the
//! sidecar's blocking pool. Every file is opened `O_RDONLY | O_NOFOLLOW`, read with
//! `pread`, never locked, never mmapped (a truncated file under mmap is SIGBUS).
//! Parsers report what they found; whether a finding is acceptable (a torn tail,
//! debris) is decided by [`layout`] and, above it, the verdict.

pub mod bbolt;
pub mod crc;
pub(crate) mod dir;
pub mod ids;
pub mod layout;
pub mod lock;
pub mod member;
pub mod pb;
pub mod raftpb;
pub mod reader;
pub mod snap;
pub mod upgrade;
pub mod v2req;
pub mod wal;
pub mod warm;
