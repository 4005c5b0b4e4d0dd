//! One minute's hand-out rows, dense: the rows side by side in a `Vec` (56 bytes each) and
//! an index of 32-bit positions beside them (5 bytes a slot), instead of a `HashMap` of
//! `(RowKey, Tally)` (65 bytes a slot at up to 7/8 load, each half padded to 32). A closed
//! minute lets go of its index: only the rows are written. At 100,000 rows a minute that
//! is 6.3 MB open and 5.6 MB closed against 8.5 MB each, and a closed minute and the next
//! one are held together for up to [`super::SPREAD`] (issue 46: the bench's peak RSS
//! 62.1 -> 60.0 MiB, one run each).

use super::{RowKey, Tally, Use};
use crate::store::connections::packed::PackedConnection;
use hashbrown::DefaultHashBuilder;
use hashbrown::HashTable;
use std::hash::BuildHasher;
use uuid::Uuid;

/// A row: its key's and its tally's fields in one struct, so that the padding of neither
/// half is paid twice.
pub(super) struct Row {
    id: Uuid,
    api_key: u64,
    pub(super) first_us: i64,
    pub(super) last_us: i64,
    /// As [`Tally::holder`].
    pub(super) holder: Option<PackedConnection>,
    pub(super) count: i32,
    what: Use,
}

impl Row {
    pub(super) fn new((id, api_key, what): RowKey, t: Tally) -> Self {
        Self { id, api_key, first_us: t.first_us, last_us: t.last_us, holder: t.holder, count: t.count, what }
    }

    pub(super) fn key(&self) -> RowKey {
        (self.id, self.api_key, self.what)
    }

    pub(super) fn into_parts(self) -> (RowKey, Tally) {
        let key = self.key();
        (key, Tally { count: self.count, first_us: self.first_us, last_us: self.last_us, holder: self.holder })
    }
}

/// Rows of distinct keys, found through the index.
#[derive(Default)]
pub(super) struct Table {
    rows: Vec<Row>,
    /// Positions in `rows`, hashed by the row's key with `hasher`.
    index: HashTable<u32>,
    /// foldhash (hashbrown's default), not SipHash: a key is a connection's id, which we
    /// made, and an API key's, which authenticated: no caller picks keys that collide.
    hasher: DefaultHashBuilder,
}

impl Table {
    /// Room for `n` rows (only what is used is touched, and so resident).
    pub(super) fn with_capacity(n: usize) -> Self {
        Self { rows: Vec::with_capacity(n), index: HashTable::with_capacity(n), hasher: DefaultHashBuilder::default() }
    }

    /// Indexes `rows`, whose keys are distinct (a closed minute's, to fold into).
    pub(super) fn from_rows(rows: Vec<Row>) -> Self {
        let mut table =
            Self { index: HashTable::with_capacity(rows.len()), rows, hasher: DefaultHashBuilder::default() };
        for i in 0..table.rows.len() {
            table.index_row(i);
        }
        table
    }

    pub(super) fn len(&self) -> usize {
        self.rows.len()
    }

    #[cfg(test)]
    pub(super) fn capacity(&self) -> usize {
        self.rows.capacity()
    }

    #[cfg(test)]
    pub(super) fn rows(&self) -> &[Row] {
        &self.rows
    }

    /// Where `key`'s row is in `rows`.
    fn find(&self, key: &RowKey) -> Option<usize> {
        let rows = &self.rows;
        self.index.find(self.hasher.hash_one(key), |&p| rows[p as usize].key() == *key).map(|&p| p as usize)
    }

    pub(super) fn get(&self, key: &RowKey) -> Option<&Row> {
        self.find(key).map(|p| &self.rows[p])
    }

    pub(super) fn get_mut(&mut self, key: &RowKey) -> Option<&mut Row> {
        self.find(key).map(|p| &mut self.rows[p])
    }

    /// Adds a row whose key is not here yet.
    pub(super) fn insert_new(&mut self, row: Row) {
        self.rows.push(row);
        self.index_row(self.rows.len() - 1);
    }

    /// Indexes the row at `i`, whose key is not indexed yet.
    fn index_row(&mut self, i: usize) {
        let (rows, hasher) = (&self.rows, &self.hasher);
        self.index
            .insert_unique(hasher.hash_one(rows[i].key()), position(i), |&p| hasher.hash_one(rows[p as usize].key()));
    }

    /// The rows, with as little room to spare as the allocator gives (a fold's table may
    /// wait long while the database is away).
    pub(super) fn shrink_to_fit(&mut self) {
        self.rows.shrink_to_fit();
        let (rows, hasher) = (&self.rows, &self.hasher);
        self.index.shrink_to_fit(|&p| hasher.hash_one(rows[p as usize].key()));
    }

    pub(super) fn rows_mut(&mut self) -> impl Iterator<Item = &mut Row> {
        self.rows.iter_mut()
    }

    /// The rows without their index (a closed minute's, to be written).
    pub(super) fn into_rows(self) -> Vec<Row> {
        self.rows
    }
}

/// A position in a table: a table holds at most the rows waiting, which a new row is
/// added to only below [`super::Bounds::capacity`] (at most 7,340,032), far below 2^32.
fn position(i: usize) -> u32 {
    u32::try_from(i).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::{Row, Table};
    use crate::store::handouts::{Tally, Use};
    use uuid::Uuid;

    #[test]
    fn a_row_is_56_bytes_and_its_parts_come_back_as_they_went() {
        assert_eq!(std::mem::size_of::<Row>(), 56);
        let key = (Uuid::from_u64_pair(1, 2), 7, Use(3));
        let (k, t) = Row::new(key, Tally { count: 5, first_us: -1, last_us: 9, holder: None }).into_parts();
        assert_eq!((k, t.count, t.first_us, t.last_us, t.holder.is_none()), (key, 5, -1, 9, true));
    }

    #[test]
    fn each_key_finds_its_own_row_before_and_after_the_index_is_rebuilt() {
        let mut table = Table::with_capacity(4);
        let key = |i: u64, what: u8| (Uuid::from_u64_pair(i, 0), 7, Use(what));
        for i in 0..1000 {
            for what in [0, 1] {
                let count = (i * 2 + u64::from(what)) as i32;
                table.insert_new(Row::new(key(i, what), Tally { count, first_us: 0, last_us: 0, holder: None }));
            }
        }
        assert_eq!(table.len(), 2000);
        table.get_mut(&key(3, 1)).unwrap().count += 1000;
        let table = Table::from_rows(table.into_rows());
        for i in 0..1000 {
            for what in [0, 1] {
                let row = table.get(&key(i, what)).unwrap();
                let bump = if (i, what) == (3, 1) { 1000 } else { 0 };
                assert_eq!((row.key(), row.count), (key(i, what), (i * 2 + u64::from(what)) as i32 + bump));
            }
        }
        assert!(table.get(&key(1000, 0)).is_none());
        assert!(table.get(&(Uuid::from_u64_pair(3, 0), 8, Use(1))).is_none(), "another API key");
    }
}
