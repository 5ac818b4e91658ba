//! How scans read as text: numbers, durations and ages, the live line while one runs, and the
//! pace a start announces (the summary is `summary`, the list `list`). Numbers come from the
//! API's status as they are; nothing here is estimated except the time left, and that only
//! from an earlier count of the same scope.

use tablescan_api::answers::{SpecShown, StatusAnswer};

use crate::describe::Scan;

/// `1234567` as `1,234,567`.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// `3725` seconds as `1h02m05s`, `125` as `2m05s`, `9` as `9s`.
pub fn duration(seconds: u64) -> String {
    match seconds {
        s if s >= 3600 => format!("{}h{:02}m{:02}s", s / 3600, s % 3600 / 60, s % 60),
        s if s >= 60 => format!("{}m{:02}s", s / 60, s % 60),
        s => format!("{s}s"),
    }
}

/// What a scan's progress is counted in: rows, or for a scan that wants one row per
/// partition (partition-keys, an enqueue per partition), partitions found, which is what it
/// works through (it reads about one row per partition where partitions are large).
pub fn progress_unit(status: &StatusAnswer) -> (&'static str, u64) {
    let p = &status.progress;
    if Scan::of_status(status).per_partition() {
        ("partitions", p.partitions)
    } else {
        ("rows", p.rows_read)
    }
}

/// The live line: state, progress (rows, or partitions: [`progress_unit`]) and rate, steps,
/// failures, throttling, the time left when the scope's size is known (`total`, in the same
/// unit), and the stall explanation when there is one. `recent_rate` is the rate the watcher
/// saw over the last seconds; without it, the status's average since the start (which
/// understates a scan that is still ramping up).
pub fn live_line(status: &StatusAnswer, total: Option<u64>, recent_rate: Option<f64>) -> String {
    let p = &status.progress;
    let (unit, done) = progress_unit(status);
    let rate = recent_rate.unwrap_or(match unit {
        "rows" => p.rows_per_second,
        _ => 0.0,
    });
    let share = match total.filter(|t| *t > 0) {
        Some(total) => {
            let percent = (done as f64 / total as f64 * 100.0).min(100.0);
            format!(" of {} {unit} ({percent:.0}%)", thousands(total))
        }
        None => format!(" {unit}"),
    };
    let mut line = format!("{}  {}{share}", state_name(status), thousands(done));
    if unit == "partitions" {
        line.push_str(&format!(" ({} rows read)", thousands(p.rows_read)));
    }
    line.push_str(&format!(
        "  {}/s  steps {} done, {} pending",
        thousands(rate.round() as u64),
        thousands(p.steps_done),
        thousands(p.steps_pending)
    ));
    let failed = p.steps_failed + p.rows_failed;
    if failed > 0 {
        line.push_str(&format!(
            "  failed {} steps, {} rows",
            p.steps_failed, p.rows_failed
        ));
    }
    let throttled = p.requests_throttled;
    if throttled > 0 {
        line.push_str(&format!("  throttled {}", thousands(throttled)));
    }
    if let Some(total) = total {
        if rate > 0.0 && done < total && !has_ended(&status.state) {
            let left = ((total - done) as f64 / rate).ceil() as u64;
            line.push_str(&format!("  ETA {}", duration(left)));
        }
    }
    let parked = status
        .activity
        .as_ref()
        .and_then(|a| a.oldest_parked_seconds);
    if let Some(seconds) = parked {
        line.push_str(&format!("  parked for {}", duration(seconds)));
    }
    if let Some(note) = status.activity.as_ref().and_then(|a| a.note.as_deref()) {
        line.push_str(&format!("  — {note}"));
    }
    line
}

/// The scan's state as the app names it (`?` when it names none).
pub fn state_name(status: &StatusAnswer) -> &str {
    match status.state.as_str() {
        "" => "?",
        state => state,
    }
}

/// Whether a scan in this state has stopped moving: it succeeded, failed or was cancelled, or
/// is paused (nothing moves until someone resumes it). Watching ends there.
pub fn has_ended(state: &str) -> bool {
    matches!(state, "succeeded" | "failed" | "cancelled" | "paused")
}

/// Entities per row the action costs the account: a row read, and for a copy, delete or
/// update a row written too.
fn entities_per_row(spec: &SpecShown) -> u64 {
    match spec.action.kind.as_deref() {
        Some("copy" | "delete" | "update") if !spec.dry_run => 2,
        _ => 1,
    }
}

/// What `tablescan start` says of the scan's pace: its cap, or that it goes as fast as the
/// account takes; and how long it should take, where an earlier count of the same scope says
/// how many rows it holds (and how long reading them took).
pub fn pace_line(spec: &SpecShown, earlier: Option<(u64, Option<f64>)>) -> String {
    let per_row = entities_per_row(spec);
    let what = if per_row == 2 {
        "entities (rows read plus rows written)"
    } else {
        "entities (rows read)"
    };
    let cap = spec.max_rows_per_second;
    let mut line = match cap {
        Some(cap) => format!("pace: at most {} {what} a second, as asked", thousands(cap)),
        None => format!(
            "pace: as fast as the account takes, {what}; after its first refusal the scan \
             holds just under that rate (maxRowsPerSecond caps it)"
        ),
    };
    let Some((rows, seconds)) = earlier else {
        return line;
    };
    // A scan that wants one row per partition seeks past the rest: the rows of the scope say
    // nothing of its time.
    if Scan::of_spec(spec).per_partition() {
        return line;
    }
    let entities = rows.saturating_mul(per_row);
    let expected = match (cap, seconds) {
        // At the cap, unless the earlier count went slower than that.
        (Some(cap), Some(seconds)) => {
            Some((entities as f64 / cap as f64).max(seconds * per_row as f64))
        }
        (Some(cap), None) => Some(entities as f64 / cap as f64),
        (None, Some(seconds)) => Some(seconds * per_row as f64),
        (None, None) => None,
    };
    if let Some(expected) = expected {
        line.push_str(&format!(
            "\n  an earlier count found {} rows in this scope: about {} at that pace",
            thousands(rows),
            duration(expected.round() as u64)
        ));
    }
    line
}

/// Seconds from start (or creation) to finish, when both are known.
pub fn elapsed_seconds(status: &StatusAnswer) -> Option<f64> {
    let parse = |time: Option<&str>| {
        time.and_then(|t| time_of(t).map(|(days, seconds)| days as f64 * 86_400.0 + seconds))
    };
    let start = parse(status.started_at.as_deref()).or_else(|| parse(Some(&status.created_at)))?;
    let end = parse(status.finished_at.as_deref())?;
    (end >= start).then_some(end - start)
}

/// How long ago `time` (a status's date) was, at `now` (seconds since 1970): `45s`, `12m`,
/// `3h`, `2d`.
pub fn age(time: &str, now: f64) -> String {
    let Some(at) = unix_seconds(time) else {
        return "?".to_string();
    };
    let seconds = (now - at).max(0.0) as u64;
    match seconds {
        s if s >= 2 * 86_400 => format!("{}d", s / 86_400),
        s if s >= 3600 => format!("{}h", s / 3600),
        s if s >= 60 => format!("{}m", s / 60),
        s => format!("{s}s"),
    }
}

/// A status's date as seconds since 1970.
pub fn unix_seconds(time: &str) -> Option<f64> {
    let (days, seconds) = time_of(time)?;
    let (epoch, _) = time_of("1970-01-01T00:00:00Z")?;
    Some((days - epoch) as f64 * 86_400.0 + seconds)
}

/// `2026-11-21T20:00:00.1234567Z` as (days since 0000-03-01, seconds into the day): enough to
/// subtract two of them.
fn time_of(text: &str) -> Option<(i64, f64)> {
    let (date, clock) = text.trim_end_matches('Z').split_once('T')?;
    let mut parts = date.split('-').map(|p| p.parse::<i64>().ok());
    let (y, m, d) = (parts.next()??, parts.next()??, parts.next()??);
    let mut hms = clock.split(':');
    let h: f64 = hms.next()?.parse().ok()?;
    let min: f64 = hms.next()?.parse().ok()?;
    let s: f64 = hms.next()?.parse().ok()?;
    // Days from a fixed origin (the civil-from-days algorithm run backwards).
    let (y, m) = if m <= 2 { (y - 1, m + 9) } else { (y, m - 3) };
    let days = 365 * y + y / 4 - y / 100 + y / 400 + (153 * m + 2) / 5 + d;
    Some((days, h * 3600.0 + min * 60.0 + s))
}

#[cfg(test)]
mod pace_tests {
    use serde_json::{json, Value};

    /// The spec of a status, as the command reads it.
    fn pace_line(spec: &Value, earlier: Option<(u64, Option<f64>)>) -> String {
        super::pace_line(&serde_json::from_value(spec.clone()).unwrap(), earlier)
    }

    #[test]
    fn the_start_line_says_the_pace_and_the_time_an_earlier_count_implies() {
        let count = json!({"action": {"type": "count"}});
        let line = pace_line(&count, None);
        assert!(line.contains("as fast as the account takes"), "{line}");
        assert!(!line.contains("earlier"), "{line}");
        // A copy pays two entities a row: at a cap of 2,000, 100,000 rows take 100 s.
        let copy = json!({"action": {"type": "copy"}, "maxRowsPerSecond": 2000});
        let line = pace_line(&copy, Some((100_000, Some(20.0))));
        assert!(
            line.contains("at most 2,000 entities (rows read plus rows written)"),
            "{line}"
        );
        assert!(
            line.contains("100,000 rows") && line.contains("1m40s"),
            "{line}"
        );
        // Uncapped: the earlier count's time, twice for a copy.
        let line = pace_line(
            &json!({"action": {"type": "copy"}}),
            Some((100_000, Some(20.0))),
        );
        assert!(line.contains("40s"), "{line}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    /// The status, as the command reads it.
    fn live_line(status: &Value, total: Option<u64>, recent: Option<f64>) -> String {
        super::live_line(
            &serde_json::from_value(status.clone()).unwrap(),
            total,
            recent,
        )
    }

    #[test]
    fn a_scan_has_ended_once_it_stops_moving() {
        assert!(has_ended("cancelled") && has_ended("paused"));
        assert!(!has_ended("cancelling"));
        assert!(!has_ended("running"));
    }

    #[test]
    fn numbers_durations_and_ages_read_easily() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(1234567), "1,234,567");
        assert_eq!(duration(9), "9s");
        assert_eq!(duration(125), "2m05s");
        assert_eq!(duration(3725), "1h02m05s");
        let now = unix_seconds("2026-11-22T00:00:00Z").unwrap();
        assert_eq!(now, 1_795_305_600.0);
        assert_eq!(age("2026-11-21T23:59:15.5000000Z", now), "44s");
        assert_eq!(age("2026-11-21T23:48:00Z", now), "12m");
        assert_eq!(age("2026-11-21T20:00:00Z", now), "4h");
        assert_eq!(age("2026-11-19T00:00:00Z", now), "3d");
        assert_eq!(age("not a date", now), "?");
    }

    fn running() -> Value {
        json!({
            "id": "s1", "state": "running",
            "spec": {"table": "logs", "action": {"type": "copy", "table": "logs2"}},
            "progress": {"rowsRead": 25000, "rowsActed": 25000, "stepsDone": 9, "stepsPending": 14,
                          "stepsFailed": 0, "rowsFailed": 0, "requestsThrottled": 3,
                          "rowsPerSecond": 5000.0, "queries": 30, "partitions": 10},
            "activity": {"note": "waiting for instances"}
        })
    }

    #[test]
    fn the_live_line_shows_progress_and_the_time_left_when_the_scope_is_known() {
        let line = live_line(&running(), Some(100_000), None);
        assert_eq!(
            line,
            "running  25,000 of 100,000 rows (25%)  5,000/s  steps 9 done, 14 pending  \
             throttled 3  ETA 15s  — waiting for instances"
        );
        let line = live_line(&running(), None, None);
        assert!(!line.contains("ETA") && !line.contains('%'), "{line}");
        let mut parked = running();
        parked["activity"]["oldestParkedSeconds"] = json!(75);
        let line = live_line(&parked, None, None);
        assert!(line.contains("  parked for 1m15s  — waiting"), "{line}");
        let line = live_line(&running(), Some(100_000), Some(15_000.0));
        assert!(
            line.contains("15,000/s") && line.contains("ETA 5s"),
            "{line}"
        );
    }

    /// A partition-keys scan reads about one row per partition: its progress is partitions
    /// found, against the partitions an earlier count found, never rows against rows.
    #[test]
    fn a_partition_keys_scan_is_measured_in_partitions() {
        let mut status = running();
        status["spec"]["action"] = json!({"type": "partition-keys", "queue": "k"});
        status["progress"]["rowsRead"] = json!(964);
        status["progress"]["partitions"] = json!(900);
        let line = live_line(&status, Some(3_600), Some(100.0));
        assert!(
            line.starts_with("running  900 of 3,600 partitions (25%) (964 rows read)  100/s"),
            "{line}"
        );
        assert!(line.contains("ETA 27s"), "{line}");
        status["state"] = json!("succeeded");
        let line = live_line(&status, Some(3_600), Some(100.0));
        assert!(
            !line.contains("ETA"),
            "an ended scan has no time left: {line}"
        );
    }
}
