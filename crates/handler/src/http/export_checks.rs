//! What a start checks and makes ready for an export or an import, within seconds, before
//! anything is recorded: the container is reachable with the connection's credentials, an
//! export's prefix is empty (so its manifest lists exactly its own blobs, and tidying after it
//! can touch nothing else), and an import's manifest is there and is a tablescan manifest.

use axum::http::StatusCode;

use super::provision::{account_for, probe_for, refused, within};
use crate::answers::{refusal, HttpError};
use crate::app::AppState;
use crate::guard::Place;
use crate::reach::{Check, Service};
use tablescan_api::ManifestSummary;
use tablescan_api::{ActionSpec, ScanSpec};
use tablescan_ledger::exports::{Layout, Manifest};
use tablescan_storage::{ContainerClient, StorageAccount};

/// Containers the Functions host keeps its own state in, and the app's package (the
/// templates' `app-package`, the portal's `app-package-<app>-<hash>`): never written by an
/// export.
const HOST_CONTAINER_PREFIXES: [&str; 3] = ["azure-webjobs-", "scm-releases", "app-package"];

/// The container `name` of connection `setting`, and its account, for checks; refusals name
/// `field` (the connection's) and `container_field`.
fn container(
    state: &AppState,
    setting: &str,
    field: &str,
    name: &str,
    container_field: &str,
) -> Result<(ContainerClient, StorageAccount), HttpError> {
    let bad = |field: &str, why: String| refusal(StatusCode::BAD_REQUEST, Some(field), why);
    let account = account_for(state, setting, field)?;
    let client = probe_for(state, setting, field)?
        .blobs()
        .map_err(|e| bad(field, e))?
        .container(name)
        .map_err(|e| bad(container_field, e.to_string()))?;
    Ok((client, account))
}

/// Creates an export's container (not in a dry run) and checks that its prefix holds nothing
/// but what this scan wrote (a start retried with the same idempotency key finds its own).
pub(super) async fn prepare_export(
    state: &AppState,
    spec: &ScanSpec,
    scan: &str,
) -> Result<(), HttpError> {
    let ActionSpec::Export {
        container: name,
        prefix,
        connection,
        ..
    } = &spec.action
    else {
        return Ok(());
    };
    if HOST_CONTAINER_PREFIXES.iter().any(|p| name.starts_with(p)) {
        return Err(refusal(
            StatusCode::BAD_REQUEST,
            Some("action.container"),
            format!(
                "{name:?} is where the Functions host keeps its own state or the app's \
                 package; export into a container of your own"
            ),
        ));
    }
    let field = "action.connection";
    let (container, account) = container(state, connection, field, name, "action.container")?;
    let check = Check {
        setting: connection,
        field,
        service: Service::Blob,
        account: &account,
    };
    if !spec.dry_run {
        let what = format!("creating the container {name:?}");
        within(&check, &what, container.create(true))
            .await?
            .map_err(|e| refused(&check, &what, &e))?;
    }
    let what = format!("listing the container {name:?}");
    let listed = match within(&check, &what, container.list_page(prefix, None, 1)).await? {
        Ok((listed, _)) => listed,
        // A dry run creates nothing: a missing container is fine.
        Err(e) if spec.dry_run && e.is_not_found() => Vec::new(),
        Err(e) => return Err(refused(&check, &what, &e)),
    };
    let layout = Layout { prefix };
    let ours = layout.data_of(scan);
    let foreign = listed.iter().find(|b| !b.name.starts_with(&ours));
    if foreign.is_some() && written_by(&container, &layout, scan).await {
        // A start retried with the same idempotency key after its export finished: the scan
        // it started answers.
        return Ok(());
    }
    if let Some(first) = foreign {
        return Err(refusal(
            StatusCode::BAD_REQUEST,
            Some("action.prefix"),
            format!(
                "blobs already exist under {name}/{prefix} (the first is {:?}); an export \
                 writes into an empty prefix, so that its manifest lists exactly its own blobs: \
                 choose a new one, such as one with today's date",
                first.name
            ),
        ));
    }
    Ok(())
}

/// Whether the manifest under `layout` was written by scan `scan`.
async fn written_by(container: &ContainerClient, layout: &Layout<'_>, scan: &str) -> bool {
    match container.get(&layout.manifest()).await {
        Ok(bytes) => Manifest::parse(&bytes).is_ok_and(|manifest| manifest.scan == scan),
        Err(_) => false,
    }
}

/// Reads an import's manifest and records what it says in the spec; where the import reads
/// from (for the guard: never the place it writes to).
pub(super) async fn prepare_import(
    state: &AppState,
    spec: &mut ScanSpec,
) -> Result<Place, HttpError> {
    let Some(import) = &spec.import else {
        return Err(refusal(StatusCode::BAD_REQUEST, Some("import"), "missing"));
    };
    let field = "import.connection";
    let (container, account) = container(
        state,
        &import.connection,
        field,
        &import.container,
        "import.container",
    )?;
    let check = Check {
        setting: &import.connection,
        field,
        service: Service::Blob,
        account: &account,
    };
    let name = Layout {
        prefix: &import.prefix,
    }
    .manifest();
    let what = "reading the export's manifest";
    let text = match within(&check, what, container.get(&name)).await? {
        Ok(text) => text,
        Err(e) if e.is_not_found() => {
            return Err(refusal(
                StatusCode::BAD_REQUEST,
                Some("import.prefix"),
                format!(
                    "there is no export at {}/{}: {name} does not exist (an export writes \
                     its manifest when it succeeds; is it finished?)",
                    import.container, import.prefix
                ),
            ))
        }
        Err(e) => return Err(refused(&check, what, &e)),
    };
    let manifest = Manifest::parse(&text).map_err(|why| {
        refusal(
            StatusCode::BAD_REQUEST,
            Some("import.prefix"),
            format!(
                "{}/{name} cannot be read as a manifest: {why}",
                import.container
            ),
        )
    })?;
    let source = Place::new(
        Service::Blob,
        account.blob_endpoint().map_or("", |e| e.as_str()),
        &import.container,
    );
    spec.table = manifest.table.clone();
    if let Some(import) = &mut spec.import {
        import.manifest = Some(ManifestSummary {
            table: manifest.table,
            scan: manifest.scan,
            rows: manifest.rows,
            blobs: manifest.blobs,
            parts: manifest.parts.len() as u32,
            compression: manifest.compression,
        });
    }
    Ok(source)
}
