//! The SHA-256 trailer `etcdctl snapshot save` appends: a bbolt image followed by
//! 32 bytes, the SHA-256 of everything before them. A bbolt file is a whole number
//! of pages (multiples of 512), so a trailer is present exactly when
//! `size % 512 == 32`; a raw `db` copied out of a data dir has none.
//!
//! [`TrailerHasher`] checks it while the bytes stream past (download or copy), so
//! the snapshot is read once.

use sha2::{Digest, Sha256};

/// Length of the trailer.
pub const TRAILER_LEN: u64 = 32;

/// Whether a snapshot of `size` bytes carries the trailer.
pub fn has_trailer(size: u64) -> bool {
    size % 512 == TRAILER_LEN
}

/// What the trailer said, once every byte was seen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TrailerCheck {
    /// The trailer matches the hash of the preceding bytes.
    Verified {
        /// The hash, hex.
        sha256: String,
    },
    /// The size says there is no trailer (a raw `db` copy).
    Absent,
    /// The trailer does not match.
    Mismatch {
        /// The trailer, hex.
        expected: String,
        /// The hash of the preceding bytes, hex.
        computed: String,
    },
    /// A different number of bytes arrived than announced.
    WrongLength {
        /// Announced (stat or HEAD).
        expected: u64,
        /// Received.
        received: u64,
    },
}

/// Hashes a snapshot of a known size as it streams past, holding back the trailer.
#[derive(Debug)]
pub struct TrailerHasher {
    size: u64,
    seen: u64,
    hasher: Sha256,
    trailer: Vec<u8>,
}

impl TrailerHasher {
    /// A hasher for a snapshot of `size` bytes (from stat or HEAD).
    pub fn new(size: u64) -> TrailerHasher {
        TrailerHasher {
            size,
            seen: 0,
            hasher: Sha256::new(),
            trailer: Vec::with_capacity(TRAILER_LEN as usize),
        }
    }

    /// Feeds the next bytes.
    pub fn update(&mut self, chunk: &[u8]) {
        let start = self.seen;
        self.seen += chunk.len() as u64;
        if !has_trailer(self.size) {
            return;
        }
        let body_end = self.size - TRAILER_LEN;
        let body = body_end.saturating_sub(start).min(chunk.len() as u64) as usize;
        self.hasher.update(&chunk[..body]);
        let rest = &chunk[body..];
        let room = (TRAILER_LEN as usize).saturating_sub(self.trailer.len());
        self.trailer
            .extend_from_slice(&rest[..rest.len().min(room)]);
    }

    /// Bytes seen so far.
    pub fn seen(&self) -> u64 {
        self.seen
    }

    /// The verdict on the trailer.
    pub fn finish(self) -> TrailerCheck {
        if self.seen != self.size {
            return TrailerCheck::WrongLength {
                expected: self.size,
                received: self.seen,
            };
        }
        if !has_trailer(self.size) {
            return TrailerCheck::Absent;
        }
        let computed = hex(&self.hasher.finalize());
        let expected = hex(&self.trailer);
        if computed == expected {
            TrailerCheck::Verified { sha256: computed }
        } else {
            TrailerCheck::Mismatch { expected, computed }
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snapshot(body_len: usize) -> Vec<u8> {
        let body: Vec<u8> = (0..body_len).map(|i| (i * 7 % 251) as u8).collect();
        let mut out = body.clone();
        out.extend_from_slice(&Sha256::digest(&body));
        out
    }

    fn check(bytes: &[u8], size: u64, chunk: usize) -> TrailerCheck {
        let mut h = TrailerHasher::new(size);
        for c in bytes.chunks(chunk.max(1)) {
            h.update(c);
        }
        h.finish()
    }

    #[test]
    fn a_saved_snapshot_verifies_whatever_the_chunking() {
        let snap = snapshot(4096 * 3);
        assert!(has_trailer(snap.len() as u64));
        for chunk in [1, 7, 31, 32, 33, 512, 4096, 4127, 1 << 20] {
            assert!(
                matches!(
                    check(&snap, snap.len() as u64, chunk),
                    TrailerCheck::Verified { .. }
                ),
                "chunk {chunk}"
            );
        }
    }

    #[test]
    fn a_flipped_byte_anywhere_is_a_mismatch() {
        let snap = snapshot(4096 * 2);
        for at in [
            0,
            100,
            4096,
            snap.len() - 33,
            snap.len() - 32,
            snap.len() - 1,
        ] {
            let mut bad = snap.clone();
            bad[at] ^= 0x40;
            assert!(
                matches!(
                    check(&bad, bad.len() as u64, 1000),
                    TrailerCheck::Mismatch { .. }
                ),
                "byte {at}"
            );
        }
    }

    #[test]
    fn a_raw_db_has_no_trailer_and_short_or_long_streams_are_caught() {
        let db = vec![0u8; 8192];
        assert_eq!(check(&db, 8192, 100), TrailerCheck::Absent);
        let snap = snapshot(4096);
        let n = snap.len() as u64;
        assert!(matches!(
            check(&snap[..snap.len() - 1], n, 64),
            TrailerCheck::WrongLength { .. }
        ));
        let mut longer = snap.clone();
        longer.push(0);
        assert!(matches!(
            check(&longer, n, 64),
            TrailerCheck::WrongLength { .. }
        ));
    }
}
