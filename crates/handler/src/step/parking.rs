//! A step's side of parking (`pacing::park`): a step not admitted parks its item in the ledger
//! instead of giving it back once it was given back often enough, and a step that finishes with
//! room in its scan here takes the oldest parked items and sends them with its follow-ups.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use time::OffsetDateTime;

use crate::pacing::park::{look_due, parks};
use tablescan_ledger::{Ledger, WorkItem};

/// Parks `item` (not admitted) if it was given back often enough: `true` once its message (as
/// first sent) is in the ledger and the host may be told the delivery is done. `false`: give it
/// back as before (not given back often enough, no longer pending, or the ledger failed).
pub(super) async fn park_if_due(ledger: &Ledger, item: &WorkItem) -> bool {
    if !parks(item.given_back) {
        return false;
    }
    let message = item.as_first_sent().encode();
    match ledger
        .park(&item.scan, &item.id(), &message, OffsetDateTime::now_utc())
        .await
    {
        Ok(true) => {
            tracing::info!(
                given_back = item.given_back,
                "not run here now; parked in the ledger"
            );
            true
        }
        Ok(false) => false,
        Err(e) => {
            tracing::warn!("could not park the item ({e}); given back instead");
            false
        }
    }
}

/// When this process last looked for parked items of a scan and found none: per scan, so that
/// a scan that parks nothing costs one empty query per [`EMPTY_LOOK_PAUSE`] here at most.
///
/// [`EMPTY_LOOK_PAUSE`]: crate::pacing::park::EMPTY_LOOK_PAUSE
static EMPTY_LOOKS: Mutex<Option<HashMap<String, Instant>>> = Mutex::new(None);

fn since_empty(scan: &str) -> Option<Duration> {
    let looks = EMPTY_LOOKS.lock().unwrap_or_else(|e| e.into_inner());
    looks.as_ref()?.get(scan).map(Instant::elapsed)
}

fn remember_look(scan: &str, empty: bool) {
    let mut looks = EMPTY_LOOKS.lock().unwrap_or_else(|e| e.into_inner());
    let looks = looks.get_or_insert_with(HashMap::new);
    if empty {
        // Scans long over are forgotten, so the map holds the scans of the last minutes.
        if looks.len() > 1_000 {
            looks.retain(|_, at| at.elapsed() < Duration::from_secs(600));
        }
        looks.insert(scan.to_string(), Instant::now());
    } else {
        looks.remove(scan);
    }
}

/// The messages of up to `room` parked items of `scan`, taken out of the ledger for this step to
/// send (none if `room` is 0, or this process found none parked a moment ago). A failure only
/// costs the chance: the items stay parked for another step or the sweep.
pub(super) async fn unpark_for_room(ledger: &Ledger, scan: &str, room: usize) -> Vec<String> {
    if room == 0 || !look_due(since_empty(scan)) {
        return Vec::new();
    }
    match ledger.unpark(scan, room as u16, None).await {
        Ok(messages) => {
            remember_look(scan, messages.is_empty());
            if !messages.is_empty() {
                tracing::info!("{} parked items sent with the follow-ups", messages.len());
            }
            messages
        }
        Err(e) => {
            tracing::warn!("could not look for parked items: {e}");
            Vec::new()
        }
    }
}
