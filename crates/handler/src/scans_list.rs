//! `GET /api/scans`: its query (a page's size and place, and filters) and what it shows of
//! each scan. A page reads `limit` entries of the scans index, newest first, and the filters
//! keep those that match: a filtered page costs what an unfiltered one does and may hold fewer
//! scans (even none) while `next` says there are more to look at.

use axum::http::StatusCode;
use serde::Deserialize;

use crate::answers::{refusal, HttpError};
use crate::protocol::HttpRequest;
use tablescan_api::answers::{ActionShown, ImportShown, ListEntry, SetShown};
use tablescan_api::{ActionKind, ActionSpec, ScanSpec};
use tablescan_ledger::status::spec_as_requested;
use tablescan_ledger::{ScanStatus, State};
use tablescan_storage::names::validate_table_name;

/// The query parameters of `GET /api/scans`.
pub(super) struct ListQuery {
    pub limit: u16,
    pub after: Option<String>,
    state: Option<State>,
    action: Option<String>,
    table: Option<String>,
}

impl ListQuery {
    pub fn parse(req: &HttpRequest) -> Result<Self, HttpError> {
        let bad = |field: &str, why: &str| refusal(StatusCode::BAD_REQUEST, Some(field), why);
        let given = |name: &str| req.query_param(name).filter(|text| !text.is_empty());
        let limit = match given("limit") {
            None => 20,
            Some(text) => text
                .parse::<u16>()
                .ok()
                .filter(|n| (1..=100).contains(n))
                .ok_or_else(|| bad("limit", "must be a whole number from 1 to 100"))?,
        };
        let after = match given("after") {
            None => None,
            Some(text)
                if text.len() <= 60
                    && text.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-') =>
            {
                Some(text.to_string())
            }
            Some(_) => return Err(bad("after", "must be the `next` value of an earlier page")),
        };
        let state = match given("state") {
            None => None,
            Some(text) => Some(State::named(&text.to_ascii_lowercase()).ok_or_else(|| {
                bad(
                    "state",
                    "must be pending, running, succeeded, failed, cancelling, cancelled, pausing or paused",
                )
            })?),
        };
        let action = match given("action") {
            None => None,
            Some(text) => match ActionKind::named(&text.to_ascii_lowercase()) {
                Some(action) => Some(action.name().to_string()),
                None => {
                    let names = ActionKind::ALL.map(ActionKind::name).join(", ");
                    return Err(bad("action", &format!("must be one of {names}")));
                }
            },
        };
        let table = match given("table") {
            None => None,
            Some(text) => {
                validate_table_name(text).map_err(|e| bad("table", &e.to_string()))?;
                Some(text.to_string())
            }
        };
        Ok(ListQuery {
            limit,
            after,
            state,
            action,
            table,
        })
    }

    /// Whether the page shows `status`: it matches every filter given.
    pub fn keeps(&self, status: &ScanStatus) -> bool {
        let spec = &status.spec;
        let state = self.state.is_none_or(|wanted| wanted == status.state);
        let action = self
            .action
            .as_deref()
            .is_none_or(|wanted| wanted == action_type(&spec.action));
        let table = self.table.as_deref().is_none_or(|wanted| {
            let source = spec.import.is_none() && spec.table.eq_ignore_ascii_case(wanted);
            let target = matches!(&spec.action, ActionSpec::Copy { table, .. }
                if table.eq_ignore_ascii_case(wanted));
            source || target
        });
        state && action && table
    }
}

/// `copy`, `partition-keys`...: the action's `type` in a request.
fn action_type(action: &ActionSpec) -> &'static str {
    match action {
        ActionSpec::Count => "count",
        ActionSpec::Copy { .. } => "copy",
        ActionSpec::Enqueue { .. } => "enqueue",
        ActionSpec::Delete => "delete",
        ActionSpec::Update { .. } => "update",
        ActionSpec::PartitionKeys { .. } => "partition-keys",
        ActionSpec::Export { .. } => "export",
    }
}

/// What the list shows of a scan: its state, what it reads and what its action touches (the
/// action's fields as a request names them, an update's properties by name only), whether it
/// is a dry run, and its main counts.
pub(super) fn entry(status: &ScanStatus) -> ListEntry {
    let spec = &status.spec;
    ListEntry {
        id: status.id.clone(),
        state: status.state,
        table: spec.table.clone(),
        connection: spec.connection.clone(),
        action: action_type(&spec.action).to_string(),
        target: target(spec),
        created_at: status.created_at.clone(),
        started_at: status.started_at.clone(),
        finished_at: status.finished_at.clone(),
        progress: status.progress.clone(),
        status: format!("/api/scans/{}", status.id),
        dry_run: spec.dry_run,
        recent_rows_per_second: recent_rows_per_second(status),
        // What the scan reads, so that an earlier count of the same scope can be found from
        // the list alone (its size gives the time left; see docs/ui.md).
        scope: Some(spec.scope.clone()),
        filter: spec.filter.clone(),
        older_than: spec.older_than.clone(),
        import: spec.import.as_ref().map(|import| ImportShown {
            container: import.container.clone(),
            prefix: import.prefix.clone(),
            connection: import.connection.clone(),
            rows: import.manifest.as_ref().map(|manifest| manifest.rows),
            manifest: None,
        }),
    }
}

/// The action's fields as a request names them (`spec_as_requested`), without its type, an
/// update's `set` by the properties' names.
fn target(spec: &ScanSpec) -> ActionShown {
    let requested = spec_as_requested(spec);
    let mut target = ActionShown::deserialize(&requested["action"]).unwrap_or_default();
    target.kind = None;
    if let Some(set) = &target.set {
        let names = set.names().into_iter().map(str::to_string).collect();
        target.set = Some(SetShown::Names(names));
    }
    target
}

/// In flight: rows read per second over the last 20 seconds or so (steps record their rows
/// when they finish, up to 15 s apart), from the history the status read has already
/// (`ledger::history`).
fn recent_rows_per_second(status: &ScanStatus) -> Option<f64> {
    let (Some(history), true) = (&status.history, status.finished_at.is_none()) else {
        return None;
    };
    let began = status.started_at.as_deref().unwrap_or(&status.created_at);
    let began = tablescan_storage::table::entity::EdmDateTime::parse(began)?;
    let elapsed = (time::OffsetDateTime::now_utc() - began.time()).as_seconds_f64();
    Some(history.recent_rows_per_second(elapsed, 20.0).unwrap_or(0.0))
}

#[cfg(test)]
#[path = "scans_list_tests.rs"]
mod tests;
