//! An in-memory table that answers page requests the way the Table service does, for tests,
//! benchmarks and the simulator.
//!
//! It is deliberately independent of the engine's key code: it orders keys by their UTF-16 code
//! units itself. It can also misbehave the way the real service may and Azurite never does:
//! short pages and empty pages that still carry a continuation, and a continuation on the last
//! page. It refuses a continuation used with another query than the one that produced it.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use super::keys::{partition_filter, range_filter, KeyRange, Lower, Upper};
use super::reader::{PageRequest, ReadScope, TableReader};
use tablescan_storage::error::{ErrorKind, StorageError};
use tablescan_storage::table::entity::Entity;
use tablescan_storage::table::query::{Continuation, Page};

/// The answer of a throttled request.
const BUSY: &str = "\u{1}busy";

struct Row {
    pk: Vec<u16>,
    rk: Vec<u16>,
    entity: Entity,
}

/// A table held in memory, sorted as the service sorts.
pub struct MemoryTable {
    rows: Vec<Row>,
}

impl MemoryTable {
    /// A table of these entities; duplicates (same keys) keep the last one.
    pub fn new(entities: impl IntoIterator<Item = Entity>) -> Self {
        let mut rows: Vec<Row> = entities
            .into_iter()
            .map(|entity| Row {
                pk: entity.partition_key.encode_utf16().collect(),
                rk: entity.row_key.encode_utf16().collect(),
                entity,
            })
            .collect();
        rows.sort_by(|a, b| (&a.pk, &a.rk).cmp(&(&b.pk, &b.rk)));
        rows.dedup_by(|later, earlier| later.pk == earlier.pk && later.rk == earlier.rk);
        MemoryTable { rows }
    }

    /// A table of bare keys.
    pub fn from_keys<'a>(keys: impl IntoIterator<Item = (&'a str, &'a str)>) -> Self {
        Self::new(keys.into_iter().map(|(pk, rk)| Entity::new(pk, rk)))
    }

    pub fn len(&self) -> usize {
        self.rows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// Every entity in table order.
    pub fn entities(&self) -> impl Iterator<Item = &Entity> {
        self.rows.iter().map(|r| &r.entity)
    }
}

/// How often the model answers as the real service sometimes does (percent of page requests).
#[derive(Debug, Clone, Copy, Default)]
pub struct Quirks {
    /// A page with no rows but a continuation.
    pub empty_pages: u8,
    /// A page with fewer rows than asked although more match.
    pub short_pages: u8,
    /// A continuation on the page that already holds the last matching row.
    pub trailing_tokens: u8,
    /// A 503 ServerBusy instead of a page.
    pub busy: u8,
    /// The most rows one request looks at, matching or not (the service stops after 5 s or at
    /// a partition boundary and hands back a continuation, maybe with no rows): with a
    /// selective filter, pages come back short or empty. `None` for no limit.
    pub max_scanned: Option<usize>,
    /// Seeds the model's choices, so a failing case replays exactly.
    pub seed: u64,
}

/// Reads a [`MemoryTable`]; counts and logs every request.
pub struct MemoryReader<'a> {
    table: &'a MemoryTable,
    quirks: Quirks,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    random: u64,
    log: Vec<String>,
    /// Positions at which an empty page was already returned, so the model always progresses.
    emptied: HashSet<(Vec<u16>, Vec<u16>)>,
    /// Which query each continuation belongs to.
    issued: HashMap<Continuation, String>,
    /// Rows the requests looked at, matching or not: what the service counts against the
    /// account's target.
    scanned: u64,
}

impl<'a> MemoryReader<'a> {
    pub fn new(table: &'a MemoryTable, quirks: Quirks) -> Self {
        MemoryReader {
            table,
            quirks,
            state: Mutex::new(State {
                random: quirks.seed ^ 0x9E37_79B9_7F4A_7C15,
                ..State::default()
            }),
        }
    }

    /// Every request so far: its filter, `+cursor` when it resumed a query, ` busy` when it was
    /// throttled.
    pub fn log(&self) -> Vec<String> {
        self.state.lock().expect("model state").log.clone()
    }

    /// How many page requests were answered.
    pub fn queries(&self) -> usize {
        self.state.lock().expect("model state").log.len()
    }

    /// How many rows the requests looked at, matching or not.
    pub fn scanned(&self) -> u64 {
        self.state.lock().expect("model state").scanned
    }

    fn answer(&self, request: &PageRequest<'_>) -> Result<Page, String> {
        let mut state = self.state.lock().expect("model state");
        let query = describe(request.scope);
        if next_percent(&mut state.random) < u32::from(self.quirks.busy) {
            state.log.push(format!("{query} busy"));
            return Err(BUSY.to_string());
        }
        state.log.push(match request.cursor {
            Some(_) => format!("{query} +cursor"),
            None => query.clone(),
        });
        let rows = &self.table.rows;
        let start = self.first_row(&state, request, &query)?;
        let in_scope = |row: &Row| match request.scope {
            ReadScope::Range(range) => below_upper(&row.pk, &range.upper),
            ReadScope::Partition {
                partition_key,
                row_keys,
            } => {
                row.pk.iter().copied().eq(partition_key.encode_utf16())
                    && below_upper(&row.rk, &row_keys.upper)
            }
        };
        let in_range = rows[start..].iter().take_while(|r| in_scope(r)).count();
        let can_scan = self
            .quirks
            .max_scanned
            .map_or(in_range, |most| most.max(1).min(in_range));
        let top = self.page_top(&mut state, start, in_range, request.top as usize);
        // Rows are looked at in key order until the page is full or the request has looked at
        // as many as it may; only those the filter takes are returned.
        let mut entities = Vec::new();
        let mut scanned = 0;
        while scanned < can_scan && entities.len() < top {
            let row = &rows[start + scanned];
            scanned += 1;
            if request.filter.is_none_or(|f| f.matches(&row.entity)) {
                entities.push(select(&row.entity, request.columns));
            }
        }
        state.scanned += scanned as u64;
        let continuation = self.continuation(&mut state, start, scanned, in_range, &query);
        if let Some(token) = &continuation {
            state.issued.insert(token.clone(), query);
        }
        Ok(Page {
            entities,
            continuation,
        })
    }

    /// The index of the first row `request` may return: the start of its scope, or where its
    /// continuation points (which must be one issued for the same `query`).
    fn first_row(
        &self,
        state: &State,
        request: &PageRequest<'_>,
        query: &str,
    ) -> Result<usize, String> {
        let rows = &self.table.rows;
        let start = match request.scope {
            ReadScope::Range(range) => rows.partition_point(|r| !above_lower(&r.pk, &range.lower)),
            ReadScope::Partition {
                partition_key,
                row_keys,
            } => {
                let pk: Vec<u16> = partition_key.encode_utf16().collect();
                rows.partition_point(|r| {
                    r.pk < pk || (r.pk == pk && !above_lower(&r.rk, &row_keys.lower))
                })
            }
        };
        let Some(cursor) = request.cursor else {
            return Ok(start);
        };
        match state.issued.get(cursor) {
            Some(owner) if owner == query => {}
            _ => {
                return Err(format!(
                    "continuation used with another query than its own: {query}"
                ))
            }
        }
        let pk: Vec<u16> = cursor.next_partition_key.encode_utf16().collect();
        let rk: Vec<u16> = cursor
            .next_row_key
            .as_deref()
            .unwrap_or("")
            .encode_utf16()
            .collect();
        Ok(start.max(rows.partition_point(|r| (&r.pk, &r.rk) < (&pk, &rk))))
    }

    /// The most rows a page from row `start` holds: `top`, unless the quirks make it empty
    /// (once per position) or short.
    fn page_top(&self, state: &mut State, start: usize, in_range: usize, top: usize) -> usize {
        let roll =
            |state: &mut State, percent: u8| next_percent(&mut state.random) < u32::from(percent);
        if in_range == 0 {
            return top;
        }
        let rows = &self.table.rows;
        let position = (rows[start].pk.clone(), rows[start].rk.clone());
        if roll(state, self.quirks.empty_pages) && state.emptied.insert(position) {
            0
        } else if top > 1 && roll(state, self.quirks.short_pages) {
            1 + (next_percent(&mut state.random) as usize) % (top - 1)
        } else {
            top
        }
    }

    /// The continuation of a page that looked at `scanned` of the `in_range` rows from `start`.
    fn continuation(
        &self,
        state: &mut State,
        start: usize,
        scanned: usize,
        in_range: usize,
        query: &str,
    ) -> Option<Continuation> {
        let rows = &self.table.rows;
        if scanned < in_range {
            let next = &rows[start + scanned].entity;
            Some(Continuation {
                next_partition_key: next.partition_key.clone(),
                next_row_key: Some(next.row_key.clone()),
            })
        } else if in_range > 0
            && next_percent(&mut state.random) < u32::from(self.quirks.trailing_tokens)
        {
            // A position just past the last row in range, as the service's would be: resumed,
            // it reads nothing. Unique per query, as a real token (a position in that query)
            // would be.
            let last = &rows[start + in_range - 1].entity;
            Some(Continuation {
                next_partition_key: last.partition_key.clone(),
                next_row_key: Some(format!("{}\u{0}{query}", last.row_key)),
            })
        } else {
            None
        }
    }
}

impl TableReader for MemoryReader<'_> {
    async fn read_page(&self, request: &PageRequest<'_>) -> Result<Page, StorageError> {
        self.answer(request).map_err(|why| {
            if why == BUSY {
                StorageError::from_service(
                    "query entities",
                    "memory table",
                    tablescan_storage::ServiceError {
                        status: 503,
                        code: Some("ServerBusy".into()),
                        message: "injected by the model".into(),
                        request_id: None,
                    },
                )
            } else {
                StorageError::new(
                    "query entities",
                    "memory table",
                    ErrorKind::InvalidRequest(why),
                )
            }
        })
    }
}

fn describe(scope: ReadScope<'_>) -> String {
    let filter = match scope {
        ReadScope::Range(range) => range_filter(range),
        ReadScope::Partition {
            partition_key,
            row_keys,
        } => Some(partition_filter(partition_key, row_keys)),
    };
    filter.map_or_else(|| "(all)".to_string(), |f| f.as_str().to_string())
}

fn above_lower(key: &[u16], lower: &Lower) -> bool {
    match lower {
        Lower::Unbounded => true,
        Lower::Included(lo) => key.iter().copied().cmp(lo.encode_utf16()).is_ge(),
        Lower::Excluded(lo) => key.iter().copied().cmp(lo.encode_utf16()).is_gt(),
    }
}

fn below_upper(key: &[u16], upper: &Upper) -> bool {
    match upper {
        Upper::Unbounded => true,
        Upper::Excluded(hi) => key.iter().copied().cmp(hi.encode_utf16()).is_lt(),
    }
}

/// The entity as a `$select` would return it: keys, metadata and the chosen properties.
fn select(entity: &Entity, columns: Option<&[String]>) -> Entity {
    match columns {
        None => entity.clone(),
        Some(names) => {
            let mut chosen = Entity::new(entity.partition_key.clone(), entity.row_key.clone());
            chosen.etag = entity.etag.clone();
            chosen.timestamp = entity.timestamp;
            for name in names {
                if let Some(value) = entity.properties.get(name) {
                    chosen.properties.insert(name.clone(), value.clone());
                }
            }
            chosen
        }
    }
}

/// A number in 0..100 from a xorshift generator: deterministic per seed.
fn next_percent(state: &mut u64) -> u32 {
    (xorshift(state) % 100) as u32
}

/// The rows of `table` whose keys fall in a scan's scope, in order (the expected answer).
pub fn rows_in_scope(table: &MemoryTable, partition_keys: &KeyRange) -> Vec<(String, String)> {
    table
        .rows
        .iter()
        .filter(|r| {
            above_lower(&r.pk, &partition_keys.lower) && below_upper(&r.pk, &partition_keys.upper)
        })
        .map(|r| (r.entity.partition_key.clone(), r.entity.row_key.clone()))
        .collect()
}

/// A table shaped like NuGet's package catalog: package ids (dotted, mixed case, skewed towards
/// a few popular owners) as PartitionKey and 1 to 50 versions each as RowKey, `rows` rows in
/// all. Deterministic for a given seed.
pub fn nuget_like(rows: usize, seed: u64) -> Vec<Entity> {
    let mut random = seed ^ 0x2545_F491_4F6C_DD1D;
    let mut entities = Vec::with_capacity(rows);
    for (id, versions) in nuget_partitions(rows as u64, seed, Versions::UpTo50) {
        for v in 0..versions {
            let patch = xorshift(&mut random) % 20;
            let beta = if xorshift(&mut random) % 5 == 0 {
                "-beta"
            } else {
                ""
            };
            entities.push(Entity::new(
                id.clone(),
                format!("{}.{}.{patch}{beta}.{v}", v / 10, v % 10),
            ));
        }
    }
    entities
}

/// How many versions (rows) each package id of a NuGet-like table has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Versions {
    /// 1 to 50, uniformly (about 25 on average): the table the engine's query efficiency is
    /// measured on.
    UpTo50,
    /// Most ids one or two, a few dozens, about 3.4 on average: the catalog the published scan
    /// copied ("about 3 to 4 rows per partition"), which the simulator's cases use.
    Catalog,
}

/// The partitions of a NuGet-like table: package ids with their number of versions (the last
/// one cut so that the counts add up to `rows`), in generation order. The simulator builds its
/// compact tables from these too.
pub fn nuget_partitions(rows: u64, seed: u64, shape: Versions) -> Vec<(String, u32)> {
    nuget_ids(rows, seed, shape)
        .map(|(id, versions)| {
            let mut key = String::with_capacity(32);
            id.write_to(&mut key);
            (key, versions)
        })
        .collect()
}

/// [`nuget_partitions`] one at a time, each id drawn but not yet written out: the simulator
/// keeps only some of hundreds of millions of ids, and needs no list of them all.
pub fn nuget_ids(rows: u64, seed: u64, shape: Versions) -> NugetIds {
    NugetIds {
        rows,
        shape,
        random: seed ^ 0xD1B5_4A32_D192_ED03,
        total: 0,
        package: 0,
    }
}

/// The package ids of a NuGet-like table with their versions: see [`nuget_ids`].
pub struct NugetIds {
    rows: u64,
    shape: Versions,
    random: u64,
    total: u64,
    package: u64,
}

/// A package id of a NuGet-like table, as drawn: written out by `Display` or
/// [`PackageId::write_to`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PackageId {
    number: u64,
    /// `Some(owner)`: `Owner.Word.Word<number>`; `None`: `<initial>word.Word<number>`.
    owner: Option<u8>,
    initial: u8,
    words: [u8; 2],
}

const OWNERS: [&str; 12] = [
    "Microsoft",
    "System",
    "Azure",
    "NuGet",
    "Serilog",
    "Newtonsoft",
    "AWSSDK",
    "Xamarin",
    "Google",
    "Akka",
    "Humanizer",
    "jQuery",
];
const WORDS: [&str; 16] = [
    "Core",
    "Extensions",
    "Logging",
    "Json",
    "Http",
    "Data",
    "Client",
    "Abstractions",
    "Runtime",
    "Tools",
    "Sql",
    "Web",
    "Identity",
    "Storage",
    "Text",
    "Collections",
];

impl PackageId {
    /// Appends the id to `out`.
    pub fn write_to(&self, out: &mut String) {
        let [first, second] = self.words.map(|w| WORDS[usize::from(w)]);
        match self.owner {
            Some(owner) => {
                out.push_str(OWNERS[usize::from(owner)]);
                out.push('.');
                out.push_str(first);
            }
            None => {
                out.push(char::from(self.initial));
                out.extend(first.chars().flat_map(char::to_lowercase));
            }
        }
        out.push('.');
        out.push_str(second);
        push_decimal(out, self.number, 0);
    }
}

impl std::fmt::Display for PackageId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut id = String::with_capacity(32);
        self.write_to(&mut id);
        f.write_str(&id)
    }
}

impl Iterator for NugetIds {
    type Item = (PackageId, u32);

    fn next(&mut self) -> Option<(PackageId, u32)> {
        if self.total >= self.rows {
            return None;
        }
        let mut next = |n: u64| (xorshift(&mut self.random) % n) as u8;
        self.package += 1;
        // Half the packages belong to a well-known owner; the rest have their own names.
        let id = if next(2) == 0 {
            let owner = next(12);
            PackageId {
                number: self.package,
                owner: Some(owner),
                initial: 0,
                words: [next(16), next(16)],
            }
        } else {
            let initial = b'A' + next(26);
            PackageId {
                number: self.package,
                owner: None,
                initial,
                words: [next(16), next(16)],
            }
        };
        let versions = match self.shape {
            Versions::UpTo50 => 1 + u64::from(next(50)),
            Versions::Catalog => catalog_versions(u64::from(next(100)), u64::from(next(100))),
        }
        .min(self.rows - self.total);
        self.total += versions;
        Some((id, versions as u32))
    }
}

/// Versions of one package id of [`Versions::Catalog`], from two uniform draws in 0..100.
fn catalog_versions(bucket: u64, spread: u64) -> u64 {
    match bucket {
        0..45 => 1,
        45..70 => 2,
        70..82 => 3,
        82..90 => 5,
        90..96 => 10,
        96..99 => 20,
        _ => 1 + spread,
    }
}

fn xorshift(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

/// Appends `n` in decimal, zero-padded to `width` digits (at most 20), as
/// `format!("{n:0width$}")` writes it but without the formatter's cost: the synthetic tables
/// write a key for every row they serve.
pub fn push_decimal(out: &mut String, n: u64, width: usize) {
    let mut digits = [b'0'; 20];
    let mut start = digits.len();
    let mut n = n;
    loop {
        start -= 1;
        digits[start] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    let start = start.min(digits.len() - width.min(digits.len()));
    out.push_str(std::str::from_utf8(&digits[start..]).expect("ASCII digits"));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn catalog_tables_have_three_to_four_rows_per_partition_and_a_long_tail() {
        let partitions = nuget_partitions(1_000_000, 1, Versions::Catalog);
        let rows: u64 = partitions.iter().map(|p| u64::from(p.1)).sum();
        assert_eq!(rows, 1_000_000);
        let mean = rows as f64 / partitions.len() as f64;
        assert!((3.0..4.0).contains(&mean), "{mean} rows per partition");
        assert!(partitions.iter().any(|p| p.1 > 50));
        let ids: HashSet<&str> = partitions.iter().map(|p| p.0.as_str()).collect();
        assert_eq!(ids.len(), partitions.len(), "every package id once");
    }
}
