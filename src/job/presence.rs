//! Which handler processes are running a scan, and how fast: one row per process in the scan's
//! partition (`pace:<process>`), written by that process alone about once a second while it
//! runs steps of the scan, so that writers never contend.
//!
//! A scan's rate cap is shared out from these rows (see `functions::pacing`): each process
//! reads them to learn how many others take a share. The status sums their rates for the
//! scan's current speed. A process that stops or dies simply stops renewing its row, which
//! then no longer counts once its `until` has passed; the cost of a read is one query of one
//! entity per process, whatever the scan's size.

use time::OffsetDateTime;

use super::ledger::{Ledger, LedgerError};
use super::rows::{millis, number, pace_key, pace_range, rows_of};
use super::status::Pace;
use crate::storage::table::batch::IfMatch;
use crate::storage::table::entity::{Entity, Value};
use crate::storage::table::query::Query;
use crate::storage::table::WriteMode;

/// One process's presence in a scan, as last written.
#[derive(Debug, Clone, PartialEq)]
pub struct Presence {
    pub process: String,
    /// Until when the row counts (epoch milliseconds): its writer renews it well before.
    pub until_ms: u64,
    /// When the process starts (or started) using its share of the scan's cap (epoch
    /// milliseconds): far enough ahead when it first writes its row for every other process
    /// to have read it by then.
    pub from_ms: u64,
    /// Whether the process has steps of the scan to run (running or waiting); one without
    /// takes no share of the cap.
    pub active: bool,
    /// Entities per second the process moved for the scan lately.
    pub rate: f64,
}

impl Presence {
    fn to_entity(&self, scan: &str) -> Entity {
        Entity::new(scan, pace_key(&self.process))
            .with(
                "until",
                Value::Int64(self.until_ms.min(i64::MAX as u64) as i64),
            )
            .with("active", Value::Boolean(self.active))
            .with("rate", Value::Double(self.rate))
    }

    fn from_entity(e: &Entity) -> Option<Presence> {
        let process = e.row_key.strip_prefix(&pace_key(""))?.to_string();
        Some(Presence {
            process,
            until_ms: number(e, "until"),
            from_ms: number(e, "from"),
            active: matches!(e.properties.get("active"), Some(Value::Boolean(true))),
            rate: match e.properties.get("rate") {
                Some(Value::Double(r)) if r.is_finite() => r.max(0.0),
                _ => 0.0,
            },
        })
    }

    /// Whether the row still counts at `now`.
    pub fn live(&self, now: OffsetDateTime) -> bool {
        self.until_ms > millis(now)
    }
}

impl Ledger {
    /// Writes (or renews) this process's presence in `scan`.
    pub async fn announce(&self, scan: &str, presence: &Presence) -> Result<(), LedgerError> {
        self.table()
            .upsert(&presence.to_entity(scan), WriteMode::Replace)
            .await?;
        Ok(())
    }

    /// Every process's presence row in `scan`, live or not.
    pub async fn presence(&self, scan: &str) -> Result<Vec<Presence>, LedgerError> {
        let query = Query::filtered(rows_of(scan, pace_range()));
        let rows = self.table().query_all(&query).await?;
        Ok(rows.iter().filter_map(Presence::from_entity).collect())
    }

    /// How fast scan `scan`, capped at `cap`, goes now: its live processes' rates summed.
    pub async fn pace(
        &self,
        scan: &str,
        cap: Option<u32>,
        now: OffsetDateTime,
    ) -> Result<Pace, LedgerError> {
        let live: Vec<Presence> = self
            .presence(scan)
            .await?
            .into_iter()
            .filter(|p| p.active && p.live(now))
            .collect();
        let rate: f64 = live.iter().map(|p| p.rate).sum();
        Ok(Pace {
            max_rows_per_second: cap,
            entities_per_second: rate.round(),
            instances: live.len() as u64,
        })
    }

    /// Removes this process's presence row from `scan` (it ran its last step there).
    pub async fn withdraw(&self, scan: &str, process: &str) -> Result<(), LedgerError> {
        match self
            .table()
            .delete(scan, &pace_key(process), &IfMatch::Any)
            .await
        {
            Err(e) if !e.is_not_found() => Err(e.into()),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::table::in_memory::InMemoryTable;

    #[tokio::test]
    async fn presence_rows_round_trip_and_expire() {
        let table = InMemoryTable::new("ledger");
        table.create_if_missing().await.unwrap();
        let ledger = Ledger::in_memory(table);
        let now = OffsetDateTime::now_utc();
        let until_ms = millis(now) + 4_000;
        for (process, active) in [("a", true), ("b", false)] {
            let presence = Presence {
                process: process.into(),
                until_ms,
                from_ms: 0,
                active,
                rate: 1_234.5,
            };
            ledger.announce("scan1", &presence).await.unwrap();
        }
        let rows = ledger.presence("scan1").await.unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].process, "a");
        assert!(rows[0].active && !rows[1].active);
        assert_eq!(rows[0].rate, 1_234.5);
        assert!(rows[0].live(now));
        assert!(!rows[0].live(now + time::Duration::seconds(5)));
        let pace = ledger.pace("scan1", Some(900), now).await.unwrap();
        assert_eq!(
            pace,
            Pace {
                max_rows_per_second: Some(900),
                entities_per_second: 1_235.0,
                instances: 1
            }
        );
        ledger.withdraw("scan1", "a").await.unwrap();
        ledger.withdraw("scan1", "a").await.unwrap();
        assert_eq!(ledger.presence("scan1").await.unwrap().len(), 1);
        assert!(ledger.presence("other").await.unwrap().is_empty());
    }
}
