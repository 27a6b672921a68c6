//! bbolt's meta pages: decoding and validating one (magic, version, FNV-1a
//! checksum, page size), finding meta1 when meta0 cannot say where it is, and
//! choosing between the two as bbolt v1.3.6 does.

use std::path::Path;

use super::page::{le_u32, le_u64, PAGE_HEADER};
use super::{BoltError, MetaProblem};
use crate::disk::reader::{Block, PosReader};

/// bbolt's magic number, at the start of each meta.
pub(crate) const MAGIC: u32 = 0xED0C_DAED;
/// The only data file version bbolt writes.
pub const VERSION: u32 = 2;
/// Meta body: 64 bytes after the page header.
pub(super) const META_SIZE: usize = 64;
/// The checksum covers the meta's first 56 bytes (everything before it).
pub(super) const META_CHECKSUMMED: usize = 56;
/// Smallest page size accepted in a meta.
pub(super) const MIN_PAGE_SIZE: u32 = 512;
/// Largest page size accepted in a meta (bbolt uses the OS page size: 4 KiB or 64 KiB).
pub(super) const MAX_PAGE_SIZE: u32 = 1 << 20;
/// Offsets where meta1 is looked for when meta0 is broken: 4096 first (what bbolt
/// itself assumes on x86), then the other page sizes bbolt may have used.
pub(super) const META1_FALLBACK_OFFSETS: [u32; 8] =
    [4096, 512, 1024, 2048, 8192, 16384, 32768, 65536];

/// The fields of a meta page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Meta {
    pub(super) page_size: u32,
    pub(super) root: u64,
    pub(super) freelist: u64,
    pub(super) high_water: u64,
    pub(super) txid: u64,
}

/// FNV-1a, 64 bits (Go's `hash/fnv` `New64a`).
pub(super) fn fnv1a64(data: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in data {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// Decodes and validates the meta in `page`, the first bytes of the page at file
/// offset `offset`.
pub(super) fn decode_meta(page: &[u8], offset: u64, file_len: u64) -> Result<Meta, MetaProblem> {
    let m = page
        .get(PAGE_HEADER..PAGE_HEADER + META_SIZE)
        .ok_or(MetaProblem::Truncated { offset, file_len })?;
    let magic = le_u32(m, 0);
    if magic != MAGIC {
        return Err(MetaProblem::Magic {
            offset,
            found: magic,
        });
    }
    let version = le_u32(m, 4);
    if version != VERSION {
        return Err(MetaProblem::Version {
            offset,
            found: version,
        });
    }
    let stored = le_u64(m, META_CHECKSUMMED);
    let computed = fnv1a64(&m[..META_CHECKSUMMED]);
    if stored != computed || stored == 0 {
        return Err(MetaProblem::Checksum {
            offset,
            stored,
            computed,
        });
    }
    let page_size = le_u32(m, 8);
    if !page_size.is_power_of_two() || !(MIN_PAGE_SIZE..=MAX_PAGE_SIZE).contains(&page_size) {
        return Err(MetaProblem::PageSize {
            offset,
            found: page_size,
        });
    }
    Ok(Meta {
        page_size,
        root: le_u64(m, 16),
        freelist: le_u64(m, 32),
        high_water: le_u64(m, 40),
        txid: le_u64(m, 48),
    })
}

/// Reads and validates the meta of the page at byte `offset`.
pub(super) fn read_meta(
    reader: &PosReader,
    offset: u32,
) -> Result<Result<Meta, MetaProblem>, BoltError> {
    let offset = u64::from(offset);
    let buf = reader.read_block(Block {
        offset,
        len: (PAGE_HEADER + META_SIZE) as u64,
    })?;
    Ok(decode_meta(&buf, offset, reader.len()))
}

/// Looks for meta1 when meta0 cannot say where it is: at each plausible page
/// size, a valid meta whose page size field names that offset. The problem
/// reported is the one at 4096, where bbolt itself would look.
pub(super) fn find_meta1(reader: &PosReader) -> Result<Result<Meta, MetaProblem>, BoltError> {
    let mut first = None;
    for off in META1_FALLBACK_OFFSETS {
        match read_meta(reader, off)? {
            Ok(m) if m.page_size == off => return Ok(Ok(m)),
            Ok(m) => first.get_or_insert(MetaProblem::PageSize {
                offset: u64::from(off),
                found: m.page_size,
            }),
            Err(e) => first.get_or_insert(e),
        };
    }
    Ok(Err(first.unwrap_or(MetaProblem::Truncated {
        offset: 4096,
        file_len: reader.len(),
    })))
}

/// The meta a file is read at, as [`choose`] picks it.
pub(super) struct Chosen {
    pub(super) meta: Meta,
    pub(super) meta_page: u8,
    /// The other meta's problem, when it is broken.
    pub(super) damaged: Option<MetaProblem>,
    pub(super) page_size: u32,
}

/// Chooses a meta page the way bbolt does: meta0 at byte 0 gives the page size
/// and meta1 sits one page in (at 4096, or another page size whose meta1 agrees,
/// when meta0 is broken); of the valid ones the higher txid wins.
pub(super) fn choose(reader: &PosReader, path: &Path) -> Result<Chosen, BoltError> {
    let meta0 = read_meta(reader, 0)?;
    let meta1 = match &meta0 {
        Ok(m) => read_meta(reader, m.page_size)?,
        Err(_) => find_meta1(reader)?,
    };
    // bbolt keeps meta0's page size even when meta1 is newer.
    let (meta, meta_page, damaged, page_size) = match (meta0, meta1) {
        (Ok(a), Ok(b)) if b.txid > a.txid => (b, 1, None, a.page_size),
        (Ok(a), Ok(_)) => (a, 0, None, a.page_size),
        (Ok(a), Err(e)) => (a, 0, Some(e), a.page_size),
        (Err(e), Ok(b)) => (b, 1, Some(e), b.page_size),
        (Err(meta0), Err(meta1)) => {
            return Err(BoltError::NoValidMeta {
                path: path.to_path_buf(),
                meta0,
                meta1,
            })
        }
    };
    Ok(Chosen {
        meta,
        meta_page,
        damaged,
        page_size,
    })
}

#[cfg(test)]
mod tests {
    use super::super::testkit::*;
    use super::super::*;
    use super::*;

    #[test]
    fn falls_back_to_the_other_meta() {
        let bytes = build(&etcd_model(), 4096, 20, false, 0);
        let dir = tempfile::tempdir().unwrap();

        // meta1 holds txid 7; break it and meta0 (txid 6) is used.
        let mut b = bytes.clone();
        corrupt_meta(&mut b, 1, 4096);
        let db = Db::open(&write(&dir, &b)).unwrap();
        assert_eq!((db.txid(), db.meta_page()), (6, 0));
        assert!(matches!(
            db.damaged_meta(),
            Some((1, MetaProblem::Checksum { offset: 4096, .. }))
        ));

        // Break meta0: page size comes from meta1 at 4096.
        let mut b = bytes.clone();
        b[..PAGE_HEADER + META_SIZE].fill(0);
        let db = Db::open(&write(&dir, &b)).unwrap();
        assert_eq!((db.txid(), db.meta_page(), db.page_size()), (7, 1, 4096));
        assert!(matches!(
            db.damaged_meta(),
            Some((0, MetaProblem::Magic { found: 0, .. }))
        ));
        assert!(db.kv_hash().is_ok());
    }

    #[test]
    fn meta1_is_found_at_another_page_size_when_meta0_is_broken() {
        let bytes = build(&etcd_model(), 16384, 20, false, 0);
        let mut b = bytes.clone();
        b[PAGE_HEADER] ^= 1; // magic
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(&write(&dir, &b)).unwrap();
        assert_eq!((db.page_size(), db.meta_page()), (16384, 1));
        assert_eq!(db.kv_hash().unwrap().hash, model_hash(&etcd_model()).0);
    }

    #[test]
    fn both_metas_broken_is_no_valid_meta() {
        let mut b = build(&etcd_model(), 4096, 20, false, 0);
        corrupt_meta(&mut b, 0, 4096);
        b[4096 + PAGE_HEADER + 4] = 3; // version
        let dir = tempfile::tempdir().unwrap();
        let p = write(&dir, &b);
        match Db::open(&p) {
            Err(BoltError::NoValidMeta { path, meta0, meta1 }) => {
                assert_eq!(path, p);
                assert!(matches!(meta0, MetaProblem::Checksum { offset: 0, .. }));
                assert!(matches!(meta1, MetaProblem::Version { found: 3, .. }));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn zero_checksum_is_refused() {
        let mut b = build(&etcd_model(), 4096, 20, false, 0);
        for slot in 0..2 {
            let at = slot * 4096 + PAGE_HEADER + META_CHECKSUMMED;
            b[at..at + 8].fill(0);
        }
        let dir = tempfile::tempdir().unwrap();
        assert!(matches!(
            Db::open(&write(&dir, &b)),
            Err(BoltError::NoValidMeta { .. })
        ));
    }

    #[test]
    fn garbage_files() {
        let dir = tempfile::tempdir().unwrap();
        for bytes in [
            vec![],
            vec![0u8; 10],
            vec![0u8; 8192],
            b"not a database at all".repeat(1000),
        ] {
            let e = Db::open(&write(&dir, &bytes)).unwrap_err();
            assert!(matches!(e, BoltError::NoValidMeta { .. }), "{e}");
            assert!(e.to_string().contains("no valid bbolt meta page"), "{e}");
        }
        let e = Db::open(&dir.path().join("missing")).unwrap_err();
        assert!(matches!(e, BoltError::Io(ref io) if io.op == "open"), "{e}");
    }

    #[test]
    fn real_etcd_db_with_broken_metas() {
        let dir = tempfile::tempdir().unwrap();
        let mut b = fixture();
        corrupt_meta(&mut b, 0, 4096);
        let db = Db::open(&write(&dir, &b)).unwrap();
        assert_eq!((db.txid(), db.meta_page()), (13, 1));
        assert_eq!(db.kv_hash().unwrap().hash, 1585619019);
        corrupt_meta(&mut b, 1, 4096);
        assert!(matches!(
            Db::open(&write(&dir, &b)),
            Err(BoltError::NoValidMeta { .. })
        ));
    }
}
