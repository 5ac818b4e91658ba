//! What a scan does, in a few words: its action and what it reads and touches (`copy logs ->
//! logsbackup in BackupStorage`, `delete logs (dry run)`), the same for a status's spec and a
//! list's entry, so that the list and the summary never disagree.

use tablescan_api::answers::{ActionShown, ImportShown, ListEntry, SpecShown, StatusAnswer};

/// The connection a request names when it names none: not worth repeating.
const DEFAULT_CONNECTION: &str = tablescan_api::DEFAULT_CONNECTION;

/// What a scan reads and what its action touches, from a status or a list entry.
pub struct Scan<'a> {
    pub kind: &'a str,
    pub table: &'a str,
    pub connection: &'a str,
    pub dry_run: bool,
    /// An import's export (`container`, `prefix`, `connection`); `None` for a table.
    pub import: Option<&'a ImportShown>,
    /// The action's fields as a request names them (`table`, `queues`, `container`, ...).
    pub action: &'a ActionShown,
}

impl<'a> Scan<'a> {
    /// From a status: its `spec`.
    pub fn of_status(status: &'a StatusAnswer) -> Scan<'a> {
        Scan::of_spec(&status.spec)
    }

    /// From a status's `spec`.
    pub fn of_spec(spec: &'a SpecShown) -> Scan<'a> {
        Scan {
            kind: spec.kind(),
            table: spec.table.as_deref().unwrap_or("?"),
            connection: spec.connection.as_deref().unwrap_or(DEFAULT_CONNECTION),
            dry_run: spec.dry_run,
            import: spec.import.as_ref(),
            action: &spec.action,
        }
    }

    /// From an entry of the scans list.
    pub fn of_entry(entry: &'a ListEntry<String>) -> Scan<'a> {
        let or = |text: &'a str, otherwise: &'a str| match text {
            "" => otherwise,
            text => text,
        };
        Scan {
            kind: or(&entry.action, "?"),
            table: or(&entry.table, "?"),
            connection: or(&entry.connection, DEFAULT_CONNECTION),
            dry_run: entry.dry_run,
            import: entry.import.as_ref(),
            action: &entry.target,
        }
    }

    /// Whether it wants one row per partition: its progress is counted in partitions.
    pub fn per_partition(&self) -> bool {
        self.kind == "partition-keys"
            || (self.kind == "enqueue" && self.action.per.as_deref() == Some("partition"))
    }

    /// Every queue an enqueue or partition-keys scan writes to.
    pub fn queues(&self) -> Vec<&'a str> {
        match &self.action.queues {
            Some(queues) => queues.iter().map(String::as_str).collect(),
            None => self.action.queue.as_deref().into_iter().collect(),
        }
    }

    /// The names of the properties an update sets (its `set` as an object in a status, as
    /// names in a list entry), annotations left out.
    pub fn set_names(&self) -> Vec<&'a str> {
        self.action
            .set
            .as_ref()
            .map(|set| set.names())
            .unwrap_or_default()
    }

    pub fn remove_names(&self) -> Vec<&'a str> {
        self.action
            .remove
            .iter()
            .flatten()
            .map(String::as_str)
            .collect()
    }
}

/// ` in CONNECTION`, unless it is the app's own storage.
pub fn in_connection(connection: Option<&str>) -> String {
    match connection {
        Some(c) if c != DEFAULT_CONNECTION && !c.is_empty() => format!(" in {c}"),
        _ => String::new(),
    }
}

/// `container/prefix`, as an export or an import names its blobs.
pub fn place(container: Option<&str>, prefix: Option<&str>) -> String {
    format!(
        "{}/{}",
        container.filter(|c| !c.is_empty()).unwrap_or("?"),
        prefix.unwrap_or_default()
    )
}

/// `a, b, c`, or `a, b, c and 5 more` beyond three.
pub fn names(names: &[&str]) -> String {
    match names.len() {
        0..=3 => names.join(", "),
        n => format!("{} and {} more", names[..3].join(", "), n - 3),
    }
}

/// `queue q` or `queues a, b, c`.
pub fn queues(list: &[&str]) -> String {
    match list {
        [one] => format!("queue {one}"),
        many => format!("queues {}", names(many)),
    }
}

/// The scan in a few words: `copy logs -> logsbackup in BackupStorage (merge)`.
pub fn what(scan: &Scan) -> String {
    let action = scan.action;
    let target_in = in_connection(action.connection.as_deref());
    let (verb, target) = match scan.kind {
        "copy" => {
            let mode = match action.mode.as_deref() {
                Some(mode) if mode != "replace" => format!(" ({mode})"),
                _ => String::new(),
            };
            let table = action.table.as_deref().unwrap_or("?");
            ("copy", format!(" -> {table}{target_in}{mode}"))
        }
        "enqueue" => {
            let mut how = Vec::new();
            if scan.per_partition() {
                how.push("one message per partition".to_string());
            }
            if let Some(rows) = action.rows_per_message.filter(|r| *r > 1) {
                how.push(format!("up to {rows} rows a message"));
            }
            let how = if how.is_empty() {
                String::new()
            } else {
                format!(" ({})", how.join(", "))
            };
            (
                "enqueue",
                format!(" -> {}{target_in}{how}", queues(&scan.queues())),
            )
        }
        "partition-keys" => (
            "partition-keys",
            format!(" -> {}{target_in}", queues(&scan.queues())),
        ),
        "export" => {
            let to = place(action.container.as_deref(), action.prefix.as_deref());
            ("export", format!(" -> {to}{target_in}"))
        }
        "update" => {
            let mut changes = Vec::new();
            let set = scan.set_names();
            if !set.is_empty() {
                changes.push(format!("set {}", names(&set)));
            }
            let remove = scan.remove_names();
            if !remove.is_empty() {
                changes.push(format!("remove {}", names(&remove)));
            }
            ("update", format!(" ({})", changes.join("; ")))
        }
        other => (other, String::new()),
    };
    let dry = if scan.dry_run { " (dry run)" } else { "" };
    match scan.import {
        Some(import) => {
            let from = format!(
                "{}{}",
                place(Some(&import.container), Some(&import.prefix)),
                in_connection(Some(&import.connection))
            );
            match scan.kind {
                "count" => format!("import {from}: count{dry}"),
                _ => format!("import {from}{target}{dry}"),
            }
        }
        None => format!(
            "{verb} {}{}{target}{dry}",
            scan.table,
            in_connection(Some(scan.connection))
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn described(spec: Value) -> String {
        let status: StatusAnswer = serde_json::from_value(json!({ "spec": spec })).unwrap();
        what(&Scan::of_status(&status))
    }

    #[test]
    fn each_action_says_what_it_touches() {
        let cases = [
            (
                json!({"table": "t", "action": {"type": "count"}}),
                "count t",
            ),
            (
                json!({"table": "t", "connection": "LOGS", "action": {"type": "count"}}),
                "count t in LOGS",
            ),
            (
                json!({"table": "t", "action": {"type": "copy", "table": "u",
                    "connection": "BackupStorage", "mode": "merge"}}),
                "copy t -> u in BackupStorage (merge)",
            ),
            (
                json!({"table": "t", "action": {"type": "copy", "table": "u",
                    "connection": "AzureWebJobsStorage"}}),
                "copy t -> u",
            ),
            (
                json!({"table": "t", "action": {"type": "enqueue", "queues": ["a", "b", "c", "d", "e"],
                    "rowsPerMessage": 5, "per": "row"}}),
                "enqueue t -> queues a, b, c and 2 more (up to 5 rows a message)",
            ),
            (
                json!({"table": "t", "action": {"type": "enqueue", "queue": "q", "per": "partition"}}),
                "enqueue t -> queue q (one message per partition)",
            ),
            (
                json!({"table": "t", "action": {"type": "partition-keys", "queue": "keys"}}),
                "partition-keys t -> queue keys",
            ),
            (
                json!({"table": "t", "action": {"type": "export", "container": "b",
                    "prefix": "day/", "connection": "BACKUP"}}),
                "export t -> b/day/ in BACKUP",
            ),
            (
                json!({"table": "t", "dryRun": true, "action": {"type": "delete"}}),
                "delete t (dry run)",
            ),
            (
                json!({"table": "t", "action": {"type": "update",
                    "set": {"S": 1, "N": "5", "N@odata.type": "Edm.Int64"}, "remove": ["Old"]}}),
                "update t (set N, S; remove Old)",
            ),
            (
                json!({"table": "t", "import": {"container": "b", "prefix": "day/",
                    "connection": "BACKUP"}, "action": {"type": "copy", "table": "r"}}),
                "import b/day/ in BACKUP -> r",
            ),
            (
                json!({"table": "t", "import": {"container": "b", "prefix": "day/"},
                    "action": {"type": "count"}}),
                "import b/day/: count",
            ),
        ];
        for (spec, expected) in cases {
            assert_eq!(described(spec.clone()), expected, "{spec}");
        }
    }

    #[test]
    fn a_list_entry_reads_the_same() {
        let entry = json!({"action": "update", "table": "t", "connection": "AzureWebJobsStorage",
            "dryRun": true, "target": {"set": ["N", "S"], "remove": ["Old"]}});
        let entry: ListEntry<String> = serde_json::from_value(entry).unwrap();
        assert_eq!(
            what(&Scan::of_entry(&entry)),
            "update t (set N, S; remove Old) (dry run)"
        );
    }
}
