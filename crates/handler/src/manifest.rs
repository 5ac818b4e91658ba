//! Writing an export's manifest once every step of it is done.
//!
//! The manifest is written by whoever first sees the export complete: the step that finished
//! last, a redelivery of a finished step, or the timer's sweep of the scans in flight (if the
//! step that finished last died before writing it). Writing it twice writes the same thing:
//! the parts come from the ledger's `blob:` rows, which no longer change once every step is
//! done. Its cost grows with the export (one ledger query and one blob write per 1,000 data
//! blobs, once), not with each step or each status read.

use std::collections::HashSet;

use time::OffsetDateTime;

use super::app::AppState;
use tablescan_actions::export::format::sha256_base64;
use tablescan_api::ActionSpec;
use tablescan_ledger::exports::{
    part_text, Layout, Manifest, PartSummary, MANIFEST_FORMAT, MANIFEST_KIND,
};
use tablescan_ledger::ledger::format_time;
use tablescan_ledger::status::awaits_manifest;
use tablescan_ledger::{Ledger, ScanRecord};
use tablescan_storage::ContainerClient;

/// What [`seal`] found or did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sealed {
    /// Not an export waiting for its manifest (another action, a dry run, already written).
    NotWaiting,
    /// Steps are still pending or failed, or the scan was cancelled.
    NotDone,
    Written {
        blobs: u64,
        rows: u64,
    },
}

/// [`seal`], logging what went wrong rather than failing its caller (whose own work is done;
/// the next redelivery or sweep tries again).
pub async fn seal_if_done(state: &AppState, ledger: &Ledger, scan: &str) {
    log_sealed(scan, seal(state, ledger, scan).await);
}

/// [`seal_if_done`] for a scan whose record the caller has read (a step's claim holds it).
pub async fn seal_record_if_done(state: &AppState, ledger: &Ledger, record: &ScanRecord) {
    log_sealed(&record.id, seal_record(state, ledger, record).await);
}

fn log_sealed(scan: &str, sealed: Result<Sealed, String>) {
    match sealed {
        Ok(Sealed::Written { blobs, rows }) => {
            tracing::info!(scan, blobs, rows, "the export's manifest is written")
        }
        Ok(_) => {}
        Err(why) => tracing::warn!(
            scan,
            "the export's manifest could not be written yet: {why}"
        ),
    }
}

/// Writes scan `scan`'s manifest if it is an export whose every step is done.
pub async fn seal(state: &AppState, ledger: &Ledger, scan: &str) -> Result<Sealed, String> {
    match ledger.scan(scan).await {
        Ok(Some(record)) => seal_record(state, ledger, &record).await,
        Ok(None) => Ok(Sealed::NotWaiting),
        Err(e) => Err(format!("the scan could not be read: {e}")),
    }
}

/// [`seal`] for a scan whose record the caller has read.
pub async fn seal_record(
    state: &AppState,
    ledger: &Ledger,
    record: &ScanRecord,
) -> Result<Sealed, String> {
    let scan = record.id.as_str();
    if !awaits_manifest(record) {
        return Ok(Sealed::NotWaiting);
    }
    if record.cancelled_at.is_some() {
        return Ok(Sealed::NotDone);
    }
    let (totals, settled) = ledger
        .consistent_totals(scan)
        .await
        .map_err(|e| format!("the scan's totals could not be read: {e}"))?;
    if !settled || totals.failed_now() > 0 || totals.dropped > 0 {
        return Ok(Sealed::NotDone);
    }
    // The caller's record may predate a cancel (a step reads its scan when it claims its
    // item): a cancel written since drops the items not yet run, and their drops settle the
    // totals as surely as their finishes would. Read the scan again, after the settling read:
    // a manifest only ever describes a whole export.
    let record = match ledger.scan(scan).await {
        Ok(Some(now)) if now.cancelled_at.is_none() => now,
        Ok(_) => return Ok(Sealed::NotDone),
        Err(e) => return Err(format!("the scan could not be read again: {e}")),
    };
    if record.manifest_at.is_some() || record.manifest_trouble.gave_up_at.is_some() {
        return Ok(Sealed::NotWaiting);
    }
    match write(state, ledger, &record).await {
        Ok(sealed) => Ok(sealed),
        Err(why) => {
            // Recorded for the status, and bounded: after the outage window the scan fails
            // with this cause instead of waiting for ever with every step done.
            let window = time::Duration::try_from(state.config.outage_window)
                .unwrap_or(time::Duration::MINUTE * 30);
            match ledger
                .note_manifest_failure(&record, &why, OffsetDateTime::now_utc(), window)
                .await
            {
                Ok(true) => tracing::error!(scan, "gave up writing the export's manifest: {why}"),
                Ok(false) => {}
                Err(e) => tracing::warn!(scan, "could not record the manifest's failure: {e}"),
            }
            Err(why)
        }
    }
}

/// Writes the manifest of `record`, an export whose every step is done.
async fn write(state: &AppState, ledger: &Ledger, record: &ScanRecord) -> Result<Sealed, String> {
    let scan = record.id.as_str();
    super::plan::permitted(state, &record.spec)?;
    let ActionSpec::Export {
        container,
        prefix,
        connection,
        compression,
    } = &record.spec.action
    else {
        return Ok(Sealed::NotWaiting);
    };
    let container = state
        .clients(connection)?
        .blobs()?
        .container(container)
        .map_err(|e| e.to_string())?;
    let layout = Layout { prefix };
    let Parts {
        parts,
        recorded,
        rows,
        bytes,
    } = write_parts(ledger, &container, &layout, scan).await?;
    let now = OffsetDateTime::now_utc();
    let manifest = Manifest {
        kind: MANIFEST_KIND.into(),
        format: MANIFEST_FORMAT,
        complete: true,
        scan: scan.to_string(),
        spec: record.spec.clone(),
        table: record.spec.table.clone(),
        compression: *compression,
        rows,
        blobs: recorded.len() as u64,
        bytes,
        parts,
        started_at: format_time(record.started_at.unwrap_or(record.created_at)),
        written_at: format_time(now),
    };
    let text = serde_json::to_vec_pretty(&manifest).map_err(|e| e.to_string())?;
    container
        .put(&layout.manifest(), text, "application/json")
        .await
        .map_err(|e| format!("the manifest could not be written: {e}"))?;
    delete_unrecorded(&container, &layout, scan, &recorded).await;
    ledger
        .mark_manifest_written(scan, now)
        .await
        .map_err(|e| format!("the manifest was written but not recorded: {e}"))?;
    Ok(Sealed::Written {
        blobs: manifest.blobs,
        rows,
    })
}

/// The manifest's parts as written, and what they list.
struct Parts {
    parts: Vec<PartSummary>,
    /// The names of the data blobs the parts list.
    recorded: HashSet<String>,
    rows: u64,
    bytes: u64,
}

/// Writes a manifest part for each page of the blobs the ledger recorded for export `scan`.
async fn write_parts(
    ledger: &Ledger,
    container: &ContainerClient,
    layout: &Layout<'_>,
    scan: &str,
) -> Result<Parts, String> {
    let mut parts = Vec::new();
    let mut recorded = HashSet::new();
    let (mut rows, mut bytes) = (0, 0);
    let mut from = None;
    loop {
        let (entries, next) = ledger
            .recorded_blobs(scan, from.as_ref())
            .await
            .map_err(|e| format!("the export's blobs could not be read from the ledger: {e}"))?;
        if !entries.is_empty() {
            // Named by its scan, and checked by the import against its SHA-256 (issue 32).
            let name = layout.part(scan, parts.len() as u32);
            let part_rows = entries.iter().map(|e| e.rows).sum();
            let text = part_text(&entries).into_bytes();
            let sha256 = sha256_base64(&text);
            container
                .put(&name, text, "application/x-ndjson")
                .await
                .map_err(|e| format!("manifest part {name} could not be written: {e}"))?;
            rows += part_rows;
            bytes += entries.iter().map(|e| e.bytes).sum::<u64>();
            parts.push(PartSummary {
                name,
                blobs: entries.len() as u64,
                rows: part_rows,
                sha256: Some(sha256),
            });
            recorded.extend(entries.into_iter().map(|e| e.name));
        }
        match next {
            Some(next) => from = Some(next),
            None => break,
        }
    }
    Ok(Parts {
        parts,
        recorded,
        rows,
        bytes,
    })
}

/// Deletes the data blobs of export `scan` that no part lists: blobs of attempts whose
/// finish was not recorded (a step that crashed after writing, or lost its claim), never read
/// since an import reads the manifest; removed to save space. Failures are only logged.
async fn delete_unrecorded(
    container: &ContainerClient,
    layout: &Layout<'_>,
    scan: &str,
    recorded: &HashSet<String>,
) {
    let data = layout.data_of(scan);
    match container.list_all(&data).await {
        Ok(listed) => {
            for blob in listed.iter().filter(|b| !recorded.contains(&b.name)) {
                match container.delete_blob(&blob.name).await {
                    Ok(()) => tracing::info!(scan, blob = %blob.name, "unrecorded blob deleted"),
                    Err(e) if e.is_not_found() => {}
                    Err(e) => tracing::warn!(scan, "could not delete unrecorded blob: {e}"),
                }
            }
        }
        Err(e) => tracing::warn!(scan, "could not list the export's blobs to tidy: {e}"),
    }
}
