//! How scans read as text: the live line while one runs, the summary when it ends, a status,
//! a list. Numbers come from the API's status as they are; nothing here is estimated except
//! the time left, and that only from an earlier count of the same scope.

use serde_json::Value;

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

fn number(value: &Value) -> u64 {
    value.as_u64().unwrap_or(0)
}

/// `3725` seconds as `1h02m05s`, `125` as `2m05s`, `9` as `9s`.
pub fn duration(seconds: u64) -> String {
    match seconds {
        s if s >= 3600 => format!("{}h{:02}m{:02}s", s / 3600, s % 3600 / 60, s % 60),
        s if s >= 60 => format!("{}m{:02}s", s / 60, s % 60),
        s => format!("{s}s"),
    }
}

/// What the scan does, in a few words: `copy logs -> logsbackup`, `count logs`.
pub fn what(status: &Value) -> String {
    let spec = &status["spec"];
    let table = spec["table"].as_str().unwrap_or("?");
    let action = &spec["action"];
    let kind = action["type"].as_str().unwrap_or("?");
    let target = match kind {
        "copy" => action["table"].as_str().map(|t| format!(" -> {t}")),
        "enqueue" | "partition-keys" => action["queue"]
            .as_str()
            .map(|q| format!(" -> queue {q}"))
            .or_else(|| {
                action["queues"]
                    .as_array()
                    .map(|q| format!(" -> {} queues", q.len()))
            }),
        "export" => action["container"]
            .as_str()
            .map(|c| format!(" -> {c}/{}", action["prefix"].as_str().unwrap_or_default())),
        _ => None,
    };
    if let Some(import) = spec["import"].as_object() {
        let from = format!(
            "{}/{}",
            import["container"].as_str().unwrap_or("?"),
            import
                .get("prefix")
                .and_then(Value::as_str)
                .unwrap_or_default()
        );
        return format!("import {from}: {kind}{}", target.unwrap_or_default());
    }
    let dry = if spec["dryRun"] == true {
        " (dry run)"
    } else {
        ""
    };
    format!("{kind} {table}{}{dry}", target.unwrap_or_default())
}

/// The live line: state, rows and rate, steps, failures, throttling, the time left when the
/// scope's size is known, and the stall explanation when there is one. `recent_rate` is the
/// rate the watcher saw over the last seconds; without it, the status's average since the
/// start (which understates a scan that is still ramping up).
pub fn live_line(status: &Value, scope_rows: Option<u64>, recent_rate: Option<f64>) -> String {
    let p = &status["progress"];
    let read = number(&p["rowsRead"]);
    let rate = recent_rate.unwrap_or_else(|| p["rowsPerSecond"].as_f64().unwrap_or(0.0));
    let mut line = format!(
        "{}  {} rows",
        status["state"].as_str().unwrap_or("?"),
        thousands(read)
    );
    if let Some(total) = scope_rows.filter(|t| *t > 0) {
        let percent = (read as f64 / total as f64 * 100.0).min(100.0);
        line.push_str(&format!(" of {} ({percent:.0}%)", thousands(total)));
    }
    line.push_str(&format!(
        "  {}/s  steps {} done, {} pending",
        thousands(rate.round() as u64),
        thousands(number(&p["stepsDone"])),
        thousands(number(&p["stepsPending"]))
    ));
    let failed = number(&p["stepsFailed"]) + number(&p["rowsFailed"]);
    if failed > 0 {
        line.push_str(&format!(
            "  failed {} steps, {} rows",
            number(&p["stepsFailed"]),
            number(&p["rowsFailed"])
        ));
    }
    let throttled = number(&p["requestsThrottled"]);
    if throttled > 0 {
        line.push_str(&format!("  throttled {}", thousands(throttled)));
    }
    if let Some(total) = scope_rows {
        if rate > 0.0 && read < total {
            let left = ((total - read) as f64 / rate).ceil() as u64;
            line.push_str(&format!("  ETA {}", duration(left)));
        }
    }
    if let Some(note) = status["activity"]["note"].as_str() {
        line.push_str(&format!("  — {note}"));
    }
    line
}

/// The summary of a scan that ended (also what `status` prints).
pub fn summary(status: &Value) -> String {
    let p = &status["progress"];
    let state = status["state"].as_str().unwrap_or("?");
    let mut out = format!(
        "scan {}: {} — {state}\n",
        status["id"].as_str().unwrap_or("?"),
        what(status)
    );
    let mut row = |name: &str, value: String| out.push_str(&format!("  {name:<16}{value}\n"));
    if let Some(result) = status["result"].as_object() {
        row(
            "result",
            format!(
                "{} rows in {} partitions",
                thousands(number(&result["rows"])),
                thousands(number(&result["partitions"]))
            ),
        );
    }
    row("rows read", thousands(number(&p["rowsRead"])));
    row("rows acted on", thousands(number(&p["rowsActed"])));
    for (name, field) in [
        ("rows skipped", "rowsSkipped"),
        ("rows failed", "rowsFailed"),
    ] {
        if number(&p[field]) > 0 {
            row(name, thousands(number(&p[field])));
        }
    }
    if status["spec"]["import"].is_null() {
        row("partitions", thousands(number(&p["partitions"])));
    }
    if let Some(per) = p["rowsReadPerPartition"].as_f64() {
        row("read/partition", format!("{per:.2} rows"));
    }
    row(
        "steps",
        format!(
            "{} done, {} pending, {} failed",
            thousands(number(&p["stepsDone"])),
            thousands(number(&p["stepsPending"])),
            thousands(number(&p["stepsFailed"]))
        ),
    );
    row("queries", thousands(number(&p["queries"])));
    if number(&p["requestsThrottled"]) > 0 {
        row("throttled", thousands(number(&p["requestsThrottled"])));
    }
    if let Some(seconds) = elapsed_seconds(status) {
        let rate = number(&p["rowsRead"]) as f64 / seconds.max(0.001);
        row(
            "took",
            format!("{seconds:.1} s ({} rows/s)", thousands(rate.round() as u64)),
        );
    }
    if let Some(export) = status["export"].as_object() {
        row(
            "blobs",
            format!(
                "{} ({} bytes)",
                thousands(number(&export["blobs"])),
                thousands(number(&export["bytes"]))
            ),
        );
        if let Some(manifest) = export["manifest"].as_str() {
            row(
                "manifest",
                format!("{}/{manifest}", export["container"].as_str().unwrap_or("?")),
            );
        }
    }
    if let Some(why) = status["failedBecause"].as_str() {
        row("failed because", why.to_string());
    }
    if let Some(note) = status["activity"]["note"].as_str() {
        row("note", note.to_string());
    }
    for error in status["errors"].as_array().into_iter().flatten().take(5) {
        let text = error["message"]
            .as_str()
            .or_else(|| error["error"].as_str())
            .map(str::to_string)
            .unwrap_or_else(|| error.to_string());
        row("error", text);
    }
    for failure in status["rowFailures"]
        .as_array()
        .into_iter()
        .flatten()
        .take(5)
    {
        row("row failed", failure.to_string());
    }
    out
}

/// Entities per row the action costs the account: a row read, and for a copy, delete or
/// update a row written too.
fn entities_per_row(spec: &Value) -> u64 {
    match spec["action"]["type"].as_str() {
        Some("copy" | "delete" | "update") if spec["dryRun"] != true => 2,
        _ => 1,
    }
}

/// What `tablescan start` says of the scan's pace: its cap, or that it goes as fast as the
/// account takes; and how long it should take, where an earlier count of the same scope says
/// how many rows it holds (and how long reading them took).
pub fn pace_line(spec: &Value, earlier: Option<(u64, Option<f64>)>) -> String {
    let per_row = entities_per_row(spec);
    let what = if per_row == 2 {
        "entities (rows read plus rows written)"
    } else {
        "entities (rows read)"
    };
    let cap = spec["maxRowsPerSecond"].as_u64();
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
pub fn elapsed_seconds(status: &Value) -> Option<f64> {
    let parse = |field: &str| {
        status[field]
            .as_str()
            .and_then(|t| time_of(t).map(|(days, seconds)| days as f64 * 86_400.0 + seconds))
    };
    let start = parse("startedAt").or_else(|| parse("createdAt"))?;
    let end = parse("finishedAt")?;
    (end >= start).then_some(end - start)
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

/// One line per scan of a list page.
pub fn list(page: &Value) -> String {
    let mut out = String::new();
    let scans = page["scans"].as_array().cloned().unwrap_or_default();
    if scans.is_empty() {
        out.push_str("no scans\n");
    }
    for scan in &scans {
        let p = &scan["progress"];
        out.push_str(&format!(
            "{}  {:<10} {:<14} {:<24} {:>12} rows  {} steps done, {} pending, {} failed  {}\n",
            scan["id"].as_str().unwrap_or("?"),
            scan["state"].as_str().unwrap_or("?"),
            scan["action"].as_str().unwrap_or("?"),
            scan["table"].as_str().unwrap_or("?"),
            thousands(number(&p["rowsRead"])),
            number(&p["stepsDone"]),
            number(&p["stepsPending"]),
            number(&p["stepsFailed"]),
            scan["createdAt"].as_str().unwrap_or(""),
        ));
    }
    for scan in page["unreadableScans"].as_array().into_iter().flatten() {
        out.push_str(&format!(
            "{}  could not be read: {}\n",
            scan["id"].as_str().unwrap_or("?"),
            scan["error"].as_str().unwrap_or("?"),
        ));
    }
    let rejected = page["rejectedMessages"].as_array().map_or(0, Vec::len);
    if rejected > 0 {
        out.push_str(&format!(
            "{rejected} queue messages were not valid work items (see --json)\n"
        ));
    }
    out
}

#[cfg(test)]
mod pace_tests {
    use super::*;
    use serde_json::json;

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
    use serde_json::json;

    #[test]
    fn numbers_and_durations_read_easily() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(1234567), "1,234,567");
        assert_eq!(duration(9), "9s");
        assert_eq!(duration(125), "2m05s");
        assert_eq!(duration(3725), "1h02m05s");
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
            "running  25,000 rows of 100,000 (25%)  5,000/s  steps 9 done, 14 pending  \
             throttled 3  ETA 15s  — waiting for instances"
        );
        let line = live_line(&running(), None, None);
        assert!(!line.contains("ETA") && !line.contains('%'), "{line}");
        let line = live_line(&running(), Some(100_000), Some(15_000.0));
        assert!(
            line.contains("15,000/s") && line.contains("ETA 5s"),
            "{line}"
        );
    }

    #[test]
    fn the_summary_gives_the_result_and_the_time_taken() {
        let mut status = running();
        status["state"] = json!("succeeded");
        status["spec"]["action"] = json!({"type": "count"});
        status["result"] = json!({"rows": 25000, "partitions": 10});
        status["startedAt"] = json!("2026-11-21T23:59:58.5000000Z");
        status["finishedAt"] = json!("2026-11-22T00:00:03.5000000Z");
        let text = summary(&status);
        assert!(
            text.starts_with("scan s1: count logs — succeeded\n"),
            "{text}"
        );
        assert!(
            text.contains("result          25,000 rows in 10 partitions"),
            "{text}"
        );
        assert!(
            text.contains("took            5.0 s (5,000 rows/s)"),
            "{text}"
        );
    }

    #[test]
    fn exports_and_imports_say_where_their_blobs_are() {
        let mut status = running();
        status["state"] = json!("succeeded");
        status["spec"]["action"] =
            json!({"type": "export", "container": "backups", "prefix": "logs/"});
        status["export"] = json!({"container": "backups", "prefix": "logs/", "blobs": 12,
            "bytes": 1234567, "manifest": "logs/manifest.json"});
        let text = summary(&status);
        assert!(
            text.starts_with("scan s1: export logs -> backups/logs/ — succeeded\n"),
            "{text}"
        );
        assert!(
            text.contains("blobs           12 (1,234,567 bytes)"),
            "{text}"
        );
        assert!(
            text.contains("manifest        backups/logs/manifest.json"),
            "{text}"
        );
        status["spec"] = json!({"table": "logs", "import": {"container": "backups",
            "prefix": "logs/", "manifest": {"rows": 25000}},
            "action": {"type": "copy", "table": "restored"}});
        status["export"] = Value::Null;
        let text = summary(&status);
        assert!(
            text.starts_with("scan s1: import backups/logs/: copy -> restored — succeeded\n"),
            "{text}"
        );
        assert!(
            !text.contains("partitions"),
            "an import counts no partitions: {text}"
        );
    }

    #[test]
    fn a_list_is_one_line_per_scan() {
        let page = json!({"scans": [
            {"id": "a", "state": "running", "action": "count", "table": "t",
             "progress": {"rowsRead": 5, "stepsDone": 1, "stepsPending": 2, "stepsFailed": 0}},
            {"id": "b", "state": "failed", "action": "copy", "table": "u", "progress": {}}
        ], "next": null, "rejectedMessages": []});
        let text = list(&page);
        assert_eq!(text.lines().count(), 2);
        assert!(
            text.lines().next().unwrap().starts_with("a  running"),
            "{text}"
        );
        assert_eq!(list(&json!({"scans": []})), "no scans\n");
        let damaged =
            json!({"scans": [], "unreadableScans": [{"id": "c", "error": "15 counter shards"}]});
        assert!(
            list(&damaged).contains("c  could not be read: 15 counter shards"),
            "{}",
            list(&damaged)
        );
    }
}
