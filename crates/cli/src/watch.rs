//! Following a scan to its end: a live line redrawn in place on a terminal (indicatif), one
//! plain line every few seconds otherwise (a log, a CI job), and the summary at the end.
//! Ctrl-C stops the watching, never the scan.

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use tablescan_api::answers::{SpecShown, StatusAnswer};

use crate::api::{Answer, Api, ApiError, ListQuery};
use crate::show;

/// How often the status is read while watching: once a second, so the live line's rate and
/// counts move as the scan does. A read of a scan in flight costs at most 5 storage requests
/// and 60 entities (its re-drive look runs at most once a minute per scan, whoever reads), so a
/// watcher spends at most 60 entities a second of the ledger's account, 0.3% of its documented
/// 20,000: polling every 2 s would save little and make the line lag.
const POLL: Duration = Duration::from_secs(1);
/// How often a plain line is printed when the output is not a terminal.
const PLAIN_EVERY: Duration = Duration::from_secs(5);

/// How following a scan ended.
pub enum Followed {
    /// The scan ended; its last status (boxed: a status is large beside the other variant).
    Ended(Box<Answer<StatusAnswer>>),
    /// The user pressed Ctrl-C; the scan goes on.
    Interrupted,
}

/// Reads the scan's status until it ends, showing its progress on stderr. `total` is the
/// scope's size in the unit the scan's progress is counted in (`show::progress_unit`).
pub async fn follow(api: &Api, id: &str, total: Option<u64>) -> Result<Followed, ApiError> {
    let terminal = std::io::stderr().is_terminal();
    let bar = terminal.then(|| {
        let bar = indicatif::ProgressBar::new_spinner();
        bar.set_style(
            indicatif::ProgressStyle::with_template("{spinner} {elapsed:>4} {wide_msg}")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner()),
        );
        bar.enable_steady_tick(Duration::from_millis(120));
        bar
    });
    let mut last_plain: Option<Instant> = None;
    let mut rate = RecentRate::default();
    let outcome = tokio::select! {
        ended = async {
            loop {
                let status = read_status(api, id).await?;
                let recent = rate.observe(show::progress_unit(&status.read).1);
                let line = show::live_line(&status.read, total, recent);
                match &bar {
                    Some(bar) => bar.set_message(line),
                    None => {
                        if last_plain.is_none_or(|at| at.elapsed() >= PLAIN_EVERY) {
                            eprintln!("{id}: {line}");
                            last_plain = Some(Instant::now());
                        }
                    }
                }
                if show::has_ended(&status.read.state) {
                    return Ok::<_, ApiError>(Followed::Ended(Box::new(status)));
                }
                tokio::time::sleep(POLL).await;
            }
        } => ended?,
        _ = tokio::signal::ctrl_c() => Followed::Interrupted,
    };
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    Ok(outcome)
}

/// The rows (or partitions) per second over the last [`RecentRate::WINDOW`], from what the watcher read: the
/// status's own rate is the average since the start, which a scan that ramps up (or slows
/// down) belies, and the time left should follow what it does now.
#[derive(Default)]
struct RecentRate {
    samples: std::collections::VecDeque<(Instant, u64)>,
}

impl RecentRate {
    const WINDOW: Duration = Duration::from_secs(10);

    /// Records `rows` read now; the rate over the window, once it spans two seconds.
    fn observe(&mut self, rows: u64) -> Option<f64> {
        let now = Instant::now();
        self.samples.push_back((now, rows));
        while self
            .samples
            .front()
            .is_some_and(|(at, _)| now.duration_since(*at) > Self::WINDOW)
        {
            self.samples.pop_front();
        }
        let (first_at, first_rows) = *self.samples.front()?;
        let span = now.duration_since(first_at).as_secs_f64();
        (span >= 2.0).then(|| rows.saturating_sub(first_rows) as f64 / span)
    }
}

/// The status, read again for a few seconds when the app is briefly unavailable (a handler
/// restarting answers 500 once; a host scaling in drops a connection).
async fn read_status(api: &Api, id: &str) -> Result<Answer<StatusAnswer>, ApiError> {
    let mut tries = 0;
    loop {
        match api.status(id).await {
            Ok(status) => return Ok(status),
            Err(error @ (ApiError::Unexpected { .. } | ApiError::NotRunning { .. }))
                if tries < 5 =>
            {
                tries += 1;
                let _ = error;
                tokio::time::sleep(POLL).await;
            }
            Err(error) => return Err(error),
        }
    }
}

/// The exit code a scan's state at the end of a watch gives: 0 succeeded, 1 failed, 2
/// cancelled, 5 paused (3 and 4 are the command's own: refused, unreachable).
pub fn exit_code(state: &str) -> i32 {
    match state {
        "succeeded" => 0,
        "cancelled" | "cancelling" => 2,
        "paused" | "pausing" => 5,
        _ => 1,
    }
}

/// What an earlier count of a scan's scope found.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Earlier {
    pub rows: u64,
    /// `None` for an import's size, which its manifest gives without partitions.
    pub partitions: Option<u64>,
    /// How long counting took, when known.
    pub seconds: Option<f64>,
}

impl Earlier {
    /// The scope's size in the unit of `status`'s progress (`show::progress_unit`).
    pub fn total_for(&self, status: &StatusAnswer) -> Option<u64> {
        match show::progress_unit(status).0 {
            "partitions" => self.partitions,
            _ => Some(self.rows),
        }
    }
}

/// What an earlier count of the same scope as `spec` found, if one succeeded: the time left can
/// then be told. An import knows its size from the export's manifest. Looks at the 50 newest
/// succeeded counts of the table and reads at most five.
pub async fn earlier_count(api: &Api, spec: &SpecShown) -> Option<Earlier> {
    let import = spec.import.as_ref();
    if let Some(rows) = import.and_then(|i| i.manifest.as_ref()?.rows) {
        return Some(Earlier {
            rows,
            partitions: None,
            seconds: None,
        });
    }
    // A count of rows older than a moving moment is not the same scope twice.
    if spec.older_than.is_some() {
        return None;
    }
    let query = ListQuery {
        limit: 50,
        state: Some("succeeded"),
        action: Some("count"),
        table: spec.table.as_deref(),
        after: None,
    };
    let page = api.list(&query).await.ok()?;
    let candidates = page
        .read
        .scans
        .iter()
        // An import's count read an export, not the table.
        .filter(|s| {
            s.action == "count" && spec.table.as_ref() == Some(&s.table) && s.import.is_none()
        })
        .map(|s| s.id.clone())
        .take(5)
        .collect::<Vec<_>>();
    for id in candidates {
        let Ok(earlier) = api.status(&id).await else {
            continue;
        };
        let earlier = earlier.read;
        let (was, is) = (&earlier.spec, spec);
        let same = was.connection == is.connection
            && was.scope == is.scope
            && was.filter == is.filter
            && was.older_than.is_none()
            && was.import.is_none()
            && !was.dry_run;
        if let (true, Some(result)) = (same, &earlier.result) {
            return Some(Earlier {
                rows: result.rows,
                partitions: Some(result.partitions),
                seconds: show::elapsed_seconds(&earlier),
            });
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn final_states_give_exit_codes() {
        assert_eq!(exit_code("succeeded"), 0);
        assert_eq!(exit_code("failed"), 1);
        assert_eq!(exit_code("cancelled"), 2);
    }
}
