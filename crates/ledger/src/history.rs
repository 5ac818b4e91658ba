//! A scan's rate over its whole life, in a bounded number of samples, kept on the counter
//! shards a status read reads anyway: showing it costs no request and no entity more.
//!
//! Each shard holds, in one string property, what the finishes it counted read, acted on and
//! met as throttling, summed into at most [`SAMPLES`] intervals of equal width on a grid fixed
//! to the Unix epoch (1 s wide at first). When a finish falls beyond the last interval, the
//! width doubles and neighbouring intervals are added together, so a shard's history always
//! spans from its first finish to its last in at most [`SAMPLES`] intervals: 64 seconds at 1 s,
//! an hour in 64 intervals of 64 s, a day in intervals of about 23 minutes. The status sums
//! the shards' histories (bringing them to the widest width first) into one of the same bound.
//!
//! What it costs: a finish already reads and writes its shard; the history adds one string to
//! it, 64 intervals of three numbers: under 1 KB at the counts of a 35-million-row scan (some
//! 40,000 rows per shard and interval), 4 KB at most (every number at 20 digits; a test pins
//! it), far under the service's 64 KiB for a property. A status read so moves some 15 KB more,
//! 64 KB at most, over its 16 shards, in the same one query. A history that cannot be read (written
//! by a later version, or damaged) counts as empty: the chart is informational, and a finish
//! never fails on it.

use tablescan_storage::table::entity::{Entity, Value};

/// The most intervals a history holds.
pub const SAMPLES: usize = 64;
/// The shard property that holds a history.
pub const HISTORY_PROPERTY: &str = "rateHistory";
/// The history's form in its property (the first field), so a later form is never misread.
const FORM: &str = "h1";
/// Widths stop doubling here (2^40 s is some 35,000 years), and every history ends by then.
const MAX_LEVEL: u32 = 40;

/// What the finishes of one interval added.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sample {
    pub rows_read: u64,
    pub rows_acted: u64,
    pub throttled: u64,
}

impl Sample {
    fn add(&mut self, other: Sample) {
        self.rows_read = self.rows_read.saturating_add(other.rows_read);
        self.rows_acted = self.rows_acted.saturating_add(other.rows_acted);
        self.throttled = self.throttled.saturating_add(other.throttled);
    }

    pub fn is_empty(&self) -> bool {
        *self == Sample::default()
    }
}

/// Samples in intervals of `2^level` seconds, the first being interval `first` of that width
/// counted from the Unix epoch.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct History {
    level: u32,
    first: u64,
    samples: Vec<Sample>,
}

impl History {
    /// The width of an interval, in seconds.
    pub fn seconds(&self) -> u64 {
        1 << self.level
    }

    /// When the first interval starts, in seconds since the epoch.
    pub fn start_seconds(&self) -> u64 {
        self.first << self.level
    }

    pub fn samples(&self) -> &[Sample] {
        &self.samples
    }

    /// Adds what a finish at `at_ms` (ms since the epoch) counted. A finish stamped before the
    /// first interval (clocks of different instances) counts in the first.
    pub fn record(&mut self, at_ms: u64, sample: Sample) {
        if sample.is_empty() {
            return;
        }
        let second = at_ms / 1000;
        if self.samples.is_empty() {
            self.first = second >> self.level;
        }
        while (second >> self.level).saturating_sub(self.first) >= SAMPLES as u64
            && self.level < MAX_LEVEL
        {
            self.coarsen();
        }
        let index = ((second >> self.level).saturating_sub(self.first) as usize).min(SAMPLES - 1);
        if self.samples.len() <= index {
            self.samples.resize(index + 1, Sample::default());
        }
        self.samples[index].add(sample);
    }

    /// Doubles the width, adding neighbouring intervals together.
    fn coarsen(&mut self) {
        let first = self.first >> 1;
        let mut samples: Vec<Sample> = Vec::with_capacity(self.samples.len() / 2 + 1);
        for (i, sample) in self.samples.iter().enumerate() {
            let index = (((self.first + i as u64) >> 1) - first) as usize;
            if samples.len() <= index {
                samples.resize(index + 1, Sample::default());
            }
            samples[index].add(*sample);
        }
        self.level += 1;
        self.first = first;
        self.samples = samples;
    }

    fn end(&self) -> u64 {
        self.first + self.samples.len() as u64
    }

    /// Adds `other` in (another shard's history): both at the wider width, and wider still
    /// until their span fits in [`SAMPLES`] intervals.
    pub fn add(&mut self, mut other: History) {
        if other.samples.is_empty() {
            return;
        }
        if self.samples.is_empty() {
            *self = other;
            return;
        }
        while self.level < other.level {
            self.coarsen();
        }
        while other.level < self.level {
            other.coarsen();
        }
        while self.end().max(other.end()) - self.first.min(other.first) > SAMPLES as u64
            && self.level < MAX_LEVEL
        {
            self.coarsen();
            other.coarsen();
        }
        let first = self.first.min(other.first);
        let mut samples = vec![Sample::default(); (self.end().max(other.end()) - first) as usize];
        for history in [&*self, &other] {
            for (i, sample) in history.samples.iter().enumerate() {
                samples[(history.first - first) as usize + i].add(*sample);
            }
        }
        self.first = first;
        self.samples = samples;
    }

    /// The history a shard holds; empty if it holds none or one this version cannot read.
    pub fn from_entity(entity: &Entity) -> History {
        match entity.properties.get(HISTORY_PROPERTY) {
            Some(Value::String(text)) => History::parse(text).unwrap_or_default(),
            _ => History::default(),
        }
    }

    /// Puts the history into a shard's entity (nothing while it is empty).
    pub fn write_into(&self, entity: &mut Entity) {
        if !self.samples.is_empty() {
            entity
                .properties
                .insert(HISTORY_PROPERTY.into(), Value::String(self.to_text()));
        }
    }

    /// `h1;<level>;<first>;<read>/<acted>/<throttled>,...`, trailing zeros left out.
    fn to_text(&self) -> String {
        let samples: Vec<String> = self
            .samples
            .iter()
            .map(|s| {
                let mut fields = vec![s.rows_read, s.rows_acted, s.throttled];
                while fields.last() == Some(&0) {
                    fields.pop();
                }
                fields
                    .iter()
                    .map(u64::to_string)
                    .collect::<Vec<_>>()
                    .join("/")
            })
            .collect();
        format!("{FORM};{};{};{}", self.level, self.first, samples.join(","))
    }

    fn parse(text: &str) -> Option<History> {
        let mut parts = text.splitn(4, ';');
        if parts.next()? != FORM {
            return None;
        }
        let level: u32 = parts.next()?.parse().ok().filter(|l| *l <= MAX_LEVEL)?;
        let first: u64 = parts.next()?.parse().ok()?;
        let mut samples = Vec::new();
        for field in parts.next()?.split(',') {
            let mut numbers = [0u64; 3];
            if !field.is_empty() {
                for (i, n) in field.split('/').enumerate() {
                    *numbers.get_mut(i)? = n.parse().ok()?;
                }
            }
            samples.push(Sample {
                rows_read: numbers[0],
                rows_acted: numbers[1],
                throttled: numbers[2],
            });
        }
        // Every history this code writes ends before 2^MAX_LEVEL seconds (finishes are
        // stamped by clocks of this era); one that does not is damaged, and summing it with
        // another could span trillions of intervals.
        let end = first.checked_add(samples.len() as u64)?;
        if samples.len() > SAMPLES || end > (1u64 << MAX_LEVEL) >> level {
            return None;
        }
        Some(History {
            level,
            first,
            samples,
        })
    }
}

/// The history as the status shows it (`history`): per interval of `bucketSeconds`, from
/// `offsetSeconds` after the scan started, the rows read, the entities (rows read plus table
/// rows written, as a cap counts them) and the throttled requests. The API's type, which the
/// CLI reads too.
pub use tablescan_api::answers::RateHistory;

/// `history` as shown for a scan that started at `began_s` (seconds since the epoch) and
/// writes a table row per row acted on when `writes` is true.
pub fn rate_history(history: &History, began_s: i64, writes: bool) -> Option<RateHistory> {
    if history.samples.is_empty() {
        return None;
    }
    let samples = history.samples();
    Some(RateHistory {
        bucket_seconds: history.seconds(),
        offset_seconds: history.start_seconds() as i64 - began_s,
        rows_read: samples.iter().map(|s| s.rows_read).collect(),
        entities: samples
            .iter()
            .map(|s| {
                s.rows_read
                    .saturating_add(if writes { s.rows_acted } else { 0 })
            })
            .collect(),
        requests_throttled: samples.iter().map(|s| s.throttled).collect(),
    })
}

#[cfg(test)]
#[path = "history_tests.rs"]
mod tests;
