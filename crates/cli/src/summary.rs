//! The summary of a scan (what `start --wait`, `status` and `status --watch` print): what it
//! did, in the words of its action (rows copied into which table of which account, messages
//! sent, partitions found, blobs written, rows deleted or that a dry run would delete), then
//! its reads, steps, time, and why it failed, with the command that helps next.

use tablescan_api::answers::{NotedRow, StatusAnswer};

use crate::describe::{self, Scan};
use crate::show::{elapsed_seconds, state_name, thousands};

/// `1 row`, `2 rows`.
fn count(n: u64, one: &str, many: &str) -> String {
    format!("{} {}", thousands(n), if n == 1 { one } else { many })
}

/// The lines of a summary, each a label and its text.
struct Lines(String);

impl Lines {
    fn row(&mut self, name: &str, value: impl AsRef<str>) {
        self.0
            .push_str(&format!("  {name:<16}{}\n", value.as_ref()));
    }
}

/// The summary of a scan, from its status.
pub fn summary(status: &StatusAnswer) -> String {
    let scan = Scan::of_status(status);
    let id = match status.id.as_str() {
        "" => "?",
        id => id,
    };
    let state = state_name(status);
    let mut out = Lines(format!("scan {id}: {} — {state}\n", describe::what(&scan)));
    outcome(&mut out, status, &scan);
    let p = &status.progress;
    if p.rows_failed > 0 {
        out.row(
            "rows failed",
            format!("{} the action could not act on", thousands(p.rows_failed)),
        );
    }
    out.row("rows read", thousands(p.rows_read));
    if scan.per_partition() {
        if let Some(per) = p.rows_read_per_partition {
            out.row("read/partition", format!("{per:.2} rows"));
        }
    }
    out.row(
        "steps",
        format!(
            "{} done, {} pending, {} failed",
            thousands(p.steps_done),
            thousands(p.steps_pending),
            thousands(p.steps_failed)
        ),
    );
    if scan.import.is_none() {
        out.row("queries", thousands(p.queries));
    }
    if p.requests_throttled > 0 {
        out.row(
            "throttled",
            format!(
                "{} requests answered \"too busy\"",
                thousands(p.requests_throttled)
            ),
        );
    }
    if let Some(seconds) = elapsed_seconds(status) {
        let rate = p.rows_read as f64 / seconds.max(0.001);
        out.row(
            "took",
            format!("{seconds:.1} s ({} rows/s)", thousands(rate.round() as u64)),
        );
    }
    reasons(&mut out, status, id);
    out.0
}

/// Why the scan failed, its note, its errors, a few rows it could not act on (or would act
/// on, in a dry run), and what to do next.
fn reasons(out: &mut Lines, status: &StatusAnswer, id: &str) {
    if let Some(why) = status.failed_because.as_deref() {
        out.row("failed because", cli_words(why, id));
    }
    if let Some(note) = status.activity.as_ref().and_then(|a| a.note.as_deref()) {
        out.row("note", cli_words(note, id));
    }
    for (text, steps) in errors(status) {
        match steps {
            1 => out.row("error", text),
            n => out.row("error", format!("{text} ({n} steps)")),
        }
    }
    for failure in status.row_failures.iter().take(5) {
        out.row("row failed", noted_row(failure));
    }
    for row in status.dry_run_rows.iter().take(3) {
        out.row("e.g.", noted_row(row));
    }
    if let Some(next) = next_step(status, id) {
        out.row("next", next);
    }
}

/// The errors of the steps that failed for good, each text once with how many of the listed
/// steps met it (their storage request ids, which differ, left to --json), at most five.
fn errors(status: &StatusAnswer) -> Vec<(String, usize)> {
    let mut seen: Vec<(String, usize)> = Vec::new();
    for error in &status.errors {
        let text = error.error.clone();
        let text = match text.rfind(" (request id ") {
            Some(at) if text.ends_with(')') => text[..at].to_string(),
            _ => text,
        };
        match seen.iter_mut().find(|(t, _)| *t == text) {
            Some((_, n)) => *n += 1,
            None => seen.push((text, 1)),
        }
    }
    seen.truncate(5);
    seen
}

/// `PartitionKey / RowKey: why`.
fn noted_row(row: &NotedRow) -> String {
    let keys = format!("{:?} / {:?}", row.partition_key, row.row_key);
    match row.reason.as_deref() {
        Some(why) => format!("{keys}: {why}"),
        None => keys,
    }
}

/// What the action did (or, in a dry run, would do), in its own words.
fn outcome(out: &mut Lines, status: &StatusAnswer, scan: &Scan) {
    let p = &status.progress;
    let (acted, skipped, partitions) = (p.rows_acted, p.rows_skipped, p.partitions);
    let target_in = describe::in_connection(scan.action.connection.as_deref());
    let manifest_rows = scan
        .import
        .and_then(|import| import.manifest.as_ref())
        .and_then(|manifest| manifest.rows);
    let of_manifest = manifest_rows
        .map(|rows| format!(" (the export's manifest lists {})", thousands(rows)))
        .unwrap_or_default();
    match scan.kind {
        "count" if scan.import.is_some() => out.row(
            "counted",
            format!(
                "{} read and checked{of_manifest}",
                count(acted, "row", "rows")
            ),
        ),
        "count" => counted(out, status, acted, partitions),
        "copy" => copied(out, scan, acted, skipped, &target_in, &of_manifest),
        "enqueue" | "partition-keys" => enqueued(out, scan, acted, partitions),
        "delete" => {
            let verb = if scan.dry_run {
                "would delete"
            } else {
                "deleted"
            };
            let also = if scan.dry_run {
                " (dry run: nothing deleted)"
            } else {
                ""
            };
            out.row(verb, format!("{}{also}", count(acted, "row", "rows")));
            if skipped > 0 {
                out.row(
                    "kept",
                    format!(
                        "{} changed since they were read",
                        count(skipped, "row", "rows")
                    ),
                );
            }
        }
        "update" => {
            let verb = if scan.dry_run {
                "would update"
            } else {
                "updated"
            };
            let also = if scan.dry_run {
                " (dry run: nothing written)"
            } else {
                ""
            };
            out.row(verb, format!("{}{also}", count(acted, "row", "rows")));
            if skipped > 0 {
                out.row(
                    "left alone",
                    format!(
                        "{} changed or deleted since they were read",
                        count(skipped, "row", "rows")
                    ),
                );
            }
        }
        "export" => exported(out, status, scan.dry_run, acted, &target_in),
        _ => out.row("rows acted on", thousands(acted)),
    }
}

/// What a count counted: its result once the scan is done, else what it counted so far.
fn counted(out: &mut Lines, status: &StatusAnswer, acted: u64, partitions: u64) {
    let (rows, partitions, all) = match &status.result {
        Some(result) => (result.rows, result.partitions, ""),
        None => (acted, partitions, " so far, not the whole scope"),
    };
    out.row(
        "counted",
        format!(
            "{} in {}{all}",
            count(rows, "row", "rows"),
            count(partitions, "partition", "partitions")
        ),
    );
}

/// What a copy (or an import's restore) wrote, and the rows it left alone.
fn copied(
    out: &mut Lines,
    scan: &Scan,
    acted: u64,
    skipped: u64,
    target_in: &str,
    of_manifest: &str,
) {
    let into = format!(
        "into {}{target_in}",
        scan.action.table.as_deref().unwrap_or("?")
    );
    let verb = match (scan.dry_run, scan.import.is_some()) {
        (true, _) => "would copy",
        (false, true) => "restored",
        (false, false) => "copied",
    };
    let also = if scan.dry_run {
        " (dry run: nothing written)"
    } else {
        ""
    };
    out.row(
        verb,
        format!("{} {into}{of_manifest}{also}", count(acted, "row", "rows")),
    );
    if skipped > 0 {
        out.row(
            "left alone",
            format!(
                "{} the target holds already, different (mode insert keeps them)",
                count(skipped, "row", "rows")
            ),
        );
    }
}

/// What an export wrote, and its manifest (or why there is none).
fn exported(out: &mut Lines, status: &StatusAnswer, dry: bool, acted: u64, target_in: &str) {
    let export = status.export.as_ref();
    let verb = if dry { "would export" } else { "exported" };
    let blobs = match export {
        Some(export) if !dry => format!(
            " into {} ({} bytes)",
            count(export.blobs, "blob", "blobs"),
            thousands(export.bytes)
        ),
        _ => String::new(),
    };
    out.row(verb, format!("{}{blobs}", count(acted, "row", "rows")));
    let in_flight = matches!(status.state.as_str(), "running" | "pending");
    match export.and_then(|e| Some((e.manifest.as_deref()?, e.container.as_str()))) {
        Some((manifest, container)) => out.row(
            "manifest",
            format!(
                "{}/{manifest}{target_in} (restore with --import)",
                match container {
                    "" => "?",
                    container => container,
                }
            ),
        ),
        None if !dry && !in_flight => out.row(
            "manifest",
            "none: the export is not whole, and an import refuses it",
        ),
        None => {}
    }
}

/// What an enqueue or a partition-keys scan sent: messages, counted in the unit the status
/// keeps (rows acted on), and the queues.
fn enqueued(out: &mut Lines, scan: &Scan, acted: u64, partitions: u64) {
    let dry = scan.dry_run;
    let verb = if dry { "would send" } else { "sent" };
    let queues = scan.queues();
    let to = describe::queues(&queues);
    let rows_per_message = scan.action.rows_per_message.unwrap_or(1);
    if scan.kind == "partition-keys" {
        out.row("partitions", format!("{} found", thousands(partitions)));
    }
    let text = if scan.per_partition() {
        format!(
            "{} to {to}, one per partition",
            count(acted, "message", "messages")
        )
    } else if rows_per_message > 1 {
        let at_least = acted.div_ceil(rows_per_message);
        format!(
            "{} to {to}, in messages of up to {rows_per_message} rows (at least {}; fewer rows \
             where a message would pass 64 KiB)",
            count(acted, "row", "rows"),
            count(at_least, "message", "messages")
        )
    } else {
        format!(
            "{} to {to}, one per row",
            count(acted, "message", "messages")
        )
    };
    out.row(verb, text);
    if queues.len() > 3 {
        out.row("queues", queues.join(", "));
    }
    if !dry {
        out.row(
            "delivery",
            "at least once: a step that runs again after a crash sends its messages again",
        );
    }
}

/// The API's hints in the command's words: `tablescan retry <id>` where the API names its route.
fn cli_words(text: &str, id: &str) -> String {
    text.replace(
        &format!("POST /api/scans/{id}/retry"),
        &format!("`tablescan retry {id}`"),
    )
    .replace(
        &format!("DELETE /api/scans/{id}"),
        &format!("`tablescan remove {id}`"),
    )
}

/// The command that helps next, if any.
fn next_step(status: &StatusAnswer, id: &str) -> Option<String> {
    let p = &status.progress;
    match status.state.as_str() {
        // Unless the app's own reason says so already (in the command's words, `cli_words`).
        "failed"
            if p.steps_failed > 0
                && !status
                    .failed_because
                    .as_deref()
                    .is_some_and(|why| why.contains("/retry")) =>
        {
            Some(format!(
                "`tablescan retry {id}` runs the failed steps again, once their cause is fixed"
            ))
        }
        "running" | "pending" | "cancelling" => Some(format!(
            "`tablescan status {id} --watch` follows it, `tablescan pause {id}` pauses it, \
             `tablescan cancel {id}` stops it"
        )),
        "pausing" | "paused" => Some(format!(
            "`tablescan resume {id}` goes on from where it stopped, `tablescan cancel {id}` \
             ends it"
        )),
        _ => None,
    }
}

#[cfg(test)]
#[path = "summary_tests.rs"]
mod tests;
