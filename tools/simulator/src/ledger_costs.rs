//! What a step costs the scan's ledger partition: requests, and entities (what the Table service
//! counts against the partition's 2,000 entities/s). The counts come from the handler's code,
//! named at each; `tests::the_counts_are_what_the_ledger_asks_of_its_table` runs that code on
//! its in-memory table and fails if one drifts.

/// A cost: requests, and entities read and written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cost {
    pub requests: u64,
    pub entities: u64,
}

/// `Ledger::begin_sent` (crates/ledger/src/ledger/claims.rs) on a pending, unclaimed item: the
/// scan row, the pending row, and the claim (a conditional merge of the pending row).
pub const BEGIN: Cost = Cost {
    requests: 3,
    entities: 3,
};

/// `Ledger::renew` (claims.rs): one conditional merge of the pending row, every third of the
/// lease while the step runs (`functions::step::run::run_claimed`).
pub const RENEW: Cost = Cost {
    requests: 1,
    entities: 1,
};

/// `Ledger::finish_noting` (crates/ledger/src/ledger/finish.rs) through `commit_counted`
/// (crates/ledger/src/ledger/shards.rs), for a step with no children and no conflict: a read of
/// its counter shard, and one transaction of the pending row's delete, the done row and the
/// shard.
pub const FINISH: Cost = Cost {
    requests: 2,
    entities: 4,
};

/// What each child adds to the finish's transaction (up to 97 in it; more are written ahead in
/// transactions of their own, which the engine's fan-out never needs).
pub const FINISH_PER_CHILD: u64 = 1;

/// A finish that lost its counter shard to another finish (`commit_counted`: the shard's etag
/// changed between its read and the transaction) reads the shard again and resubmits: the same
/// cost again, after a pause of 5 ms + 10 ms per conflict (`conflict_pause`).
pub const SHARD_CONFLICT_PAUSE_MS: f64 = 5.0;
pub const SHARD_CONFLICT_PAUSE_GROWTH_MS: f64 = 10.0;
/// Counter shards of a scan (`job::rows::SHARDS`): a finish picks one by its item's id.
pub const SHARDS: usize = tablescan::job::rows::SHARDS as usize;

/// `Ledger::fail` (crates/ledger/src/ledger/failures.rs) of a transient failure: a read of its
/// counter shard and one transaction (the pending row released, the shard).
pub const FAIL: Cost = Cost {
    requests: 2,
    entities: 3,
};

/// `Ledger::read_status` (crates/ledger/src/status.rs) of a scan in flight with something
/// unsettled: the scan row and one query of its 16 counter shards. What a client polling the
/// status costs per read, whatever the scan's size (ledger format 2).
pub const STATUS_READ: Cost = Cost {
    requests: 2,
    entities: 17,
};

/// The scan row read by each process every `functions::app::CANCEL_CHECK_EVERY` while it runs
/// steps of the scan (the cancel and pause checks, and the learned cap).
pub const CANCEL_CHECK: Cost = Cost {
    requests: 1,
    entities: 1,
};
pub const CANCEL_CHECK_EVERY_S: f64 = tablescan::functions::app::CANCEL_CHECK_EVERY.as_secs_f64();

/// The re-drive's look at a scan in flight (`Ledger::stranded`, crates/ledger/src/redrive.rs, at
/// most once a minute per scan from the status reads and every 5 minutes from the timer): one
/// query of a window of at most `STRANDED_WINDOW` (200) pending rows, charged here at its most.
pub const REDRIVE_LOOK: Cost = Cost {
    requests: 1,
    entities: tablescan::job::redrive::STRANDED_WINDOW as u64,
};
pub const REDRIVE_LOOK_EVERY_S: f64 = 60.0;

/// `Ledger::park` (crates/ledger/src/parked.rs): one transaction of the parked row's insert
/// and the pending row's touch.
pub const PARK: Cost = Cost {
    requests: 1,
    entities: 2,
};

/// `Ledger::unpark` of `taken` rows: the query of the oldest (one request, what it returns),
/// then, if it found any, one transaction of their deletes.
pub fn unpark(taken: usize) -> Cost {
    let taken = taken as u64;
    Cost {
        requests: if taken > 0 { 2 } else { 1 },
        entities: 2 * taken,
    }
}

/// A finish of a step with `children` follow-ups, without conflicts.
pub fn finish(children: usize) -> Cost {
    Cost {
        requests: FINISH.requests,
        entities: FINISH.entities + FINISH_PER_CHILD * children as u64,
    }
}

#[cfg(test)]
mod tests;
