//! The steps of an import: reading an export's manifest parts and data blobs.
//!
//! An import's first item reads part 0 of the manifest and makes a work item of each blob it
//! lists (a few hundred per step, the rest handed on, then the next part). A blob's item reads
//! the blob, checks it against the manifest's size and SHA-256 before acting on any row, and
//! gives its rows, a chunk at a time, to the scan's action (the copy planner, paced like any
//! copy). A step that runs out of time hands the rest of its blob on as an item that resumes at
//! a chunk's first byte with a range read. A blob that is missing, damaged or not the one the
//! export wrote fails its item alone, for good, naming the blob; the rest of the import goes on.

use super::{ActionSink, FailureKind, StepDone, StepFailure};
use crate::app::AppState;
use crate::config::STORAGE_DEADLINE_BUDGETS;
use crate::pacing::StepPace;
use crate::plan::action_for;
use tablescan_actions::export::format::{next_chunk, parse_line, sha256_base64, Compression};
use tablescan_actions::{ActionCounts, RowFailure};
use tablescan_api::{ImportSource, ManifestSummary};
use tablescan_engine::{Clock, RowSink, SystemClock};
use tablescan_ledger::exports::{parse_part, BlobEntry, Layout, Manifest, PartSummary};
use tablescan_ledger::notes::{NotedRow, RowNotes};
use tablescan_ledger::{ImportTask, ScanRecord, StepCounts, WorkItem};
use tablescan_storage::{ContainerClient, StorageError};

/// How many blob items one step of a manifest part makes (the rest is handed on).
pub const BLOBS_PER_STEP: usize = 250;

/// Runs a step of an import's work item, `item`, whose task is `task`.
pub(super) async fn run(
    state: &AppState,
    item: &WorkItem,
    task: &ImportTask,
    scan: &ScanRecord,
    lost: &std::sync::atomic::AtomicBool,
    pace: &StepPace,
) -> Result<StepDone, StepFailure> {
    let Some(import) = &scan.spec.import else {
        return Err(StepFailure::permanent(
            "the work item belongs to an import, and its scan is not one".into(),
        ));
    };
    // Before the import's container is read (its blob steps check again in `action_for`).
    crate::plan::permitted(state, &scan.spec).map_err(StepFailure::permanent)?;
    let Some(manifest) = &import.manifest else {
        return Err(StepFailure::permanent(
            "the import's manifest was not read when it started".into(),
        ));
    };
    let container = state
        .clients(&import.connection)
        .and_then(|c| c.blobs().cloned())
        .and_then(|blobs| {
            blobs
                .container(&import.container)
                .map_err(|e| e.to_string())
        })
        .map_err(StepFailure::permanent)?;
    let started = std::time::Instant::now();
    let done = match task {
        ImportTask::ExportPart { part, from } => {
            run_part(item, import, manifest, &container, *part, *from).await?
        }
        ImportTask::ExportBlob {
            name,
            bytes,
            sha256,
            offset,
            skip,
        } => {
            let read = BlobRead {
                state,
                item,
                scan,
                lost,
                pace,
                container: &container,
                compression: crate::plan::compression(manifest.compression),
            };
            read.run(name, *bytes, sha256, *offset, *skip).await?
        }
    };
    Ok(StepDone {
        counts: StepCounts {
            duration_ms: started.elapsed().as_millis() as u64,
            ..done.counts
        },
        ..done
    })
}

/// A failure to read a blob: missing or refused for good, anything else to be tried again.
fn blob_failure(what: &str, error: StorageError) -> StepFailure {
    let kind = if error.is_transient() {
        FailureKind::Transient
    } else {
        FailureKind::Permanent
    };
    let message = if error.is_not_found() {
        format!("{what} is missing: the export is incomplete or was moved ({error})")
    } else {
        format!("{what} could not be read: {error}")
    };
    StepFailure::new(kind, message)
}

/// Makes work items of up to [`BLOBS_PER_STEP`] of the blobs part `part` lists, from the
/// `from`-th, and one more item for what is left of the part (or for the next part).
async fn run_part(
    item: &WorkItem,
    import: &ImportSource,
    manifest: &ManifestSummary,
    container: &ContainerClient,
    part: u32,
    from: u32,
) -> Result<StepDone, StepFailure> {
    // An export of no rows has no parts: nothing to import.
    let follow_ups = if part >= manifest.parts {
        Vec::new()
    } else {
        let entries = read_part(import, manifest, container, part).await?;
        part_follow_ups(item, &entries, part, from, manifest.parts)
    };
    Ok(StepDone {
        counts: StepCounts::default(),
        notes: RowNotes::default(),
        blob: None,
        follow_ups,
        room: 0,
    })
}

/// The blobs part `part` of the export's manifest lists. The part is the one the manifest
/// names, checked against the SHA-256 the manifest recorded, and every blob it lists must be
/// the export's own: a part another export into the same prefix wrote is refused, never
/// imported.
async fn read_part(
    import: &ImportSource,
    manifest: &ManifestSummary,
    container: &ContainerClient,
    part: u32,
) -> Result<Vec<BlobEntry>, StepFailure> {
    let layout = Layout {
        prefix: &import.prefix,
    };
    let described = manifest_part(import, manifest, container, part).await?;
    let name = described.name;
    let what = format!("manifest part {}/{name}", import.container);
    if !name.starts_with(&layout.parts()) {
        return Err(StepFailure::permanent(format!(
            "{what} is not under the export's prefix ({}); the manifest was edited",
            layout.parts()
        )));
    }
    let text = container
        .get(&name)
        .await
        .map_err(|e| blob_failure(&what, e))?;
    if let Some(expected) = &described.sha256 {
        if sha256_base64(&text) != *expected {
            return Err(StepFailure::permanent(format!(
                "{what} is not the part its manifest describes: its SHA-256 is not the one the \
                 manifest recorded (it was changed or replaced since the export wrote it)"
            )));
        }
    }
    let entries = parse_part(&text)
        .map_err(|why| StepFailure::permanent(format!("{what} cannot be read: {why}")))?;
    let own = layout.data_of(&manifest.scan);
    if let Some(foreign) = entries.iter().find(|entry| !entry.name.starts_with(&own)) {
        return Err(StepFailure::permanent(format!(
            "{what} lists {}, which is not a blob of export {} (its blobs are under {own}): \
             another export wrote into the same prefix",
            foreign.name, manifest.scan
        )));
    }
    Ok(entries)
}

/// The work items of a step over part `part` (of `parts`) listing `entries`: one for each of
/// up to [`BLOBS_PER_STEP`] blobs from the `from`-th, then one for the rest of the part, or
/// for the next part when this one is done.
fn part_follow_ups(
    item: &WorkItem,
    entries: &[BlobEntry],
    part: u32,
    from: u32,
    parts: u32,
) -> Vec<WorkItem> {
    let start = (from as usize).min(entries.len());
    let end = (start + BLOBS_PER_STEP).min(entries.len());
    let mut follow_ups: Vec<WorkItem> = entries[start..end]
        .iter()
        .map(|entry| {
            item.follow_up(ImportTask::ExportBlob {
                name: entry.name.clone(),
                bytes: entry.bytes,
                sha256: entry.sha256.clone(),
                offset: 0,
                skip: 0,
            })
        })
        .collect();
    if end < entries.len() {
        follow_ups.push(item.follow_up(ImportTask::ExportPart {
            part,
            from: end as u32,
        }));
    } else if part + 1 < parts {
        follow_ups.push(item.follow_up(ImportTask::ExportPart {
            part: part + 1,
            from: 0,
        }));
    }
    follow_ups
}

/// Part `part` as the export's manifest describes it (its name, and its SHA-256 when the
/// manifest recorded one). The manifest is read again, one small blob per part step: the
/// import's spec keeps only its summary. It must still be the manifest the import started
/// from: one written since by another export into the same prefix is refused.
async fn manifest_part(
    import: &ImportSource,
    manifest: &ManifestSummary,
    container: &ContainerClient,
    part: u32,
) -> Result<PartSummary, StepFailure> {
    let name = Layout {
        prefix: &import.prefix,
    }
    .manifest();
    let what = format!("the manifest {}/{name}", import.container);
    let bytes = container
        .get(&name)
        .await
        .map_err(|e| blob_failure(&what, e))?;
    let read = Manifest::parse(&bytes)
        .map_err(|why| StepFailure::permanent(format!("{what} cannot be read: {why}")))?;
    if read.scan != manifest.scan {
        return Err(StepFailure::permanent(format!(
            "{what} was replaced since the import started: it describes export {} now, not {}",
            read.scan, manifest.scan
        )));
    }
    read.parts
        .into_iter()
        .nth(part as usize)
        .ok_or_else(|| StepFailure::permanent(format!("{what} lists no part {part}")))
}

/// What a step over a blob did: its sink's counts and notes, the rows it read, and the item
/// that reads the rest of the blob, if any.
fn blob_step_done(sink: ActionSink<'_>, rows_read: u64, follow_ups: Vec<WorkItem>) -> StepDone {
    let ActionCounts {
        acted,
        skipped,
        failed,
    } = sink.counts;
    StepDone {
        counts: StepCounts {
            rows_read,
            rows_acted: acted,
            rows_skipped: skipped,
            rows_failed: failed,
            ..StepCounts::default()
        },
        notes: sink.notes,
        blob: None,
        follow_ups,
        room: 0,
    }
}

/// One step over a data blob.
struct BlobRead<'a> {
    state: &'a AppState,
    item: &'a WorkItem,
    scan: &'a ScanRecord,
    lost: &'a std::sync::atomic::AtomicBool,
    /// The step's place in its scan's pace (admitted before the item was claimed).
    pace: &'a StepPace,
    container: &'a ContainerClient,
    compression: Compression,
}

impl BlobRead<'_> {
    /// Acts on the rows of blob `name` (of `bytes` bytes with SHA-256 `sha256`, as the manifest
    /// recorded it) from byte `offset` on, less the first `skip` rows of the chunk there.
    async fn run(
        &self,
        name: &str,
        bytes: u64,
        sha256: &str,
        offset: u64,
        skip: u32,
    ) -> Result<StepDone, StepFailure> {
        let what = format!("blob {}/{name}", self.container.name());
        let data = self.read(&what, name, bytes, sha256, offset).await?;
        let clock = SystemClock::default();
        let mut sink = self.sink(clock)?;
        let (rows_read, rest) = self
            .act_on_chunks(&mut sink, clock, &what, &data, offset, skip as usize)
            .await?;
        let follow_ups = match rest {
            Some((at, skip)) if !sink.cancelled => {
                vec![self.item.follow_up(ImportTask::ExportBlob {
                    name: name.to_string(),
                    bytes,
                    sha256: sha256.to_string(),
                    offset: offset + at as u64,
                    skip: skip as u32,
                })]
            }
            _ => Vec::new(),
        };
        Ok(blob_step_done(sink, rows_read, follow_ups))
    }

    /// Where the blob's rows go: the scan's action, on the step's clock and in its pace.
    fn sink(&self, clock: SystemClock) -> Result<ActionSink<'_>, StepFailure> {
        let spec = &self.scan.spec;
        let action = action_for(self.state, spec).map_err(StepFailure::permanent)?;
        Ok(ActionSink::new(
            action,
            spec.dry_run,
            clock,
            self.state,
            &self.item.scan,
            self.lost,
            self.pace,
        ))
    }

    /// Acts on the rows of `data` (the blob from byte `offset` on) a chunk at a time, less the
    /// first `skip` rows of the first chunk, until the data ends, the step's time is up, the
    /// action stops short or the scan is cancelled or paused. The rows this step read, and
    /// where the rest starts if it did not finish: a byte of `data`, and how many rows of the
    /// chunk there an earlier step (or this one) finished.
    async fn act_on_chunks(
        &self,
        sink: &mut ActionSink<'_>,
        clock: SystemClock,
        what: &str,
        data: &[u8],
        offset: u64,
        mut skip: usize,
    ) -> Result<(u64, Option<(usize, usize)>), StepFailure> {
        let budget = self.state.config.budget;
        let deadline = budget.action_deadline();
        let storage_deadline =
            tokio::time::Instant::now() + budget.max_duration * STORAGE_DEADLINE_BUDGETS;
        let mut rows_read = 0u64;
        let mut at = 0usize;
        loop {
            if clock.now() >= budget.max_duration && rows_read > 0 {
                return Ok((rows_read, Some((at, skip))));
            }
            let here = offset + at as u64;
            let chunk = match next_chunk(&data[at..], here, self.compression) {
                Ok(Some(chunk)) => chunk,
                Ok(None) => return Ok((rows_read, None)),
                Err(e) => return Err(StepFailure::permanent(format!("{what} is damaged: {e}"))),
            };
            let (rows, bad) = parse_rows(&chunk.text, here);
            if skip == 0 {
                rows_read += bad.len() as u64;
                sink.note_failures(bad);
            }
            let todo: Vec<_> = rows.into_iter().skip(skip).collect();
            let count = todo.len();
            let finished =
                tablescan_storage::deadline::within(storage_deadline, sink.accept(todo, deadline))
                    .await
                    .map_err(|e| {
                        StepFailure::from(tablescan_engine::StepError::<StorageError>::Action(e))
                    })?;
            // The rows this step finished: those of the chunk an earlier step finished were
            // counted by it, and those it did not reach are counted by the step that does.
            rows_read += finished.min(count) as u64;
            if sink.cancelled {
                return Ok((rows_read, None));
            }
            if finished < count {
                return Ok((rows_read, Some((at, skip + finished))));
            }
            at += chunk.length;
            skip = 0;
            if sink.stopping() && at < data.len() {
                // Paused: a chunk of one row is not cut; the step stops after it.
                return Ok((rows_read, Some((at, 0))));
            }
        }
    }

    /// The blob from `offset` to its end. Read whole, it must be the blob the manifest
    /// describes (its size and SHA-256), checked before any row is acted on; read from a
    /// chunk on, each chunk's own CRC checks it.
    async fn read(
        &self,
        what: &str,
        name: &str,
        bytes: u64,
        sha256: &str,
        offset: u64,
    ) -> Result<Vec<u8>, StepFailure> {
        let data = if offset == 0 {
            self.container.get(name).await
        } else {
            self.container
                .get_range(name, offset, bytes.saturating_sub(offset))
                .await
        }
        .map_err(|e| blob_failure(what, e))?;
        let expected = bytes.saturating_sub(offset);
        if data.len() as u64 != expected {
            return Err(StepFailure::permanent(format!(
                "{what} is not the blob the export wrote: {} bytes from byte {offset} where the \
                 manifest says {expected} (it was changed or replaced since)",
                data.len()
            )));
        }
        if offset == 0 && sha256_base64(&data) != sha256 {
            return Err(StepFailure::permanent(format!(
                "{what} is damaged: its SHA-256 is not the one the manifest recorded (its size \
                 is right; some of its bytes changed since the export wrote it)"
            )));
        }
        Ok(data)
    }
}

/// The rows of a chunk's lines, and the lines that are not rows (each reported with where it
/// is, as its keys cannot be read).
fn parse_rows(
    text: &str,
    chunk_offset: u64,
) -> (
    Vec<tablescan_storage::table::entity::Entity>,
    Vec<RowFailure>,
) {
    let mut rows = Vec::new();
    let mut bad = Vec::new();
    for (n, line) in text.lines().enumerate().filter(|(_, l)| !l.is_empty()) {
        match parse_line(line) {
            Ok(row) => rows.push(row),
            Err(why) => bad.push(RowFailure::new(
                "",
                "",
                format!("line {} of the chunk at byte {chunk_offset}: {why}", n + 1),
            )),
        }
    }
    (rows, bad)
}

impl ActionSink<'_> {
    /// Counts and notes rows that could not be read.
    fn note_failures(&mut self, failures: Vec<RowFailure>) {
        self.counts.failed += failures.len() as u64;
        let room = tablescan_actions::FAILURES_KEPT.saturating_sub(self.notes.failed.len());
        self.notes
            .failed
            .extend(failures.into_iter().take(room).map(|f| NotedRow {
                partition_key: f.partition_key,
                row_key: f.row_key,
                reason: Some(f.reason),
            }));
    }
}
