//! What the model requires of a scan once it has ended: its state right for what happened to
//! it, and what it did exact.

use std::collections::BTreeSet;

use serde_json::Value;
use tablescan::actions::export::format::{next_chunk, parse_line};
use tablescan::functions::plan::compression;
use tablescan::job::exports::{parse_part, Manifest};
use tablescan::storage::table::query::Query;

use crate::common;
use crate::drive::Drive;
use crate::fixture::{container, ExportFixture, Source, CHILDREN_IN_ONE_TRANSACTION};
use crate::{Case, Damage, Shape};

pub(crate) fn number(status: &Value, path: &[&str]) -> u64 {
    path.iter()
        .fold(status, |v, k| &v[*k])
        .as_u64()
        .unwrap_or(u64::MAX)
}

/// A scan whose state is right for what happened to it: succeeded unless cancelled (and a
/// cancelled scan ends, lost messages or not: the sweep drops what no step holds).
pub(crate) fn check_state(drive: &Drive, status: &Value, may_fail: bool) -> Result<(), String> {
    let state = status["state"].as_str().unwrap_or_default();
    let fine = match state {
        "succeeded" => true,
        "cancelled" => drive.cancel_issued,
        "failed" => may_fail,
        _ => false,
    };
    if !fine {
        return Err(format!("the scan ended {state}"));
    }
    if state == "failed" {
        check_failed(status)?;
    }
    Ok(())
}

/// An import failed only because of the blob the case deleted: one item failed for good, and
/// its cause names that blob as missing (any other failure would be hidden by the retry).
pub(crate) fn check_missing_blob(status: &Value, blob: &str) -> Result<(), String> {
    check_failed(status)?;
    let failed = number(status, &["progress", "stepsFailed"]);
    let error = status["errors"][0]["error"].as_str().unwrap_or_default();
    if failed != 1 || !error.contains(blob) || !error.contains("is missing") {
        return Err(format!(
            "the import with blob {blob} missing failed {failed} steps, the first with {error:?}"
        ));
    }
    Ok(())
}

/// A failed scan names its cause: each failed item's error, and the sentence for the scan.
pub(crate) fn check_failed(status: &Value) -> Result<(), String> {
    let errors = status["errors"].as_array().cloned().unwrap_or_default();
    let named = !errors.is_empty()
        && errors
            .iter()
            .all(|e| !e["error"].as_str().unwrap_or_default().trim().is_empty());
    let because = status["failedBecause"].as_str().unwrap_or_default();
    if !named || because.trim().is_empty() {
        return Err("a failed scan does not name its cause".into());
    }
    Ok(())
}

pub(crate) async fn check_table_scan(
    case: &Case,
    drive: &Drive,
    status: &Value,
    small: &Source,
    target: &str,
    exported: &str,
) -> Result<(), String> {
    check_state(drive, status, false)?;
    let rows = small.keys.len() as u64;
    let read = number(status, &["progress", "rowsRead"]);
    let acted = number(status, &["progress", "rowsActed"]);
    if read > rows || acted > rows {
        return Err(format!("{read} rows read and {acted} acted on, of {rows}"));
    }
    let succeeded = status["state"] == "succeeded";
    if succeeded && (read, acted) != (rows, rows) {
        return Err(format!(
            "succeeded with {read} rows read and {acted} acted on, of {rows}"
        ));
    }
    match case.shape {
        Shape::Count if succeeded => {
            let result = (
                number(status, &["result", "rows"]),
                number(status, &["result", "partitions"]),
            );
            if result != (rows, small.partitions) {
                return Err(format!(
                    "counted {result:?}, the table holds ({rows}, {})",
                    small.partitions
                ));
            }
        }
        Shape::Copy => {
            let table = common::tables().table(target).unwrap();
            let copied = table
                .query_all(&Query::default())
                .await
                .map_err(|e| format!("the target: {e}"))?;
            let keys: BTreeSet<_> = copied
                .iter()
                .map(|r| (r.partition_key.clone(), r.row_key.clone()))
                .collect();
            if !keys.is_subset(&small.keys) || (succeeded && keys != small.keys) {
                return Err(format!(
                    "the copy holds {} rows ({} of the source's {})",
                    copied.len(),
                    keys.intersection(&small.keys).count(),
                    rows
                ));
            }
        }
        Shape::Export => check_export(status, small, exported).await?,
        _ => {}
    }
    Ok(())
}

/// An export's manifest, when there is one, lists every row of the table exactly once (in
/// any state: a cancel that raced the seal may leave a whole export cancelled); a succeeded
/// export has one.
pub(crate) async fn check_export(
    status: &Value,
    small: &Source,
    exported: &str,
) -> Result<(), String> {
    let blobs = container(exported);
    let text = match blobs.get("b/manifest.json").await {
        Ok(text) => text,
        Err(e) if e.is_not_found() => {
            return match status["state"] == "succeeded" {
                true => Err("a succeeded export has no manifest".into()),
                false => Ok(()),
            };
        }
        Err(e) => return Err(format!("the manifest could not be read: {e}")),
    };
    let manifest = Manifest::parse(&text).map_err(|why| format!("the manifest: {why}"))?;
    let mut seen = Vec::new();
    for part in &manifest.parts {
        let part = blobs.get(&part.name).await.map_err(|e| e.to_string())?;
        for entry in parse_part(&part)? {
            let data = blobs.get(&entry.name).await.map_err(|e| e.to_string())?;
            let mut at = 0;
            while let Some(chunk) =
                next_chunk(&data[at..], at as u64, compression(manifest.compression))
                    .map_err(|e| e.to_string())?
            {
                for line in chunk.text.lines() {
                    let row = parse_line(line).map_err(|e| e.to_string())?;
                    seen.push((row.partition_key, row.row_key));
                }
                at += chunk.length;
            }
        }
    }
    let keys: BTreeSet<_> = seen.iter().cloned().collect();
    if !manifest.complete
        || keys != small.keys
        || seen.len() != keys.len()
        || manifest.rows != seen.len() as u64
    {
        return Err(format!(
            "the export ended {} with a manifest of {} rows (complete: {}) listing {} rows, {} \
             distinct, of the table's {}",
            status["state"],
            manifest.rows,
            manifest.complete,
            seen.len(),
            keys.len(),
            small.keys.len()
        ));
    }
    Ok(())
}

/// `most_children`: the most children one step recorded (see
/// [`Drive::most_children_recorded`]).
pub(crate) fn check_import(
    damage: Damage,
    drive: &Drive,
    status: &Value,
    export: &ExportFixture,
    most_children: usize,
) -> Result<(), String> {
    let state = status["state"].as_str().unwrap_or_default();
    let read = number(status, &["progress", "rowsRead"]);
    if read > export.rows {
        return Err(format!("{read} rows read of the export's {}", export.rows));
    }
    match damage {
        Damage::TwiceInFinish | Damage::TwiceAhead | Damage::TwiceAcross
            if !drive.cancel_issued || state == "failed" =>
        {
            // The part's finish is refused the same way at every attempt: the item fails for
            // good with that cause (issue 32 item 4), it does not loop through the poison queue.
            check_state(drive, status, true)?;
            let error = status["errors"][0]["error"].as_str().unwrap_or_default();
            if state != "failed" || !error.contains("finish cannot be recorded") {
                return Err(format!(
                    "a part listing a blob twice ended {state}, error {error:?}"
                ));
            }
            return Ok(());
        }
        _ => check_state(drive, status, false)?,
    }
    if state == "succeeded" {
        let result = number(status, &["result", "rows"]);
        if (result, read) != (export.rows, export.rows) {
            return Err(format!(
                "imported {result} rows ({read} read) of the export's {} in {} blobs",
                export.rows, export.blobs
            ));
        }
        if most_children <= CHILDREN_IN_ONE_TRANSACTION {
            return Err(format!(
                "no step recorded more children than one transaction holds (at most \
                 {most_children})"
            ));
        }
    }
    Ok(())
}
