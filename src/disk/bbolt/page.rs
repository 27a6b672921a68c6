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
        let n = self.reader.read_at(offset, &mut buf[start..])?;
        if n != want {
            return Err(BoltError::ShortRead {
                path: self.path().to_path_buf(),
                pgid,
                offset,
                expected: len,
                found: n as u64,
            });
        }
        Ok(())
    }

    /// Reads one page and its overflow: one `pread` for the first page, one more
    /// for the rest.
    pub(super) fn read_page(&self, pgid: u64) -> Result<Page, BoltError> {
        self.check_span(pgid, 0)?;
        let mut data = Vec::new();
        let ps = u64::from(self.page_size);
        self.read_exact_into(pgid, self.page_offset(pgid), ps, &mut data)?;
        self.check_header(pgid, &data)?;
        self.complete(Page { pgid, data })
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

    /// Reads several pages, returned in the order asked. Ids that are close in the
    /// file are fetched with one `pread`. The overflow of a page that runs past
    /// its group is left for [`Db::complete`], so a batch of large values is
    /// never in memory at once.
    pub(super) fn read_pages(&self, ids: &[u64]) -> Result<Vec<Page>, BoltError> {
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
            let mut group = Vec::new();
            self.read_exact_into(
                first,
                self.page_offset(first),
                (last - first + 1) * ps,
                &mut group,
            )?;
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
