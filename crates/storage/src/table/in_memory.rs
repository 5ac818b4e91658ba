//! A table held in memory that answers the calls of [`TableClient`](super::TableClient) with the
//! service's semantics: etags and conditional writes (404 and 412), inserts that refuse an
//! existing entity (409), entity group transactions applied all or nothing with the failing
//! operation's index, filtered and projected queries in key order with pages and continuations,
//! `Timestamp` set on every write, and a missing table answered 404 until it is created.
//!
//! (`query_all` is `job::LedgerTable`'s, over these pages.)
//!
//! It serves the ledger's race tests and its in-memory benchmark (`job::LedgerTable`): it counts
//! requests and entities the way the test proxy counts them against Azurite, its clock can be
//! set so that leases run out on demand, and every call yields to the runtime first, so that
//! concurrent calls interleave at each request as they would against the service.
//! (`scan::model::MemoryTable` is the read-only table of the scan engine's tests.)

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use time::OffsetDateTime;

use super::batch::{IfMatch, Operation, MAX_OPERATIONS};
use super::entity::{EdmDateTime, Entity};
use super::query::{Continuation, Page, Query, MAX_PAGE_SIZE};
use super::WriteMode;
use crate::error::{describe, ErrorKind, ServiceError, StorageError};

/// Whether the client sends a request again after its answer was lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retry {
    No,
    Yes,
}

/// What becomes of a request's answer.
#[derive(Debug, Clone, Copy)]
enum Fate {
    Answered,
    Lost(Retry),
}

const TRANSACTION: &str = "submit transaction";

/// Rows keyed as the service orders them: partition key, then row key, by UTF-16 code units.
type Key = (Vec<u16>, Vec<u16>);

/// A shareable in-memory table: clones see the same rows.
#[derive(Clone)]
pub struct InMemoryTable {
    name: String,
    inner: Arc<Mutex<State>>,
    counts: Arc<Counts>,
}

#[derive(Default)]
struct State {
    exists: bool,
    /// Request numbers (counting from 1) that are answered 503 instead, each once.
    failing: Vec<u64>,
    /// Request numbers whose write is applied and whose answer is lost (each once), and
    /// whether the client's retry then sends it again.
    lost_answers: Vec<(u64, Retry)>,
    rows: BTreeMap<Key, Entity>,
    /// The clock for `Timestamp`; `None` follows the system clock.
    now: Option<OffsetDateTime>,
    next_etag: u64,
}

/// What the table was asked, counted as the Table service counts against its targets.
#[derive(Default)]
struct Counts {
    requests: AtomicU64,
    entities: AtomicU64,
}

impl InMemoryTable {
    /// An empty table that does not exist yet (as a fresh account): create it first.
    pub fn new(name: &str) -> Self {
        InMemoryTable {
            name: name.to_string(),
            inner: Arc::default(),
            counts: Arc::default(),
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Requests answered so far.
    pub fn requests(&self) -> u64 {
        self.counts.requests.load(Ordering::Relaxed)
    }

    /// Entities read or written so far, as the service counts them against its targets: each
    /// entity a query scanned (returned or not), each operation of a transaction, and one for
    /// any other request.
    pub fn entities(&self) -> u64 {
        self.counts.entities.load(Ordering::Relaxed)
    }

    /// Sets the clock that stamps writes (tests that move time forward).
    pub fn set_now(&self, now: OffsetDateTime) {
        self.state().now = Some(now);
    }

    /// How many entities the table holds.
    pub fn len(&self) -> usize {
        self.state().rows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave the rows half-written: every change is
        // made on a copy or in one insert, so the poisoned state is still consistent.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Answers the `n`th request from now (1 is the next) with 503 Server Busy, as a crash
    /// or an outage at exactly that point would look to the caller.
    pub fn fail_request(&self, n: u64) {
        let at = self.requests() + n;
        self.state().failing.push(at);
    }

    /// Applies the `n`th request from now (1 is the next) and loses its answer, as a timeout
    /// after the service acted looks to the caller: with [`Retry::No`] the caller gets 500
    /// Operation Timed Out; with [`Retry::Yes`] the request is sent again (as the storage
    /// client's retry policy does) and the caller gets the second answer (a 404 or 412 where
    /// the first one changed what the second one expects).
    pub fn lose_answer(&self, n: u64, retry: Retry) {
        let at = self.requests() + n;
        self.state().lost_answers.push((at, retry));
    }

    /// Lets other tasks run first (so that concurrent callers interleave request by request),
    /// then counts the request, or refuses it if it was chosen to fail; says what becomes of
    /// its answer.
    async fn request(&self, operation: &'static str, entities: u64) -> Result<Fate, StorageError> {
        tokio::task::yield_now().await;
        let number = self.counts.requests.fetch_add(1, Ordering::Relaxed) + 1;
        self.counts.entities.fetch_add(entities, Ordering::Relaxed);
        let mut state = self.state();
        if let Some(at) = state.failing.iter().position(|&n| n == number) {
            state.failing.swap_remove(at);
            return Err(self.error(operation, 503, "ServerBusy"));
        }
        match state.lost_answers.iter().position(|&(n, _)| n == number) {
            Some(at) => Ok(Fate::Lost(state.lost_answers.swap_remove(at).1)),
            None => Ok(Fate::Answered),
        }
    }

    /// [`InMemoryTable::request`] for a request that changes nothing worth losing (a read, or
    /// creating the table): a lost answer is an error like any other.
    async fn read_request(
        &self,
        operation: &'static str,
        entities: u64,
    ) -> Result<(), StorageError> {
        match self.request(operation, entities).await? {
            Fate::Answered => Ok(()),
            Fate::Lost(_) => Err(self.error(operation, 500, "OperationTimedOut")),
        }
    }

    /// The answer to a write of `fate`, applied by `apply` (once, or twice when retried).
    async fn answer<T>(
        &self,
        operation: &'static str,
        entities: u64,
        fate: Fate,
        apply: impl Fn() -> Result<T, StorageError>,
    ) -> Result<T, StorageError> {
        let first = apply();
        match fate {
            Fate::Answered => first,
            Fate::Lost(Retry::No) => Err(self.error(operation, 500, "OperationTimedOut")),
            Fate::Lost(Retry::Yes) => {
                let Fate::Answered = self.request(operation, entities).await? else {
                    return Err(self.error(operation, 500, "OperationTimedOut"));
                };
                apply()
            }
        }
    }

    fn error(&self, operation: &'static str, status: u16, code: &str) -> StorageError {
        StorageError::from_service(
            operation,
            describe("table", &self.name),
            service(status, code),
        )
    }

    pub async fn create_if_missing(&self) -> Result<bool, StorageError> {
        self.read_request("create table", 1).await?;
        let mut state = self.state();
        let created = !state.exists;
        state.exists = true;
        Ok(created)
    }

    pub async fn get_entity(
        &self,
        partition_key: &str,
        row_key: &str,
    ) -> Result<Option<Entity>, StorageError> {
        self.read_request("get entity", 1).await?;
        let state = self.state();
        if !state.exists {
            return Err(self.error("get entity", 404, "TableNotFound"));
        }
        Ok(state.rows.get(&key(partition_key, row_key)).cloned())
    }

    pub async fn insert(&self, entity: &Entity) -> Result<String, StorageError> {
        self.apply_one("insert entity", Operation::Insert(entity.clone()))
            .await
    }

    pub async fn upsert(&self, entity: &Entity, mode: WriteMode) -> Result<String, StorageError> {
        let operation = match mode {
            WriteMode::Replace => Operation::UpsertReplace(entity.clone()),
            WriteMode::Merge => Operation::UpsertMerge(entity.clone()),
        };
        self.apply_one("insert or replace entity", operation).await
    }

    pub async fn update(
        &self,
        entity: &Entity,
        mode: WriteMode,
        if_match: &IfMatch,
    ) -> Result<String, StorageError> {
        let operation = match mode {
            WriteMode::Replace => Operation::Update(entity.clone(), if_match.clone()),
            WriteMode::Merge => Operation::Merge(entity.clone(), if_match.clone()),
        };
        self.apply_one("update entity", operation).await
    }

    pub async fn delete(
        &self,
        partition_key: &str,
        row_key: &str,
        if_match: &IfMatch,
    ) -> Result<(), StorageError> {
        let operation = Operation::Delete {
            partition_key: partition_key.to_string(),
            row_key: row_key.to_string(),
            if_match: if_match.clone(),
        };
        self.apply_one("delete entity", operation).await.map(drop)
    }

    async fn apply_one(
        &self,
        operation_name: &'static str,
        operation: Operation,
    ) -> Result<String, StorageError> {
        let fate = self.request(operation_name, 1).await?;
        self.answer(operation_name, 1, fate, || {
            self.apply_one_now(operation_name, &operation)
        })
        .await
    }

    fn apply_one_now(
        &self,
        operation_name: &'static str,
        operation: &Operation,
    ) -> Result<String, StorageError> {
        let mut state = self.state();
        if !state.exists {
            return Err(self.error(operation_name, 404, "TableNotFound"));
        }
        let now = state.clock();
        state
            .apply(operation, now)
            .map(Option::unwrap_or_default)
            .map_err(|e| {
                StorageError::from_service(operation_name, describe("table", &self.name), e)
            })
    }

    /// Applies up to 100 writes to one partition, all or nothing.
    pub async fn submit_transaction(
        &self,
        operations: &[Operation],
    ) -> Result<Vec<Option<String>>, StorageError> {
        let entities = operations.len() as u64;
        let fate = self.request(TRANSACTION, entities).await?;
        self.answer(TRANSACTION, entities, fate, || self.transact(operations))
            .await
    }

    fn transact(&self, operations: &[Operation]) -> Result<Vec<Option<String>>, StorageError> {
        const OP: &str = TRANSACTION;
        let invalid = |why: &str| {
            StorageError::invalid_request(OP, describe("table", &self.name), why.to_string())
        };
        if operations.is_empty() || operations.len() > MAX_OPERATIONS {
            return Err(invalid("a transaction holds 1 to 100 operations"));
        }
        let partitions: std::collections::HashSet<&str> =
            operations.iter().map(|op| op.keys().0).collect();
        if partitions.len() > 1 {
            return Err(invalid("a transaction writes to one partition"));
        }
        let distinct: std::collections::HashSet<(&str, &str)> =
            operations.iter().map(Operation::keys).collect();
        if distinct.len() != operations.len() {
            return Err(invalid("a transaction writes each entity once"));
        }
        let mut state = self.state();
        if !state.exists {
            return Err(self.error(OP, 404, "TableNotFound"));
        }
        let now = state.clock();
        let first_etag = state.next_etag;
        // What each applied operation replaced, to put back if a later one fails.
        let mut undo = Vec::with_capacity(operations.len());
        let mut etags = Vec::with_capacity(operations.len());
        for (index, operation) in operations.iter().enumerate() {
            let (pk, rk) = operation.keys();
            let at = key(pk, rk);
            let previous = state.rows.get(&at).cloned();
            match state.apply(operation, now) {
                Ok(etag) => {
                    etags.push(etag);
                    undo.push((at, previous));
                }
                Err(error) => {
                    for (at, previous) in undo.into_iter().rev() {
                        match previous {
                            Some(entity) => state.rows.insert(at, entity),
                            None => state.rows.remove(&at),
                        };
                    }
                    state.next_etag = first_etag;
                    return Err(StorageError::new(
                        OP,
                        describe("table", &self.name),
                        ErrorKind::Batch { index, error },
                    ));
                }
            }
        }
        Ok(etags)
    }

    /// One page of a query, in key order, starting at `continuation`.
    pub async fn query_page(
        &self,
        query: &Query,
        continuation: Option<&Continuation>,
    ) -> Result<Page, StorageError> {
        const OP: &str = "query entities";
        self.read_request(OP, 0).await?;
        let top = usize::from(query.top.unwrap_or(MAX_PAGE_SIZE));
        if top == 0 || top > usize::from(MAX_PAGE_SIZE) {
            return Err(StorageError::invalid_request(
                OP,
                describe("table", &self.name),
                format!("the page size must be 1 to {MAX_PAGE_SIZE}, not {top}"),
            ));
        }
        let (entities, continuation, scanned) = {
            let state = self.state();
            if !state.exists {
                return Err(self.error(OP, 404, "TableNotFound"));
            }
            let start = continuation.map(|c| {
                key(
                    &c.next_partition_key,
                    c.next_row_key.as_deref().unwrap_or(""),
                )
            });
            // A query confined to a key range scans that range only, as the service does.
            let bounds = query.filter.as_ref().and_then(|f| f.key_bounds());
            let lowest = bounds
                .map(|b| key(b.partition, b.lowest_row))
                .unwrap_or_default();
            let from = start.map_or(lowest.clone(), |s| s.max(lowest));
            let partition: Option<Vec<u16>> = bounds.map(|b| b.partition.encode_utf16().collect());
            let in_range = |(pk, rk): &Key| {
                partition.as_ref().is_none_or(|p| p == pk) && bounds.is_none_or(|b| b.below_top(rk))
            };
            let mut page = Vec::new();
            let mut next = None;
            // Entities scanned: each one examined, matching or not, as the service charges.
            let mut scanned = 0u64;
            for (at, entity) in state.rows.range(from..) {
                if !in_range(at) {
                    break;
                }
                if page.len() == top {
                    // The page is full: the query resumes here.
                    next = Some(Continuation {
                        next_partition_key: entity.partition_key.clone(),
                        next_row_key: Some(entity.row_key.clone()),
                    });
                    break;
                }
                scanned += 1;
                if query.filter.as_ref().is_none_or(|f| f.matches(entity)) {
                    page.push(project(entity, query.select.as_deref()));
                }
            }
            (page, next, scanned)
        };
        self.counts.entities.fetch_add(scanned, Ordering::Relaxed);
        Ok(Page {
            entities,
            continuation,
        })
    }
}

impl State {
    fn clock(&self) -> EdmDateTime {
        EdmDateTime::new(self.now.unwrap_or_else(OffsetDateTime::now_utc))
    }

    fn new_etag(&mut self, at: EdmDateTime) -> String {
        self.next_etag += 1;
        format!("W/\"datetime'{at}'-{}\"", self.next_etag)
    }

    /// Applies one write; the new etag (`None` for a delete) or the service's refusal.
    fn apply(
        &mut self,
        operation: &Operation,
        now: EdmDateTime,
    ) -> Result<Option<String>, ServiceError> {
        let (pk, rk) = operation.keys();
        let at = key(pk, rk);
        let existing = self.rows.get(&at);
        let condition_holds = |if_match: &IfMatch| match (if_match, existing) {
            (_, None) => Err(service(404, "ResourceNotFound")),
            (IfMatch::Any, Some(_)) => Ok(()),
            (IfMatch::Etag(etag), Some(e)) if e.etag.as_deref() == Some(etag.as_str()) => Ok(()),
            (IfMatch::Etag(_), Some(_)) => Err(service(412, "UpdateConditionNotSatisfied")),
        };
        let merged = |entity: &Entity| {
            let mut properties = existing.map(|e| e.properties.clone()).unwrap_or_default();
            properties.extend(entity.properties.clone());
            properties
        };
        let properties = match operation {
            Operation::Delete { if_match, .. } => {
                condition_holds(if_match)?;
                self.rows.remove(&at);
                return Ok(None);
            }
            Operation::Insert(_) if existing.is_some() => {
                return Err(service(409, "EntityAlreadyExists"))
            }
            Operation::Insert(entity) | Operation::UpsertReplace(entity) => {
                entity.properties.clone()
            }
            Operation::UpsertMerge(entity) => merged(entity),
            Operation::Update(entity, if_match) => {
                condition_holds(if_match)?;
                entity.properties.clone()
            }
            Operation::Merge(entity, if_match) => {
                condition_holds(if_match)?;
                merged(entity)
            }
        };
        let etag = self.new_etag(now);
        self.rows.insert(
            at,
            Entity {
                partition_key: pk.to_string(),
                row_key: rk.to_string(),
                timestamp: Some(now),
                etag: Some(etag.clone()),
                properties,
            },
        );
        Ok(Some(etag))
    }
}

fn key(partition_key: &str, row_key: &str) -> Key {
    (
        partition_key.encode_utf16().collect(),
        row_key.encode_utf16().collect(),
    )
}

fn service(status: u16, code: &str) -> ServiceError {
    ServiceError {
        status,
        code: Some(code.to_string()),
        message: code.to_string(),
        request_id: None,
    }
}

/// The entity with only the selected properties (the keys, Timestamp and etag always stay).
fn project(entity: &Entity, select: Option<&[String]>) -> Entity {
    let mut out = entity.clone();
    if let Some(names) = select {
        out.properties
            .retain(|name, _| names.iter().any(|n| n == name));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::entity::Value;
    use crate::table::filter::{Comparison, Filter};

    fn row(pk: &str, rk: &str, n: i64) -> Entity {
        Entity::new(pk, rk).with("n", Value::Int64(n))
    }

    async fn table() -> InMemoryTable {
        let table = InMemoryTable::new("t");
        table.create_if_missing().await.unwrap();
        table
    }

    #[tokio::test]
    async fn a_missing_table_answers_404_until_created() {
        let table = InMemoryTable::new("t");
        let e = table.get_entity("a", "b").await.unwrap_err();
        assert_eq!((e.status(), e.code()), (Some(404), Some("TableNotFound")));
        assert!(table.create_if_missing().await.unwrap());
        assert!(!table.create_if_missing().await.unwrap());
        assert_eq!(table.get_entity("a", "b").await.unwrap(), None);
    }

    #[tokio::test]
    async fn conditional_writes_follow_the_etag() {
        let table = table().await;
        let first = table.insert(&row("p", "r", 1)).await.unwrap();
        let e = table.insert(&row("p", "r", 2)).await.unwrap_err();
        assert_eq!(e.status(), Some(409));
        let second = table
            .update(
                &row("p", "r", 3),
                WriteMode::Replace,
                &IfMatch::Etag(first.clone()),
            )
            .await
            .unwrap();
        assert_ne!(first, second);
        let stale = table
            .update(
                &row("p", "r", 4),
                WriteMode::Merge,
                &IfMatch::Etag(first.clone()),
            )
            .await
            .unwrap_err();
        assert_eq!(stale.status(), Some(412));
        let missing = table.delete("p", "nope", &IfMatch::Any).await.unwrap_err();
        assert_eq!(missing.status(), Some(404));
        let merged = Entity::new("p", "r").with("m", Value::Boolean(true));
        table
            .update(&merged, WriteMode::Merge, &IfMatch::Etag(second))
            .await
            .unwrap();
        let now = table.get_entity("p", "r").await.unwrap().unwrap();
        assert_eq!(now.properties.get("n"), Some(&Value::Int64(3)));
        assert_eq!(now.properties.get("m"), Some(&Value::Boolean(true)));
        assert!(now.timestamp.is_some());
    }

    #[tokio::test]
    async fn a_transaction_is_all_or_nothing_and_names_the_failing_operation() {
        let table = table().await;
        table.insert(&row("p", "b", 1)).await.unwrap();
        let batch = [
            Operation::Insert(row("p", "a", 1)),
            Operation::Insert(row("p", "b", 2)),
        ];
        let e = table.submit_transaction(&batch).await.unwrap_err();
        match e.kind() {
            ErrorKind::Batch { index, error } => assert_eq!((*index, error.status), (1, 409)),
            other => panic!("{other:?}"),
        }
        assert_eq!(table.get_entity("p", "a").await.unwrap(), None);
        let two_partitions = [
            Operation::Insert(row("p", "c", 1)),
            Operation::Insert(row("q", "c", 1)),
        ];
        assert!(matches!(
            table
                .submit_transaction(&two_partitions)
                .await
                .unwrap_err()
                .kind(),
            ErrorKind::InvalidRequest(_)
        ));
        assert_eq!(table.len(), 1);
    }

    #[tokio::test]
    async fn a_lost_answer_is_applied_and_its_retry_meets_what_it_changed() {
        let table = InMemoryTable::new("t");
        table.create_if_missing().await.unwrap();
        let etag = table
            .upsert(&Entity::new("p", "r"), WriteMode::Replace)
            .await
            .unwrap();
        let change = Entity::new("p", "r").with("n", crate::table::entity::Value::Int32(1));
        // Applied and answered 500: the caller cannot tell that it was applied.
        table.lose_answer(1, Retry::No);
        let lost = table
            .update(&change, WriteMode::Merge, &IfMatch::Etag(etag.clone()))
            .await
            .unwrap_err();
        assert_eq!(lost.status(), Some(500), "{lost}");
        let now = table.get_entity("p", "r").await.unwrap().unwrap();
        assert!(now.properties.contains_key("n"), "applied");
        assert_ne!(now.etag.as_deref(), Some(etag.as_str()));
        // Applied, and the retry meets its own change: 412.
        let etag = now.etag.unwrap();
        table.lose_answer(1, Retry::Yes);
        let retried = table
            .update(&change, WriteMode::Merge, &IfMatch::Etag(etag))
            .await
            .unwrap_err();
        assert!(retried.reason().is_gone_or_changed(), "{retried}");
        // A transaction retried after it applied: its delete finds nothing (index 0).
        table.lose_answer(1, Retry::Yes);
        let gone = table
            .submit_transaction(&[Operation::Delete {
                partition_key: "p".into(),
                row_key: "r".into(),
                if_match: IfMatch::Any,
            }])
            .await
            .unwrap_err();
        assert!(
            matches!(gone.kind(), ErrorKind::Batch { index: 0, .. }),
            "{gone}"
        );
        assert!(table.is_empty());
    }

    #[tokio::test]
    async fn a_chosen_request_fails_once() {
        let table = table().await;
        table.fail_request(2);
        table.insert(&row("p", "a", 1)).await.unwrap();
        let e = table.insert(&row("p", "b", 1)).await.unwrap_err();
        assert!(e.is_transient());
        assert_eq!(table.get_entity("p", "b").await.unwrap(), None);
        table.insert(&row("p", "b", 1)).await.unwrap();
    }

    #[tokio::test]
    async fn queries_page_in_key_order_with_filters_and_projection() {
        let table = table().await;
        for n in 0..25 {
            table
                .insert(&row("p", &format!("r{n:02}"), n))
                .await
                .unwrap();
        }
        table.insert(&row("q", "r00", 99)).await.unwrap();
        let query = Query::filtered(
            Filter::partition_key(Comparison::Eq, "p").and(Filter::row_key(Comparison::Ge, "r05")),
        )
        .select(["m"])
        .top(7);
        let first = table.query_page(&query, None).await.unwrap();
        assert_eq!(first.entities.len(), 7);
        assert_eq!(first.entities[0].row_key, "r05");
        assert!(first.entities[0].properties.is_empty());
        let query_all = || {
            crate::table::query::all_pages(|from| {
                let (table, query) = (table.clone(), query.clone());
                async move { table.query_page(&query, from.as_ref()).await }
            })
        };
        let all = query_all().await.unwrap();
        let keys: Vec<&str> = all.iter().map(|e| e.row_key.as_str()).collect();
        assert_eq!(keys.len(), 20);
        assert!(keys.windows(2).all(|w| w[0] < w[1]));
        let before = (table.requests(), table.entities());
        query_all().await.unwrap();
        assert_eq!(
            (table.requests() - before.0, table.entities() - before.1),
            (3, 20)
        );
    }
}
