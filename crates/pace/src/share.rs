//! One process's share of one scan's cap: the slices it holds, and the round of work
//! ([`ScanShare::tick`]) that joins, renews, takes more and gives back.

use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::sync::Mutex;
use std::time::Duration;

use crate::clock::Clock;
use crate::slice::{SliceRow, LEASE, PROBE_MAX, PROBE_MIN, RENEW_EVERY, SLICES, SURPLUS_AFTER};
use crate::store::{SliceStore, StoreError};

/// What the process's steps of the scan want, as the caller sees it at a tick.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Demand {
    /// Steps would use more than the process holds: some wait to be admitted, or the rate held
    /// a read or write back lately.
    pub wants_more: bool,
    /// Entities per second the process's steps used lately.
    pub used: f64,
}

/// A slice this process holds: until when (epoch ms), and the row's version.
#[derive(Debug, Clone)]
struct Held {
    until_ms: u64,
    etag: String,
}

#[derive(Debug)]
struct State {
    held: BTreeMap<u16, Held>,
    /// Whether the slices were read once (a process joins by reading them all).
    joined: bool,
    next_probe_ms: u64,
    probe_gap_ms: u64,
    next_renew_ms: u64,
    /// Since when the process has held more than it uses.
    surplus_since_ms: Option<u64>,
    random: u64,
}

/// One process's part in one scan's cap.
pub struct ScanShare<S, C> {
    scan: String,
    process: String,
    cap: f64,
    store: S,
    clock: C,
    state: Mutex<State>,
}

fn ms(duration: Duration) -> u64 {
    duration.as_millis() as u64
}

impl<S: SliceStore, C: Clock> ScanShare<S, C> {
    /// `process` (a name unique to the process) taking part in `scan`, capped at `cap`
    /// entities per second.
    pub fn new(store: S, clock: C, scan: &str, process: &str, cap: f64) -> Self {
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        (scan, process).hash(&mut hasher);
        ScanShare {
            scan: scan.to_string(),
            process: process.to_string(),
            cap,
            store,
            clock,
            state: Mutex::new(State {
                held: BTreeMap::new(),
                joined: false,
                next_probe_ms: 0,
                probe_gap_ms: ms(PROBE_MIN),
                next_renew_ms: 0,
                surplus_since_ms: None,
                random: hasher.finish() | 1,
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // Plain data: a panic elsewhere cannot leave it half-written.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Entities per second one slice allows.
    pub fn slice_rate(&self) -> f64 {
        self.cap / f64::from(SLICES)
    }

    /// How many slices the process may use now.
    pub fn usable(&self) -> usize {
        let now = self.clock.now_ms();
        let margin = crate::slice::CLOCK_MARGIN_MS;
        self.lock()
            .held
            .values()
            .filter(|held| held.until_ms > now.saturating_add(margin))
            .count()
    }

    /// Entities per second the process may use now.
    pub fn granted(&self) -> f64 {
        self.usable() as f64 * self.slice_rate()
    }

    /// One round: joins if it has not, renews when due, gives back what it does not use,
    /// looks for more when it wants more. A few store requests at most; call it every tenth
    /// of a second or so.
    pub async fn tick(&self, demand: Demand) {
        let now = self.clock.now_ms();
        self.drop_lapsed(now);
        let (joined, renew_due, probe_due) = {
            let state = self.lock();
            (
                state.joined,
                !state.held.is_empty() && now >= state.next_renew_ms,
                now >= state.next_probe_ms,
            )
        };
        if !joined {
            if demand.wants_more && probe_due {
                self.join(now).await;
            }
            return;
        }
        if renew_due {
            self.renew(now, demand.used).await;
        }
        self.give_back_surplus(now, demand).await;
        let room = self.lock().held.len() < usize::from(SLICES);
        if demand.wants_more && room && probe_due {
            self.probe(now).await;
        }
    }

    /// Gives every slice back (the process has no more steps of the scan).
    pub async fn leave(&self) {
        let held: Vec<(u16, Held)> = std::mem::take(&mut self.lock().held).into_iter().collect();
        self.free(held).await;
    }

    /// Forgets slices whose lease is too near its end to use.
    fn drop_lapsed(&self, now: u64) {
        let margin = crate::slice::CLOCK_MARGIN_MS;
        self.lock()
            .held
            .retain(|_, held| held.until_ms > now.saturating_add(margin));
    }

    /// Reads every slice and takes those free (a joining process wants more: its first step
    /// waits).
    async fn join(&self, now: u64) {
        let rows = match self.store.read_all(&self.scan).await {
            Ok(rows) => rows,
            Err(e) => {
                tracing::debug!(scan = %self.scan, "could not read the scan's slices: {e}");
                self.lock().next_probe_ms = now + ms(PROBE_MIN);
                return;
            }
        };
        self.lock().joined = true;
        let rows = self.adopt(rows, now);
        let free: Vec<SliceRow> = rows.into_iter().filter(|row| row.is_free(now)).collect();
        if !free.is_empty() {
            self.take(free, now).await;
        }
        self.lock().next_probe_ms = now + ms(PROBE_MIN);
    }

    /// Every slice, stored or not, after taking as held those the store says this process
    /// holds (a write whose answer was lost).
    fn adopt(&self, stored: Vec<SliceRow>, now: u64) -> Vec<SliceRow> {
        let mut rows: Vec<SliceRow> = (0..SLICES).map(SliceRow::unwritten).collect();
        for row in stored {
            if let Some(slot) = rows.get_mut(usize::from(row.index)) {
                *slot = row;
            }
        }
        let mut state = self.lock();
        state.held.clear();
        for row in &rows {
            if row.usable_by(&self.process, now) {
                let etag = row.etag.clone().unwrap_or_default();
                state.held.insert(
                    row.index,
                    Held {
                        until_ms: row.until_ms,
                        etag,
                    },
                );
            }
        }
        rows
    }

    /// Takes `rows` (read free at `now`) in one conditional write.
    async fn take(&self, rows: Vec<SliceRow>, now: u64) -> bool {
        let until = now + ms(LEASE);
        let taken: Vec<SliceRow> = rows
            .iter()
            .map(|row| row.held(&self.process, until, 0.0))
            .collect();
        match self.store.write(&self.scan, &taken).await {
            Ok(etags) => {
                let mut state = self.lock();
                for (row, etag) in taken.iter().zip(etags) {
                    state.held.insert(
                        row.index,
                        Held {
                            until_ms: until,
                            etag,
                        },
                    );
                }
                // Slices held before keep their renewal time (the new ones are renewed with
                // them, early); the first ones set it.
                if state.held.len() == taken.len() {
                    state.next_renew_ms = now + ms(RENEW_EVERY);
                }
                tracing::debug!(scan = %self.scan, taken = taken.len(), held = state.held.len(), "took slices of the scan's cap");
                true
            }
            Err(e) => {
                tracing::debug!(scan = %self.scan, "could not take slices: {e}");
                false
            }
        }
    }

    /// Extends every held slice's lease in one write.
    async fn renew(&self, now: u64, used: f64) {
        let until = now + ms(LEASE);
        let held: Vec<(u16, Held)> = self
            .lock()
            .held
            .iter()
            .map(|(index, held)| (*index, held.clone()))
            .collect();
        let per_slice = used / held.len().max(1) as f64;
        let rows: Vec<SliceRow> = held
            .iter()
            .map(|(index, held)| SliceRow {
                index: *index,
                holder: self.process.clone(),
                until_ms: until,
                used: per_slice,
                etag: Some(held.etag.clone()),
            })
            .collect();
        match self.store.write(&self.scan, &rows).await {
            Ok(etags) => {
                let mut state = self.lock();
                for ((index, _), etag) in held.iter().zip(etags) {
                    // A slice dropped meanwhile (lapsed) stays dropped.
                    if let Some(entry) = state.held.get_mut(index) {
                        *entry = Held {
                            until_ms: until,
                            etag,
                        };
                    }
                }
                state.next_renew_ms = now + ms(RENEW_EVERY);
            }
            Err(StoreError::Conflict) => {
                // Some slice changed: a lease that ran out was taken, or an earlier write
                // applied though its answer was lost. The store says which are ours.
                match self.store.read_all(&self.scan).await {
                    Ok(rows) => {
                        self.adopt(rows, now);
                        self.lock().next_renew_ms = now;
                    }
                    Err(_) => self.lock().next_renew_ms = now + 1_000,
                }
            }
            Err(e) => {
                // The leases hold until their ends; try again in a second.
                tracing::debug!(scan = %self.scan, "could not renew the scan's slices: {e}");
                self.lock().next_renew_ms = now + 1_000;
            }
        }
    }

    /// Gives back the slices the process has not used for [`SURPLUS_AFTER`], keeping one more
    /// than its use needs.
    async fn give_back_surplus(&self, now: u64, demand: Demand) {
        let needed = if demand.wants_more {
            usize::MAX
        } else {
            ((demand.used * 1.2 / self.slice_rate()).ceil() as usize + 1).max(1)
        };
        let surplus: Vec<(u16, Held)> = {
            let mut state = self.lock();
            if state.held.len() <= needed {
                state.surplus_since_ms = None;
                return;
            }
            let since = *state.surplus_since_ms.get_or_insert(now);
            if now < since + ms(SURPLUS_AFTER) {
                return;
            }
            state.surplus_since_ms = None;
            let extra = state.held.len() - needed;
            // Stop using them before the store says they are free.
            let indexes: Vec<u16> = state.held.keys().rev().take(extra).copied().collect();
            indexes
                .into_iter()
                .filter_map(|index| state.held.remove(&index).map(|held| (index, held)))
                .collect()
        };
        self.free(surplus).await;
    }

    /// Writes `held` slices free (already out of this process's use).
    async fn free(&self, held: Vec<(u16, Held)>) {
        if held.is_empty() {
            return;
        }
        let rows: Vec<SliceRow> = held
            .into_iter()
            .map(|(index, held)| SliceRow {
                index,
                holder: String::new(),
                until_ms: 0,
                used: 0.0,
                etag: Some(held.etag),
            })
            .collect();
        if let Err(e) = self.store.write(&self.scan, &rows).await {
            // Their leases run out by themselves.
            tracing::debug!(scan = %self.scan, "could not give slices back: {e}");
        }
    }

    /// Looks at one slice this process does not hold, and takes it if free.
    async fn probe(&self, now: u64) {
        let index = {
            let mut state = self.lock();
            let others: Vec<u16> = (0..SLICES)
                .filter(|i| !state.held.contains_key(i))
                .collect();
            state.random = splitmix(state.random);
            others[(state.random % others.len() as u64) as usize]
        };
        let found = match self.store.read_one(&self.scan, index).await {
            Ok(row) => row.unwrap_or_else(|| SliceRow::unwritten(index)),
            Err(_) => {
                self.back_off(now);
                return;
            }
        };
        if found.is_free(now) && self.take(vec![found], now).await {
            let mut state = self.lock();
            state.probe_gap_ms = ms(PROBE_MIN);
            state.next_probe_ms = now + ms(PROBE_MIN);
        } else {
            self.back_off(now);
        }
    }

    fn back_off(&self, now: u64) {
        let mut state = self.lock();
        state.probe_gap_ms = (state.probe_gap_ms * 2).min(ms(PROBE_MAX));
        // Spread the looks of many processes: a gap between half and all of the current one.
        state.random = splitmix(state.random);
        let gap = state.probe_gap_ms / 2 + state.random % (state.probe_gap_ms / 2).max(1);
        state.next_probe_ms = now + gap;
    }
}

/// A step of the splitmix64 generator: enough randomness to spread probes, with no crate.
fn splitmix(state: u64) -> u64 {
    let mut z = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}
