//! Parking: work items of a paced scan that keep finding no room wait in the scan's ledger
//! partition instead of in the queue.
//!
//! The platform's queue scaler counts every message of a queue, visible or not, so an item given
//! back again and again (`give_back_delay`) keeps asking for instances that could only split the
//! scan's cap further. An item given back [`PARK_AFTER`] times in a row is *parked* instead: its
//! message (as first sent) goes into a `parked:` row of the scan's ledger partition and leaves the
//! queue. A step that finishes where its scan has room takes up to [`UNPARK_AT_MOST`] of the
//! oldest parked rows and sends them beside its own follow-ups ([`unpark_room`]); the re-drive
//! sweep sends a page of those parked for longer than [`SWEEP_PARKED_AFTER`]
//! ([`SWEEP_PAGES`]), so a scan whose processes all went away still finishes.
//!
//! These are the decisions alone, plain functions that the handler's steps and the simulator
//! (tools/simulator) both call; the rows are `tablescan_ledger::parked`.

use std::time::Duration;

/// How many give-backs in a row an item has had before the next one parks it instead. The
/// first give-backs are short (1-2 s, then 2-4 s) and usually find room: a slot frees every
/// few seconds in a paced scan. An item still without room after both belongs to a scan with
/// more items than its pace runs, and would otherwise wait 4-16 s at a time in the queue.
pub const PARK_AFTER: u32 = 2;

/// Whether a step not admitted, whose item was given back `given_back` times in a row, parks
/// its item rather than giving it back again.
pub fn parks(given_back: u32) -> bool {
    given_back >= PARK_AFTER
}

/// The most parked items one finishing step sends: a small page of the oldest, so that one
/// step's answer stays small and the items spread over the processes that have room.
pub const UNPARK_AT_MOST: usize = 4;

/// How many parked items a step that finishes may send: the room its scan has in this process
/// once the step is over (`slots` it may run at once, `running` now with this step among them,
/// `waiting` to be admitted), less the follow-ups it sends itself, at most
/// [`UNPARK_AT_MOST`]. A scan with nothing limiting it here (`slots` is `usize::MAX`) parks
/// nothing in this process: only the sweep sends what another process parked while paced.
pub fn unpark_room(slots: usize, running: usize, waiting: usize, follow_ups: usize) -> usize {
    if slots == usize::MAX {
        return 0;
    }
    let others = running.saturating_sub(1);
    slots
        .saturating_sub(others + waiting + follow_ups)
        .min(UNPARK_AT_MOST)
}

/// How long a process waits, after a look that found nothing parked, before it looks again for
/// the same scan: it bounds the cost of looking in a scan that parks nothing to one query per
/// process with room per this long (an empty query costs a request and no entity).
pub const EMPTY_LOOK_PAUSE: Duration = Duration::from_secs(5);

/// Whether a process with room looks for parked items now: never yet, or its last look found
/// some, or its last empty look was at least [`EMPTY_LOOK_PAUSE`] ago (`since_empty`).
pub fn look_due(since_empty: Option<Duration>) -> bool {
    since_empty.is_none_or(|since| since >= EMPTY_LOOK_PAUSE)
}

/// How old a parked row is when the re-drive sweep (`RedriveScans`, each minute) sends its
/// message itself: by then a finishing step would have taken it if the scan had room anywhere
/// at all, so the scan may have nobody left to run it.
pub const SWEEP_PARKED_AFTER: Duration = Duration::from_secs(60);

/// How many pages (`tablescan_ledger::parked::UNPARK_PAGE` items each) of a scan's parked items
/// one look of the sweep sends: one. A scan parks because its pace is full, and in a scan that
/// stays full (more items than its cap runs) almost no step finishes with room: its freed slot
/// goes to the steps already waiting here. Sending every old parked item at once put hundreds
/// of items a minute back into a full scan, where most were given back twice and parked again
/// (`docs/scan.md`, Parking, has the simulator's figures before and after). One page
/// a minute is enough to restart a scan nobody runs any more (the items it sends run in an
/// empty pace, and each finishes with room for [`UNPARK_AT_MOST`] more); a scan still running
/// takes the rest as its steps finish with room, oldest first.
pub const SWEEP_PAGES: usize = 1;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_items_given_back_often_enough_park() {
        assert!(!parks(0));
        assert!(!parks(PARK_AFTER - 1));
        assert!(parks(PARK_AFTER));
        assert!(parks(u32::MAX));
    }

    #[test]
    fn room_counts_what_runs_waits_and_is_handed_on() {
        // 4 slots, this step alone: 3 others could run, and 1 follow-up takes one of them.
        assert_eq!(unpark_room(4, 1, 0, 1), 3);
        // Full of others, or others waiting for the slot this one leaves.
        assert_eq!(unpark_room(4, 4, 0, 0), 1);
        assert_eq!(unpark_room(4, 4, 1, 0), 0);
        assert_eq!(unpark_room(4, 2, 5, 0), 0);
        // Never more than a small page, never for an unpaced scan.
        assert_eq!(unpark_room(64, 1, 0, 0), UNPARK_AT_MOST);
        assert_eq!(unpark_room(usize::MAX, 1, 0, 0), 0);
        // No slot at all (a capped scan's process without a slice).
        assert_eq!(unpark_room(0, 1, 0, 0), 0);
    }

    #[test]
    fn an_empty_look_pauses_the_next() {
        assert!(look_due(None));
        assert!(!look_due(Some(Duration::from_secs(1))));
        assert!(look_due(Some(EMPTY_LOOK_PAUSE)));
    }
}
