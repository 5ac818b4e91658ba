//! Sends again the messages of a scan's stranded work items (see `job::redrive`): when someone
//! reads the scan's status (at most once a minute per scan), and on a schedule for every scan in flight (`RedriveScans`, a timer
//! function), so that a scan nobody watches still finishes. Failures of the status read's
//! re-drive never fail the read: they are logged, and the next read or sweep tries again.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use time::OffsetDateTime;

use super::app::AppState;
use super::names::STORAGE_CONNECTION;
use super::pacing::park::{SWEEP_PAGES, SWEEP_PARKED_AFTER};
use super::protocol::{Failure, Invocation, Outcome};
use super::send::send_items;
use tablescan_ledger::active::Listing;
use tablescan_ledger::cancel_drop::DROP_LOOKS_PER_SWEEP;
use tablescan_ledger::parked::UNPARK_PAGE;
use tablescan_ledger::redrive::Stranded;
use tablescan_ledger::WorkItem;
use tablescan_ledger::{Ledger, ScanStatus, State};
use tablescan_storage::queue::{MessageEncoding, PutOptions};
use tablescan_storage::QueueServiceClient;

/// How long a pending item may go untouched before it counts as stranded.
pub fn redrive_after(state: &AppState) -> time::Duration {
    time::Duration::try_from(state.config.redrive_after).unwrap_or(time::Duration::MAX)
}

/// How often, at most, status reads of one scan take the re-drive look: once a minute
/// (`job::redrive::LOOK_EVERY`), or as often as items become stranded when the app says that
/// happens sooner (tests and drills set `TABLESCAN_REDRIVE_AFTER_SECONDS` to a few seconds, and
/// expect a lost item back within about that).
pub fn status_look_every(state: &AppState) -> time::Duration {
    redrive_after(state).min(tablescan_ledger::redrive::LOOK_EVERY)
}

/// How long a status read may spend sending stranded items again: the read must stay quick
/// (and Azure's front end gives an HTTP call 230 s); what is left waits for the next read or
/// sweep.
pub const STATUS_READ_REDRIVE_TIME: Duration = Duration::from_secs(5);

/// Sends again the messages of scan `id`'s `stranded` items, starting none after `deadline`
/// (each costs three or four requests, and a scan may have lost thousands); returns how many
/// were sent. Items not reached stay stranded for the next read or sweep; items whose message
/// may still wait in a backlog (see [`waits_in_backlog`]) are left alone.
pub async fn redrive_stranded(
    state: &AppState,
    ledger: &Ledger,
    id: &str,
    stranded: Vec<Stranded>,
    deadline: Instant,
) -> Result<u64, String> {
    if stranded.is_empty() {
        return Ok(0);
    }
    let now = OffsetDateTime::now_utc();
    let queues = state.clients(STORAGE_CONNECTION)?.queues()?.clone();
    // As the host writes output bindings (host.json messageEncoding: base64).
    let options = PutOptions {
        encoding: MessageEncoding::Base64,
        at_least_once: true,
        ..PutOptions::default()
    };
    let mut sent = 0;
    let mut failure = None;
    // Per queue, when its oldest visible message was put (looked up once per re-drive).
    let mut oldest: HashMap<String, Option<u64>> = HashMap::new();
    for item in stranded {
        if Instant::now() >= deadline {
            tracing::info!(
                scan = id,
                sent,
                "stranded work items left for the next re-drive"
            );
            break;
        }
        let queue = match WorkItem::decode(&item.message) {
            Ok(work) => state.item_queues.of(&work.task).to_string(),
            Err(_) => continue,
        };
        let queue = &queue;
        let oldest_put = match oldest_put(&queues, queue, &mut oldest).await {
            Ok(put) => put,
            Err(why) => {
                failure = Some(why);
                break;
            }
        };
        // An abandoned claim's message is not in the backlog: the dead host holds it.
        if !item.abandoned && waits_in_backlog(item.touched_ms, oldest_put) {
            continue;
        }
        match send_again(ledger, &queues, id, &item, queue, now, &options).await {
            Ok(true) => {
                tracing::warn!(scan = id, item = %item.row_key, queue, "sent a stranded work item again");
                sent += 1;
            }
            Ok(false) => {}
            Err(why) => {
                failure = Some(why);
                break;
            }
        }
    }
    // Counted once for the whole re-drive, also when it stopped at a failure.
    ledger
        .count_redriven(id, sent)
        .await
        .map_err(|e| e.to_string())?;
    match failure {
        Some(why) => Err(why),
        None => Ok(sent),
    }
}

/// When `queue`'s oldest visible message was put, looked up once per re-drive (`oldest`
/// keeps what was looked up).
async fn oldest_put(
    queues: &QueueServiceClient,
    queue: &str,
    oldest: &mut HashMap<String, Option<u64>>,
) -> Result<Option<u64>, String> {
    if let Some(put) = oldest.get(queue) {
        return Ok(*put);
    }
    let put = queues
        .queue(queue)
        .map_err(|e| e.to_string())?
        .oldest_visible_ms()
        .await
        .map_err(|e| e.to_string())?;
    oldest.insert(queue.to_string(), put);
    Ok(put)
}

/// Marks stranded `item` of scan `id` re-driven and puts its message on `queue` again;
/// `false` when the ledger says it is no longer stranded (then nothing is sent).
async fn send_again(
    ledger: &Ledger,
    queues: &QueueServiceClient,
    id: &str,
    item: &Stranded,
    queue: &str,
    now: OffsetDateTime,
    options: &PutOptions,
) -> Result<bool, String> {
    if !ledger
        .mark_redriven(id, item, now)
        .await
        .map_err(|e| e.to_string())?
    {
        return Ok(false);
    }
    queues
        .queue(queue)
        .map_err(|e| e.to_string())?
        .put_message(item.message.as_bytes(), options)
        .await
        .map_err(|e| e.to_string())?;
    Ok(true)
}

/// How much later than its ledger row a work item's message may have been put (the host
/// writes a step's output messages after the step's ledger transaction).
const SEND_AFTER_WRITE: u64 = 2 * 60 * 1000;

/// Whether the message of an item last touched at `touched_ms` may still be waiting in a
/// queue whose oldest visible message was put at `oldest_ms`: a backlog older than the item
/// has not reached its message yet, and sending it again would only lengthen the backlog.
pub fn waits_in_backlog(touched_ms: u64, oldest_ms: Option<u64>) -> bool {
    oldest_ms.is_some_and(|oldest| oldest <= touched_ms.saturating_add(SEND_AFTER_WRITE))
}

/// Whether a scan in `state` may still have work for its stranded items: a cancelled scan's
/// items are dropped instead (see [`wants_drops`]), and a settled scan has none.
pub fn wants_redrive(state: State) -> bool {
    matches!(state, State::Pending | State::Running)
}

/// Whether a cancelled scan may still have pending items for the sweep to drop (see
/// `job::cancel_drop`): it is `cancelling` (a step holds an item, or more items are pending
/// than the status looks at, counted or written ahead and never counted), or its counters say
/// items are pending. The sweep keeps it listed until it has none.
pub fn wants_drops(status: &ScanStatus) -> bool {
    status.state == State::Cancelling
        || (status.state == State::Cancelled && status.progress.steps_pending > 0)
}

/// What one sweep over the scans in flight did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Sweep {
    pub scans: usize,
    pub sent: u64,
    pub settled: usize,
    /// Pending items of cancelled scans dropped (their messages may be gone: see
    /// `job::cancel_drop`).
    pub dropped: u64,
    /// Scans left for the next sweep: the time budget ran out or their ledger could not be read.
    pub left: usize,
}

/// `RedriveScans`, the timer function. Its trigger data (the host's timer information) is not
/// needed: every run looks at every scan in flight, so a missed or doubled run costs nothing.
/// It answers 200 unless the ledger cannot be listed at all; the host only logs a failed timer
/// invocation and the next run tries again.
pub async fn sweep_handler(state: &AppState, body: &[u8]) -> Response {
    if let Err(why) = Invocation::parse(body) {
        return Failure::new(StatusCode::BAD_REQUEST, why).into_response();
    }
    let ledger = match state.ledger() {
        Ok(ledger) => ledger,
        Err(why) => return Failure::new(StatusCode::SERVICE_UNAVAILABLE, why).into_response(),
    };
    match sweep(state, ledger).await {
        Ok(done) => {
            let line = format!(
                "re-drive sweep: {} scans in flight, {} work items sent again, {} of cancelled scans dropped, {} settled, {} left for the next run",
                done.scans, done.sent, done.dropped, done.settled, done.left
            );
            // One line per sweep, on stdout (the host logs it with the invocation's time).
            tracing::info!("{line}");
            Outcome::default().into_response()
        }
        Err(why) => Failure::new(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("the scans in flight could not be listed: {why}"),
        )
        .into_response(),
    }
}

/// Looks at each scan in flight, within the step time budget: sends again the messages of its
/// stranded items, drops the unclaimed items of a cancelled one, or takes it off the list once
/// it has settled (or does not exist).
pub async fn sweep(state: &AppState, ledger: &Ledger) -> Result<Sweep, String> {
    let deadline = Instant::now() + state.config.budget.max_duration;
    let listings = ledger.listings().await.map_err(|e| e.to_string())?;
    let mut done = Sweep {
        scans: listings.len(),
        ..Sweep::default()
    };
    for listing in &listings {
        if Instant::now() >= deadline {
            done.left += 1;
            continue;
        }
        if let Err(why) = sweep_scan(state, ledger, listing, deadline, &mut done).await {
            tracing::warn!(scan = listing.id.as_str(), "re-drive sweep: {why}");
            done.left += 1;
        }
    }
    Ok(done)
}

/// One scan of the sweep, by what its status says: in flight, its stranded items sent again;
/// cancelled, its unclaimed items dropped; paused, left alone; settled or gone, taken off the
/// list.
async fn sweep_scan(
    state: &AppState,
    ledger: &Ledger,
    listing: &Listing,
    deadline: Instant,
    done: &mut Sweep,
) -> Result<(), String> {
    let id = &listing.id;
    let after = redrive_after(state);
    let lease = time::Duration::try_from(state.config.lease).unwrap_or(time::Duration::MINUTE);
    let looked = ledger
        .status_and_stranded(id, OffsetDateTime::now_utc(), after, lease)
        .await
        .map_err(|e| e.to_string())?;
    match looked {
        Some((status, stranded)) if wants_redrive(status.state) => {
            go_on_with(state, ledger, id, &status, stranded, deadline, done).await
        }
        Some((status, _)) if wants_drops(&status) => {
            drop_cancelled(ledger, listing, deadline, done).await
        }
        // A paused scan stays listed, untouched: its items wait for the resume.
        Some((status, _)) if matches!(status.state, State::Paused | State::Pausing) => Ok(()),
        // No such scan: one being created (its entry is written first) is left alone.
        None if !listing.orphaned_at(OffsetDateTime::now_utc()) => Ok(()),
        _ => settle(ledger, listing, done).await,
    }
}

/// Keeps scan `id`, in flight, going where nobody else does: the next round of a resume
/// nobody went on with, the manifest the last step did not write, its `stranded` items and
/// its items parked too long.
async fn go_on_with(
    state: &AppState,
    ledger: &Ledger,
    id: &str,
    status: &ScanStatus,
    stranded: Vec<Stranded>,
    deadline: Instant,
    done: &mut Sweep,
) -> Result<(), String> {
    if status.resuming {
        // A resume nobody went on with: this sweep sends its next round.
        match super::pause::resume_round_by_sweep(state, ledger, id).await {
            Ok(sent) => done.sent += sent,
            Err(why) => tracing::warn!(scan = id, "resume round: {why}"),
        }
    }
    if status.export.is_some() && status.progress.steps_pending == 0 {
        // Every step is done and the manifest is not written: the step that finished last
        // stopped before writing it.
        super::manifest::seal_if_done(state, ledger, id).await;
    }
    done.sent += redrive_stranded(state, ledger, id, stranded, deadline).await?;
    done.sent += send_parked(state, ledger, id, deadline).await?;
    Ok(())
}

/// Sends the messages of scan `id`'s items parked for longer than `SWEEP_PARKED_AFTER`
/// (`pacing::park`), at most `SWEEP_PAGES` pages, until none is left or `deadline`: no finishing
/// step had room for them, perhaps because no process runs the scan any more (a scan still
/// running takes the rest as its steps finish with room; see `SWEEP_PAGES`). Each page is deleted
/// before it is sent; a page another taker took first is simply not sent here. If a send fails,
/// its items stay pending in the ledger, and the re-drive's look sends them again once they are
/// stranded.
async fn send_parked(
    state: &AppState,
    ledger: &Ledger,
    id: &str,
    deadline: Instant,
) -> Result<u64, String> {
    let before = OffsetDateTime::now_utc() - SWEEP_PARKED_AFTER;
    let mut sent = 0;
    for _ in 0..SWEEP_PAGES {
        if Instant::now() >= deadline {
            break;
        }
        let messages = ledger
            .unpark(id, UNPARK_PAGE, Some(before))
            .await
            .map_err(|e| e.to_string())?;
        let last = messages.len() < usize::from(UNPARK_PAGE);
        sent += send_items(state, &messages).await?;
        if last {
            break;
        }
    }
    if sent > 0 {
        tracing::info!(scan = id, sent, "sent parked work items");
    }
    Ok(sent)
}

/// Drops the unclaimed pending items of cancelled scan `listing` (see `job::cancel_drop`), and
/// takes it off the list once none is left.
async fn drop_cancelled(
    ledger: &Ledger,
    listing: &Listing,
    deadline: Instant,
    done: &mut Sweep,
) -> Result<(), String> {
    let id = listing.id.as_str();
    let dropped = ledger
        .drop_unclaimed(
            id,
            OffsetDateTime::now_utc(),
            DROP_LOOKS_PER_SWEEP,
            deadline,
        )
        .await
        .map_err(|e| e.to_string())?;
    done.dropped += dropped.dropped;
    // Parked messages of a cancelled scan are dropped as its queue's are on delivery (their
    // pending rows are dropped above, counted).
    while Instant::now() < deadline {
        let parked = ledger.unpark(id, UNPARK_PAGE, None).await;
        if parked.map_err(|e| e.to_string())?.is_empty() {
            break;
        }
    }
    if dropped.dropped > 0 {
        tracing::info!(
            scan = id,
            dropped = dropped.dropped,
            "dropped pending items of a cancelled scan"
        );
    }
    if dropped.complete
        && dropped.dropped == 0
        && dropped.left == 0
        && !parked_left(ledger, id).await?
    {
        // No pending row is left (its counters may lag behind a drop made meanwhile), and no
        // parked row (the loop above stops at its deadline, or on a page another unparker
        // took first): nothing for the sweep to wait for.
        settle(ledger, listing, done).await
    } else {
        Ok(())
    }
}

/// Whether cancelled scan `id` still has parked rows: one query of at most one key.
async fn parked_left(ledger: &Ledger, id: &str) -> Result<bool, String> {
    let oldest = ledger.oldest_parked_ms(id).await;
    Ok(oldest.map_err(|e| e.to_string())?.is_some())
}

/// Takes a scan off the list as its entry was read (see [`Ledger::settle`]), counting it.
async fn settle(ledger: &Ledger, listing: &Listing, done: &mut Sweep) -> Result<(), String> {
    if ledger.settle(listing).await.map_err(|e| e.to_string())? {
        done.settled += 1;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_backlog_older_than_the_item_is_waited_for() {
        let minute = 60 * 1000;
        let touched = 100 * minute;
        // The queue is empty: the message is gone.
        assert!(!waits_in_backlog(touched, None));
        // The oldest message is older than the item: the backlog has not reached it.
        assert!(waits_in_backlog(touched, Some(touched - 30 * minute)));
        // Put just after the item's write: it may be the item's own message.
        assert!(waits_in_backlog(touched, Some(touched + minute)));
        // Everything older was delivered: the item's message was lost.
        assert!(!waits_in_backlog(touched, Some(touched + 10 * minute)));
    }
}
