//! Which handler processes are running a scan, and how fast: one row per process in the scan's
//! partition (`pace:<process>`), written by that process alone about once a second while it
//! runs steps of the scan, so that writers never contend.
//!
//! A scan's rate cap is shared out from these rows (see `functions::pacing` and
//! `functions::shares`): each process reads them to learn what the others want of the cap.
//! The status sums their rates for the scan's current speed. A process that stops or dies simply stops renewing its row, which
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
    /// Entities per second of the scan's cap the process wants until `from_ms` (0 while it
    /// joins: it takes no part yet).
    pub want: f64,
    /// What it wants from `from_ms` on. A larger want than before takes effect only at a time
    /// far enough ahead, when it is written, for every other process to have read it by then;
    /// a smaller one takes effect at once.
    pub next_want: f64,
    /// When `next_want` takes effect (epoch milliseconds).
    pub from_ms: u64,
    /// Entities per second the process moved for the scan lately.
    pub rate: f64,
}

impl Presence {
    fn to_entity(&self, scan: &str) -> Entity {
        Entity::new(scan, pace_key(&self.process))
            .with("until", Value::Int64(clamp_ms(self.until_ms)))
            .with("from", Value::Int64(clamp_ms(self.from_ms)))
            .with("want", Value::Double(finite(self.want)))
            .with("next", Value::Double(finite(self.next_want)))
            .with("rate", Value::Double(self.rate))
    }

    fn from_entity(e: &Entity) -> Option<Presence> {
        let process = e.row_key.strip_prefix(&pace_key(""))?.to_string();
        // A row without wants claims as much as it can get: the safe reading.
        let want = double(e, "want").unwrap_or(f64::INFINITY);
        Some(Presence {
            process,
            until_ms: number(e, "until"),
            from_ms: number(e, "from"),
            want,
            next_want: double(e, "next").unwrap_or(want),
            rate: double(e, "rate").unwrap_or(0.0),
        })
    }

    /// What the process wants at `at_ms` (epoch milliseconds).
    pub fn want_at(&self, at_ms: u64) -> f64 {
        if at_ms >= self.from_ms {
            self.next_want
        } else {
            self.want
        }
    }

    /// Whether the row still counts at `now`.
    pub fn live(&self, now: OffsetDateTime) -> bool {
        self.until_ms > millis(now)
    }
}

fn clamp_ms(ms: u64) -> i64 {
    ms.min(i64::MAX as u64) as i64
}

/// Wants are stored finite (the service's JSON has no infinity): as much as it can get is
/// written as the largest double, and read back as such, larger than any cap.
fn finite(want: f64) -> f64 {
    if want.is_finite() {
        want.max(0.0)
    } else {
        f64::MAX
    }
}

/// A non-negative double property, if present and sound.
fn double(e: &Entity, name: &str) -> Option<f64> {
    match e.properties.get(name) {
        Some(Value::Double(x)) if !x.is_nan() => Some(x.max(0.0)),
        _ => None,
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
            .filter(|p| p.live(now))
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
        for (process, until_ms) in [("a", until_ms), ("b", until_ms - 8_000)] {
            let presence = Presence {
                process: process.into(),
                until_ms,
                want: 0.0,
                next_want: f64::INFINITY,
                from_ms: 1_000,
                rate: 1_234.5,
            };
            ledger.announce("scan1", &presence).await.unwrap();
        }
        let rows = ledger.presence("scan1").await.unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].process, "a");
        assert_eq!(rows[0].rate, 1_234.5);
        // The time a larger want takes effect survives the round trip: the others must see it.
        assert_eq!(rows[0].from_ms, 1_000);
        assert_eq!(rows[0].want_at(999), 0.0);
        assert!(rows[0].want_at(1_000) > 1e300);
        assert!(rows[0].live(now) && !rows[1].live(now));
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
