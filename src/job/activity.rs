//! What a running scan's status says about why it is, or is not, moving: steps holding live
//! claims, claims abandoned by a step that stopped without finishing (its host died: the
//! message comes back when the host's hold on it ends), and how long since a step last
//! finished. Each figure costs one query returning at most [`COUNTED_UP_TO`] entities.

use serde::Serialize;
use time::OffsetDateTime;

use super::ledger::{Ledger, LedgerError};
use super::rows::{self, millis};
use crate::storage::table::filter::{Comparison, Filter, Literal, Property};
use crate::storage::table::query::Query;

/// Claims are counted up to this many (the figure then reads "at least").
pub const COUNTED_UP_TO: u16 = 100;

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
}

impl Ledger {
    /// Counts (up to [`COUNTED_UP_TO`] each) the live and abandoned claims of scan `id`.
    pub async fn claims(&self, id: &str, now: OffsetDateTime) -> Result<Claims, LedgerError> {
        let now_ms = now_ms(now);
        let running = self
            .count_pending(id, lease(Comparison::Gt, now_ms), COUNTED_UP_TO)
            .await?;
        let abandoned = self
            .count_pending(
                id,
                lease(Comparison::Gt, 0).and(lease(Comparison::Le, now_ms)),
                COUNTED_UP_TO,
            )
            .await?;
        Ok(Claims { running, abandoned })
    }

    /// Whether some step holds a live claim on one of scan `id`'s items at `now` (what makes a
    /// cancelled scan `cancelling`): one query returning one entity at most.
    pub async fn any_claimed(&self, id: &str, now: OffsetDateTime) -> Result<bool, LedgerError> {
        let live = lease(Comparison::Gt, now_ms(now));
        Ok(self.count_pending(id, live, 1).await? > 0)
    }

    /// How many pending rows `filter` selects, up to `up_to`, in at most a few requests (a
    /// filtered query may answer empty pages with a continuation).
    async fn count_pending(
        &self,
        id: &str,
        filter: Filter,
        up_to: u16,
    ) -> Result<u64, LedgerError> {
        let query = Query::filtered(rows::rows_of(id, rows::pending_range()).and(filter))
            .select(["leaseUntil"])
            .top(up_to);
        let mut counted = 0u64;
        let mut continuation = None;
        for _ in 0..5 {
            let page = self
                .table()
                .query_page(&query, continuation.as_ref())
                .await?;
            counted += page.entities.len() as u64;
            match page.continuation {
                Some(next) if counted < u64::from(up_to) => continuation = Some(next),
                _ => break,
            }
        }
        Ok(counted.min(u64::from(up_to)))
    }
}

fn now_ms(now: OffsetDateTime) -> i64 {
    millis(now).min(i64::MAX as u64) as i64
}

/// `leaseUntil op value`.
fn lease(op: Comparison, value: i64) -> Filter {
    Filter::compare(
        Property::new("leaseUntil").expect("a valid property name"),
        op,
        Literal::Int64(value),
    )
    .expect("an integer is a valid literal")
}
