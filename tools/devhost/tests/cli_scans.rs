//! What the `tablescan` command says of scans, against devhost on Azurite: the summary of every
//! action and the list of them, as golden text (ids, names of this run and times replaced);
//! `--set` typing checked in the table; `remove`. Flags an action does not use are refused
//! with nothing started; errors read `field: message`, 5xx answers too; a start whose answer
//! was lost is sent again and makes one scan.

use tablescan::storage::queue::MessageEncoding;
use tablescan::storage::table::entity::{Entity, Value as Edm};
use tablescan::storage::table::query::Query;

mod common;
use common::cli::*;
use common::*;

/// 24 rows in 4 partitions of 6, each with a name and a number.
fn small_rows() -> Vec<Entity> {
    (0..24)
        .map(|n| {
            Entity::new(format!("p{}", n % 4), format!("r{n:02}"))
                .with("Name", Edm::String(format!("row {n}")))
                .with("N", Edm::Int32(n))
        })
        .collect()
}

/// Runs `tablescan args...` to the end; its stdout, asserting the exit code.
async fn run(url: &str, args: &[&str], code: i32) -> String {
    let out = tablescan(url, args, &[]).await;
    assert_eq!(
        out.status.code(),
        Some(code),
        "{args:?}\n{}\n{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stdout)
}

/// The names of this run, longest first (so that none is replaced inside a longer one).
fn placeholders<'a>(names: &'a [(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
    let mut names = names.to_vec();
    names.sort_by_key(|(name, _)| std::cmp::Reverse(name.len()));
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_action_is_summed_up_and_listed_in_its_own_words() {
    let rows = small_rows();
    let source = table_with(&rows).await;
    let victim = table_with(&rows).await;
    let storage = storage();
    let host = Host::start(1, &[("BackupStorage", storage.as_str())]);
    let url = url(&host);
    let copy = unique("copy");
    let restored = unique("restored");
    let queues = [unique("q-"), unique("q-"), unique("q-")];
    let keys = unique("keys-");
    let per_partition = unique("pp-");
    let container = unique("bk");
    let src = source.name();
    let names = [
        (src, "<source>"),
        (victim.name(), "<victim>"),
        (copy.as_str(), "<copy>"),
        (restored.as_str(), "<restored>"),
        (queues[0].as_str(), "<q1>"),
        (queues[1].as_str(), "<q2>"),
        (queues[2].as_str(), "<q3>"),
        (keys.as_str(), "<keys>"),
        (per_partition.as_str(), "<pp>"),
        (container.as_str(), "<container>"),
    ];
    let names = placeholders(&names);
    let spread = queues.join(",");
    let export = format!("{container}/day/one");
    let runs: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["start", "--table", src, "--count", "--wait"],
            "scan <id>: count <source> — succeeded
  counted         24 rows in 4 partitions
  rows read       24
  steps           1 done, 0 pending, 0 failed
  queries         1
  took            <time>
",
        ),
        (
            vec![
                "start", "--table", src, "--copy", &copy, "--to-connection", "BackupStorage",
                "--mode", "merge", "--wait",
            ],
            "scan <id>: copy <source> -> <copy> in BackupStorage (merge) — succeeded
  copied          24 rows into <copy> in BackupStorage
  rows read       24
  steps           1 done, 0 pending, 0 failed
  queries         1
  took            <time>
",
        ),
        (
            vec![
                "start", "--table", src, "--enqueue", &spread, "--rows-per-message", "4",
                "--encoding", "none", "--wait",
            ],
            "scan <id>: enqueue <source> -> queues <q1>, <q2>, <q3> (up to 4 rows a message) — succeeded
  sent            24 rows to queues <q1>, <q2>, <q3>, in messages of up to 4 rows (at least 6 messages; fewer rows where a message would pass 64 KiB)
  delivery        at least once: a step that runs again after a crash sends its messages again
  rows read       24
  steps           1 done, 0 pending, 0 failed
  queries         1
  took            <time>
",
        ),
        (
            vec![
                "start", "--table", src, "--enqueue", &per_partition, "--per", "partition",
                "--wait",
            ],
            "scan <id>: enqueue <source> -> queue <pp> (one message per partition) — succeeded
  sent            4 messages to queue <pp>, one per partition
  delivery        at least once: a step that runs again after a crash sends its messages again
  rows read       6
  read/partition  1.50 rows
  steps           1 done, 0 pending, 0 failed
  queries         8
  took            <time>
",
        ),
        (
            vec!["start", "--table", src, "--partition-keys", &keys, "--wait"],
            "scan <id>: partition-keys <source> -> queue <keys> — succeeded
  partitions      4 found
  sent            4 messages to queue <keys>, one per partition
  delivery        at least once: a step that runs again after a crash sends its messages again
  rows read       6
  read/partition  1.50 rows
  steps           1 done, 0 pending, 0 failed
  queries         8
  took            <time>
",
        ),
        (
            vec!["start", "--table", src, "--export", &export, "--wait"],
            "scan <id>: export <source> -> <container>/day/one/ — succeeded
  exported        24 rows into 1 blob (<size> bytes)
  manifest        <container>/day/one/manifest.json (restore with --import)
  rows read       24
  steps           1 done, 0 pending, 0 failed
  queries         1
  took            <time>
",
        ),
        (
            vec!["start", "--import", &export, "--count", "--wait"],
            "scan <id>: import <container>/day/one/: count — succeeded
  counted         24 rows read and checked (the export's manifest lists 24)
  rows read       24
  steps           2 done, 0 pending, 0 failed
  took            <time>
",
        ),
        (
            vec!["start", "--import", &export, "--copy", &restored, "--wait"],
            "scan <id>: import <container>/day/one/ -> <restored> — succeeded
  restored        24 rows into <restored> (the export's manifest lists 24)
  rows read       24
  steps           2 done, 0 pending, 0 failed
  took            <time>
",
        ),
        (
            vec![
                "start", "--table", victim.name(), "--prefix", "p1", "--delete", "--dry-run",
                "--wait",
            ],
            "scan <id>: delete <victim> (dry run) — succeeded
  would delete    6 rows (dry run: nothing deleted)
  rows read       6
  steps           1 done, 0 pending, 0 failed
  queries         1
  took            <time>
  e.g.            \"p1\" / \"r01\"
  e.g.            \"p1\" / \"r05\"
  e.g.            \"p1\" / \"r09\"
",
        ),
        (
            vec!["start", "--table", victim.name(), "--prefix", "p1", "--delete", "--wait"],
            "scan <id>: delete <victim> — succeeded
  deleted         6 rows
  rows read       6
  steps           1 done, 0 pending, 0 failed
  queries         1
  took            <time>
",
        ),
        (
            vec![
                "start", "--table", victim.name(), "--prefix", "p2", "--update", "--set",
                r#"{"Big":1099511627776,"Small":7}"#, "--remove", "Name", "--wait",
            ],
            "scan <id>: update <victim> (set Big, Small; remove Name) — succeeded
  updated         6 rows
  rows read       6
  steps           1 done, 0 pending, 0 failed
  queries         1
  took            <time>
",
        ),
    ];
    let mut failures = Vec::new();
    for (args, expected) in &runs {
        let printed = normalised(&run(&url, args, 0).await, &names);
        if printed != *expected {
            failures.push(format!("{args:?} printed\n{printed}"));
        }
    }
    let listed = normalised(&run(&url, &["list"], 0).await, &names);
    let expected_list = "\
ID                                STATE          ROWS READ   AGE  SCAN
<id>  succeeded              6  <age>  update <victim> (set Big, Small; remove Name)
<id>  succeeded              6  <age>  delete <victim>
<id>  succeeded              6  <age>  delete <victim> (dry run)
<id>  succeeded             24  <age>  import <container>/day/one/ -> <restored>
<id>  succeeded             24  <age>  import <container>/day/one/: count
<id>  succeeded             24  <age>  export <source> -> <container>/day/one/
<id>  succeeded              6  <age>  partition-keys <source> -> queue <keys>
<id>  succeeded              6  <age>  enqueue <source> -> queue <pp> (one message per partition)
<id>  succeeded             24  <age>  enqueue <source> -> queues <q1>, <q2>, <q3> (up to 4 rows a message)
<id>  succeeded             24  <age>  copy <source> -> <copy> in BackupStorage (merge)
<id>  succeeded             24  <age>  count <source>
";
    if listed != expected_list {
        failures.push(format!("list printed\n{listed}"));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));

    // remove: a finished scan's records go; a scan in flight stays, with how to stop it.
    let counted = run(&url, &["start", "--table", src, "--count", "--wait"], 0).await;
    let counted = counted
        .split_whitespace()
        .nth(1)
        .unwrap()
        .trim_end_matches(':');
    let removed = run(&url, &["remove", counted], 0).await;
    assert!(
        removed.starts_with(&format!("scan {counted} removed: "))
            && removed.ends_with(" ledger rows (its status and counts; what it wrote stays)\n"),
        "{removed}"
    );
    let gone = tablescan(&url, &["status", counted], &[]).await;
    assert_eq!(gone.status.code(), Some(3));
    assert_eq!(text(&gone.stderr), "tablescan: no scan has this id (404)\n");
    let slow = run(
        &url,
        &[
            "start",
            "--table",
            src,
            "--count",
            "--page-size=1",
            "--max-rows-per-second=1",
        ],
        0,
    )
    .await;
    let slow = slow.trim();
    let busy = tablescan(&url, &["remove", slow], &[]).await;
    assert_eq!(busy.status.code(), Some(3));
    assert_eq!(
        text(&busy.stderr),
        format!(
            "tablescan: refused (409)\n  only a finished scan can be removed; cancel it first \
             (`tablescan cancel {slow}`)\n"
        )
    );
    run(&url, &["cancel", slow], 0).await;
    run(&url, &["status", slow, "--watch"], 2).await;
    let removed = run(&url, &["remove", slow], 0).await;
    assert!(
        removed.starts_with(&format!("scan {slow} removed: ")),
        "{removed}"
    );

    // What the summaries say is what happened.
    let restored_rows = tables().table(&restored).unwrap();
    assert_same_rows(&restored_rows, &source, "the restored export").await;
    let mut messages = 0;
    for queue in &queues {
        messages += drain_queue(queue, MessageEncoding::Text).await.len();
    }
    assert!((6..=24).contains(&messages), "{messages} messages");
    let updated = victim
        .query_all(&Query::default())
        .await
        .unwrap()
        .into_iter()
        .filter(|row| row.partition_key == "p2")
        .collect::<Vec<_>>();
    assert_eq!(updated.len(), 6);
    for row in &updated {
        assert_eq!(
            row.properties.get("Big"),
            Some(&Edm::Int64(1_099_511_627_776)),
            "beyond Int32: an Int64, not a Double"
        );
        assert_eq!(row.properties.get("Small"), Some(&Edm::Int32(7)));
        assert!(!row.properties.contains_key("Name"), "removed");
    }
}
