//! A process that leaves a scan while the store fails its reads still gives its slices back, and
//! a slice another process asked for still goes to the asker. `ScanShare::leave` reads the
//! slices to learn which were asked for; before abc1058 a failed read made it free nothing, and
//! the slices sat with a process that had left until their leases ran out (10 s of the cap).

use std::sync::atomic::{AtomicUsize, Ordering};
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
        self.inner.read_all(scan).await
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

#[tokio::test(start_paused = true)]
async fn a_slice_asked_for_goes_to_its_asker_when_the_first_read_fails() {
    let store = ReadsFail::default();
    let holder = holder_of_every_slice(&store).await;
    // Another process asks for slice 15 after the holder's last write: the holder's etag of
    // it is stale, so a write with the holder's etags fails whole and the slices are read again.
    let now = TokioClock.now_ms();
    let asked = store.inner.read_one("s", 15).await.unwrap().unwrap();
    store
        .inner
        .write("s", &[asked.wanted("asker", 0, now)])
        .await
        .unwrap();
    store.fail_next_reads(1);
    holder.leave().await;
    let now = TokioClock.now_ms();
    let rows = store.inner.read_all("s").await.unwrap();
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
