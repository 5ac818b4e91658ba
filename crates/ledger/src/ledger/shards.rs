//! The counter shards: every count of a scan is added to one of its shards in the same
//! transaction as the rows it counts, on the shard's etag, so the shards always agree with the
//! item rows; a status sums them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use time::OffsetDateTime;

use super::{Ledger, LedgerError};
use crate::history::{History, Sample};
use crate::rows::{self, counter_key, millis, Tallies, SHARDS};
use tablescan_storage::table::batch::{IfMatch, Operation};
use tablescan_storage::table::query::Query;
use tablescan_storage::{ErrorKind, Reason};

/// How often a transaction is tried again when another finish updated its counter shard first.
const SHARD_CONFLICT_RETRIES: u32 = 30;

/// How often each scan's counter shards were contended or its ledger requests refused in this
/// process, by scan: see [`Ledger::strains`].
pub(super) type Strains = Arc<Mutex<HashMap<String, u64>>>;

impl Ledger {
    /// Submits `operations` together with `delta` added to a counter shard (first `item`'s,
    /// [`rows::shard_of`]), reading the shard and trying again, on another
    /// ([`rows::next_shard`]), while other finishes update it first. A failure of one of
    /// `operations` comes back as it is (its index is its index in `operations`).
    pub(crate) async fn commit_counted(
        &self,
        scan: &str,
        item: &str,
        operations: Vec<Operation>,
        delta: Tallies,
    ) -> Result<(), LedgerError> {
        let shard_index = operations.len();
        let mut batch = operations;
        let mut shard = rows::shard_of(item);
        for conflict in 0.. {
            let read = self.table.get_entity(scan, &counter_key(shard)).await;
            let read = read.inspect_err(|e| self.strained_if_refused(scan, e))?;
            let Some(current) = read else {
                return Err(LedgerError::Corrupt(
                    format!("scan {scan}"),
                    format!("counter shard {shard} is missing"),
                ));
            };
            let mut next = Tallies::from_entity(&current);
            next.add(delta);
            // The shard's rate history (`job::history`) goes along in the same write.
            let mut history = History::from_entity(&current);
            let at_ms = match delta.last_finished_ms {
                0 => millis(OffsetDateTime::now_utc()),
                at => at,
            };
            history.record(
                at_ms,
                Sample {
                    rows_read: delta.rows_read,
                    rows_acted: delta.rows_acted,
                    throttled: delta.throttled,
                },
            );
            let mut entity = next.to_entity(scan, shard);
            history.write_into(&mut entity);
            let etag = IfMatch::Etag(current.etag.clone().unwrap_or_default());
            batch.truncate(shard_index);
            batch.push(Operation::Update(entity, etag));
            match self.table.submit_transaction(&batch).await {
                Ok(_) => return Ok(()),
                Err(e)
                    if conflict < SHARD_CONFLICT_RETRIES
                        && matches!(e.kind(), ErrorKind::Batch { index, error }
                            if *index == shard_index && error.reason() == Reason::PreconditionFailed) =>
                {
                    // Another finish took the shard between our read and our write: the next
                    // round tries another one.
                    self.strained(scan);
                    shard = rows::next_shard(shard, item, conflict);
                    tokio::time::sleep(conflict_pause(conflict)).await;
                }
                Err(e) => {
                    self.strained_if_refused(scan, &e);
                    return Err(e.into());
                }
            }
        }
        unreachable!("the loop returns")
    }

    /// How often, in this process, a finish of `scan` found its counter shard taken by another
    /// finish, or the scan's ledger partition refused a finish (503 Server Busy, 500 Operation
    /// Timed Out), since the process began. Both say the partition is busier than its finishes
    /// can share: the step pace reads the count to hold the scan's concurrent steps down
    /// (`pacing::ledger_health`). A count that only grows, read as `Governor::cuts` is.
    pub fn strains(&self, scan: &str) -> u64 {
        let strains = self.strains.lock().unwrap_or_else(|e| e.into_inner());
        strains.get(scan).copied().unwrap_or(0)
    }

    fn strained(&self, scan: &str) {
        let mut strains = self.strains.lock().unwrap_or_else(|e| e.into_inner());
        *strains.entry(scan.to_string()).or_default() += 1;
    }

    fn strained_if_refused(&self, scan: &str, error: &tablescan_storage::StorageError) {
        if error.reason() == Reason::Throttled {
            self.strained(scan);
        }
    }

    /// Adds `delta` to a scan's totals outside a step (the re-drive's count of messages sent).
    pub(crate) async fn add_to_totals(
        &self,
        scan: &str,
        delta: Tallies,
    ) -> Result<(), LedgerError> {
        self.commit_counted(scan, "", Vec::new(), delta).await
    }

    /// The scan's totals, summed over its counter shards from one query, with each shard's
    /// etag (two reads with equal etags saw the same state) and the sum of their rate
    /// histories (`job::history`).
    pub(crate) async fn totals(
        &self,
        scan: &str,
    ) -> Result<(Tallies, Vec<String>, History), LedgerError> {
        let query = Query::filtered(rows::rows_of(scan, rows::counter_range()));
        let shards = self.table.query_all(&query).await?;
        if shards.len() != usize::from(SHARDS) {
            return Err(LedgerError::Corrupt(
                format!("scan {scan}"),
                format!("{} counter shards instead of {SHARDS}", shards.len()),
            ));
        }
        let mut sum = Tallies::default();
        let mut history = History::default();
        let mut etags = Vec::with_capacity(shards.len());
        for shard in &shards {
            sum.add(Tallies::from_entity(shard));
            history.add(History::from_entity(shard));
            etags.push(shard.etag.clone().unwrap_or_default());
        }
        Ok((sum, etags, history))
    }
}

/// A short, growing, slightly uneven pause after losing a counter shard to another finish, so
/// that the finishes that collided do not collide again.
fn conflict_pause(conflict: u32) -> std::time::Duration {
    let spread = u64::from(std::process::id() ^ conflict.wrapping_mul(2_654_435_761)) % 20;
    std::time::Duration::from_millis(5 + 10 * u64::from(conflict.min(10)) + spread)
}
