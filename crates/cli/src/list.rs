//! `tablescan list`: a page of scans under a header, each with its state, rows, age and what
//! it touches, and a line that says how to see more. Filters are the API's (each of its pages
//! costs the same, filtered or not, and may hold fewer scans than asked): the command reads
//! pages until it has the scans asked for, at most [`MOST_PAGES`] of them.

use serde_json::Value;
use tablescan_api::answers::{ListEntry, State, UnreadableScan};

use crate::api::{Api, ApiError, ListQuery};
use crate::args::ListArgs;
use crate::describe::{self, Scan};
use crate::show::{age, thousands};

/// The most API pages one `list` reads.
const MOST_PAGES: u32 = 10;

/// What `list` found: the scans, where the next page starts, the API's last page (for its
/// refused messages), and the query as flags (for the "more" line).
pub struct Listing {
    pub scans: Vec<ListEntry<String>>,
    pub next: Option<String>,
    pub rejected: Vec<Value>,
    /// Scans of the pages read whose ledger rows could not be read.
    pub unreadable: Vec<UnreadableScan>,
    /// The pages' `scans` and `unreadableScans` as the app gave them, for `--json` (a newer
    /// app's fields included).
    pub json: PagesJson,
}

/// What `--json` prints of the pages read: their arrays as the app gave them.
#[derive(Default)]
pub struct PagesJson {
    pub scans: Vec<Value>,
    pub unreadable: Vec<Value>,
}

/// Reads pages until `args.limit` scans are found or no page is left.
pub async fn read(api: &Api, args: &ListArgs) -> Result<Listing, ApiError> {
    let state = args.state.map(State::name);
    let action = args.action.map(|action| action.name().to_string());
    let mut listing = Listing {
        scans: Vec::new(),
        next: args.after.clone(),
        rejected: Vec::new(),
        unreadable: Vec::new(),
        json: PagesJson::default(),
    };
    for _ in 0..MOST_PAGES {
        let wanted = args.limit - listing.scans.len() as u32;
        let query = ListQuery {
            limit: wanted,
            state,
            action: action.as_deref(),
            table: args.table.as_deref(),
            after: listing.next.as_deref(),
        };
        let page = api.list(&query).await?;
        let raw = |field: &str| page.json[field].as_array().cloned().unwrap_or_default();
        listing.json.scans.extend(raw("scans"));
        listing.json.unreadable.extend(raw("unreadableScans"));
        let page = page.read;
        listing.scans.extend(page.scans);
        listing.unreadable.extend(page.unreadable_scans);
        listing.rejected = page.rejected_messages;
        listing.next = page.next;
        if listing.next.is_none() || listing.scans.len() as u32 >= args.limit {
            break;
        }
    }
    Ok(listing)
}

/// The listing as text, with `now` (seconds since 1970) for the ages.
pub fn text(listing: &Listing, args: &ListArgs, now: f64) -> String {
    let mut out = String::new();
    if listing.scans.is_empty() {
        out.push_str("no scans");
        if args.state.is_some() || args.action.is_some() || args.table.is_some() {
            out.push_str(" match");
        }
        out.push('\n');
    } else {
        out.push_str(&format!(
            "{:<32}  {:<10}  {:>12}  {:>4}  SCAN\n",
            "ID", "STATE", "ROWS READ", "AGE"
        ));
    }
    for scan in &listing.scans {
        out.push_str(&format!(
            "{:<32}  {:<10}  {:>12}  {:>4}  {}\n",
            or_unknown(&scan.id),
            or_unknown(&scan.state),
            thousands(scan.progress.rows_read),
            age(&scan.created_at, now),
            describe::what(&Scan::of_entry(scan)),
        ));
    }
    for scan in &listing.unreadable {
        out.push_str(&format!(
            "{}  could not be read: {}\n",
            or_unknown(&scan.id),
            or_unknown(&scan.error),
        ));
    }
    if let Some(next) = &listing.next {
        out.push_str(&format!(
            "more: tablescan list{} --after {next}\n",
            same_filters(args)
        ));
    }
    if !listing.rejected.is_empty() {
        out.push_str(&format!(
            "{} queue messages were not valid work items (see --json)\n",
            listing.rejected.len()
        ));
    }
    out
}

/// `text`, or `?` when the app gave none.
fn or_unknown(text: &str) -> &str {
    match text {
        "" => "?",
        text => text,
    }
}

/// The flags of `args` that the next page needs again.
fn same_filters(args: &ListArgs) -> String {
    let mut flags = String::new();
    if let Some(state) = args.state {
        flags.push_str(&format!(" --state {}", state.name()));
    }
    if let Some(action) = args.action {
        flags.push_str(&format!(" --action {}", action.name()));
    }
    if let Some(table) = &args.table {
        flags.push_str(&format!(" --table {table}"));
    }
    if args.limit != 20 {
        flags.push_str(&format!(" --limit {}", args.limit));
    }
    flags
}

/// The listing as the API's JSON: its scans, `next`, and the refused messages.
pub fn json(listing: &Listing) -> Value {
    serde_json::json!({
        "scans": listing.json.scans,
        "next": listing.next,
        "unreadableScans": listing.json.unreadable,
        "rejectedMessages": listing.rejected,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::{Cli, Command};
    use clap::Parser;
    use serde_json::json;

    /// An entry (or an unreadable scan) given as JSON, read as the command reads the app's.
    fn read<T: serde::de::DeserializeOwned>(json: Value) -> T {
        serde_json::from_value(json).unwrap()
    }

    fn args(flags: &[&str]) -> ListArgs {
        let mut all = vec!["tablescan", "list"];
        all.extend_from_slice(flags);
        match Cli::try_parse_from(all).unwrap().command {
            Command::List(args) => args,
            _ => panic!("not a list"),
        }
    }

    #[test]
    fn a_list_has_a_header_a_line_per_scan_and_says_how_to_see_more() {
        let listing = Listing {
            scans: vec![
                read(
                    json!({"id": "a".repeat(32), "state": "running", "action": "copy", "table": "t",
                    "connection": "AzureWebJobsStorage", "createdAt": "2026-11-21T23:59:00Z",
                    "target": {"table": "u", "connection": "BackupStorage"},
                    "progress": {"rowsRead": 12345}}),
                ),
                read(
                    json!({"id": "b".repeat(32), "state": "succeeded", "action": "delete",
                    "table": "t", "dryRun": true, "createdAt": "2026-11-21T20:00:00Z",
                    "target": {}, "progress": {"rowsRead": 5}}),
                ),
            ],
            next: Some("9223-abc".into()),
            rejected: Vec::new(),
            unreadable: vec![read(
                json!({"id": "c".repeat(32), "error": "15 counter shards"}),
            )],
            json: PagesJson::default(),
        };
        let now = crate::show::unix_seconds("2026-11-22T00:00:00Z").unwrap();
        let text = text(&listing, &args(&["--state=running", "--limit=2"]), now);
        assert_eq!(
            text,
            format!(
                "ID                                STATE          ROWS READ   AGE  SCAN\n\
                 {}  running           12,345    1m  copy t -> u in BackupStorage\n\
                 {}  succeeded              5    4h  delete t (dry run)\n\
                 {}  could not be read: 15 counter shards\n\
                 more: tablescan list --state running --limit 2 --after 9223-abc\n",
                "a".repeat(32),
                "b".repeat(32),
                "c".repeat(32)
            )
        );
        let empty = Listing {
            scans: Vec::new(),
            next: None,
            rejected: Vec::new(),
            unreadable: Vec::new(),
            json: PagesJson::default(),
        };
        assert_eq!(super::text(&empty, &args(&[]), now), "no scans\n");
        assert_eq!(
            super::text(&empty, &args(&["--action=copy"]), now),
            "no scans match\n"
        );
    }
}
