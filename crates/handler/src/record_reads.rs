//! One read of a scan's record at a time per scan and process (see `AppState::scan_record`).
//!
//! Steps that start together (a batch of 16 messages when a scan starts, or when the record's
//! last read has aged) would each read the scan row; through a [`ScanReads`] the first reads
//! and those that waited for it take its answer, a failed one too, so a ledger in trouble is
//! asked once, not once per waiting step in turn. A pause or resume made through this process
//! [`ScanReads::forget`]s: a read begun before it is not taken by steps that came after it, nor
//! kept as the process's fresh record.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use tokio::sync::{Mutex, MutexGuard};

use tablescan_ledger::ScanRecord;

/// The reads of one scan's record in one process.
#[derive(Default)]
pub struct ScanReads {
    /// Bumped by every [`ScanReads::forget`].
    generation: AtomicU64,
    /// The last read's answer, locked while the next one runs.
    last: Mutex<Option<LastRead>>,
}

struct LastRead {
    ended: Instant,
    /// The generation when it began.
    generation: u64,
    /// `None`: not found, or the read failed.
    record: Option<Arc<ScanRecord>>,
}

/// The right to read, held while reading: the others wait for its answer.
pub struct Turn<'a> {
    reads: &'a ScanReads,
    last: MutexGuard<'a, Option<LastRead>>,
    generation: u64,
}

impl ScanReads {
    /// Waits for a read that ended after this call began, and began after the last forget this
    /// call could know of: `Ok` with its answer; or for the turn to read (`Err`).
    pub async fn answer_or_turn(&self) -> Result<Option<Arc<ScanRecord>>, Turn<'_>> {
        let arrived = Instant::now();
        let known = self.generation.load(Ordering::SeqCst);
        let last = self.last.lock().await;
        if let Some(read) = last
            .as_ref()
            .filter(|read| read.ended >= arrived && read.generation >= known)
        {
            return Ok(read.record.clone());
        }
        Err(Turn {
            reads: self,
            last,
            generation: self.generation.load(Ordering::SeqCst),
        })
    }

    /// A pause or resume was written through this process: reads begun before now answer no
    /// one who comes later.
    pub fn forget(&self) {
        self.generation.fetch_add(1, Ordering::SeqCst);
    }
}

impl Turn<'_> {
    /// Hands `record` to those waiting; `true` if no forget came while it was read (then it
    /// may be kept as the process's fresh record).
    pub fn done(mut self, record: Option<Arc<ScanRecord>>) -> bool {
        *self.last = Some(LastRead {
            ended: Instant::now(),
            generation: self.generation,
            record,
        });
        self.reads.generation.load(Ordering::SeqCst) == self.generation
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn record() -> Option<Arc<ScanRecord>> {
        // The gate hands on whatever it was given; which record does not matter here.
        None
    }

    #[tokio::test]
    async fn those_who_waited_take_the_answer_of_the_read_in_flight_a_failed_one_too() {
        let reads = Arc::new(ScanReads::default());
        let Err(turn) = reads.answer_or_turn().await else {
            panic!("the first caller reads");
        };
        let waiter = {
            let reads = reads.clone();
            tokio::spawn(async move { reads.answer_or_turn().await.is_ok() })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(turn.done(record()), "no forget came");
        assert!(waiter.await.unwrap(), "the waiter took the answer");
        // Someone who comes after that read ended reads again.
        assert!(reads.answer_or_turn().await.is_err());
    }

    #[tokio::test]
    async fn a_read_begun_before_a_forget_answers_no_one_who_came_after_it() {
        let reads = Arc::new(ScanReads::default());
        let Err(turn) = reads.answer_or_turn().await else {
            panic!("the first caller reads");
        };
        reads.forget();
        let waiter = {
            let reads = reads.clone();
            tokio::spawn(async move {
                match reads.answer_or_turn().await {
                    Ok(_) => false,
                    Err(turn) => turn.done(record()),
                }
            })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(
            !turn.done(record()),
            "a forget came while it read: not kept"
        );
        assert!(
            waiter.await.unwrap(),
            "the waiter read again, and may keep it"
        );
    }
}
