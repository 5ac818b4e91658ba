//! What a start checks and makes ready before it records a scan: the ledger table, the source
//! table (there, and readable with the setting's credentials), the target the action writes
//! to, each account check within seconds (`functions::reach`), and nothing protected written
//! (`functions::guard`).

use axum::http::StatusCode;

use crate::answers::{refusal, HttpError};
use crate::app::AppState;
use crate::guard::{self, Place, Protected, Touches};
use crate::names;
use crate::reach::{self, Check, Service};
use tablescan_api::{ActionSpec, ScanSpec};
use tablescan_storage::table::query::Query;
use tablescan_storage::TableServiceClient;

/// Refuses a scan that would write to the app's own storage or copy a table onto itself
/// (`functions::guard`), before anything is created.
fn guard(
    state: &AppState,
    spec: &ScanSpec,
    source: Place,
    ledger_tables: &TableServiceClient,
    ledger_table: &str,
) -> Result<(), HttpError> {
    let unavailable = |e: String| refusal(StatusCode::SERVICE_UNAVAILABLE, None, e);
    let app = state
        .clients(names::STORAGE_CONNECTION)
        .map_err(unavailable)?;
    let app_queues = app.queues().map_err(unavailable)?;
    let protected = Protected {
        ledger: Place::new(Service::Table, ledger_tables.endpoint(), ledger_table),
        // The queues the app's function.json files name (renamed ones too), and the built-in
        // names in case a file could not be read.
        work_queues: [
            state.item_queues.range.as_str(),
            state.item_queues.partition.as_str(),
            state.item_queues.export.as_str(),
            names::RANGE_QUEUE,
            names::PARTITION_QUEUE,
            names::EXPORT_QUEUE,
        ]
        .map(|queue| Place::new(Service::Queue, app_queues.endpoint(), queue))
        .to_vec(),
    };
    let not_usable = |e: String| refusal(StatusCode::BAD_REQUEST, Some("action.connection"), e);
    let target = |connection: &str| state.clients(connection).map_err(not_usable);
    let (target_table, target_queues) = match &spec.action {
        ActionSpec::Copy {
            table, connection, ..
        } => {
            let target = target(connection)?;
            let tables = target.tables().map_err(not_usable)?;
            (
                Some(Place::new(Service::Table, tables.endpoint(), table)),
                Vec::new(),
            )
        }
        ActionSpec::Enqueue { connection, .. } | ActionSpec::PartitionKeys { connection, .. } => {
            let target = target(connection)?;
            let endpoint = target.queues().map_err(not_usable)?.endpoint();
            let places = spec
                .action
                .target_queues()
                .iter()
                .map(|queue| Place::new(Service::Queue, endpoint, queue))
                .collect();
            (None, places)
        }
        ActionSpec::Count
        | ActionSpec::Delete
        | ActionSpec::Update { .. }
        | ActionSpec::Export { .. } => (None, Vec::new()),
    };
    let touches = Touches {
        source,
        target_table,
        target_queues,
    };
    guard::check(spec, &touches, &protected).map_err(|refused| {
        refusal(
            StatusCode::BAD_REQUEST,
            Some(refused.field),
            refused.message,
        )
    })
}

/// Makes ready what a scan needs before its first step: the ledger table, and the target it
/// writes to (not in a dry run). Checks on the way, within seconds (`functions::reach`), that
/// the source table exists and its account takes the setting's credentials, that the target's
/// account does, and that nothing the scan writes is protected (`functions::guard`).
pub(super) async fn prepare(
    state: &AppState,
    spec: &mut ScanSpec,
    id: &str,
) -> Result<(), HttpError> {
    let unavailable = |what: String| refusal(StatusCode::SERVICE_UNAVAILABLE, None, what);
    let ledger = state.ledger().map_err(unavailable)?;
    let ledger_account = state
        .clients(&state.config.ledger_connection)
        .map_err(unavailable)?;
    let ledger_tables = ledger_account.tables().map_err(unavailable)?;
    ledger_tables
        .create_table(ledger.table().name(), true)
        .await
        .map_err(|e| unavailable(format!("the scan ledger table could not be created: {e}")))?;
    let account = |setting: &str, field: &str| account_for(state, setting, field);
    let probe = |setting: &str, field: &str| probe_for(state, setting, field);
    if spec.import.is_some() {
        let source = super::export_checks::prepare_import(state, spec).await?;
        guard(state, spec, source, ledger_tables, ledger.table().name())?;
        return prepare_target(state, spec, id).await;
    }
    let source_account = account(&spec.connection, "connection")?;
    let source = probe(&spec.connection, "connection")?;
    let source = source
        .tables()
        .map_err(|e| refusal(StatusCode::BAD_REQUEST, Some("connection"), e))?;
    let table = source
        .table(&spec.table)
        .map_err(|e| refusal(StatusCode::BAD_REQUEST, Some("table"), e.to_string()))?;
    let check = Check {
        setting: &spec.connection,
        field: "connection",
        service: Service::Table,
        account: &source_account,
    };
    let what = "reading the source table";
    match within(&check, what, table.query_page(&first_key(), None)).await? {
        Ok(_) => {}
        Err(e) if e.is_not_found() => {
            return Err(refusal(
                StatusCode::BAD_REQUEST,
                Some("table"),
                format!(
                    "table {:?} does not exist in the account of {:?}",
                    spec.table, spec.connection
                ),
            ))
        }
        Err(e) => return Err(refused(&check, what, &e)),
    }
    let source = Place::new(Service::Table, source.endpoint(), &spec.table);
    guard(state, spec, source, ledger_tables, ledger.table().name())?;
    prepare_target(state, spec, id).await
}

/// Makes ready, or checks in a dry run, what the scan's action writes to.
async fn prepare_target(state: &AppState, spec: &ScanSpec, id: &str) -> Result<(), HttpError> {
    match &spec.action {
        ActionSpec::Copy {
            table, connection, ..
        } => prepare_target_table(state, spec, table, connection).await,
        ActionSpec::Enqueue { connection, .. } | ActionSpec::PartitionKeys { connection, .. } => {
            prepare_target_queues(state, spec, connection).await
        }
        ActionSpec::Export { .. } => super::export_checks::prepare_export(state, spec, id).await,
        ActionSpec::Count | ActionSpec::Delete | ActionSpec::Update { .. } => Ok(()),
    }
}

/// A copy's target table: created, or in a dry run (which writes nothing, and so creates no
/// target either) read if it is there.
async fn prepare_target_table(
    state: &AppState,
    spec: &ScanSpec,
    table: &str,
    connection: &str,
) -> Result<(), HttpError> {
    let target_account = account_for(state, connection, "action.connection")?;
    let target = probe_for(state, connection, "action.connection")?;
    let target = target
        .tables()
        .map_err(|e| refusal(StatusCode::BAD_REQUEST, Some("action.connection"), e))?
        .table(table)
        .map_err(|e| refusal(StatusCode::BAD_REQUEST, Some("action.table"), e.to_string()))?;
    let check = Check {
        setting: connection,
        field: "action.connection",
        service: Service::Table,
        account: &target_account,
    };
    if spec.dry_run {
        // A dry run writes nothing, and so creates no target either; a missing one is fine.
        let what = "reading the target table";
        match within(&check, what, target.query_page(&first_key(), None)).await? {
            Err(e) if !e.is_not_found() => return Err(refused(&check, what, &e)),
            _ => {}
        }
    } else {
        let what = "creating the target table";
        within(&check, what, target.create_if_missing())
            .await?
            .map_err(|e| refused(&check, what, &e))?;
    }
    Ok(())
}

/// An enqueue's queues (or a partition-keys action's queue): created, or in a dry run counted
/// if they are there.
async fn prepare_target_queues(
    state: &AppState,
    spec: &ScanSpec,
    connection: &str,
) -> Result<(), HttpError> {
    let target_account = account_for(state, connection, "action.connection")?;
    let target = probe_for(state, connection, "action.connection")?;
    let target = target
        .queues()
        .map_err(|e| refusal(StatusCode::BAD_REQUEST, Some("action.connection"), e))?;
    let check = Check {
        setting: connection,
        field: "action.connection",
        service: Service::Queue,
        account: &target_account,
    };
    for name in spec.action.target_queues() {
        let queue = target
            .queue(name)
            .map_err(|e| refusal(StatusCode::BAD_REQUEST, Some("action.queue"), e.to_string()))?;
        let what = format!("creating the queue {name:?}");
        let checked = if spec.dry_run {
            match within(&check, &what, queue.approximate_count()).await? {
                Err(e) if !e.is_not_found() => Err(e),
                _ => Ok(()),
            }
        } else {
            within(&check, &what, queue.create()).await?.map(drop)
        };
        checked.map_err(|e| refused(&check, &what, &e))?;
    }
    Ok(())
}

/// The account a connection names, or a refusal naming the request's `field`.
pub(crate) fn account_for(
    state: &AppState,
    setting: &str,
    field: &str,
) -> Result<tablescan_storage::StorageAccount, HttpError> {
    state
        .account(setting)
        .map_err(|e| refusal(StatusCode::BAD_REQUEST, Some(field), e))
}

/// Clients for a start's quick checks of a connection, or a refusal naming `field`.
pub(crate) fn probe_for(
    state: &AppState,
    setting: &str,
    field: &str,
) -> Result<crate::app::Clients, HttpError> {
    state
        .probe_clients(setting)
        .map_err(|e| refusal(StatusCode::BAD_REQUEST, Some(field), e))
}

/// A query for one row's keys: the cheapest read that proves a table is there and readable.
fn first_key() -> Query {
    Query::default().top(1).select(Vec::<String>::new())
}

/// Runs one account check within [`reach::CHECK_DEADLINE`]; the refusal when it takes longer.
pub(crate) async fn within<T>(
    check: &Check<'_>,
    what: &str,
    work: impl std::future::Future<Output = Result<T, tablescan_storage::StorageError>>,
) -> Result<Result<T, tablescan_storage::StorageError>, HttpError> {
    tokio::time::timeout(reach::CHECK_DEADLINE, work)
        .await
        .map_err(|_| {
            let (status, message) = reach::timed_out(check, what);
            let field = status.is_client_error().then_some(check.field);
            refusal(status, field, message)
        })
}

/// The answer for a failed account check (see `functions::reach`).
pub(crate) fn refused(
    check: &Check<'_>,
    what: &str,
    error: &tablescan_storage::StorageError,
) -> HttpError {
    let (status, message) = reach::refusal(check, what, error);
    let field = status.is_client_error().then_some(check.field);
    refusal(status, field, message)
}
