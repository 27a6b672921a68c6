//! bbolt's pages: the page header, the element tables of leaf and branch
//! pages, sub-bucket values, and reading a page (with its overflow) or a batch of
//! pages, every id and element checked against the file.

use super::{BoltError, Db};

/// Page header: id u64, flags u16, count u16, overflow u32.
pub(super) const PAGE_HEADER: usize = 16;
/// Leaf element: flags u32, pos u32, ksize u32, vsize u32.
pub(super) const LEAF_ELEMENT: usize = 16;
/// Branch element: pos u32, ksize u32, pgid u64.
pub(super) const BRANCH_ELEMENT: usize = 16;
/// Sub-bucket header stored as a value: root pgid u64, sequence u64.
pub(super) const BUCKET_HEADER: usize = 16;
pub(super) const BRANCH_PAGE: u16 = 0x01;
pub(super) const LEAF_PAGE: u16 = 0x02;
/// Leaf element flag marking a sub-bucket.
pub(super) const BUCKET_LEAF: u32 = 0x01;
/// Largest page plus overflow read into memory. etcd's values are bounded by its
/// request size limit (1.5 MiB by default); a bigger span is corruption.
pub(super) const MAX_PAGE_SPAN_BYTES: u64 = 512 << 20;
/// A gap of up to this many unwanted pages is read through rather than paying for
/// another syscall.
pub(super) const BATCH_MAX_GAP: u64 = 4;
/// Upper bound of one coalesced read.
pub(super) const BATCH_MAX_BYTES: u64 = 1 << 20;

pub(super) fn le_u16(b: &[u8], at: usize) -> u16 {
    let mut a = [0u8; 2];
    if let Some(s) = b.get(at..at + 2) {
        a.copy_from_slice(s);
    }
    u16::from_le_bytes(a)
}

pub(super) fn le_u32(b: &[u8], at: usize) -> u32 {
    let mut a = [0u8; 4];
    if let Some(s) = b.get(at..at + 4) {
        a.copy_from_slice(s);
    }
    u32::from_le_bytes(a)
}

pub(super) fn le_u64(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    if let Some(s) = b.get(at..at + 8) {
        a.copy_from_slice(s);
    }
    u64::from_le_bytes(a)
}

/// A page (with its overflow) read into memory.
pub(super) struct Page {
    pub(super) pgid: u64,
    pub(super) data: Vec<u8>,
}

/// The decoded header of a page.
#[derive(Clone, Copy)]
pub(super) struct Header {
    pub(super) id: u64,
    pub(super) flags: u16,
    pub(super) count: u16,
    pub(super) overflow: u32,
}

pub(super) fn header(page: &[u8]) -> Header {
    Header {
        id: le_u64(page, 0),
        flags: le_u16(page, 8),
        count: le_u16(page, 10),
        overflow: le_u32(page, 12),
    }
}

/// Where a page's bytes came from, for error context. Inline bucket pages live
/// inside a value of another page: `host` is that page.
#[derive(Clone, Copy)]
pub(super) struct Origin {
    pub(super) host: u64,
    pub(super) offset: u64,
}

/// One element of a leaf page.
pub(super) struct LeafElem<'a> {
    pub(super) flags: u32,
    pub(super) key: &'a [u8],
    pub(super) value: &'a [u8],
}

/// Where a bucket's tree starts.
#[derive(Clone, Copy)]
pub(super) enum BucketRoot<'a> {
    /// A tree of pages rooted at this pgid.
    Page(u64),
    /// An inline bucket: a leaf page stored inside the value on page `host`.
    Inline { page: &'a [u8], host: u64 },
}

/// Pages visited by one walk: a bitset over the pgids the bounds checks allow.
pub(super) struct PageSet {
    pub(super) bits: Vec<u64>,
}

impl PageSet {
    pub(super) fn new(limit: u64) -> Self {
        let words = usize::try_from(limit.div_ceil(64)).unwrap_or(0);
        PageSet {
            bits: vec![0; words],
        }
    }

    /// Marks `id`; `None` when it is outside the set, `Some(false)` when it was
    /// already there.
    pub(super) fn insert(&mut self, id: u64) -> Option<bool> {
        let word = self.bits.get_mut(usize::try_from(id / 64).ok()?)?;
        let bit = 1u64 << (id % 64);
        let fresh = *word & bit == 0;
        *word |= bit;
        Some(fresh)
    }
}

pub(super) enum Kind {
    Branch,
    Leaf,
}

impl Db {
    /// Interprets a sub-bucket value found on page `host`.
    pub(super) fn bucket_root<'a>(
        &self,
        key: &[u8],
        value: &'a [u8],
        host: u64,
    ) -> Result<BucketRoot<'a>, BoltError> {
        let bad = || BoltError::BadBucketValue {
            path: self.path().to_path_buf(),
            pgid: host,
            key: key.to_vec(),
            len: value.len(),
        };
        if value.len() < BUCKET_HEADER {
            return Err(bad());
        }
        match le_u64(value, 0) {
            0 => {
                let page = &value[BUCKET_HEADER..];
                if page.len() < PAGE_HEADER {
                    return Err(bad());
                }
                Ok(BucketRoot::Inline { page, host })
            }
            root => Ok(BucketRoot::Page(root)),
        }
    }

    pub(super) fn page_offset(&self, pgid: u64) -> u64 {
        pgid.saturating_mul(u64::from(self.page_size))
    }

    pub(super) fn out_of_bounds(&self, pgid: u64, overflow: u64) -> BoltError {
        BoltError::PageOutOfBounds {
            path: self.path().to_path_buf(),
            pgid,
            overflow,
            high_water: self.meta.high_water,
            file_len: self.reader.len(),
        }
    }

    /// The number of pgids a walk may touch: below the high-water mark and inside
    /// the file.
    pub(super) fn page_limit(&self) -> u64 {
        let in_file = self.reader.len() / u64::from(self.page_size);
        self.meta.high_water.min(in_file)
    }

    /// Checks that pages `pgid ..= pgid + overflow` are data pages of this file.
    pub(super) fn check_span(&self, pgid: u64, overflow: u64) -> Result<(), BoltError> {
        let end = pgid.checked_add(overflow).and_then(|e| e.checked_add(1));
        match end {
            Some(end) if pgid >= 2 && end <= self.page_limit() => Ok(()),
            _ => Err(self.out_of_bounds(pgid, overflow)),
        }
    }

    /// Validates a freshly read page header and returns its overflow count.
    pub(super) fn check_header(&self, pgid: u64, first: &[u8]) -> Result<u64, BoltError> {
        let h = header(first);
        let offset = self.page_offset(pgid);
        if h.id != pgid {
            return Err(BoltError::PageIdMismatch {
                path: self.path().to_path_buf(),
                pgid,
                offset,
                found: h.id,
            });
        }
        let overflow = u64::from(h.overflow);
        if (overflow + 1).saturating_mul(u64::from(self.page_size)) > MAX_PAGE_SPAN_BYTES {
            return Err(BoltError::PageTooLarge {
                path: self.path().to_path_buf(),
                pgid,
                offset,
                overflow,
            });
        }
        self.check_span(pgid, overflow)?;
        Ok(overflow)
    }

    /// Appends exactly `len` bytes read at `offset` (inside page `pgid`) to `buf`.
    pub(super) fn read_exact_into(
        &self,
        pgid: u64,
        offset: u64,
        len: u64,
        buf: &mut Vec<u8>,
    ) -> Result<(), BoltError> {
        let start = buf.len();
        let want = usize::try_from(len).map_err(|_| self.out_of_bounds(pgid, 0))?;
        buf.resize(start + want, 0);
        self.read_exact_at(pgid, offset, &mut buf[start..])
    }

    /// Fills `buf` with the bytes at `offset` (inside page `pgid`), all of them.
    pub(super) fn read_exact_at(
        &self,
        pgid: u64,
        offset: u64,
        buf: &mut [u8],
    ) -> Result<(), BoltError> {
        let n = self.reader.read_at(offset, buf)?;
        if n != buf.len() {
            return Err(BoltError::ShortRead {
                path: self.path().to_path_buf(),
                pgid,
                offset,
                expected: buf.len() as u64,
                found: n as u64,
            });
        }
        Ok(())
    }

    /// Reads one page and its overflow: one `pread` for the first page, one more
    /// for the rest.
    pub(super) fn read_page(&self, pgid: u64) -> Result<Page, BoltError> {
        let page = self.read_head(pgid)?;
        self.complete(page)
    }

    /// Reads the first page of page `pgid` only, its header checked (overflow
    /// included); [`Db::complete`] reads the rest.
    pub(super) fn read_head(&self, pgid: u64) -> Result<Page, BoltError> {
        self.check_span(pgid, 0)?;
        let mut data = Vec::new();
        let ps = u64::from(self.page_size);
        self.read_exact_into(pgid, self.page_offset(pgid), ps, &mut data)?;
        self.check_header(pgid, &data)?;
        Ok(Page { pgid, data })
    }

    /// The bytes of page `page` with its overflow.
    pub(super) fn span_len(&self, page: &[u8]) -> u64 {
        (u64::from(header(page).overflow) + 1) * u64::from(self.page_size)
    }

    /// Reads the part of a page's overflow not read yet, in one `pread`.
    pub(super) fn complete(&self, mut page: Page) -> Result<Page, BoltError> {
        let span = (u64::from(header(&page.data).overflow) + 1) * u64::from(self.page_size);
        let have = page.data.len() as u64;
        if have < span {
            let offset = self.page_offset(page.pgid) + have;
            self.read_exact_into(page.pgid, offset, span - have, &mut page.data)?;
        }
        Ok(page)
    }

    /// The whole span of `page` (first page and overflow) in `buf[..n]`, and `n`:
    /// what `page` holds already is copied, the rest read in one `pread`. `buf`
    /// is a buffer kept across pages: it only grows, so its bytes are written
    /// (zeroed) once, not for every page; bytes past `n` are another page's and
    /// never looked at.
    pub(super) fn complete_into(&self, page: &Page, buf: &mut Vec<u8>) -> Result<usize, BoltError> {
        let span = self.span_len(&page.data);
        let n = usize::try_from(span).map_err(|_| self.out_of_bounds(page.pgid, 0))?;
        let have = page.data.len().min(n);
        if buf.len() < n {
            buf.resize(n, 0);
        }
        buf[..have].copy_from_slice(&page.data[..have]);
        let offset = self.page_offset(page.pgid) + have as u64;
        self.read_exact_at(page.pgid, offset, &mut buf[have..n])?;
        Ok(n)
    }

    /// Reads several pages, returned in the order asked. Ids that are close in the
    /// file are fetched with one `pread` into `group`, a buffer kept across calls
    /// (it only grows, so it is zeroed once). The overflow of a page that runs past
    /// its group is left for [`Db::complete`], so a batch of large values is
    /// never in memory at once.
    pub(super) fn read_pages(
        &self,
        ids: &[u64],
        group: &mut Vec<u8>,
    ) -> Result<Vec<Page>, BoltError> {
        let ps = u64::from(self.page_size);
        for &id in ids {
            self.check_span(id, 0)?;
        }
        let mut order: Vec<usize> = (0..ids.len()).collect();
        order.sort_unstable_by_key(|&i| ids[i]);
        let max_span = (BATCH_MAX_BYTES / ps).max(1);
        let mut out: Vec<(usize, Page)> = Vec::with_capacity(ids.len());
        let mut i = 0;
        while i < order.len() {
            let first = ids[order[i]];
            let mut j = i + 1;
            let mut last = first;
            while j < order.len() {
                let id = ids[order[j]];
                if id - last > BATCH_MAX_GAP + 1 || id - first + 1 > max_span {
                    break;
                }
                last = id;
                j += 1;
            }
            let len = usize::try_from((last - first + 1) * ps)
                .map_err(|_| self.out_of_bounds(first, 0))?;
            if group.len() < len {
                group.resize(len, 0);
            }
            self.read_exact_at(first, self.page_offset(first), &mut group[..len])?;
            let group = &group[..len];
            for &idx in &order[i..j] {
                let pgid = ids[idx];
                // `first <= pgid <= last`, so the page starts inside the group.
                let at = usize::try_from((pgid - first) * ps).unwrap_or(usize::MAX);
                let head = group.get(at..).unwrap_or(&[]);
                let overflow = self.check_header(pgid, head)?;
                let span = usize::try_from((overflow + 1) * ps).unwrap_or(usize::MAX);
                let data = head[..span.min(head.len())].to_vec();
                out.push((idx, Page { pgid, data }));
            }
            i = j;
        }
        out.sort_unstable_by_key(|(idx, _)| *idx);
        Ok(out.into_iter().map(|(_, p)| p).collect())
    }

    /// Branch or leaf, the way bbolt's cursor decides (the leaf flag wins).
    pub(super) fn kind(&self, data: &[u8], origin: Origin) -> Result<Kind, BoltError> {
        let flags = header(data).flags;
        if flags & LEAF_PAGE != 0 {
            Ok(Kind::Leaf)
        } else if flags & BRANCH_PAGE != 0 {
            Ok(Kind::Branch)
        } else {
            Err(BoltError::PageType {
                path: self.path().to_path_buf(),
                pgid: origin.host,
                offset: origin.offset,
                flags,
            })
        }
    }

    pub(super) fn check_leaf(&self, data: &[u8], origin: Origin) -> Result<(), BoltError> {
        match self.kind(data, origin)? {
            Kind::Leaf => Ok(()),
            Kind::Branch => Err(BoltError::PageType {
                path: self.path().to_path_buf(),
                pgid: origin.host,
                offset: origin.offset,
                flags: header(data).flags,
            }),
        }
    }
}

pub(super) fn element_error(db: &Db, origin: Origin, index: u64) -> BoltError {
    BoltError::ElementOutOfBounds {
        path: db.path().to_path_buf(),
        pgid: origin.host,
        offset: origin.offset,
        index,
    }
}

/// The element table of a page, checked to lie inside it.
pub(super) fn element_table(
    db: &Db,
    data: &[u8],
    origin: Origin,
    width: usize,
) -> Result<usize, BoltError> {
    let count = usize::from(header(data).count);
    if PAGE_HEADER + count * width > data.len() {
        return Err(element_error(db, origin, count as u64));
    }
    Ok(count)
}

/// The slice `[start, start + len)` of `data`, if it lies inside.
pub(super) fn span(data: &[u8], start: u64, len: u64) -> Option<&[u8]> {
    let end = start.checked_add(len)?;
    data.get(usize::try_from(start).ok()?..usize::try_from(end).ok()?)
}

/// The elements of a leaf page, every key and value checked to lie inside it.
pub(super) fn leaf_elements<'a>(
    db: &Db,
    data: &'a [u8],
    origin: Origin,
) -> Result<Vec<LeafElem<'a>>, BoltError> {
    let count = element_table(db, data, origin, LEAF_ELEMENT)?;
    let mut out = Vec::with_capacity(count);
    for i in 0..count {
        let at = PAGE_HEADER + i * LEAF_ELEMENT;
        let pos = u64::from(le_u32(data, at + 4));
        let ksize = u64::from(le_u32(data, at + 8));
        let vsize = u64::from(le_u32(data, at + 12));
        let kstart = at as u64 + pos;
        let key = span(data, kstart, ksize);
        let value = span(data, kstart + ksize, vsize);
        let (Some(key), Some(value)) = (key, value) else {
            return Err(element_error(db, origin, i as u64));
        };
        out.push(LeafElem {
            flags: le_u32(data, at),
            key,
            value,
        });
    }
    Ok(out)
}

/// The sub-bucket elements of a leaf page of which only `data`, a prefix of its
/// `span_len` bytes, was read; every element is checked to lie inside the span,
/// exactly as [`leaf_elements`] checks it against the whole page. `None` when
/// the prefix is not enough to tell: the element table, or a sub-bucket's key or
/// value, runs past it.
pub(super) fn leaf_buckets_in_prefix<'a>(
    db: &Db,
    data: &'a [u8],
    span_len: u64,
    origin: Origin,
) -> Result<Option<Vec<LeafElem<'a>>>, BoltError> {
    let count = usize::from(header(data).count);
    let table_end = (PAGE_HEADER + count * LEAF_ELEMENT) as u64;
    if table_end > span_len {
        return Err(element_error(db, origin, count as u64));
    }
    if table_end > data.len() as u64 {
        return Ok(None);
    }
    let mut out = Vec::new();
    for i in 0..count {
        let at = PAGE_HEADER + i * LEAF_ELEMENT;
        let flags = le_u32(data, at);
        let pos = u64::from(le_u32(data, at + 4));
        let ksize = u64::from(le_u32(data, at + 8));
        let vsize = u64::from(le_u32(data, at + 12));
        let kstart = at as u64 + pos;
        // The value follows the key, so the value's end bounds both.
        let end = kstart + ksize + vsize;
        if end > span_len {
            return Err(element_error(db, origin, i as u64));
        }
        if flags & BUCKET_LEAF == 0 {
            continue;
        }
        let (Some(key), Some(value)) =
            (span(data, kstart, ksize), span(data, kstart + ksize, vsize))
        else {
            return Ok(None);
        };
        out.push(LeafElem { flags, key, value });
    }
    Ok(Some(out))
}

/// The `(first key, child pgid)` elements of a branch page.
pub(super) fn branch_elements<'a>(
    db: &Db,
    data: &'a [u8],
    origin: Origin,
) -> Result<Vec<(&'a [u8], u64)>, BoltError> {
    let count = element_table(db, data, origin, BRANCH_ELEMENT)?;
    let mut out = Vec::with_capacity(count);
    for i in 0..count {
        let at = PAGE_HEADER + i * BRANCH_ELEMENT;
        let pos = u64::from(le_u32(data, at));
        let ksize = u64::from(le_u32(data, at + 4));
        let key = span(data, at as u64 + pos, ksize)
            .ok_or_else(|| element_error(db, origin, i as u64))?;
        out.push((key, le_u64(data, at + 8)));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::super::testkit::*;
    use super::super::*;
    use super::*;

    #[test]
    fn other_page_sizes() {
        let model = etcd_model();
        for ps in [1024usize, 8192, 65536] {
            let bytes = build(&model, ps, 30, false, 1);
            let dir = tempfile::tempdir().unwrap();
            let db = Db::open(&write(&dir, &bytes)).unwrap();
            assert_eq!(db.page_size() as usize, ps);
            assert_eq!(db.kv_hash().unwrap().hash, model_hash(&model).0);
        }
    }

    #[test]
    fn snapshot_trailer_is_ignored() {
        let model = etcd_model();
        let mut bytes = build(&model, 4096, 20, false, 0);
        let logical = bytes.len() as u64;
        bytes.extend([0x11; 32]);
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(&write(&dir, &bytes)).unwrap();
        let s = db.summary().unwrap();
        assert_eq!((s.file_size, s.logical_size), (logical + 32, logical));
        assert_eq!(db.kv_hash().unwrap().total_size, logical);
    }

    #[test]
    fn out_of_bounds_pages_are_reported() {
        for target in [0u64, 1, 99, u64::MAX] {
            let bytes = custom(|b| b.branch(&[(b"a", target)]));
            let (s, _) = walk_errors(&bytes);
            assert!(
                matches!(s, BoltError::PageOutOfBounds { pgid, .. } if pgid == target),
                "{s}"
            );
        }
        // An overflow count that runs past the high-water mark.
        let mut bytes = custom(|b| b.leaf(&[(false, b"k", b"v")]));
        put_u32(&mut bytes[2 * 4096..], 12, 5);
        let (s, _) = walk_errors(&bytes);
        assert!(
            matches!(
                s,
                BoltError::PageOutOfBounds {
                    pgid: 2,
                    overflow: 5,
                    ..
                }
            ),
            "{s}"
        );
        // An absurd overflow count is refused before anything is allocated.
        put_u32(&mut bytes[2 * 4096..], 12, u32::MAX);
        let (s, _) = walk_errors(&bytes);
        assert!(matches!(s, BoltError::PageTooLarge { pgid: 2, .. }), "{s}");
    }

    #[test]
    fn the_file_shorter_than_the_high_water_mark() {
        let bytes = build(&etcd_model(), 4096, 20, false, 0);
        let cut = &bytes[..bytes.len() - 4096];
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(&write(&dir, cut)).unwrap();
        assert_eq!(db.logical_size(), bytes.len() as u64);
        // The root leaf is the last page: gone.
        let e = db.summary().unwrap_err();
        assert!(matches!(e, BoltError::PageOutOfBounds { .. }), "{e}");
    }

    #[test]
    fn bad_pages_and_elements_are_reported() {
        // Wrong id in the header.
        let mut bytes = custom(|b| b.leaf(&[(false, b"k", b"v")]));
        put_u64(&mut bytes[2 * 4096..], 0, 77);
        let (s, _) = walk_errors(&bytes);
        assert!(
            matches!(
                s,
                BoltError::PageIdMismatch {
                    pgid: 2,
                    found: 77,
                    ..
                }
            ),
            "{s}"
        );

        // Neither branch nor leaf.
        let mut bytes = custom(|b| b.leaf(&[(false, b"k", b"v")]));
        bytes[2 * 4096 + 8] = 0x10;
        let (s, _) = walk_errors(&bytes);
        assert!(
            matches!(
                s,
                BoltError::PageType {
                    pgid: 2,
                    flags: 0x10,
                    ..
                }
            ),
            "{s}"
        );

        // A value running off the page.
        let mut bytes = custom(|b| b.leaf(&[(false, b"k", b"v")]));
        put_u32(&mut bytes[2 * 4096..], PAGE_HEADER + 12, 5000);
        let (s, h) = walk_errors(&bytes);
        assert!(
            matches!(
                s,
                BoltError::ElementOutOfBounds {
                    pgid: 2,
                    index: 0,
                    ..
                }
            ),
            "{s}"
        );
        assert!(matches!(h, BoltError::ElementOutOfBounds { .. }), "{h}");

        // More elements than fit.
        let mut bytes = custom(|b| b.leaf(&[(false, b"k", b"v")]));
        bytes[2 * 4096 + 10..2 * 4096 + 12].copy_from_slice(&u16::MAX.to_le_bytes());
        let (s, _) = walk_errors(&bytes);
        assert!(
            matches!(s, BoltError::ElementOutOfBounds { index: 65535, .. }),
            "{s}"
        );

        // A bucket value too short for its header.
        let mut b = Builder::new(4096);
        let root = b.leaf(&[(true, b"b", b"short")]);
        let bytes = b.finish(root, 3);
        let (s, h) = walk_errors(&bytes);
        assert!(matches!(s, BoltError::BadBucketValue { len: 5, .. }), "{s}");
        assert!(matches!(h, BoltError::BadBucketValue { .. }), "{h}");
    }

    #[test]
    fn batched_reads_match_single_reads() {
        // 200 one-entry leaves, some with overflow, in reverse page order with
        // gaps: exercises coalescing, gaps, chunking and overflow tails.
        let mut entries = Bucket::new();
        for i in 0..200u64 {
            let size = if i % 37 == 0 { 10_000 } else { 10 };
            entries.insert(rev_key(i + 1, 0, false), vec![i as u8; size]);
        }
        let mut model = Model::new();
        model.insert(b"key".to_vec(), entries.clone());
        for gap in [0, 1, 5] {
            for reverse in [false, true] {
                let bytes = build(&model, 4096, 1, reverse, gap);
                let dir = tempfile::tempdir().unwrap();
                let db = Db::open(&write(&dir, &bytes)).unwrap();
                let kvs = all_kvs(&db, b"key");
                assert_eq!(kvs, entries.clone().into_iter().collect::<Vec<_>>());
                assert_eq!(db.kv_hash().unwrap().hash, model_hash(&model).0);
                for (k, v) in entries.iter().step_by(13) {
                    assert_eq!(db.get(b"key", k).unwrap().as_ref(), Some(v));
                }
            }
        }
    }

    #[test]
    fn a_smaller_span_after_a_larger_one_sees_only_its_own_bytes() {
        // Leaves of overflowing values, large and smaller in turn: each span is
        // read into a buffer kept across pages, longer than the span after a
        // larger one.
        let mut entries = Bucket::new();
        for (i, size) in [40_000usize, 9_000, 100_000, 5_000, 20_000, 4_100]
            .into_iter()
            .enumerate()
        {
            entries.insert(rev_key(i as u64 + 1, 0, false), vec![i as u8 + 1; size]);
        }
        let mut model = Model::new();
        model.insert(b"key".to_vec(), entries.clone());
        for reverse in [false, true] {
            let bytes = build(&model, 4096, 1, reverse, 1);
            let dir = tempfile::tempdir().unwrap();
            let db = Db::open(&write(&dir, &bytes)).unwrap();
            assert_eq!(
                all_kvs(&db, b"key"),
                entries.clone().into_iter().collect::<Vec<_>>()
            );
            assert_eq!(db.kv_hash().unwrap().hash, model_hash(&model).0);
        }

        // A value that claims more than its own (smaller) span is out of bounds,
        // though the buffer still holds the larger page's bytes where it points.
        let (k1, k2) = (rev_key(1, 0, false), rev_key(2, 0, false));
        let (big, small) = (vec![7u8; 40_000], vec![8u8; 5_000]);
        let mut b = Builder::new(4096);
        let l1 = b.leaf(&[(false, &k1, &big)]);
        let l2 = b.leaf(&[(false, &k2, &small)]);
        let vsize = l2 as usize * 4096 + PAGE_HEADER + 12;
        put_u32(&mut b.data, vsize, 20_000);
        let branch = b.branch(&[(&k1, l1), (&k2, l2)]);
        let v = bucket_value(branch);
        let root = b.leaf(&[(true, b"key", &v)]);
        let (summary, hash) = walk_errors(&b.finish(root, 3));
        for err in [summary, hash] {
            assert!(
                matches!(err, BoltError::ElementOutOfBounds { pgid, .. } if pgid == l2),
                "{err:?}"
            );
        }
    }
}
