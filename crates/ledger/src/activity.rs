//! What a running scan's status says about why it is, or is not, moving: steps holding live
//! claims, claims abandoned by a step that stopped without finishing (its host died: the
//! message comes back when the host's hold on it ends), and how long since a step last
//! finished. The claims are judged in one window of pending rows (`job::window`): exact when
//! the scan has at most [`CLAIMS_WINDOW`] pending items, estimated from [`CLAIMS_WINDOW`] of
//! them above that, at the cost of one query of that many entities whatever the scan's size.
//! The window is small because every status read of a scan in flight pays for it
//! (`job::read_budget`): 25 rows tell "steps are running" from "nothing runs" as surely as 100.

use serde::Serialize;
use time::OffsetDateTime;

use super::ledger::{Ledger, LedgerError};
use super::rows::{millis, number};

/// Claims are judged in a window of at most this many pending rows.
pub const CLAIMS_WINDOW: u16 = 25;

/// The claims among a scan's pending items.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Claims {
    /// Items a step is working on now.
    pub running: u64,
    /// Items whose step stopped without finishing or releasing them (its process died). The
    /// host makes their messages visible again when its hold on them ends, at most 10 minutes
    /// after the delivery under Azure Functions; their ledger claims have run out already.
    pub abandoned: u64,
    /// Whether the figures are estimates (scaled up from a window of the pending items).
    pub estimated: bool,
    /// When the oldest pending item seen was last written or sent (ms since the epoch): the
    /// oldest of all when the window held every pending item, of the window otherwise.
    pub oldest_touched_ms: Option<u64>,
    /// The latest last write among the abandoned claims seen (ms since the epoch). Their
    /// deliveries came before it, so their messages come back at most the queue host's hold
    /// after it (the caller, which knows the host, adds that).
    pub abandoned_touched_ms: Option<u64>,
}

impl Ledger {
    /// The live and abandoned claims among scan `id`'s `pending` items (its unsettled count),
    /// judged in a window of at most `window` (1 to [`CLAIMS_WINDOW`]) of them: one request.
    pub async fn claims(
        &self,
        id: &str,
        pending: u64,
        window: u16,
        now: OffsetDateTime,
    ) -> Result<Claims, LedgerError> {
        let now_ms = millis(now);
        let window = self
            .first_pending(
                id,
                window.clamp(1, CLAIMS_WINDOW),
                &["leaseUntil", "redrivenAt", "Timestamp"],
            )
            .await?;
        // (lease until, last touched) of each pending row seen; a lapsed claim whose item was
        // sent again since is no longer abandoned (its new message is on its way).
        let rows: Vec<(u64, u64)> = window
            .rows
            .iter()
            .map(|row| {
                let written = row.timestamp.map_or(0, |t| millis(t.time()));
                let until = number(row, "leaseUntil");
                let redriven = number(row, "redrivenAt");
                let until = if redriven >= until { 0 } else { until };
                (until, written.max(redriven))
            })
            .collect();
        let running = rows.iter().filter(|(until, _)| *until > now_ms).count() as u64;
        let is_abandoned = |until: u64| until > 0 && until <= now_ms;
        let abandoned = rows
            .iter()
            .filter(|(until, _)| is_abandoned(*until))
            .count() as u64;
        let oldest_touched_ms = rows.iter().map(|(_, touched)| *touched).min();
        let abandoned_touched_ms = rows
            .iter()
            .filter(|(until, _)| is_abandoned(*until))
            .map(|(_, touched)| *touched)
            .max();
        let estimated = !window.complete && !rows.is_empty();
        let scale = |n: u64| {
            if estimated {
                (n * pending).div_ceil(rows.len() as u64)
            } else {
                n
            }
        };
        Ok(Claims {
            running: scale(running),
            abandoned: scale(abandoned),
            estimated,
            oldest_touched_ms,
            abandoned_touched_ms,
        })
    }

    /// Whether some step may hold a live claim on one of scan `id`'s items at `now` (what keeps
    /// a cancelled scan `cancelling`): a live claim in a window of pending rows, or more
    /// pending rows than the window held (their messages are still being dropped). One
    /// request of at most [`CLAIMS_WINDOW`] entities.
    pub async fn any_claimed(&self, id: &str, now: OffsetDateTime) -> Result<bool, LedgerError> {
        let now_ms = millis(now);
        let window = self
            .first_pending(id, CLAIMS_WINDOW, &["leaseUntil"])
            .await?;
        let live = window
            .rows
            .iter()
            .any(|row| number(row, "leaseUntil") > now_ms);
        Ok(live || !window.complete)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rows::PendingRow;
    use tablescan_storage::table::batch::Operation;
    use tablescan_storage::table::in_memory::InMemoryTable;

    #[tokio::test]
    async fn claims_of_a_large_scan_are_estimated_from_one_window() {
        let table = InMemoryTable::new("ledger");
        let ledger = Ledger::in_memory(table.clone());
        ledger.ensure().await.unwrap();
        let now = OffsetDateTime::now_utc();
        let now_ms = millis(now);
        // 1,000 pending items: 300 running, 100 abandoned, the rest waiting.
        let rows: Vec<Operation> = (0..1000u64)
            .map(|n| {
                use base64::Engine;
                // Ids as the product makes them (random-looking, so the window is a sample),
                // but drawn from a fixed sequence: a random draw left the window without one
                // running item about once in 7,000 runs (0.7^25), and CI met it.
                let id = base64::engine::general_purpose::URL_SAFE_NO_PAD
                    .encode(scrambled(n).to_be_bytes());
                let mut row = PendingRow::new(format!("m{n}"), 1);
                row.lease_until = match n % 10 {
                    0..=2 => now_ms + 60_000,
                    3 => now_ms - 60_000,
                    _ => 0,
                };
                Operation::Insert(row.to_entity("scan", &id))
            })
            .collect();
        for chunk in rows.chunks(100) {
            ledger.table().submit_transaction(chunk).await.unwrap();
        }
        let before = (table.requests(), table.entities());
        let claims = ledger
            .claims("scan", 1000, CLAIMS_WINDOW, now)
            .await
            .unwrap();
        assert_eq!(table.requests() - before.0, 1);
        assert_eq!(table.entities() - before.1, u64::from(CLAIMS_WINDOW));
        assert!(claims.estimated);
        // 25 of 1,000 chosen by their random ids, scaled by 40: within three standard
        // deviations of the truth (300 running: 7.5 +- 6.9 of 25; 100 abandoned: 2.5 +- 4.5).
        assert!((40..=560).contains(&claims.running), "{claims:?}");
        assert!(claims.abandoned <= 280, "{claims:?}");
        assert!(ledger.any_claimed("scan", now).await.unwrap());
    }

    /// A fixed, well-mixed 128-bit value for `n` (SplitMix64's finaliser, twice).
    fn scrambled(n: u64) -> u128 {
        fn mix(mut z: u64) -> u64 {
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        }
        let high = mix(n.wrapping_add(0x9e37_79b9_7f4a_7c15));
        (u128::from(high) << 64) | u128::from(mix(high))
    }
}
