//! The paced reader: what it reserves of its scan's share ahead of a page, and gives up.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::sink::PacedReader;
use crate::pacing::tests::{ledger, record};
use crate::pacing::{Pacing, ADMIT_WAIT};
use tablescan_storage::pacing::Governor;

/// A step of a scan capped at 1,000 entities/s reading `rows` rows of a model table through
/// its paced reader (pages of 500: half a second of the cap) with `last` on its request, and
/// then how long the process's next read of 500 waits: half a second when the reader holds no
/// place for a page it will not read, a second when such a place stands in the line ahead (to
/// be earned, then forfeit when the step ends).
async fn wait_after_a_page(rows: usize, last: bool) -> Duration {
    use tablescan_engine::model::{MemoryReader, MemoryTable, Quirks};
    use tablescan_engine::reader::{PageRequest, ReadScope, TableReader};
    let ledger = ledger().await;
    let pacing = Pacing::new(tablescan_pace::TokioClock);
    let step = pacing
        .admit(
            &ledger,
            &record("scan-r", Some(1_000)),
            Arc::new(Governor::default()),
            ADMIT_WAIT,
        )
        .await
        .unwrap();
    let keys: Vec<String> = (0..rows).map(|i| format!("k{i:04}")).collect();
    let table = MemoryTable::from_keys(keys.iter().map(|k| (k.as_str(), "r")));
    let model = MemoryReader::new(&table, Quirks::default());
    let reader = PacedReader::new(&model, &step);
    let all = tablescan_engine::keys::KeyRange::all();
    let request = PageRequest {
        scope: ReadScope::Range(&all),
        top: 1000,
        columns: None,
        cursor: None,
        filter: None,
        last,
    };
    let page = reader.read_page(&request).await.unwrap();
    assert_eq!(page.entities.len(), 500.min(rows));
    let start = Instant::now();
    step.before_read(500).await;
    start.elapsed()
}

#[tokio::test(start_paused = true)]
async fn a_reader_keeps_no_place_for_a_page_after_its_query_ended_or_its_last() {
    // The query ended with the page: its next page's place is given up at once.
    let ended = wait_after_a_page(500, false).await;
    // The query goes on, but the step's budget ends with this page: no place was taken.
    let last = wait_after_a_page(1_500, true).await;
    // The query goes on and the step reads on: the next page's place stands first in line.
    let reads_on = wait_after_a_page(1_500, false).await;
    let half = Duration::from_millis(500);
    for (what, took) in [("ended", ended), ("last", last)] {
        assert!(
            took >= half - Duration::from_millis(50) && took <= half + Duration::from_millis(150),
            "{what}: {took:?}"
        );
    }
    assert!(reads_on >= Duration::from_millis(950), "{reads_on:?}");
}
