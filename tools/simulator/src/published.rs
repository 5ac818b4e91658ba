//! The published design, as the blog's copy ran it (ExplorePackages, December 2020): one queue;
//! a scan message runs one prefix query (one query per distinct next character under its
//! prefix, a page each) or reads one partition whole, and enqueues a row-copy message per
//! PartitionKey it saw (packed into bulk messages of up to 64 KiB when there are ten or more)
//! plus a message per child query. A bulk message's execution puts its inner messages one by
//! one; a row-copy execution reads its rows again and upserts them. No ledger: the scan keeps
//! no state besides its messages.

use tablescan::scan::keys::{KeyRange, Lower, Upper};
use tablescan::scan::reader::ReadScope;
use tablescan::storage::retry::RetryPolicy;

use crate::sim::{batch_latency, query_latency, Design, Execution, FollowUp, World};
use crate::storage::{Partition, Purpose, Request, Role};
use crate::table::{partition_hash, RawPage, SyntheticTable};

/// The largest queue message the published enqueuer packs, bytes.
const MAX_MESSAGE: usize = 65_536;
/// Messages an execution enqueues before it packs them into bulk messages.
const BULK_THRESHOLD: usize = 10;
/// The published code's last character, used as an exclusive upper bound.
const LAST: char = '\u{ffff}';

/// Rows of one partition to copy (consecutive rows, as the scan read them).
#[derive(Debug, Clone)]
pub struct RowCopy {
    partition: usize,
    rows: u32,
}

#[derive(Debug, Clone)]
pub enum Message {
    /// The scan's first message: the empty PartitionKey, then the prefix query over everything.
    Start,
    /// PartitionKeys above `lower` and below `upper`, all under `prefix`.
    Prefix {
        prefix: String,
        lower: String,
        upper: String,
    },
    /// The rest of one partition, after a RowKey.
    Partition {
        index: usize,
        after_row: u32,
    },
    Bulk(Vec<RowCopy>),
    Copy(RowCopy),
}

pub struct Published<'a> {
    table: &'a SyntheticTable,
}

impl<'a> Published<'a> {
    pub fn new(table: &'a SyntheticTable) -> Self {
        Published { table }
    }

    /// The queue message size of a row-copy message, bytes (JSON with the table names and
    /// every RowKey, as TableRowCopyMessage serialises).
    fn size(&self, copy: &RowCopy) -> usize {
        100 + self.table.key(copy.partition).len()
            + copy.rows as usize * (self.table.row_key_width() + 3)
    }
}

/// One execution's running time and what it enqueued.
struct Run {
    now: f64,
    failed: bool,
    follow_ups: Vec<FollowUp<Message>>,
    /// Rows read by the scan, as row copies to enqueue.
    copies: Vec<RowCopy>,
}

impl Run {
    fn query(&mut self, world: &mut World, table: &SyntheticTable, page: &RawPage) -> bool {
        let entities = page.rows.len() as f64;
        let partition = page.hottest_partition(table).map(Partition::Source);
        let request = Request {
            role: Role::Source,
            purpose: Purpose::Rows,
            entities,
            partition,
            latency: query_latency(&world.params, entities),
        };
        world.stats.queries += 1;
        match world
            .storage
            .send(self.now, &RetryPolicy::default(), &request)
        {
            Ok(done) => {
                self.now = done;
                world.stats.count_rows(done, page.rows.len() as u64);
                for (index, rows) in &page.partitions {
                    match self.copies.last_mut() {
                        Some(last) if last.partition == *index => last.rows += rows,
                        _ => self.copies.push(RowCopy {
                            partition: *index,
                            rows: *rows,
                        }),
                    }
                }
                true
            }
            Err(gave_up) => {
                self.now = gave_up;
                self.failed = true;
                world.stats.failed_on_read += 1;
                false
            }
        }
    }

    /// Puts `messages` on the queue one by one (the published enqueuer's one worker).
    fn enqueue(&mut self, world: &mut World, messages: Vec<Message>) {
        for message in messages {
            self.now = world.storage.put_message(self.now, 0);
            self.follow_ups.push(FollowUp {
                message,
                queued_at: Some(self.now),
            });
        }
    }
}

impl Published<'_> {
    fn prefix_query(
        &self,
        world: &mut World,
        run: &mut Run,
        prefix: &str,
        lower: &str,
        upper: &str,
    ) {
        let mut lower = lower.to_string();
        let mut children = Vec::new();
        loop {
            let range = KeyRange {
                lower: Lower::Excluded(lower.clone()),
                upper: Upper::Excluded(upper.to_string()),
            };
            // Pages until one has rows (empty pages with a continuation are skipped).
            let mut cursor = None;
            let (rows_page, has_more) = loop {
                let page = self.table.read(
                    ReadScope::Range(&range),
                    world.params.page_size,
                    cursor.as_ref(),
                    world.params.server_range_rows,
                );
                if !run.query(world, self.table, &page) {
                    return;
                }
                let has_more = page.continuation.is_some();
                if !page.rows.is_empty() || !has_more {
                    break (page, has_more);
                }
                cursor = page.continuation;
            };
            let Some(last) = rows_page.rows.last() else {
                break;
            };
            if !has_more {
                break;
            }
            let next: String = last
                .partition_key
                .chars()
                .take(prefix.chars().count() + 1)
                .collect();
            let index = self
                .table
                .index_of(&last.partition_key)
                .expect("a key the table returned");
            children.push(Message::Partition {
                index,
                after_row: last.row_key.parse().unwrap_or(0),
            });
            let child_upper = format!("{next}{LAST}");
            children.push(Message::Prefix {
                prefix: next.clone(),
                lower: lower.clone().max(last.partition_key.clone()),
                upper: child_upper.clone().min(upper.to_string()),
            });
            lower = child_upper;
        }
        run.enqueue(world, children);
    }

    fn partition_query(&self, world: &mut World, run: &mut Run, index: usize, after_row: u32) {
        let width = self.table.row_key_width();
        let after = format!("{after_row:0width$}");
        let row_keys = KeyRange::between(Some(&after), None);
        let mut cursor = None;
        loop {
            let page = self.table.read(
                ReadScope::Partition {
                    partition_key: self.table.key(index),
                    row_keys: &row_keys,
                },
                world.params.page_size,
                cursor.as_ref(),
                world.params.server_range_rows,
            );
            if !run.query(world, self.table, &page) {
                return;
            }
            match page.continuation {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
    }

    /// The row copies, packed into bulk messages when there are enough of them.
    fn enqueue_copies(&self, world: &mut World, run: &mut Run) {
        let copies = std::mem::take(&mut run.copies);
        if copies.len() < BULK_THRESHOLD {
            run.enqueue(world, copies.into_iter().map(Message::Copy).collect());
            return;
        }
        let mut bulks = Vec::new();
        let mut bulk: Vec<RowCopy> = Vec::new();
        let mut size = 100;
        for copy in copies {
            let add = self.size(&copy) + 1;
            if !bulk.is_empty() && size + add > MAX_MESSAGE {
                bulks.push(Message::Bulk(std::mem::take(&mut bulk)));
                size = 100;
            }
            size += add;
            bulk.push(copy);
        }
        bulks.push(Message::Bulk(bulk));
        run.enqueue(world, bulks);
    }

    fn copy_rows(&self, world: &mut World, run: &mut Run, copy: &RowCopy, instance: usize) {
        let hash = partition_hash(self.table.key(copy.partition));
        let rows = f64::from(copy.rows);
        let read = Request {
            role: Role::Source,
            purpose: Purpose::Rows,
            entities: rows,
            partition: (copy.rows >= 100).then_some(Partition::Source(hash)),
            latency: query_latency(&world.params, rows.min(1000.0))
                * (rows / 1000.0).ceil().max(1.0),
        };
        world.stats.queries += (rows / 1000.0).ceil().max(1.0) as u64;
        run.now = match world.storage.send(run.now, &RetryPolicy::default(), &read) {
            Ok(done) => done,
            Err(gave_up) => {
                run.now = gave_up;
                run.failed = true;
                world.stats.failed_on_read += 1;
                return;
            }
        };
        let cpu = rows * world.params.copy_cpu_ms_per_1000 / 1_000_000.0;
        run.now = world.compute(instance, run.now, cpu);
        let mut left = copy.rows;
        while left > 0 {
            let batch = left.min(100);
            let write = Request {
                role: Role::Target,
                purpose: Purpose::Rows,
                entities: f64::from(batch),
                partition: (batch >= 100).then_some(Partition::Target(hash)),
                latency: batch_latency(&world.params, f64::from(batch)),
            };
            match world.storage.send(run.now, &RetryPolicy::default(), &write) {
                Ok(done) => run.now = done,
                Err(gave_up) => {
                    run.now = gave_up;
                    run.failed = true;
                    world.stats.failed_on_write += 1;
                    return;
                }
            }
            world.stats.writes += 1;
            left -= batch;
        }
        world.stats.rows_acted += u64::from(copy.rows);
    }
}

impl Design for Published<'_> {
    type Message = Message;

    fn queue(&self, _: &Message) -> usize {
        0
    }

    fn has_ledger(&self) -> bool {
        false
    }

    fn execute(
        &mut self,
        world: &mut World,
        message: &Message,
        t: f64,
        instance: usize,
    ) -> Execution<Message> {
        let mut run = Run {
            now: t + world.params.invocation_ms / 1000.0,
            failed: false,
            follow_ups: Vec::new(),
            copies: Vec::new(),
        };
        match message {
            Message::Start => {
                // The empty PartitionKey (a query that finds nothing here), then everything.
                let empty = RawPage {
                    rows: Vec::new(),
                    continuation: None,
                    partitions: Vec::new(),
                };
                if run.query(world, self.table, &empty) {
                    self.prefix_query(world, &mut run, "", "", &LAST.to_string());
                }
            }
            Message::Prefix {
                prefix,
                lower,
                upper,
            } => self.prefix_query(world, &mut run, prefix, lower, upper),
            Message::Partition { index, after_row } => {
                self.partition_query(world, &mut run, *index, *after_row)
            }
            Message::Bulk(copies) => {
                let messages = copies.iter().cloned().map(Message::Copy).collect();
                run.enqueue(world, messages);
            }
            Message::Copy(copy) => self.copy_rows(world, &mut run, copy, instance),
        }
        if !run.failed {
            self.enqueue_copies(world, &mut run);
        }
        Execution {
            end: run.now,
            follow_ups: if run.failed {
                Vec::new()
            } else {
                run.follow_ups
            },
            failed: run.failed,
        }
    }
}
