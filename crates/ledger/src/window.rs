//! A bounded look at a scan's pending rows.
//!
//! The Table service charges a query for every entity it scans, not only for those it returns
//! (a query that scans 1,000 entities and returns 5 costs 1,000). A filter on a pending row's
//! lease or last write would therefore scan every pending row of the scan on every look: a cost
//! that grows with the work in flight, paid by each status read and each re-drive sweep. So the
//! looks that judge pending rows (stranded items, running and abandoned claims) read one window
//! of at most a fixed number of pending rows, by key range only, starting at a random item id,
//! and judge them here.
//!
//! Item ids are hashes, so a window is a uniform sample of the pending items. When the scan has
//! no more pending rows than a window holds (as at its end, where one stranded item would hold
//! up completion), the window is all of them, and what it finds is exact.

use super::ledger::{Ledger, LedgerError};
use super::rows::{self, pending_key};
use tablescan_storage::table::entity::Entity;
use tablescan_storage::table::query::Query;

/// The characters of an item id (URL-safe base64), in key order.
const ID_ALPHABET: &[u8] = b"-0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ_abcdefghijklmnopqrstuvwxyz";

/// At most `size` pending rows of a scan, from a random point of the pending range on.
#[derive(Debug)]
pub struct Window {
    pub rows: Vec<Entity>,
    /// Whether the window holds every pending row of the scan (it came back short of `size`).
    pub complete: bool,
}

impl Ledger {
    /// Reads a window of at most `size` of scan `id`'s pending rows (with the properties in
    /// `select`, all if `None`): from a random item id to the end of the pending range, then,
    /// if that was short, from the start of the range. At most two requests and `size`
    /// entities scanned, whatever the scan's size.
    pub(crate) async fn pending_window(
        &self,
        id: &str,
        size: u16,
        select: Option<&[&str]>,
    ) -> Result<Window, LedgerError> {
        let (low, high) = rows::pending_range();
        let start = pending_key(&random_id_start());
        let query = |range: (String, String), top: u16| {
            let query = Query::filtered(rows::rows_of(id, range)).top(top);
            match select {
                Some(names) => query.select(names.iter().copied()),
                None => query,
            }
        };
        let first = self
            .table()
            .query_page(&query((start.clone(), high), size), None)
            .await?;
        let mut rows = first.entities;
        // A short page with a continuation still has rows after it: the window ends there.
        if rows.len() >= usize::from(size) || first.continuation.is_some() {
            return Ok(Window {
                rows,
                complete: false,
            });
        }
        let rest = size - rows.len() as u16;
        let second = self
            .table()
            .query_page(&query((low, start), rest), None)
            .await?;
        let complete = second.entities.len() < usize::from(rest) && second.continuation.is_none();
        rows.extend(second.entities);
        Ok(Window { rows, complete })
    }
}

impl Ledger {
    /// The first `size` of scan `id`'s pending rows in item-id order (with the properties in
    /// `select`), in one request of at most `size` entities. Item ids are hashes, so these are
    /// a uniform sample of the pending items as well, though the same ones from one read to
    /// the next while they stay pending: right for estimating how many items are claimed
    /// (what a status read needs, within one request), not for finding stranded ones (which
    /// must see different items each time: [`Ledger::pending_window`]).
    pub(crate) async fn first_pending(
        &self,
        id: &str,
        size: u16,
        select: &[&str],
    ) -> Result<Window, LedgerError> {
        let query = Query::filtered(rows::rows_of(id, rows::pending_range()))
            .top(size)
            .select(select.iter().copied());
        let page = self.table().query_page(&query, None).await?;
        let complete = page.entities.len() < usize::from(size) && page.continuation.is_none();
        Ok(Window {
            rows: page.entities,
            complete,
        })
    }
}

/// Three random id characters: where a window starts.
fn random_id_start() -> String {
    uuid::Uuid::new_v4().as_bytes()[..3]
        .iter()
        .map(|b| char::from(ID_ALPHABET[usize::from(*b) % ID_ALPHABET.len()]))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rows::PendingRow;
    use tablescan_storage::table::batch::Operation;
    use tablescan_storage::table::in_memory::InMemoryTable;

    async fn ledger_with_pending(items: usize) -> (Ledger, InMemoryTable) {
        let table = InMemoryTable::new("ledger");
        let ledger = Ledger::in_memory(table.clone());
        ledger.ensure().await.unwrap();
        let rows: Vec<Operation> = (0..items)
            .map(|n| {
                // Item ids are URL-safe base64 of a hash, spread over the whole alphabet.
                use base64::Engine;
                let id = base64::engine::general_purpose::URL_SAFE_NO_PAD
                    .encode(uuid::Uuid::new_v4().as_bytes());
                Operation::Insert(PendingRow::new(format!("m{n}"), 1).to_entity("scan", &id))
            })
            .collect();
        for chunk in rows.chunks(100) {
            ledger.table().submit_transaction(chunk).await.unwrap();
        }
        (ledger, table)
    }

    #[test]
    fn the_alphabet_is_in_key_order() {
        assert!(ID_ALPHABET.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(ID_ALPHABET.len(), 64);
    }

    #[tokio::test]
    async fn a_small_scan_is_seen_whole_and_a_large_one_through_a_bounded_window() {
        let (small, _) = ledger_with_pending(30).await;
        for _ in 0..10 {
            let window = small.pending_window("scan", 100, None).await.unwrap();
            assert_eq!(window.rows.len(), 30);
            assert!(window.complete);
        }
        let (large, table) = ledger_with_pending(5000).await;
        let mut seen = std::collections::HashSet::new();
        for _ in 0..20 {
            let before = (table.requests(), table.entities());
            let window = large.pending_window("scan", 100, None).await.unwrap();
            assert_eq!(window.rows.len(), 100);
            assert!(!window.complete);
            assert!(table.requests() - before.0 <= 2);
            assert_eq!(table.entities() - before.1, 100, "the cost is the window");
            seen.extend(window.rows.into_iter().map(|e| e.row_key));
        }
        // Windows start at random points: twenty of them see far more than one window's rows.
        assert!(seen.len() > 1000, "{}", seen.len());
    }
}
