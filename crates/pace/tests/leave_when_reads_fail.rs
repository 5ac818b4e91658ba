//! A process that leaves a scan while the store fails its reads still gives its slices back, and
//! a slice another process asked for still goes to the asker. `ScanShare::leave` reads the
//! slices to learn which were asked for; before abc1058 a failed read made it free nothing, and
//! the slices sat with a process that had left until their leases ran out (10 s of the cap).
//! An ask written between that read and the write fails the write whole; the slices are read
//! and written once more.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use tablescan_pace::{
    Clock, Demand, InMemorySlices, ScanShare, SliceRow, SliceStore, StoreError, TokioClock, SLICES,
};

/// An in-memory store whose next `failing_reads` whole-scan reads fail (the service
/// unreachable for a moment); every other request goes through.
#[derive(Clone, Default)]
struct ReadsFail {
    inner: InMemorySlices,
    failing_reads: Arc<AtomicUsize>,
    /// Whether the next whole-scan read is followed at once by an ask for slice 15 (another
    /// process asking between the leaving process's read and its write).
    ask_after_next_read: Arc<AtomicBool>,
}

impl ReadsFail {
    fn fail_next_reads(&self, n: usize) {
        self.failing_reads.store(n, Ordering::Relaxed);
    }
}

impl SliceStore for ReadsFail {
    async fn read_all(&self, scan: &str) -> Result<Vec<SliceRow>, StoreError> {
        let failing = self
            .failing_reads
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
        if failing.is_ok() {
            return Err(StoreError::Unavailable("read refused by the test".into()));
        }
        let rows = self.inner.read_all(scan).await;
        if self.ask_after_next_read.swap(false, Ordering::Relaxed) {
            ask_for_slice_15(&self.inner).await;
        }
        rows
    }

    async fn read_one(&self, scan: &str, index: u16) -> Result<Option<SliceRow>, StoreError> {
        self.inner.read_one(scan, index).await
    }

    async fn write(&self, scan: &str, rows: &[SliceRow]) -> Result<Vec<String>, StoreError> {
        self.inner.write(scan, rows).await
    }
}

const WANTS: Demand = Demand {
    wants_more: true,
    used: 0.0,
};

/// A process alone in scan "s", capped at 1,600 entities/s, holding all 16 slices.
async fn holder_of_every_slice(store: &ReadsFail) -> ScanShare<ReadsFail, TokioClock> {
    let holder = ScanShare::new(store.clone(), TokioClock, "s", "holder", 1_600.0);
    holder.tick(WANTS).await;
    assert_eq!(holder.usable(), usize::from(SLICES));
    holder
}

#[tokio::test(start_paused = true)]
async fn slices_are_freed_when_every_read_fails() {
    let store = ReadsFail::default();
    let holder = holder_of_every_slice(&store).await;
    store.fail_next_reads(usize::MAX);
    holder.leave().await;
    store.fail_next_reads(0);
    let rows = store.inner.read_all("s").await.unwrap();
    let still_held: Vec<u16> = rows
        .iter()
        .filter(|row| !row.holder.is_empty())
        .map(|row| row.index)
        .collect();
    assert!(
        still_held.is_empty(),
        "left to their leases: {still_held:?}"
    );
    assert_eq!(holder.usable(), 0);
}

/// Process "asker" asks for slice 15 of scan "s".
async fn ask_for_slice_15(store: &InMemorySlices) {
    let now = TokioClock.now_ms();
    let asked = store.read_one("s", 15).await.unwrap().unwrap();
    store
        .write("s", &[asked.wanted("asker", 0, now)])
        .await
        .unwrap();
}

/// Whether slice 15 went to "asker" and every other slice is free.
async fn asked_one_handed_and_rest_free(store: &InMemorySlices) {
    let now = TokioClock.now_ms();
    let rows = store.read_all("s").await.unwrap();
    let handed = rows.iter().find(|row| row.index == 15).unwrap();
    assert!(
        handed.usable_by("asker", now),
        "not handed over: {handed:?}"
    );
    let others_free = rows
        .iter()
        .filter(|row| row.index != 15)
        .all(|row| row.holder.is_empty());
    assert!(others_free, "not all freed: {rows:?}");
}

#[tokio::test(start_paused = true)]
async fn a_give_back_an_ask_gets_in_the_way_of_is_written_again() {
    let store = ReadsFail::default();
    let holder = holder_of_every_slice(&store).await;
    // The ask lands between `leave`'s read and its write: the write, with the etags read,
    // fails whole; the slices are read again and given up as they are then.
    store.ask_after_next_read.store(true, Ordering::Relaxed);
    holder.leave().await;
    asked_one_handed_and_rest_free(&store.inner).await;
}

#[tokio::test(start_paused = true)]
async fn a_slice_asked_for_goes_to_its_asker_when_the_first_read_fails() {
    let store = ReadsFail::default();
    let holder = holder_of_every_slice(&store).await;
    // Another process asks for slice 15 after the holder's last write: the holder's etag of
    // it is stale, so a write with the holder's etags fails whole and the slices are read again.
    ask_for_slice_15(&store.inner).await;
    store.fail_next_reads(1);
    holder.leave().await;
    asked_one_handed_and_rest_free(&store.inner).await;
}
