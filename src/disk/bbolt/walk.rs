//! Walking bbolt's trees: a bounded descent to one key (bbolt's `Cursor.seek`),
//! and the [`Walker`] that visits every entry of a bucket in key order, nested
//! buckets on request, remembering each page so that a page reached twice is
//! reported instead of looping.

use super::page::{
    branch_elements, header, leaf_buckets_in_prefix, leaf_elements, BucketRoot, Kind, Origin, Page,
    PageSet, BUCKET_LEAF,
};
use super::{BoltError, Db};

/// Freelist pgid when the freelist is not persisted (etcd sets `NoFreelistSync`).
pub(super) const NO_FREELIST: u64 = u64::MAX;
/// Deepest recursion accepted: tree levels plus bucket nesting. Real trees are a
/// handful of levels deep; the bound keeps crafted chains off the stack.
pub(super) const MAX_DEPTH: u32 = 64;
/// How many children of a branch are fetched per batch.
pub(super) const BATCH_CHILDREN: usize = 64;

/// One key/value pair of a bucket, as a walk sees it.
pub(super) struct Entry<'a> {
    pub(super) key: &'a [u8],
    /// For a sub-bucket: the bucket header and inline page (not what `ForEach` sees).
    pub(super) value: &'a [u8],
    pub(super) is_bucket: bool,
    /// The page holding the element.
    pub(super) pgid: u64,
    /// Recursion depth of the page holding the element.
    pub(super) depth: u32,
}

/// A value found by [`Db::lookup`].
pub(super) struct Found {
    pub(super) is_bucket: bool,
    pub(super) value: Vec<u8>,
    pub(super) pgid: u64,
}

impl Db {
    /// Finds `key` in a bucket by descending its tree (bbolt's `Cursor.seek`).
    pub(super) fn lookup(
        &self,
        root: BucketRoot<'_>,
        depth: u32,
        key: &[u8],
    ) -> Result<Option<Found>, BoltError> {
        let find_in_leaf = |data: &[u8], origin: Origin| -> Result<Option<Found>, BoltError> {
            for e in leaf_elements(self, data, origin)? {
                if e.key == key {
                    return Ok(Some(Found {
                        is_bucket: e.flags & BUCKET_LEAF != 0,
                        value: e.value.to_vec(),
                        pgid: origin.host,
                    }));
                }
            }
            Ok(None)
        };
        let mut pgid = match root {
            BucketRoot::Inline { page, host } => {
                let origin = Origin {
                    host,
                    offset: self.page_offset(host),
                };
                self.check_leaf(page, origin)?;
                return find_in_leaf(page, origin);
            }
            BucketRoot::Page(p) => p,
        };
        for _ in depth..=MAX_DEPTH {
            let page = self.read_page(pgid)?;
            let origin = Origin {
                host: pgid,
                offset: self.page_offset(pgid),
            };
            match self.kind(&page.data, origin)? {
                Kind::Leaf => return find_in_leaf(&page.data, origin),
                Kind::Branch => {
                    let children = branch_elements(self, &page.data, origin)?;
                    // The last child whose first key is <= key, else the first.
                    let next = children
                        .iter()
                        .take_while(|(k, _)| *k <= key)
                        .last()
                        .or(children.first());
                    match next {
                        Some((_, c)) => pgid = *c,
                        None => return Ok(None),
                    }
                }
            }
        }
        Err(self.too_deep(pgid))
    }

    /// The last key of a bucket, by descending its rightmost children (bbolt's
    /// `Cursor.Last`); `None` for an empty bucket. A handful of page reads
    /// whatever the bucket's size: what the backend's revision costs.
    pub(super) fn last_entry_key(
        &self,
        root: BucketRoot<'_>,
        depth: u32,
    ) -> Result<Option<Vec<u8>>, BoltError> {
        let last_in_leaf = |data: &[u8], origin: Origin| -> Result<Option<Vec<u8>>, BoltError> {
            Ok(leaf_elements(self, data, origin)?
                .last()
                .map(|e| e.key.to_vec()))
        };
        let mut pgid = match root {
            BucketRoot::Inline { page, host } => {
                let origin = Origin {
                    host,
                    offset: self.page_offset(host),
                };
                self.check_leaf(page, origin)?;
                return last_in_leaf(page, origin);
            }
            BucketRoot::Page(p) => p,
        };
        for _ in depth..=MAX_DEPTH {
            let page = self.read_page(pgid)?;
            let origin = Origin {
                host: pgid,
                offset: self.page_offset(pgid),
            };
            match self.kind(&page.data, origin)? {
                Kind::Leaf => return last_in_leaf(&page.data, origin),
                Kind::Branch => match branch_elements(self, &page.data, origin)?.last() {
                    Some((_, c)) => pgid = *c,
                    None => return Ok(None),
                },
            }
        }
        Err(self.too_deep(pgid))
    }

    pub(super) fn too_deep(&self, pgid: u64) -> BoltError {
        BoltError::TooDeep {
            path: self.path().to_path_buf(),
            pgid,
            depth: MAX_DEPTH,
        }
    }
}

/// The callback of a walk: sees each entry of a bucket in key order and may walk
/// into nested buckets through the walker it is given.
pub(super) type EntryFn<'f, 'd> =
    dyn FnMut(&mut Walker<'d>, Entry<'_>) -> Result<(), BoltError> + 'f;

/// One traversal: remembers the pages it read, so a page reached twice is
/// reported instead of looping, and counts them.
pub(super) struct Walker<'d> {
    pub(super) db: &'d Db,
    pub(super) seen: PageSet,
    /// Pages (with overflow) visited.
    pub(super) pages: u64,
    /// Counting pages only: the callback sees sub-bucket entries alone, and a
    /// leaf's overflow is read only when a sub-bucket's key or value lies in it
    /// (every element is still checked to lie inside its page). A bucket of
    /// large values then costs one page read per leaf, not the values.
    pub(super) skim: bool,
    /// A page span read into a buffer kept across pages ([`Db::complete_into`]).
    spare: Vec<u8>,
    /// The coalesced reads of [`Db::read_pages`].
    group: Vec<u8>,
}

impl<'d> Walker<'d> {
    pub(super) fn new(db: &'d Db) -> Self {
        Walker {
            db,
            seen: PageSet::new(db.page_limit()),
            pages: 0,
            skim: false,
            spare: Vec::new(),
            group: Vec::new(),
        }
    }

    /// Records a page and its overflow as visited.
    pub(super) fn mark(&mut self, page: &Page) -> Result<(), BoltError> {
        let overflow = u64::from(header(&page.data).overflow);
        for id in page.pgid..=page.pgid.saturating_add(overflow) {
            match self.seen.insert(id) {
                Some(true) => {}
                Some(false) => {
                    return Err(BoltError::PageReused {
                        path: self.db.path().to_path_buf(),
                        pgid: id,
                        offset: self.db.page_offset(id),
                    })
                }
                None => return Err(self.db.out_of_bounds(page.pgid, overflow)),
            }
        }
        self.pages += overflow + 1;
        Ok(())
    }

    /// Calls `f` for each entry of the bucket at `root`, in key order.
    pub(super) fn bucket(
        &mut self,
        root: BucketRoot<'_>,
        depth: u32,
        f: &mut EntryFn<'_, 'd>,
    ) -> Result<(), BoltError> {
        match root {
            BucketRoot::Page(pgid) => {
                let page = if self.skim {
                    self.db.read_head(pgid)?
                } else {
                    self.db.read_page(pgid)?
                };
                self.mark(&page)?;
                self.node(page, depth, f)
            }
            BucketRoot::Inline { page, host } => {
                let origin = Origin {
                    host,
                    offset: self.db.page_offset(host),
                };
                if depth > MAX_DEPTH {
                    return Err(self.db.too_deep(host));
                }
                self.db.check_leaf(page, origin)?;
                self.leaf(page, origin, depth, f)
            }
        }
    }

    pub(super) fn leaf(
        &mut self,
        data: &[u8],
        origin: Origin,
        depth: u32,
        f: &mut EntryFn<'_, 'd>,
    ) -> Result<(), BoltError> {
        for e in leaf_elements(self.db, data, origin)? {
            if self.skim && e.flags & BUCKET_LEAF == 0 {
                continue;
            }
            f(
                self,
                Entry {
                    key: e.key,
                    value: e.value,
                    is_bucket: e.flags & BUCKET_LEAF != 0,
                    pgid: origin.host,
                    depth,
                },
            )?;
        }
        Ok(())
    }

    /// Visits a page already read (whole, or its first page when skimming) and
    /// marked, and the subtree below it.
    pub(super) fn node(
        &mut self,
        page: Page,
        depth: u32,
        f: &mut EntryFn<'_, 'd>,
    ) -> Result<(), BoltError> {
        if depth > MAX_DEPTH {
            return Err(self.db.too_deep(page.pgid));
        }
        let origin = Origin {
            host: page.pgid,
            offset: self.db.page_offset(page.pgid),
        };
        let kind = self.db.kind(&page.data, origin)?;
        if self.skim {
            if let Kind::Leaf = kind {
                let span = self.db.span_len(&page.data);
                if let Some(buckets) = leaf_buckets_in_prefix(self.db, &page.data, span, origin)? {
                    for e in buckets {
                        f(
                            self,
                            Entry {
                                key: e.key,
                                value: e.value,
                                is_bucket: true,
                                pgid: origin.host,
                                depth,
                            },
                        )?;
                    }
                    return Ok(());
                }
            }
        }
        if (page.data.len() as u64) >= self.db.span_len(&page.data) {
            return self.visit(kind, &page.data, origin, depth, f);
        }
        // The overflow is read into the spare buffer. A nested bucket's pages,
        // visited from inside, find it taken and use their own; the larger is kept.
        let mut buf = std::mem::take(&mut self.spare);
        let visited = self.db.complete_into(&page, &mut buf).and_then(|n| {
            drop(page);
            self.visit(kind, &buf[..n], origin, depth, f)
        });
        if buf.len() > self.spare.len() {
            self.spare = buf;
        }
        visited
    }

    /// The entries of a leaf, or the subtrees of a branch, whose whole span is
    /// `data`.
    fn visit(
        &mut self,
        kind: Kind,
        data: &[u8],
        origin: Origin,
        depth: u32,
        f: &mut EntryFn<'_, 'd>,
    ) -> Result<(), BoltError> {
        match kind {
            Kind::Leaf => self.leaf(data, origin, depth, f),
            Kind::Branch => {
                let children: Vec<u64> = branch_elements(self.db, data, origin)?
                    .into_iter()
                    .map(|(_, c)| c)
                    .collect();
                for chunk in children.chunks(BATCH_CHILDREN) {
                    let mut group = std::mem::take(&mut self.group);
                    let pages = self.db.read_pages(chunk, &mut group);
                    self.group = group;
                    let pages = pages?;
                    for p in &pages {
                        self.mark(p)?;
                    }
                    for p in pages {
                        self.node(p, depth + 1, f)?;
                    }
                }
                Ok(())
            }
        }
    }
}

/// Key/value pairs copied out of a bucket.
pub(super) type Records = Vec<(Vec<u8>, Vec<u8>)>;

/// Walks a bucket and every bucket nested in it, so all their pages are counted;
/// with `collect`, keeps the bucket's own top-level records.
pub(super) fn visit_all(
    w: &mut Walker<'_>,
    root: BucketRoot<'_>,
    depth: u32,
    mut collect: Option<&mut Records>,
) -> Result<(), BoltError> {
    w.bucket(root, depth, &mut |w, e| {
        if e.is_bucket {
            let child = w.db.bucket_root(e.key, e.value, e.pgid)?;
            visit_all(w, child, e.depth + 1, None)?;
        } else if let Some(c) = collect.as_mut() {
            c.push((e.key.to_vec(), e.value.to_vec()));
        }
        Ok(())
    })
}

/// What [`Db::read_buckets`] found.
pub(super) struct BucketScan {
    /// Root bucket names, in key order.
    pub(super) names: Vec<String>,
    /// The top-level records of each wanted bucket present, in key order of the
    /// buckets.
    pub(super) records: Vec<(&'static [u8], Records)>,
    /// Pages in use: both metas, the freelist if persisted, and every page of the
    /// buckets walked (all of them when counting).
    pub(super) pages_in_use: u64,
}

/// One step of [`Db::for_each_root_entry`].
pub(super) enum Visit<'a> {
    /// A root bucket, before its entries.
    Bucket(&'a [u8]),
    /// A top-level entry of root bucket `bucket`.
    Entry {
        /// The root bucket's name.
        bucket: &'a [u8],
        /// The entry (a nested bucket's value is its header, not walked into).
        entry: Entry<'a>,
    },
}

impl Db {
    /// Walks the root bucket once: the names of its buckets, and the top-level
    /// records of the buckets named in `wanted` (each walked whole, nested buckets
    /// included, so their pages count); with `count_pages`, every other bucket
    /// too, so that [`BucketScan::pages_in_use`] covers every page reachable from
    /// the chosen meta.
    ///
    /// With `skim`, the buckets walked only to count their pages are skimmed
    /// ([`Walker::skim`]): the same count and the same errors, without reading
    /// the values.
    pub(super) fn read_buckets(
        &self,
        wanted: &[&'static [u8]],
        count_pages: bool,
        skim: bool,
    ) -> Result<BucketScan, BoltError> {
        let mut w = Walker::new(self);
        // Meta pages 0 and 1 are always in use.
        let mut in_use: u64 = 2;
        if self.meta.freelist != NO_FREELIST {
            let page = self.read_page(self.meta.freelist)?;
            w.mark(&page)?;
        }
        let mut buckets = Vec::new();
        let mut records: Vec<(&'static [u8], Records)> = Vec::new();
        w.bucket(BucketRoot::Page(self.meta.root), 0, &mut |w, e| {
            if !e.is_bucket {
                return Ok(());
            }
            buckets.push(String::from_utf8_lossy(e.key).into_owned());
            let root = w.db.bucket_root(e.key, e.value, e.pgid)?;
            match wanted.iter().find(|n| **n == e.key) {
                Some(name) => {
                    let mut kvs = Vec::new();
                    visit_all(w, root, e.depth + 1, Some(&mut kvs))?;
                    records.push((*name, kvs));
                }
                None if count_pages => {
                    w.skim = skim;
                    let walked = visit_all(w, root, e.depth + 1, None);
                    w.skim = false;
                    walked?
                }
                None => {}
            }
            Ok(())
        })?;
        in_use += w.pages;
        Ok(BucketScan {
            names: buckets,
            records,
            pages_in_use: in_use,
        })
    }

    /// Calls `f` for each root bucket in key order, then for each of its
    /// top-level entries in key order (nested buckets are not walked into): the
    /// traversal of etcd's `v3Manager.Status`. A root key that is not a bucket is
    /// [`BoltError::NotABucket`], as bbolt's `ForEach` there fails.
    pub(super) fn for_each_root_entry(
        &self,
        f: &mut dyn FnMut(Visit<'_>) -> Result<(), BoltError>,
    ) -> Result<(), BoltError> {
        let mut w = Walker::new(self);
        w.bucket(BucketRoot::Page(self.meta.root), 0, &mut |w, e| {
            if !e.is_bucket {
                return Err(BoltError::NotABucket {
                    path: w.db.path().to_path_buf(),
                    key: e.key.to_vec(),
                });
            }
            f(Visit::Bucket(e.key))?;
            let bucket = e.key;
            let root = w.db.bucket_root(e.key, e.value, e.pgid)?;
            w.bucket(root, e.depth + 1, &mut |_, entry| {
                f(Visit::Entry { bucket, entry })
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::testkit::*;
    use super::super::*;
    use super::*;

    #[test]
    fn scattered_layout_and_free_pages() {
        let model = etcd_model();
        let bytes = build(&model, 4096, 7, true, 2);
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(&write(&dir, &bytes)).unwrap();
        let (hash, total) = model_hash(&model);
        let h = db.kv_hash().unwrap();
        assert_eq!((h.hash, h.total_key, h.revision), (hash, total, 300));
        let s = db.summary().unwrap();
        // Two junk pages follow every leaf of a bucket that is not inline.
        let leaves: u64 = model
            .values()
            .filter(|b| b.len() > 2)
            .map(|b| b.len().div_ceil(7) as u64)
            .sum();
        assert_eq!(s.logical_size - s.size_in_use.unwrap(), leaves * 2 * 4096);
        let key: Vec<_> = model[&b"key".to_vec()].clone().into_iter().collect();
        assert_eq!(all_kvs(&db, b"key"), key);
    }

    #[test]
    fn a_shared_page_is_reported() {
        let bytes = custom(|b| {
            let leaf = b.leaf(&[(false, b"k", b"v")]);
            b.branch(&[(b"a", leaf), (b"k", leaf)])
        });
        let (s, h) = walk_errors(&bytes);
        assert!(
            matches!(
                s,
                BoltError::PageReused {
                    pgid: 2,
                    offset: 8192,
                    ..
                }
            ),
            "{s}"
        );
        assert!(matches!(h, BoltError::PageReused { pgid: 2, .. }), "{h}");
    }

    #[test]
    fn a_cycle_is_reported() {
        // A branch whose child is itself: page 2 points to page 2.
        let bytes = custom(|b| b.branch(&[(b"a", 2)]));
        let (s, h) = walk_errors(&bytes);
        assert!(matches!(s, BoltError::PageReused { pgid: 2, .. }), "{s}");
        assert!(matches!(h, BoltError::PageReused { pgid: 2, .. }), "{h}");
        // Seeking has no visited set; the depth bound stops it.
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(&write(&dir, &bytes)).unwrap();
        assert!(matches!(db.get(b"b", b"a"), Err(BoltError::TooDeep { .. })));
    }

    #[test]
    fn a_bucket_cycle_is_reported() {
        // A nested bucket whose root is the leaf holding it (page 2), and one
        // whose root is the root leaf of the whole tree (page 3): the page walk
        // stops at the page seen twice instead of going round. The hash, like
        // bbolt's ForEach, does not descend into nested buckets, so it ends too.
        for target in [2u64, 3] {
            let bytes = custom(|b| b.leaf(&[(true, b"n", &bucket_value(target))]));
            let dir = tempfile::tempdir().unwrap();
            let db = Db::open(&write(&dir, &bytes)).unwrap();
            let s = db.summary().unwrap_err();
            assert!(
                matches!(s, BoltError::PageReused { pgid, .. } if pgid == target),
                "{s}"
            );
            assert_eq!(db.kv_hash().unwrap().total_key, 1);
        }
    }

    #[test]
    fn a_deep_chain_is_refused_before_the_stack_suffers() {
        let bytes = custom(|b| {
            let mut child = b.leaf(&[(false, b"k", b"v")]);
            for _ in 0..MAX_DEPTH + 5 {
                child = b.branch(&[(b"k", child)]);
            }
            child
        });
        let (s, h) = walk_errors(&bytes);
        assert!(
            matches!(
                s,
                BoltError::TooDeep {
                    depth: MAX_DEPTH,
                    ..
                }
            ),
            "{s}"
        );
        assert!(matches!(h, BoltError::TooDeep { .. }), "{h}");
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(&write(&dir, &bytes)).unwrap();
        assert!(matches!(db.get(b"b", b"k"), Err(BoltError::TooDeep { .. })));

        // Just inside the limit still reads.
        let bytes = custom(|b| {
            let mut child = b.leaf(&[(false, b"k", b"v")]);
            for _ in 0..MAX_DEPTH - 2 {
                child = b.branch(&[(b"k", child)]);
            }
            child
        });
        let db = Db::open(&write(&dir, &bytes)).unwrap();
        assert_eq!(db.get(b"b", b"k").unwrap(), Some(b"v".to_vec()));
        assert_eq!(db.kv_hash().unwrap().total_key, 1);
    }
}
