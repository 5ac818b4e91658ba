//! The connections a scan uses: each with the request field that names it and whether the
//! scan writes through it. What the app lets scans use is decided on these
//! (the handler's `allowlist`), and a request's connections are looked up in this order.

use crate::{ActionSpec, ScanSpec};

/// What a scan does through a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Access {
    /// Reads only: the source of a count, a copy, an enqueue, a partition-keys scan or an
    /// export; an import's blobs; anything of a dry run, which writes nothing.
    Read,
    /// Writes or deletes: the table of a delete or an update, the target of a copy (an
    /// import's too), an enqueue, a partition-keys scan or an export.
    Write,
}

impl Access {
    /// How the access is named in messages: `read` or `write`.
    pub fn verb(self) -> &'static str {
        match self {
            Access::Read => "read",
            Access::Write => "write",
        }
    }
}

/// One connection a scan uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionUse<'a> {
    /// The request field that names it (`connection`, `import.connection`,
    /// `action.connection`).
    pub field: &'static str,
    /// The connection: an app setting's name.
    pub name: &'a str,
    pub access: Access,
}

impl ScanSpec {
    /// Every connection the scan uses, its source first, then its action's target.
    pub fn connection_uses(&self) -> Vec<ConnectionUse<'_>> {
        let writes = |yes: bool| {
            if yes && !self.dry_run {
                Access::Write
            } else {
                Access::Read
            }
        };
        let mut uses = Vec::with_capacity(2);
        match &self.import {
            Some(import) => uses.push(ConnectionUse {
                field: "import.connection",
                name: &import.connection,
                access: Access::Read,
            }),
            None => uses.push(ConnectionUse {
                field: "connection",
                name: &self.connection,
                access: writes(matches!(
                    self.action,
                    ActionSpec::Delete | ActionSpec::Update { .. }
                )),
            }),
        }
        match &self.action {
            ActionSpec::Copy { connection, .. }
            | ActionSpec::Enqueue { connection, .. }
            | ActionSpec::PartitionKeys { connection, .. }
            | ActionSpec::Export { connection, .. } => uses.push(ConnectionUse {
                field: "action.connection",
                name: connection,
                access: writes(true),
            }),
            ActionSpec::Count | ActionSpec::Delete | ActionSpec::Update { .. } => {}
        }
        uses
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn uses(body: &str) -> Vec<(&'static str, String, Access)> {
        let spec =
            ScanSpec::parse_unresolved_at(body, None, time::OffsetDateTime::now_utc()).unwrap();
        spec.connection_uses()
            .into_iter()
            .map(|u| (u.field, u.name.to_string(), u.access))
            .collect()
    }

    #[test]
    fn destructive_actions_and_targets_write_and_everything_else_reads() {
        use Access::{Read, Write};
        let web = || "AzureWebJobsStorage".to_string();
        assert_eq!(
            uses(r#"{"table":"tab1","action":{"type":"count"}}"#),
            [("connection", web(), Read)]
        );
        for action in [r#"{"type":"delete"}"#, r#"{"type":"update","set":{"x":1}}"#] {
            let body = format!(r#"{{"table":"tab1","connection":"A","action":{action}}}"#);
            assert_eq!(uses(&body), [("connection", "A".into(), Write)], "{body}");
            let dry =
                format!(r#"{{"table":"tab1","connection":"A","dryRun":true,"action":{action}}}"#);
            assert_eq!(uses(&dry), [("connection", "A".into(), Read)], "{dry}");
        }
        for action in [
            r#"{"type":"copy","table":"tab2","connection":"B"}"#,
            r#"{"type":"enqueue","queue":"queue1","connection":"B"}"#,
            r#"{"type":"partition-keys","queue":"queue1","connection":"B"}"#,
            r#"{"type":"export","container":"cont1","connection":"B"}"#,
        ] {
            let body = format!(r#"{{"table":"tab1","connection":"A","action":{action}}}"#);
            assert_eq!(
                uses(&body),
                [
                    ("connection", "A".into(), Read),
                    ("action.connection", "B".into(), Write)
                ],
                "{body}"
            );
        }
        assert_eq!(
            uses(
                r#"{"import":{"container":"cont1","connection":"A"},
                    "action":{"type":"copy","table":"tab2","connection":"B"}}"#
            ),
            [
                ("import.connection", "A".into(), Read),
                ("action.connection", "B".into(), Write)
            ]
        );
        assert_eq!(
            uses(r#"{"import":{"container":"cont1"},"action":{"type":"count"}}"#),
            [("import.connection", web(), Read)]
        );
    }
}
