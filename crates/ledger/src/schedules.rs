//! Schedules, kept in the ledger table: a row per schedule in partition [`SCHEDULES`], with its
//! timetable, the scan request it starts (as `POST /api/scans` takes it), whether it is paused,
//! the last occurrence it handled, the occurrence whose scan it is starting (if any), and its
//! last [`RUNS_KEPT`] runs. Reading every schedule is one query of one partition; starting a run
//! is two conditional writes of one row (the occurrence marked, then its run recorded).

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use super::ledger::{Ledger, LedgerError};
use super::rows::{date, date_value, text};
use super::timetable::Timetable;
use tablescan_api::SpecError;
use tablescan_storage::table::batch::IfMatch;
use tablescan_storage::table::entity::{Entity, Value};
use tablescan_storage::table::filter::{Comparison, Filter};
use tablescan_storage::table::query::Query;
use tablescan_storage::table::WriteMode;
use tablescan_storage::Reason;

/// The ledger partition of the schedules (outside any scan id's keys).
pub const SCHEDULES: &str = "~schedules";
/// How many of its runs a schedule keeps.
pub const RUNS_KEPT: usize = 10;
/// The most schedules an app keeps (one page of the partition).
pub const MOST_SCHEDULES: usize = 1000;

/// Whether `name` may name a schedule: 1 to 63 lowercase letters, digits and dashes, starting
/// with a letter or digit (it goes into routes, row keys and idempotency keys).
pub fn is_schedule_name(name: &str) -> bool {
    (1..=63).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !name.starts_with('-')
}

/// One run of a schedule: a scan started, an occurrence skipped, or a start refused.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Run {
    /// The occurrence (RFC 3339), or the moment of a run asked for by hand.
    pub occurrence: String,
    /// When it was handled.
    pub at: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scan: Option<String>,
    /// Started later than its occurrence by more than the timer's period (the app was down).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub late: bool,
    /// Occurrences before it that were never run (a downtime): they are not replayed.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub missed: u32,
    /// Asked for by hand (`run now`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub manual: bool,
    /// Why it was skipped (the schedule's previous scan still in flight).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
    /// Why the scan could not start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// A schedule as stored.
#[derive(Debug, Clone)]
pub struct Schedule {
    pub name: String,
    pub timetable: Timetable,
    /// The scan request, JSON text.
    pub request: String,
    pub paused: bool,
    pub created_at: OffsetDateTime,
    /// The last occurrence handled (run, skipped or refused); none before the first.
    pub last_occurrence: Option<OffsetDateTime>,
    /// The occurrence whose scan the timer is starting: marked before the start and cleared
    /// with the run's record, so that a process killed between the scan's start and that
    /// record leaves a mark the next look finds, instead of a scan the schedule never heard
    /// of. Pausing, resuming and replacing the schedule keep it.
    pub starting: Option<OffsetDateTime>,
    /// Newest last.
    pub runs: Vec<Run>,
    pub etag: String,
}

impl Schedule {
    /// A new schedule set at `now`: its occurrences from now on (one due at the very moment it
    /// is set counts as past).
    pub fn new(name: &str, timetable: Timetable, request: String, now: OffsetDateTime) -> Self {
        Schedule {
            name: name.to_string(),
            last_occurrence: timetable.latest_at_or_before(now),
            starting: None,
            timetable,
            request,
            paused: false,
            created_at: now,
            runs: Vec::new(),
            etag: String::new(),
        }
    }

    fn to_entity(&self) -> Entity {
        let mut e = Entity::new(SCHEDULES, self.name.clone())
            .with("request", Value::String(self.request.clone()))
            .with("paused", Value::Boolean(self.paused))
            .with("createdAt", date_value(self.created_at))
            .with("runs", Value::String(runs_text(&self.runs)));
        match &self.timetable {
            Timetable::Cron {
                expression,
                time_zone,
                ..
            } => {
                e.properties
                    .insert("cron".into(), Value::String(expression.clone()));
                e.properties
                    .insert("timeZone".into(), Value::String(time_zone.clone()));
            }
            Timetable::Every { text, anchor, .. } => {
                e.properties
                    .insert("every".into(), Value::String(text.clone()));
                e.properties.insert("anchor".into(), date_value(*anchor));
            }
        }
        if let Some(last) = self.last_occurrence {
            e.properties
                .insert("lastOccurrence".into(), date_value(last));
        }
        if let Some(starting) = self.starting {
            e.properties.insert(STARTING.into(), date_value(starting));
        }
        e
    }

    fn from_entity(e: &Entity) -> Result<Schedule, LedgerError> {
        let corrupt = |why: String| LedgerError::Corrupt(format!("schedule {}", e.row_key), why);
        let timetable = match (text(e, "cron"), text(e, "every")) {
            (Some(cron), _) => Timetable::cron(&cron, text(e, "timeZone").as_deref()),
            (None, Some(every)) => Timetable::every(
                &every,
                date(e, "anchor").unwrap_or(OffsetDateTime::UNIX_EPOCH),
            ),
            (None, None) => return Err(corrupt("no timetable".into())),
        }
        .map_err(|SpecError { field, message }| corrupt(format!("{field}: {message}")))?;
        let runs = match text(e, "runs") {
            Some(runs) => serde_json::from_str(&runs).map_err(|err| corrupt(err.to_string()))?,
            None => Vec::new(),
        };
        Ok(Schedule {
            name: e.row_key.clone(),
            timetable,
            request: text(e, "request").ok_or_else(|| corrupt("no request".into()))?,
            paused: matches!(e.properties.get("paused"), Some(Value::Boolean(true))),
            created_at: date(e, "createdAt").unwrap_or(OffsetDateTime::UNIX_EPOCH),
            last_occurrence: date(e, "lastOccurrence"),
            starting: date(e, STARTING),
            runs,
            etag: e.etag.clone().unwrap_or_default(),
        })
    }

    /// The occurrence due at `now` that this schedule has not handled yet, if any.
    pub fn due(&self, now: OffsetDateTime) -> Option<OffsetDateTime> {
        let latest = self.timetable.latest_at_or_before(now)?;
        match self.last_occurrence {
            Some(last) if latest <= last => None,
            _ => Some(latest),
        }
    }

    /// The scan of its newest run that started one.
    pub fn last_scan(&self) -> Option<&str> {
        self.runs.iter().rev().find_map(|run| run.scan.as_deref())
    }

    /// Adds `run`, keeping the newest [`RUNS_KEPT`].
    pub fn add_run(&mut self, run: Run) {
        self.runs.push(run);
        let extra = self.runs.len().saturating_sub(RUNS_KEPT);
        self.runs.drain(..extra);
    }
}

/// The property of [`Schedule::starting`].
const STARTING: &str = "startingOccurrence";

fn runs_text(runs: &[Run]) -> String {
    serde_json::to_string(runs).unwrap_or_else(|_| "[]".into())
}

impl Ledger {
    /// Creates or replaces schedule `schedule.name`. A replaced schedule keeps its runs, and
    /// the occurrence it handled last if that is later than the new one's past.
    pub async fn put_schedule(&self, schedule: &Schedule) -> Result<Schedule, LedgerError> {
        // The first schedule may come before the first scan, which creates the table.
        self.ensure().await?;
        loop {
            let as_read = self.schedule(&schedule.name).await?;
            if let Some(stored) = self.put_schedule_over(schedule, as_read.as_ref()).await? {
                return Ok(stored);
            }
        }
    }

    /// Writes `schedule` over `as_read` (the row as read, none if there was none), keeping its
    /// runs and last occurrence; `None` when the row changed since it was read.
    pub async fn put_schedule_over(
        &self,
        schedule: &Schedule,
        as_read: Option<&Schedule>,
    ) -> Result<Option<Schedule>, LedgerError> {
        let mut schedule = schedule.clone();
        if let Some(old) = as_read {
            schedule.runs = old.runs.clone();
            schedule.last_occurrence = schedule.last_occurrence.max(old.last_occurrence);
            schedule.starting = old.starting;
        }
        let written = match as_read {
            // A PUT's create that finds the row there lost to another PUT.
            None => self.table().insert(&schedule.to_entity()).await,
            // Conditional on the row as read: the timer may have recorded an occurrence since.
            Some(old) => {
                self.table()
                    .update(
                        &schedule.to_entity(),
                        WriteMode::Replace,
                        &IfMatch::Etag(old.etag.clone()),
                    )
                    .await
            }
        };
        match written {
            Ok(etag) => Ok(Some(Schedule { etag, ..schedule })),
            Err(e) if e.reason().is_gone_or_changed() || e.reason() == Reason::AlreadyExists => {
                Ok(None)
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Schedule `name`, if there is one.
    pub async fn schedule(&self, name: &str) -> Result<Option<Schedule>, LedgerError> {
        match self.table().get_entity(SCHEDULES, name).await {
            Ok(Some(e)) => Schedule::from_entity(&e).map(Some),
            Ok(None) => Ok(None),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Every schedule, by name; each that cannot be read is returned as its name and why.
    pub async fn schedules(&self) -> Result<(Vec<Schedule>, Vec<(String, String)>), LedgerError> {
        let query = Query::filtered(Filter::partition_key(Comparison::Eq, SCHEDULES))
            .top(MOST_SCHEDULES as u16);
        let page = match self.table().query_page(&query, None).await {
            Ok(page) => page,
            Err(e) if e.is_not_found() => return Ok((Vec::new(), Vec::new())),
            Err(e) => return Err(e.into()),
        };
        let mut good = Vec::new();
        let mut bad = Vec::new();
        for e in &page.entities {
            match Schedule::from_entity(e) {
                Ok(schedule) => good.push(schedule),
                Err(why) => bad.push((e.row_key.clone(), why.to_string())),
            }
        }
        Ok((good, bad))
    }

    /// Deletes schedule `name`; whether there was one. Its scans stay.
    pub async fn delete_schedule(&self, name: &str) -> Result<bool, LedgerError> {
        match self.table().delete(SCHEDULES, name, &IfMatch::Any).await {
            Ok(()) => Ok(true),
            Err(e) if e.is_not_found() => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// Marks `occurrence` as the one `schedule` is starting, if the row is still as it was read:
    /// the schedule with its new etag, or `None` when another writer came first (another
    /// instance is starting it, or the schedule was changed or deleted).
    pub async fn mark_starting(
        &self,
        schedule: &Schedule,
        occurrence: OffsetDateTime,
    ) -> Result<Option<Schedule>, LedgerError> {
        let merge =
            Entity::new(SCHEDULES, schedule.name.clone()).with(STARTING, date_value(occurrence));
        let written = self.merge_if_unchanged(&merge, &schedule.etag).await?;
        Ok(written.map(|etag| Schedule {
            starting: Some(occurrence),
            etag,
            ..schedule.clone()
        }))
    }

    /// Merges `merge` into a schedule's row if its etag is still `etag`: the new etag, or
    /// `None` when another writer came first.
    async fn merge_if_unchanged(
        &self,
        merge: &Entity,
        etag: &str,
    ) -> Result<Option<String>, LedgerError> {
        match self
            .table()
            .update(merge, WriteMode::Merge, &IfMatch::Etag(etag.to_string()))
            .await
        {
            Ok(etag) => Ok(Some(etag)),
            Err(e) if e.reason().is_gone_or_changed() => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Writes `schedule`'s state (paused, last occurrence, runs, the mark of an occurrence
    /// being started) if the row is still as it was read; `false` when another writer came
    /// first (another instance recorded the occurrence, or the schedule was changed or
    /// deleted).
    pub async fn record_schedule(&self, schedule: &Schedule) -> Result<bool, LedgerError> {
        // A merge keeps what it does not name: a cleared mark is written empty.
        let starting = schedule
            .starting
            .map_or(Value::String(String::new()), date_value);
        let mut merge = Entity::new(SCHEDULES, schedule.name.clone())
            .with("paused", Value::Boolean(schedule.paused))
            .with("runs", Value::String(runs_text(&schedule.runs)))
            .with(STARTING, starting);
        if let Some(last) = schedule.last_occurrence {
            merge
                .properties
                .insert("lastOccurrence".into(), date_value(last));
        }
        Ok(self
            .merge_if_unchanged(&merge, &schedule.etag)
            .await?
            .is_some())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use time::macros::datetime;

    #[test]
    fn names_are_short_plain_and_safe_in_routes_and_keys() {
        for good in ["logs-retention", "a", "0nightly"] {
            assert!(is_schedule_name(good), "{good}");
        }
        for bad in [
            "",
            "-x",
            "Logs",
            "a/b",
            "a b",
            "a_b",
            &"x".repeat(64),
            "../x",
        ] {
            assert!(!is_schedule_name(bad), "{bad}");
        }
    }

    #[test]
    fn an_occurrence_is_due_once_and_missed_ones_are_not_replayed() {
        let set = datetime!(2026-01-01 00:00:01 UTC);
        let t = Timetable::every("PT10S", datetime!(2026-01-01 00:00:00 UTC)).unwrap();
        let mut s = Schedule::new("s", t, "{}".into(), set);
        assert_eq!(s.due(set), None, "the occurrence before it was set is past");
        let due = s.due(datetime!(2026-01-01 00:00:12 UTC)).unwrap();
        assert_eq!(due, datetime!(2026-01-01 00:00:10 UTC));
        s.last_occurrence = Some(due);
        assert_eq!(s.due(datetime!(2026-01-01 00:00:19 UTC)), None);
        // Down for a minute: one occurrence due, the latest, with five missed before it.
        let late = s.due(datetime!(2026-01-01 00:01:15 UTC)).unwrap();
        assert_eq!(late, datetime!(2026-01-01 00:01:10 UTC));
        assert_eq!(s.timetable.between(due, late, 100), 5);
    }

    #[test]
    fn a_cron_occurrence_recorded_at_one_tick_is_not_due_at_the_next() {
        let t = Timetable::cron("0 3 * * *", None).unwrap();
        let mut s = Schedule::new("s", t, "{}".into(), datetime!(2026-01-01 12:00 UTC));
        let due = s.due(datetime!(2026-01-02 03:00:30.2 UTC)).unwrap();
        assert_eq!(due, datetime!(2026-01-02 03:00 UTC));
        s.last_occurrence = Some(due);
        assert_eq!(s.due(datetime!(2026-01-02 03:01:30.9 UTC)), None);
    }

    fn every_ten_seconds() -> Timetable {
        Timetable::every("PT10S", datetime!(2026-01-01 00:00 UTC)).unwrap()
    }

    /// A ledger holding schedule `s` (every ten seconds), and the moment it was set.
    async fn ledger_with_schedule_s() -> (Ledger, OffsetDateTime) {
        let table = tablescan_storage::table::in_memory::InMemoryTable::new("ledger");
        table.create_if_missing().await.unwrap();
        let ledger = Ledger::in_memory(table);
        let set = datetime!(2026-01-01 00:00:01 UTC);
        ledger
            .put_schedule(&Schedule::new("s", every_ten_seconds(), "{}".into(), set))
            .await
            .unwrap();
        (ledger, set)
    }

    /// A `PUT` that read the schedule before the timer recorded an occurrence must not write
    /// over that record: the run (and its scan, which the next occurrence's overlap check
    /// looks at) and the last occurrence would be lost.
    #[tokio::test]
    async fn a_replace_never_writes_over_an_occurrence_recorded_since_it_read() {
        let (ledger, set) = ledger_with_schedule_s().await;
        let t = every_ten_seconds;
        let put_read = ledger.schedule("s").await.unwrap();
        // The timer records occurrence 00:00:10 meanwhile.
        let mut timer = ledger.schedule("s").await.unwrap().unwrap();
        timer.last_occurrence = Some(datetime!(2026-01-01 00:00:10 UTC));
        timer.add_run(Run {
            scan: Some("scan10".into()),
            ..Run::default()
        });
        assert!(ledger.record_schedule(&timer).await.unwrap());
        let replacement = Schedule::new("s", t(), r#"{"new":1}"#.into(), set);
        let over = ledger
            .put_schedule_over(&replacement, put_read.as_ref())
            .await
            .unwrap();
        assert!(
            over.is_none(),
            "written over a row that changed since it was read"
        );
        let stored = ledger.put_schedule(&replacement).await.unwrap();
        assert_eq!(stored.request, r#"{"new":1}"#);
        let back = ledger.schedule("s").await.unwrap().unwrap();
        assert_eq!(back.last_scan(), Some("scan10"));
        assert_eq!(
            back.last_occurrence,
            Some(datetime!(2026-01-01 00:00:10 UTC))
        );
        // A schedule created by two PUTs at once: the second sees the first's row.
        let first = ledger
            .put_schedule_over(&Schedule::new("n", t(), "{}".into(), set), None)
            .await
            .unwrap();
        assert!(first.is_some());
        let second = ledger
            .put_schedule_over(&Schedule::new("n", t(), "{}".into(), set), None)
            .await
            .unwrap();
        assert!(second.is_none(), "a second create wrote over the first");
    }

    /// The mark of an occurrence being started stays until a record clears it, whatever is
    /// written over the row meanwhile (a replacing `PUT`, a pause); of two instances marking
    /// from the same read, one does.
    #[tokio::test]
    async fn a_mark_stays_until_the_record_of_its_run_clears_it() {
        let (ledger, _) = ledger_with_schedule_s().await;
        let read = ledger.schedule("s").await.unwrap().unwrap();
        assert_eq!(read.starting, None);
        let occurrence = datetime!(2026-01-01 00:00:10 UTC);
        ledger
            .mark_starting(&read, occurrence)
            .await
            .unwrap()
            .expect("marked");
        assert!(
            ledger
                .mark_starting(&read, occurrence)
                .await
                .unwrap()
                .is_none(),
            "a second instance marked from the same read"
        );
        // Replaced after the occurrence (its past is then later than the mark), and paused.
        let later = datetime!(2026-01-01 00:00:11 UTC);
        ledger
            .put_schedule(&Schedule::new(
                "s",
                every_ten_seconds(),
                r#"{"new":1}"#.into(),
                later,
            ))
            .await
            .unwrap();
        let mut paused = ledger.schedule("s").await.unwrap().unwrap();
        assert_eq!(paused.starting, Some(occurrence), "kept by a PUT");
        paused.paused = true;
        assert!(ledger.record_schedule(&paused).await.unwrap());
        let mut recorded = ledger.schedule("s").await.unwrap().unwrap();
        assert_eq!(recorded.starting, Some(occurrence), "kept by a pause");
        recorded.starting = None;
        assert!(ledger.record_schedule(&recorded).await.unwrap());
        let back = ledger.schedule("s").await.unwrap().unwrap();
        assert_eq!(back.starting, None, "cleared by the record");
        assert!(back.paused);
    }

    #[test]
    fn a_schedule_keeps_its_newest_runs() {
        let t = Timetable::every("PT1S", OffsetDateTime::UNIX_EPOCH).unwrap();
        let mut s = Schedule::new("s", t, "{}".into(), OffsetDateTime::UNIX_EPOCH);
        for n in 0..15 {
            s.add_run(Run {
                occurrence: n.to_string(),
                at: String::new(),
                scan: Some(format!("scan{n}")),
                late: false,
                missed: 0,
                manual: false,
                skipped: None,
                error: None,
            });
        }
        assert_eq!(s.runs.len(), RUNS_KEPT);
        assert_eq!(s.runs[0].occurrence, "5");
        assert_eq!(s.last_scan(), Some("scan14"));
        let back = Schedule::from_entity(&Entity {
            etag: Some("e".into()),
            ..s.to_entity()
        })
        .unwrap();
        assert_eq!(back.runs, s.runs);
        assert_eq!(back.timetable, s.timetable);
    }
}
