//! A scan's status, read from its counter shards every time it is asked for: a few entities
//! whatever the scan's size, never stale, and never disagreeing with the ledger.

use time::OffsetDateTime;

use super::activity::CLAIMS_WINDOW;
use super::history::{rate_history, History};
use super::ledger::{format_time, Ledger, LedgerError, ScanRecord};
use super::notes::{RowNotes, STEPS_READ as NOTED_STEPS_READ};
use super::read_budget::ReadCost;
use super::redrive::Stranded;
use super::rows::{self, Tallies, SHARDS};
use tablescan_api::{ActionSpec, ScanSpec};
use tablescan_storage::table::query::Query;

/// The status document and its parts: the API's types (`tablescan_api::answers`), which the
/// CLI reads too; the ledger fills them.
pub use tablescan_api::answers::{
    spec_as_requested, Activity, CountResult, ExportProgress, Pace, Progress, ScanStatus, State,
    StepFailure,
};

/// How many items that failed for good a status lists (the count is always exact).
pub const ERRORS_LISTED: u16 = 20;
/// How many times the finishing step tries to see the shards twice unchanged before it settles
/// for `running`: finishes landing between the reads only delay the verdict.
const CONSISTENT_READ_TRIES: u32 = 3;
/// A status read reads the shards at most twice (the second only when the first shows nothing
/// unsettled): a finish landing between the reads delays the verdict to the next status read,
/// and the read stays within its allowance (`job::read_budget`).
const STATUS_SHARD_READS: u32 = 2;

/// Whether the scan writes a table row per row it acts on (a copy, a delete, an update, not
/// in a dry run): a cap counts those writes beside the rows read.
pub fn writes_rows(spec: &ScanSpec) -> bool {
    !spec.dry_run
        && matches!(
            spec.action,
            ActionSpec::Copy { .. } | ActionSpec::Delete | ActionSpec::Update { .. }
        )
}

/// A status as one read saw it: what the read cost, and what the status read's re-drive look
/// needs (see `job::redrive`).
#[derive(Debug, Clone)]
pub struct StatusRead {
    pub status: ScanStatus,
    /// At most what the read spent in the ledger's account.
    pub cost: ReadCost,
    /// The scan row's etag as read: a turn at the re-drive look is taken on it.
    pub scan_etag: String,
    pub created_at: OffsetDateTime,
    /// When a status read last took its turn at the re-drive look.
    pub redrive_looked_at: Option<OffsetDateTime>,
    /// While a resume's rounds are under way: where the next one starts (the re-drive leaves
    /// the rows after it to them).
    pub resume_from: Option<String>,
}

impl Ledger {
    /// The status of a scan; `None` if there is no such scan.
    pub async fn status(
        &self,
        id: &str,
        now: OffsetDateTime,
    ) -> Result<Option<ScanStatus>, LedgerError> {
        Ok(self.read_status(id, now).await?.map(|read| read.status))
    }

    /// The status of a scan with what reading it cost; `None` if there is no such scan. A scan
    /// in flight costs the scan row and one read of the shards, or two when the first shows
    /// nothing unsettled; a list of failed items or noted rows one query more each.
    pub async fn read_status(
        &self,
        id: &str,
        now: OffsetDateTime,
    ) -> Result<Option<StatusRead>, LedgerError> {
        let Some((record, scan_etag)) = self.scan_and_etag(id).await? else {
            return Ok(None);
        };
        let mut cost = ReadCost::new(1, 1);
        let (totals, settled, reads, history) = self.totals_within(id, STATUS_SHARD_READS).await?;
        cost = cost.plus(ReadCost::new(reads, reads * u32::from(SHARDS)));
        // Whether a step still runs: asked only of a cancelled or paused scan (`cancelling`,
        // `pausing`), whose steps are stopping; not of a scan paused so long ago that none can
        // still be running (a paused scan is polled as often as a running one, for as long as
        // the pause lasts).
        let running = if record.cancelled_at.is_some() {
            cost = cost.plus(ReadCost::new(1, u32::from(CLAIMS_WINDOW)));
            self.any_claimed(id, now).await?
        } else if record.is_paused() && self.steps_may_run(&record, now) {
            cost = cost.plus(ReadCost::new(1, u32::from(CLAIMS_WINDOW)));
            self.any_stopping(&record, now).await?
        } else {
            false
        };
        let errors = if totals.failed_now() > 0 {
            cost = cost.plus(ReadCost::new(1, u32::from(ERRORS_LISTED)));
            self.failures(id, ERRORS_LISTED).await?
        } else {
            Vec::new()
        };
        let errors = errors
            .into_iter()
            .map(|(step, failed)| StepFailure {
                step,
                error: failed.error,
                attempts: failed.attempts,
            })
            .collect();
        let notes = if totals.rows_failed > 0 || record.spec.dry_run {
            cost = cost.plus(ReadCost::new(1, u32::from(NOTED_STEPS_READ)));
            self.row_notes(id).await?
        } else {
            RowNotes::default()
        };
        let created_at = record.created_at;
        let redrive_looked_at = record.redrive_looked_at;
        let resume_from = record.resume_from.clone();
        let mut status = status_of(record, totals, settled, running, errors, now);
        let began = status.started_at.as_deref().unwrap_or(&status.created_at);
        let began_s = tablescan_storage::table::entity::EdmDateTime::parse(began)
            .map_or(0, |t| t.time().unix_timestamp());
        status.history = rate_history(&history, began_s, writes_rows(&status.spec));
        status.row_failures = notes.failed;
        status.dry_run_rows = notes.sample;
        let resume_from = resume_from.filter(|_| status.resuming);
        Ok(Some(StatusRead {
            status,
            cost,
            scan_etag,
            created_at,
            redrive_looked_at,
            resume_from,
        }))
    }

    /// The status of a scan and up to a page of its work items stranded for `after` (see
    /// `job::redrive`); none are looked for unless the scan is in flight.
    pub async fn status_and_stranded(
        &self,
        id: &str,
        now: OffsetDateTime,
        after: time::Duration,
        lease: time::Duration,
    ) -> Result<Option<(ScanStatus, Vec<Stranded>)>, LedgerError> {
        let Some(read) = self.read_status(id, now).await? else {
            return Ok(None);
        };
        let status = read.status;
        let stranded = if matches!(status.state, State::Pending | State::Running) {
            let stall = super::redrive::stall_after(lease);
            let stalled = (super::redrive::quiet_for(&status, now) >= stall).then_some(stall);
            self.stranded(id, now, after, stalled, read.resume_from.as_deref())
                .await?
        } else {
            Vec::new()
        };
        Ok(Some((status, stranded)))
    }

    /// The scan's totals, and whether they are settled: no item unsettled, seen in two reads
    /// of the shards with no shard changed between them. One read is not enough: a query is
    /// not a snapshot, and could see a child's finish but not its parent's (which created
    /// the child), summing to zero unsettled items while the child's own children run. Two
    /// reads with equal etags saw every shard unchanged over a moment they share.
    pub async fn consistent_totals(&self, id: &str) -> Result<(Tallies, bool), LedgerError> {
        let (totals, settled, _, _) = self.totals_within(id, 1 + CONSISTENT_READ_TRIES).await?;
        Ok((totals, settled))
    }

    /// As [`Ledger::consistent_totals`], in at most `reads` reads of the shards (at least
    /// one), and how many it made: not settled if the reads ran out first.
    async fn totals_within(
        &self,
        id: &str,
        reads: u32,
    ) -> Result<(Tallies, bool, u32, History), LedgerError> {
        let (mut totals, mut etags, mut history) = self.totals(id).await?;
        let mut made = 1;
        while made < reads {
            if totals.unsettled() > 0 {
                return Ok((totals, false, made, history));
            }
            let (again, again_etags, again_history) = self.totals(id).await?;
            made += 1;
            if again_etags == etags {
                return Ok((again, true, made, again_history));
            }
            (totals, etags, history) = (again, again_etags, again_history);
        }
        Ok((totals, false, made, history))
    }

    /// Up to [`ROWS_LISTED`](crate::notes::ROWS_LISTED) noted rows of each kind, from the first
    /// few steps that noted any (see `notes`): one query of a few entities, whatever the
    /// scan's size.
    pub async fn row_notes(&self, scan: &str) -> Result<RowNotes, LedgerError> {
        let query = Query::filtered(rows::rows_of(scan, rows::rows_range())).top(NOTED_STEPS_READ);
        let page = self.table().query_page(&query, None).await?;
        let mut notes = RowNotes::default();
        for entity in &page.entities {
            notes.add(RowNotes::from_entity(entity));
        }
        Ok(notes)
    }
}

/// Whether the scan is an export (not a dry run) whose manifest is not written yet.
pub fn awaits_manifest(record: &ScanRecord) -> bool {
    matches!(record.spec.action, ActionSpec::Export { .. })
        && !record.spec.dry_run
        && record.manifest_at.is_none()
}

/// Whether more rows failed than the scan allows.
fn too_many_row_failures(spec: &ScanSpec, t: &Tallies) -> bool {
    spec.max_row_failures
        .is_some_and(|most| t.rows_failed > most)
}

/// The status of scan `record`, from its totals `t` (`settled` when two reads saw them
/// unchanged with nothing unsettled), whether a step of a cancelled or paused scan still runs,
/// and its items failed for good.
fn status_of(
    record: ScanRecord,
    t: Tallies,
    settled: bool,
    running: bool,
    errors: Vec<StepFailure>,
    now: OffsetDateTime,
) -> ScanStatus {
    let state = state_of(&record, &t, settled, running);
    let failed_because = (state == State::Failed).then(|| failed_because(&record, &t));
    let last_finished = (t.last_finished_ms > 0)
        .then(|| {
            OffsetDateTime::from_unix_timestamp_nanos(i128::from(t.last_finished_ms) * 1_000_000)
                .ok()
        })
        .flatten();
    let finished = match state {
        State::Cancelled => record.cancelled_at,
        State::Succeeded | State::Failed => last_finished.or(Some(now)),
        State::Pending | State::Running | State::Cancelling | State::Pausing | State::Paused => {
            None
        }
    };
    let began = record.started_at.unwrap_or(record.created_at);
    let seconds = (finished.unwrap_or(now) - began).as_seconds_f64();
    let rows_per_second = if seconds > 0.0 {
        (t.rows_read as f64 / seconds * 10.0).round() / 10.0
    } else {
        0.0
    };
    let result = (state == State::Succeeded && record.spec.action == ActionSpec::Count).then_some(
        CountResult {
            rows: t.rows_acted,
            partitions: t.partitions,
        },
    );
    let paused = record.is_paused();
    ScanStatus {
        export: export_progress(&record, &t),
        paused_at: record.paused_at.filter(|_| paused).map(format_time),
        resumed_at: record.resumed_at.filter(|_| !paused).map(format_time),
        resuming: !paused && record.cancelled_at.is_none() && record.resume_from.is_some(),
        progress: progress_of(&record.spec, &t, rows_per_second, last_finished),
        id: record.id,
        state,
        learned_max_rows_per_second: record.learned_cap.map(|cap| cap.round() as u32),
        spec: record.spec,
        errors,
        failed_because,
        row_failures: Vec::new(),
        dry_run_rows: Vec::new(),
        created_at: format_time(record.created_at),
        started_at: record.started_at.map(format_time),
        finished_at: finished.map(format_time),
        result,
        activity: None,
        pace: None,
        history: None,
    }
}

/// Where the scan stands: cancelled or paused (and whether a step still stops), in flight
/// while anything is unsettled, else failed or succeeded (an export only once its manifest is
/// written).
fn state_of(record: &ScanRecord, t: &Tallies, settled: bool, running: bool) -> State {
    if record.cancelled_at.is_some() {
        if running {
            State::Cancelling
        } else {
            State::Cancelled
        }
    } else if record.is_paused() && !settled {
        if running {
            State::Pausing
        } else {
            State::Paused
        }
    } else if !settled {
        if t.done + t.failed > 0 || record.started_at.is_some() {
            State::Running
        } else {
            State::Pending
        }
    } else if t.failed_now() > 0
        || too_many_row_failures(&record.spec, t)
        || (awaits_manifest(record) && record.manifest_trouble.gave_up_at.is_some())
    {
        State::Failed
    } else if awaits_manifest(record) {
        // Every step is done; the export is whole once its manifest is written.
        State::Running
    } else {
        State::Succeeded
    }
}

/// Why a failed scan failed, in a sentence: its items failed for good, its rows that could not
/// be acted on beyond `maxRowFailures`, an export's manifest that could not be written.
fn failed_because(record: &ScanRecord, t: &Tallies) -> String {
    let mut reasons = Vec::new();
    if t.failed_now() > 0 {
        reasons.push(format!(
            "{} step{} failed for good (see errors; POST /api/scans/{}/retry runs them again)",
            t.failed_now(),
            if t.failed_now() == 1 { "" } else { "s" },
            record.id
        ));
    }
    if let (true, Some(most)) = (
        too_many_row_failures(&record.spec, t),
        record.spec.max_row_failures,
    ) {
        reasons.push(format!(
            "{} row{} could not be acted on, more than maxRowFailures ({most}); see rowFailures",
            t.rows_failed,
            if t.rows_failed == 1 { "" } else { "s" }
        ));
    }
    let trouble = &record.manifest_trouble;
    if let (Some(since), Some(gave_up)) = (trouble.since, trouble.gave_up_at) {
        reasons.push(format!(
            "the export's manifest could not be written ({}), tried for {} minutes; the \
             blobs are written but no import reads them without a manifest",
            trouble.error.as_deref().unwrap_or("no cause recorded"),
            (gave_up - since).whole_minutes()
        ));
    }
    reasons.join("; ")
}

/// An export's progress: where its blobs are, how many, and its manifest once written.
fn export_progress(record: &ScanRecord, t: &Tallies) -> Option<ExportProgress> {
    let ActionSpec::Export {
        container, prefix, ..
    } = &record.spec.action
    else {
        return None;
    };
    Some(ExportProgress {
        container: container.clone(),
        prefix: prefix.clone(),
        blobs: t.blobs,
        bytes: t.blob_bytes,
        manifest: record
            .manifest_at
            .map(|_| super::exports::Layout { prefix }.manifest()),
        manifest_written_at: record.manifest_at.map(format_time),
        manifest_error: record
            .manifest_at
            .is_none()
            .then(|| record.manifest_trouble.error.clone())
            .flatten(),
    })
}

/// The scan's exact counts from its totals.
fn progress_of(
    spec: &ScanSpec,
    t: &Tallies,
    rows_per_second: f64,
    last_finished: Option<OffsetDateTime>,
) -> Progress {
    let rows_read_per_partition = (spec.reads_partition_keys() && t.partitions > 0)
        .then(|| (t.rows_read as f64 / t.partitions as f64 * 100.0).round() / 100.0);
    Progress {
        rows_read: t.rows_read,
        rows_acted: t.rows_acted,
        rows_skipped: t.rows_skipped,
        rows_failed: t.rows_failed,
        partitions: t.partitions,
        steps_done: t.done,
        steps_pending: t.unsettled(),
        steps_failed: t.failed_now(),
        steps_retried: t.retried,
        attempts_failed: t.attempts_failed,
        requests_throttled: t.throttled,
        queries: t.queries,
        rows_per_second,
        longest_step_seconds: t.longest_step_ms as f64 / 1000.0,
        last_step_at: last_finished.map(format_time),
        steps_redriven: t.redriven,
        rows_read_per_partition,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tablescan_api::ScanSpec;
    use tablescan_storage::SettingLookup;

    struct Settings;
    impl SettingLookup for Settings {
        fn setting(&self, name: &str) -> Option<String> {
            (name == "AzureWebJobsStorage").then(|| "UseDevelopmentStorage=true".to_string())
        }
    }

    /// The spec a status shows is one the API takes back as a request, meaning the same.
    #[test]
    fn a_status_shows_the_spec_as_a_request_names_it() {
        for action in [
            r#"{"type":"enqueue","queues":["qa1","qb2","qc3"],"rowsPerMessage":4}"#,
            r#"{"type":"enqueue","queue":"qa1","per":"partition"}"#,
            r#"{"type":"copy","table":"there","mode":"merge"}"#,
            r#"{"type":"export","container":"backups","prefix":"day"}"#,
        ] {
            let request = format!(r#"{{"table":"things","action":{action}}}"#);
            let spec = ScanSpec::parse(&request, &Settings).unwrap();
            let shown = spec_as_requested(&spec);
            let again = ScanSpec::parse(&shown.to_string(), &Settings)
                .unwrap_or_else(|e| panic!("{shown} is refused: {e}"));
            assert_eq!(again, spec, "{shown}");
        }
        let spec = ScanSpec::parse(
            r#"{"table":"things","action":{"type":"enqueue","queues":["qa1","qb2"]}}"#,
            &Settings,
        )
        .unwrap();
        let shown = spec_as_requested(&spec);
        assert!(shown["action"].get("queue").is_none(), "{shown}");
        assert_eq!(shown["action"]["queues"], serde_json::json!(["qa1", "qb2"]));
    }

    /// Through the ledger: the steps' finishes land in the status's history, summed over the
    /// shards they counted in, from the scan's start, with no request more than the status read
    /// made before (one query of the 16 shards; `read.cost` is unchanged).
    #[tokio::test]
    async fn a_status_shows_the_rate_of_every_finished_step_since_the_start() {
        use crate::history::SAMPLES;
        use crate::ledger::{Begin, StepCounts};
        use crate::work_item::{ReadRange, WorkItem};
        use tablescan_engine::keys::KeyRange;
        use tablescan_storage::table::in_memory::InMemoryTable;
        use time::Duration;

        let t0 = time::macros::datetime!(2026-11-23 00:00 UTC);
        let at = |s: i64| t0 + Duration::seconds(s);
        let table = InMemoryTable::new("ledger");
        table.set_now(t0);
        let ledger = Ledger::in_memory(table.clone());
        ledger.ensure().await.unwrap();
        let spec = tablescan_api::ScanSpec::parse(
            r#"{"table":"source","action":{"type":"copy","table":"target"}}"#,
            &|name: &str| {
                (name == "AzureWebJobsStorage").then(|| "UseDevelopmentStorage=true".into())
            },
        )
        .unwrap();
        let root = WorkItem::root(crate::ledger::new_scan_id(), KeyRange::all(), "");
        ledger.create_scan(&spec, &root, t0).await.unwrap();
        let children: Vec<WorkItem> = (0..2)
            .map(|n| {
                root.follow_up(ReadRange::Partition {
                    partition_key: format!("p{n}"),
                    row_keys: KeyRange::all(),
                    prefix: String::new(),
                    cursor: None,
                    unstarted: false,
                })
            })
            .collect();
        let counts = |rows: u64, throttled: u64| StepCounts {
            rows_read: rows,
            rows_acted: rows,
            requests_throttled: throttled,
            queries: 1,
            ..StepCounts::default()
        };
        let lease = Duration::seconds(60);
        let mut steps = vec![(&root, 1, counts(100, 0), children.clone())];
        steps.push((&children[0], 30, counts(50, 2), Vec::new()));
        steps.push((&children[1], 100, counts(50, 0), Vec::new()));
        for (item, finished, counts, children) in steps {
            table.set_now(at(finished - 1));
            let Begin::Run(claim) = ledger.begin(item, at(finished - 1), lease).await.unwrap()
            else {
                panic!("the step should run");
            };
            table.set_now(at(finished));
            ledger
                .finish(item, &claim, counts, &children, at(finished))
                .await
                .unwrap();
        }
        let read = ledger
            .read_status(&root.scan, at(101))
            .await
            .unwrap()
            .unwrap();
        let history = read.status.history.expect("a history");
        assert_eq!(history.rows_read.iter().sum::<u64>(), 200);
        // A copy writes a row per row: entities are rows read plus rows written.
        assert_eq!(history.entities.iter().sum::<u64>(), 400);
        assert_eq!(history.requests_throttled.iter().sum::<u64>(), 2);
        assert!(history.rows_read.len() <= SAMPLES);
        // A hundred seconds in intervals of 2 s, the first holding the root's finish.
        assert_eq!(history.bucket_seconds, 2);
        assert!(history.offset_seconds <= 1 && history.offset_seconds >= -1);
        assert_eq!(history.rows_read[0], 100);
        // The status read cost what it did before the history: the scan row and one or two
        // reads of the shards.
        assert!(read.cost.requests <= 3, "{:?}", read.cost);
        assert!(read.cost.entities <= ReadCost::new(1, 1 + 2 * 16).entities);
    }
}
