//! A scan in one line for the log: what it does, where, over which rows and how fast;
//! connections by setting name, never their value.

use super::{ActionSpec, CopyMode, ImportSource, ScanSpec};

impl ScanSpec {
    /// One line saying what the scan does, for the log: the action and its target, the source,
    /// the scope and the cap; connections by setting name (never their value).
    pub fn summary(&self) -> String {
        let action = self.action_summary();
        let dry_run = if self.dry_run { "DRY RUN of " } else { "" };
        if let Some(import) = &self.import {
            return format!("{dry_run}{}, {action}", import_summary(import));
        }
        let cap = self
            .max_rows_per_second
            .map_or("no cap".to_string(), |cap| {
                format!("at most {cap} entities/s")
            });
        format!(
            "{dry_run}{action} over table {:?} of {}; {}; {cap}",
            self.table,
            self.connection,
            self.rows_summary()
        )
    }

    /// The action and what it writes to.
    fn action_summary(&self) -> String {
        match &self.action {
            ActionSpec::Count => "count".to_string(),
            ActionSpec::Delete => "delete".to_string(),
            ActionSpec::Update { set, remove } => {
                let mut parts = Vec::new();
                let names: Vec<&str> = set
                    .keys()
                    .filter(|k| !k.contains('@'))
                    .map(String::as_str)
                    .collect();
                if !names.is_empty() {
                    parts.push(format!("set {}", names.join(", ")));
                }
                if !remove.is_empty() {
                    parts.push(format!("remove {}", remove.join(", ")));
                }
                format!("update ({})", parts.join("; "))
            }
            ActionSpec::Copy {
                table,
                connection,
                mode,
            } => format!(
                "copy ({}) into table {table:?} of {connection}",
                match mode {
                    CopyMode::Replace => "replace",
                    CopyMode::Merge => "merge",
                    CopyMode::Insert => "insert",
                }
            ),
            ActionSpec::Enqueue { connection, .. } => format!(
                "enqueue into {} of {connection}",
                quoted_list(&self.action.target_queues())
            ),
            ActionSpec::PartitionKeys {
                queue, connection, ..
            } => format!("partition-keys into queue {queue:?} of {connection}"),
            ActionSpec::Export {
                container,
                prefix,
                connection,
                ..
            } => format!("export into blobs {container}/{prefix}* of {connection}"),
        }
    }

    /// Which rows the scan reads: its scope's bounds and its conditions, or every PartitionKey.
    fn rows_summary(&self) -> String {
        let scope = &self.scope;
        let mut limits = Vec::new();
        if !scope.prefix.is_empty() {
            limits.push(format!("prefix {:?}", scope.prefix));
        }
        if let Some(after) = &scope.after {
            limits.push(format!("after {after:?}"));
        }
        if let Some(before) = &scope.before {
            limits.push(format!("before {before:?}"));
        }
        if !scope.row_prefix.is_empty() {
            limits.push(format!("RowKeys starting with {:?}", scope.row_prefix));
        }
        if let Some(after) = &scope.row_after {
            limits.push(format!("RowKeys after {after:?}"));
        }
        if let Some(before) = &scope.row_before {
            limits.push(format!("RowKeys before {before:?}"));
        }
        if let Some(older) = &self.older_than {
            limits.push(format!(
                "rows older than {} (before {})",
                older.age, older.before
            ));
        }
        if let Some(filter) = &self.filter {
            limits.push(format!("rows where {filter}"));
        }
        if limits.is_empty() {
            "every PartitionKey".to_string()
        } else {
            limits.join(", ")
        }
    }
}

/// The export an import reads, and what its manifest said once it was read.
fn import_summary(import: &ImportSource) -> String {
    format!(
        "import of the export {}/{}* of {} ({})",
        import.container,
        import.prefix,
        import.connection,
        import
            .manifest
            .as_ref()
            .map_or("manifest not read yet".to_string(), |m| {
                format!("table {:?}, {} rows in {} blobs", m.table, m.rows, m.blobs)
            }),
    )
}

/// `queue "a"`, or `queues "a", "b"`.
fn quoted_list<S: AsRef<str>>(names: &[S]) -> String {
    let quoted: Vec<String> = names.iter().map(|n| format!("{:?}", n.as_ref())).collect();
    match quoted.len() {
        1 => format!("queue {}", quoted[0]),
        _ => format!("queues {}", quoted.join(", ")),
    }
}
