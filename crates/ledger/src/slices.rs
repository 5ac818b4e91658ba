//! The slices of a capped scan's cap (`tablescan_pace`), kept in the scan's ledger partition as
//! rows `pace:00` to `pace:15`: each names the process leasing it, when the lease ends, and what
//! that process used of it at its last renewal. Writes are conditional on each row's etag and
//! go in one transaction (the rows share the partition), so a process takes or renews all its
//! slices at once or none.
//!
//! The status reads them (one query of at most 16 entities) for the scan's current speed and the
//! number of processes running it.

use time::OffsetDateTime;

use super::ledger::{Ledger, LedgerError};
use super::rows::{millis, number, pace_key, pace_range, rows_of};
use tablescan_api::answers::Pace;
use tablescan_pace::{SliceRow, SliceStore, StoreError};
use tablescan_storage::table::batch::{IfMatch, Operation};
use tablescan_storage::table::entity::{Entity, Value};
use tablescan_storage::table::query::Query;
use tablescan_storage::{ErrorKind, Reason, StorageError};

fn to_entity(scan: &str, row: &SliceRow) -> Entity {
    Entity::new(scan, pace_key(row.index))
        .with("holder", Value::String(row.holder.clone()))
        .with(
            "until",
            Value::Int64(row.until_ms.min(i64::MAX as u64) as i64),
        )
        .with("used", Value::Double(finite(row.used)))
        .with(
            "wanted",
            Value::Int64(row.wanted_ms.min(i64::MAX as u64) as i64),
        )
        .with("wantedBy", Value::String(row.wanted_by.clone()))
        .with("wantedHolds", Value::Int32(i32::from(row.wanted_holds)))
}

fn finite(x: f64) -> f64 {
    if x.is_finite() {
        x.max(0.0)
    } else {
        0.0
    }
}

fn from_entity(e: &Entity) -> Option<SliceRow> {
    let index = e.row_key.strip_prefix("pace:")?.parse::<u16>().ok()?;
    let holder = match e.properties.get("holder") {
        Some(Value::String(holder)) => holder.clone(),
        _ => String::new(),
    };
    let used = match e.properties.get("used") {
        Some(Value::Double(x)) => finite(*x),
        _ => 0.0,
    };
    Some(SliceRow {
        index,
        holder,
        until_ms: number(e, "until"),
        used,
        wanted_ms: number(e, "wanted"),
        wanted_by: match e.properties.get("wantedBy") {
            Some(Value::String(by)) => by.clone(),
            _ => String::new(),
        },
        // Absent in rows written before it: 0, as for a process that held nothing.
        wanted_holds: match e.properties.get("wantedHolds") {
            Some(Value::Int32(n)) => u16::try_from(*n).unwrap_or(0),
            _ => 0,
        },
        etag: e.etag.clone(),
    })
}

/// A failed write: lost to another writer (or the row is not where it was read), or anything
/// else, which may or may not have applied.
fn write_error(e: StorageError) -> StoreError {
    let conflict = |reason: Reason| reason.is_gone_or_changed() || reason == Reason::AlreadyExists;
    match e.kind() {
        ErrorKind::Batch { error, .. } if conflict(error.reason()) => StoreError::Conflict,
        _ if conflict(e.reason()) => StoreError::Conflict,
        _ => StoreError::Unavailable(e.to_string()),
    }
}

fn unavailable(e: impl std::fmt::Display) -> StoreError {
    StoreError::Unavailable(e.to_string())
}

impl SliceStore for Ledger {
    async fn read_all(&self, scan: &str) -> Result<Vec<SliceRow>, StoreError> {
        let query = Query::filtered(rows_of(scan, pace_range()));
        let rows = self.table().query_all(&query).await.map_err(unavailable)?;
        Ok(rows.iter().filter_map(from_entity).collect())
    }

    async fn read_one(&self, scan: &str, index: u16) -> Result<Option<SliceRow>, StoreError> {
        let row = self
            .table()
            .get_entity(scan, &pace_key(index))
            .await
            .map_err(unavailable)?;
        Ok(row.as_ref().and_then(from_entity))
    }

    async fn write(&self, scan: &str, rows: &[SliceRow]) -> Result<Vec<String>, StoreError> {
        let operations: Vec<Operation> = rows
            .iter()
            .map(|row| match &row.etag {
                None => Operation::Insert(to_entity(scan, row)),
                Some(etag) => Operation::Update(to_entity(scan, row), IfMatch::Etag(etag.clone())),
            })
            .collect();
        let etags = self
            .table()
            .submit_transaction(&operations)
            .await
            .map_err(write_error)?;
        Ok(etags.into_iter().map(Option::unwrap_or_default).collect())
    }
}

impl Ledger {
    /// How fast scan `scan`, capped at `cap`, goes now: what the holders of its slices used of
    /// them at their last renewal, summed, and how many processes hold them. One query of at
    /// most 16 entities.
    pub async fn pace(
        &self,
        scan: &str,
        cap: Option<u32>,
        now: OffsetDateTime,
    ) -> Result<Pace, LedgerError> {
        let now_ms = millis(now);
        let query = Query::filtered(rows_of(scan, pace_range()));
        let rows: Vec<SliceRow> = self
            .table()
            .query_all(&query)
            .await?
            .iter()
            .filter_map(from_entity)
            .collect();
        let live: Vec<&SliceRow> = rows
            .iter()
            .filter(|row| !row.holder.is_empty() && row.until_ms > now_ms)
            .collect();
        let mut holders: Vec<&str> = live.iter().map(|row| row.holder.as_str()).collect();
        holders.sort_unstable();
        holders.dedup();
        Ok(Pace {
            max_rows_per_second: cap,
            entities_per_second: live.iter().map(|row| row.used).sum::<f64>().round(),
            instances: holders.len() as u64,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tablescan_storage::table::in_memory::InMemoryTable;

    #[tokio::test]
    async fn slices_round_trip_and_writes_are_conditional() {
        let table = InMemoryTable::new("ledger");
        table.create_if_missing().await.unwrap();
        let ledger = Ledger::in_memory(table);
        let rows: Vec<SliceRow> = (0..3)
            .map(|i| SliceRow::unwritten(i).held("p", u64::MAX / 4, 100.0))
            .collect();
        let etags = ledger.write("scan", &rows).await.unwrap();
        assert_eq!(etags.len(), 3);
        // Inserting over existing rows is a conflict, as is a stale etag.
        assert_eq!(
            ledger.write("scan", &rows[..1]).await,
            Err(StoreError::Conflict)
        );
        let mut stale = rows[1].held("q", 1, 0.0);
        stale.etag = Some("W/\"stale\"".into());
        assert_eq!(
            ledger.write("scan", &[stale]).await,
            Err(StoreError::Conflict)
        );
        let read = ledger.read_all("scan").await.unwrap();
        assert_eq!(read.len(), 3);
        assert!(read.iter().all(|r| r.holder == "p" && r.used == 100.0));
        let one = ledger.read_one("scan", 2).await.unwrap().unwrap();
        assert_eq!(one.etag.as_deref(), Some(etags[2].as_str()));
        // The holder renews with the etag it got.
        let renewed = SliceRow {
            etag: one.etag.clone(),
            ..one.held("p", u64::MAX / 4, 50.0)
        };
        ledger.write("scan", &[renewed]).await.unwrap();
        let pace = ledger
            .pace("scan", Some(1_000), OffsetDateTime::now_utc())
            .await
            .unwrap();
        assert_eq!(pace.entities_per_second, 250.0);
        assert_eq!(pace.instances, 1);
        assert_eq!(ledger.read_one("scan", 9).await.unwrap(), None);
        // A mark keeps who asked and how many slices it held.
        let one = ledger.read_one("scan", 0).await.unwrap().unwrap();
        ledger
            .write("scan", &[one.wanted("q", 3, 5_000)])
            .await
            .unwrap();
        let marked = ledger.read_one("scan", 0).await.unwrap().unwrap();
        assert_eq!(
            (
                marked.wanted_by.as_str(),
                marked.wanted_holds,
                marked.wanted_ms
            ),
            ("q", 3, 5_000)
        );
    }
}
