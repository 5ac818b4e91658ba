//! The ledger: what a scan is and where each of its work items stands, in a table of the app's
//! own storage account. Its rows are described in `job::rows`.
//!
//! A step's end is one entity group transaction in the scan's partition: insert its children as
//! pending, delete its own pending row (on the etag of its claim), insert its done row, and add
//! its counts to one counter shard (on the shard's etag). So children are recorded exactly when
//! their parent is marked done, each item counts once however often its message is delivered,
//! and the counter shards always agree with the item rows. A status read sums the shards (a
//! few entities, whatever the scan's size); a scan is complete exactly when the shards, read
//! twice with no change between the reads, show no item unsettled (see `job::status`).
//!
//! A step claims its pending row before working (a lease, by etag), so a duplicate delivery
//! that arrives while the first is running backs off instead of acting twice.
//!
//! `scans` keeps the scans' own rows (the record, the index by age, refused messages);
//! `shards` the counter shards every count goes through; `claims` decides whether a delivered
//! item runs and holds it while it does; `finish` records a step's end with its children, and
//! `failures` a failed attempt and the retry of items failed for good.

mod claims;
mod failures;
mod finish;
mod scans;
mod shards;

pub use crate::step_counts::StepCounts;
pub(crate) use claims::Ahead;
pub use claims::{Begin, Claim, DEFAULT_STEP_LEASE};
pub use failures::FailureRecord;
pub use finish::Finish;
pub(crate) use scans::index_key;
pub use scans::{Created, Rejected, ScanRecord, CANCEL_CHECK_EVERY};

use time::OffsetDateTime;

use super::rows::LEDGER_FORMAT;
use super::store::LedgerTable;
use tablescan_storage::table::entity::EdmDateTime;
use tablescan_storage::table::in_memory::InMemoryTable;
use tablescan_storage::{ErrorKind, StorageError, TableClient};

/// The ledger table's name unless the `TABLESCAN_LEDGER_TABLE` setting says otherwise.
pub const DEFAULT_LEDGER_TABLE: &str = "tablescanledger";
pub(crate) const INDEX_PARTITION: &str = "~index";
pub(crate) const REJECTED_PARTITION: &str = "~rejected";
/// The partition that lists the scans in flight, one row per scan id (`active`).
pub(crate) const ACTIVE_PARTITION: &str = "~active";
/// How long after a pause a step that was running then may still act, unless the app says
/// otherwise ([`Ledger::with_steps_stop_within`]): a step's work ends at its storage deadline,
/// three budgets of 15 s after it started, and its finish takes a few requests more.
pub const STEPS_STOP_WITHIN: time::Duration = time::Duration::seconds(60);

/// A failed ledger operation.
#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    #[error(transparent)]
    Storage(#[from] StorageError),
    #[error("the ledger entry {0} is unreadable: {1}")]
    Corrupt(String, String),
    /// A write the ledger must refuse whatever the service says: it would record something
    /// wrong (a step that chose one child twice).
    #[error("{0}")]
    Refused(String),
    #[error("scan {0} was started by an earlier version of tablescan (ledger format {1}, this version reads {LEDGER_FORMAT}); finish or cancel it with that version")]
    OldFormat(String, u64),
}

impl LedgerError {
    pub fn is_transient(&self) -> bool {
        matches!(self, LedgerError::Storage(e) if e.is_transient())
    }

    /// Whether the ledger would refuse the same write the same way every time: a transaction
    /// the client refuses to send (an entity twice, over 100 operations or 4 MiB), one the
    /// service finds malformed (400), too large (413) or in conflict with a row that will not
    /// go away (409: a done row already there), or an unreadable ledger row. Trying again
    /// cannot help; a step whose finish is refused so fails for good with the cause. Not:
    /// throttling, timeouts, a lost connection, a conditional write that lost a race (412 or
    /// 404, for which the callers have their own answers).
    pub fn refused_for_good(&self) -> bool {
        match self {
            LedgerError::Corrupt(..) | LedgerError::OldFormat(..) | LedgerError::Refused(_) => true,
            LedgerError::Storage(e) => match e.kind() {
                ErrorKind::InvalidRequest(_) => true,
                ErrorKind::Batch { error, .. } => matches!(error.status, 400 | 409 | 413),
                ErrorKind::Service(error) => matches!(error.status, 400 | 413),
                _ => false,
            },
        }
    }
}

/// The ledger of every scan.
#[derive(Clone)]
pub struct Ledger {
    table: LedgerTable,
    /// See [`Ledger::steps_stop_within`] (`pause`).
    steps_stop_within: time::Duration,
    /// See [`Ledger::strains`]; shared by the clones of this ledger (one process's).
    strains: shards::Strains,
}

impl Ledger {
    /// The ledger in a table of a storage account.
    pub fn new(table: TableClient) -> Self {
        Ledger {
            table: LedgerTable::Storage(table),
            steps_stop_within: STEPS_STOP_WITHIN,
            strains: Default::default(),
        }
    }

    /// The ledger in a table held in memory (race tests and the in-memory benchmark).
    pub fn in_memory(table: InMemoryTable) -> Self {
        Ledger {
            table: LedgerTable::Memory(table),
            steps_stop_within: STEPS_STOP_WITHIN,
            strains: Default::default(),
        }
    }

    /// This ledger, for an app whose steps end at most `within` after a pause (their storage
    /// deadline and their finish): see [`Ledger::steps_stop_within`].
    pub fn with_steps_stop_within(mut self, within: time::Duration) -> Self {
        self.steps_stop_within = within;
        self
    }

    /// How long after a pause a step that was running then may still act (each sees the
    /// pause at its next page and stops, at the latest, at its storage deadline).
    pub fn steps_stop_within(&self) -> time::Duration {
        self.steps_stop_within
    }

    pub fn table(&self) -> &LedgerTable {
        &self.table
    }

    /// Creates the ledger table if it does not exist yet.
    pub async fn ensure(&self) -> Result<(), LedgerError> {
        self.table.create_if_missing().await?;
        Ok(())
    }
}

/// Scan ids are 32 lowercase hex digits; anything else cannot name a scan (and is never used as
/// a key, so a request cannot reach the ledger's other partitions through an id).
pub fn is_scan_id(id: &str) -> bool {
    id.len() == 32
        && id
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// A new scan id.
pub fn new_scan_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

pub fn format_time(time: OffsetDateTime) -> String {
    EdmDateTime::new(time).to_string()
}
