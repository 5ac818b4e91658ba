//! Parking as the handler does it (`tablescan::functions::pacing::park`, the step's
//! `step::parking`, and the re-drive sweep): an item not admitted after `PARK_AFTER` give-backs
//! waits in the ledger, where the platform's scaler does not count it; a step that finishes
//! with room in its instance takes up to its room of the oldest; the sweep, every minute, sends
//! those parked for longer than `SWEEP_PARKED_AFTER`. Each park and look is charged to the
//! ledger's partition at the costs the ledger's own code has (`ledger_costs`).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tablescan::functions::pacing::park::{look_due, SWEEP_PAGES, SWEEP_PARKED_AFTER};
use tablescan::scan::item::WorkItem;

use super::{lock, Engine, Message};
use crate::ledger_costs;

/// The scan's parked items, oldest first, and when each instance last looked and found none.
#[derive(Default)]
pub struct Parked {
    items: Mutex<VecDeque<(f64, WorkItem)>>,
    empty_looks: Mutex<HashMap<usize, f64>>,
}

impl Parked {
    /// How many items are parked now.
    pub fn len(&self) -> usize {
        lock(&self.items).len()
    }
}

/// Parks `message`'s item at `end` (its message as first sent), as `Ledger::park` does.
pub fn park(engine: &Arc<Engine>, end: f64, message: Message) {
    engine.charge_ledger(ledger_costs::PARK, end);
    engine.world().stats.parked += 1;
    lock(&engine.parked.items).push_back((end, message.item.as_first_sent()));
}

/// A step that finished on `instance` at `end` leaving `room` in its scan's pace there takes up
/// to that many parked items and sends them with its follow-ups.
pub fn unpark_for_room(engine: &Arc<Engine>, instance: usize, end: f64, room: usize) {
    if room == 0 {
        return;
    }
    let since_empty = lock(&engine.parked.empty_looks)
        .get(&instance)
        .map(|at| Duration::from_secs_f64((end - at).max(0.0)));
    if !look_due(since_empty) {
        return;
    }
    let taken: Vec<WorkItem> = {
        let mut items = lock(&engine.parked.items);
        let n = room.min(items.len());
        items.drain(..n).map(|(_, item)| item).collect()
    };
    engine.charge_ledger(ledger_costs::unpark(taken.len()), end);
    let mut looks = lock(&engine.parked.empty_looks);
    if taken.is_empty() {
        looks.insert(instance, end);
        return;
    }
    looks.remove(&instance);
    drop(looks);
    engine.world().stats.unparked += taken.len() as u64;
    send(engine, end, taken);
}

/// The re-drive sweep at `now`: sends items parked for longer than `SWEEP_PARKED_AFTER`, a page
/// of `UNPARK_PAGE` at a time, at most `SWEEP_PAGES` pages, as `redrive::send_parked` does.
pub fn sweep(engine: &Arc<Engine>, now: f64) {
    let before = now - SWEEP_PARKED_AFTER.as_secs_f64();
    let page = usize::from(tablescan::job::parked::UNPARK_PAGE);
    let taken: Vec<WorkItem> = {
        let mut items = lock(&engine.parked.items);
        let old = items.iter().take_while(|(at, _)| *at < before).count();
        let n = old.min(page * SWEEP_PAGES);
        items.drain(..n).map(|(_, item)| item).collect()
    };
    for chunk in taken.chunks(page) {
        engine.charge_ledger(ledger_costs::unpark(chunk.len()), now);
    }
    if taken.len() % page == 0 && taken.len() < page * SWEEP_PAGES {
        // The last look, which finds none (a short page was the last).
        engine.charge_ledger(ledger_costs::unpark(0), now);
    }
    engine.world().stats.swept += taken.len() as u64;
    send(engine, now, taken);
}

/// Puts `items` on their queues at `at`.
fn send(engine: &Arc<Engine>, at: f64, items: Vec<WorkItem>) {
    for item in items {
        let queue = Engine::queue_of(&item);
        let visible = {
            let mut world = engine.world();
            world.stats.queue_operations += 1;
            world.storage.put_message(at, queue)
        };
        let message = Message {
            item,
            deliveries: 0,
            failing_since: None,
        };
        engine.enqueue(message, visible + engine.params.poll_ms / 1000.0);
    }
}
