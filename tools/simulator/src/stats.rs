//! What a simulated scan did, counted as it runs.

/// Rows read are counted in windows of this many seconds (for the plot).
pub const ROW_WINDOW: f64 = 5.0;
/// Executions are counted in windows of this many seconds, as the published runs report them.
pub const EXECUTION_WINDOW: f64 = 30.0;

#[derive(Debug, Default, Clone)]
pub struct Stats {
    pub seconds: f64,
    /// Rows acted on (copied, deleted, counted).
    pub rows_acted: u64,
    pub queries: u64,
    /// Entity group transactions written by the action.
    pub writes: u64,
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
    /// Steps that ran longer than the claim's lease (another delivery could claim them).
    pub lease_overruns: u64,
    pub rows_per_window: Vec<u64>,
    pub executions_per_window: Vec<u64>,
}

impl Stats {
    pub fn count_rows(&mut self, t: f64, rows: u64) {
        bump(&mut self.rows_per_window, t / ROW_WINDOW, rows);
    }

    pub fn count_execution(&mut self, t: f64) {
        bump(&mut self.executions_per_window, t / EXECUTION_WINDOW, 1);
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
