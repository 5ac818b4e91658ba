//! What a simulated scan did, counted as it runs.

/// Rows read are counted in windows of this many seconds (for the plot).
pub const ROW_WINDOW: f64 = 5.0;
/// Executions are counted in windows of this many seconds, as the published runs report them.
pub const EXECUTION_WINDOW: f64 = 30.0;

#[derive(Debug, Default, Clone)]
pub struct Stats {
    pub seconds: f64,
    /// Rows acted on (copied, deleted, updated, counted; for partition keys, partitions found).
    pub rows_acted: u64,
    pub queries: u64,
    /// Entity group transactions written by the action.
    pub writes: u64,
    /// Rows those transactions wrote (copied, deleted or updated).
    pub rows_written: u64,
    /// Executions started, and those that ended without failing.
    pub executions: u64,
    pub executions_done_ok: u64,
    /// Why attempts failed: a ledger request, the step's first read, or a write of the action,
    /// still refused after its retries.
    pub failed_on_ledger: u64,
    pub failed_on_read: u64,
    pub failed_on_write: u64,
    /// Messages that used up their deliveries: work the scan never did.
    pub failed_for_good: u64,
    pub longest_execution: f64,
    pub peak_instances: usize,
    /// Ledger entities the steps themselves read and wrote (begin, claim, finish).
    pub step_ledger_entities: u64,
    /// Ledger entities read by status reads and re-drive sweeps.
    pub status_entities: u64,
    /// Requests to the ledger (billed per request, whatever their entities).
    pub ledger_requests: u64,
    /// Queue operations: puts, gets and deletes of work messages.
    pub queue_operations: u64,
    pub status_reads: u64,
    pub rows_per_window: Vec<u64>,
    pub executions_per_window: Vec<u64>,
    /// Ledger entities in each second (every request to the ledger's partition).
    pub ledger_per_second: Vec<u64>,
    /// Ledger entities outside the steps: status reads, cancel checks, re-drive looks, the
    /// slices and learning rounds.
    pub ledger_entities_other: u64,
    /// Requests of the slices protocol to the ledger.
    pub slice_requests: u64,
    /// Integral of running instances over time.
    pub instance_seconds: f64,
    /// Invocations not admitted by the scan's pace in time: the item went back to its queue.
    pub given_back: u64,
    /// Invocations not admitted that parked their item in the ledger instead.
    pub parked: u64,
    /// Parked items sent by finishing steps with room, and by the re-drive sweep.
    pub unparked: u64,
    pub swept: u64,
    /// Items handed on in a fresh message at their message's last delivery.
    pub handed_on: u64,
    /// Items sent again by the re-drive after their message went to the poison queue.
    pub redriven: u64,
    /// Finishes that lost their counter shard to another finish and tried again.
    pub shard_conflicts: u64,
    pub renewals: u64,
    pub blob_writes: u64,
    /// Rounds that set or changed a learned cap.
    pub caps_learned: u64,
    /// The scan's learned cap at its end.
    pub learned_cap: Option<f64>,
    /// The PartitionKeys a partition-keys scan put on its output queue, in the order put, when
    /// the run collects them (`cases::run_collecting_keys`, for tests).
    pub partition_keys: Option<Vec<String>>,
}

impl Stats {
    pub fn count_rows(&mut self, t: f64, rows: u64) {
        bump(&mut self.rows_per_window, t / ROW_WINDOW, rows);
    }

    pub fn count_execution(&mut self, t: f64) {
        bump(&mut self.executions_per_window, t / EXECUTION_WINDOW, 1);
    }

    pub fn count_ledger(&mut self, t: f64, entities: u64) {
        bump(&mut self.ledger_per_second, t, entities);
    }

    /// The ledger partition's busiest 10 seconds, entities per second.
    pub fn ledger_peak(&self) -> f64 {
        let w = &self.ledger_per_second;
        if w.len() < 10 {
            return w.iter().sum::<u64>() as f64 / 10.0;
        }
        w.windows(10)
            .map(|s| s.iter().sum::<u64>())
            .max()
            .unwrap_or(0) as f64
            / 10.0
    }

    /// The ledger partition's load over the whole scan, entities per second.
    pub fn ledger_mean(&self) -> f64 {
        self.ledger_per_second.iter().sum::<u64>() as f64 / self.seconds.max(1.0)
    }

    /// The most executions that started in one 30-second window.
    pub fn most_executions_per_window(&self) -> u64 {
        self.executions_per_window
            .iter()
            .copied()
            .max()
            .unwrap_or(0)
    }
}

fn bump(windows: &mut Vec<u64>, index: f64, by: u64) {
    let index = index.max(0.0) as usize;
    if windows.len() <= index {
        windows.resize(index + 1, 0);
    }
    windows[index] += by;
}
