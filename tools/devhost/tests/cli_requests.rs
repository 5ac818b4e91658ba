//! What the `tablescan` command sends and how it reads refusals, against devhost on Azurite:
//! flags an action does not use are refused before anything starts; errors read
//! `field: message` on a line of their own, 5xx answers too, the JSON only with --json; a start
//! whose answer was lost is sent again with its idempotency key and makes one scan.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use serde_json::Value;
use tablescan::storage::queue::MessageEncoding;
use tablescan::storage::table::entity::Entity;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

mod common;
use common::cli::*;
use common::*;

/// Every scan the host's ledger lists.
async fn scans(url: &str) -> Vec<Value> {
    let out = tablescan(url, &["--json", "list", "--limit=100"], &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let page: Value = serde_json::from_slice(&out.stdout).unwrap();
    page["scans"].as_array().unwrap().clone()
}

/// One flag per action option, each given to an action that does not use it: refused, naming
/// both, exit 3, and no scan started (the bulk of the table is the parser's unit test,
/// `request_flags_tests.rs`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flags_an_action_does_not_use_are_refused_and_nothing_starts() {
    let source = table_with(&[Entity::new("p", "r")]).await;
    let host = Host::start(1, &[]);
    let url = url(&host);
    let t = source.name();
    let cases: [(&[&str], &str); 9] = [
        (&["--count", "--set", r#"{"a":1}"#], "--set does not apply to --count: it is for --update"),
        (&["--enqueue", "qqq", "--mode", "merge"], "--mode does not apply to --enqueue: it is for --copy"),
        (
            &["--copy", "t2", "--rows-per-message", "5"],
            "--rows-per-message does not apply to --copy: it is for --enqueue",
        ),
        (&["--copy", "t2", "--per", "partition"], "--per does not apply to --copy: it is for --enqueue"),
        (
            &["--copy", "t2", "--compression", "none"],
            "--compression does not apply to --copy: it is for --export",
        ),
        (
            &["--delete", "--to-connection", "B"],
            "--to-connection does not apply to --delete: it is for --copy, --enqueue, --partition-keys or --export",
        ),
        (
            &["--export", "bk/x", "--encoding", "none"],
            "--encoding does not apply to --export: it is for --enqueue or --partition-keys",
        ),
        (&["--count", "--dry-run"], "--dry-run does not apply to --count: it is for --copy, --enqueue, --delete, --update, --partition-keys or --export"),
        (&["--partition-keys", "kkk", "--remove", "A"], "--remove does not apply to --partition-keys: it is for --update"),
    ];
    for (flags, message) in cases {
        let mut args = vec!["start", "--table", t];
        args.extend_from_slice(flags);
        let out = tablescan(&url, &args, &[]).await;
        assert_eq!(out.status.code(), Some(3), "{args:?}");
        assert_eq!(
            text(&out.stderr),
            format!("tablescan: {message}\n"),
            "{args:?}"
        );
        assert!(out.stdout.is_empty());
    }
    let out = tablescan(
        &url,
        &["start", "--import", "bk/x", "--copy", "t2", "--prefix", "a"],
        &[],
    )
    .await;
    assert_eq!(out.status.code(), Some(3));
    assert!(
        text(&out.stderr).starts_with("tablescan: --prefix does not apply to --import"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(
        scans(&url).await,
        Vec::<Value>::new(),
        "nothing was started"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_read_field_colon_message_and_the_json_comes_only_with_json() {
    let host = Host::start(1, &[]);
    let url = url(&host);
    let out = tablescan(&url, &["start", "--table", "nosuchtable", "--count"], &[]).await;
    assert_eq!(out.status.code(), Some(3));
    assert_eq!(
        text(&out.stderr),
        "tablescan: refused (400)\n  table: table \"nosuchtable\" does not exist in the account \
         of \"AzureWebJobsStorage\"\n"
    );
    assert!(out.stdout.is_empty(), "no JSON without --json");
    let out = tablescan(
        &url,
        &["--json", "start", "--table", "nosuchtable", "--count"],
        &[],
    )
    .await;
    assert_eq!(out.status.code(), Some(3));
    let body: Value = serde_json::from_slice(&out.stdout).expect("the answer's JSON on stdout");
    assert_eq!(body["error"]["field"], "table");
    let out = tablescan(
        &url,
        &["start", "--table", "nosuchtable", "--copy", "x"],
        &[],
    )
    .await;
    assert_eq!(
        text(&out.stderr),
        "tablescan: refused (400)\n  action.table: 'x' is not a valid table name: it must be 3 \
         to 63 characters long\n"
    );
    let out = tablescan(&url, &["list", "--table", "no_such"], &[]).await;
    assert_eq!(out.status.code(), Some(3));
    assert!(
        text(&out.stderr).starts_with("tablescan: refused (400)\n  table: "),
        "{}",
        text(&out.stderr)
    );

    // A 5xx: the app cannot start scans with a default cap it cannot read. Its message, on a
    // line of its own; sent once (the app's own 500 would be the same again).
    let broken = Host::start(1, &[("TABLESCAN_MAX_ROWS_PER_SECOND", "lots")]);
    let out = tablescan(
        &common::cli::url(&broken),
        &["start", "--table", "sometable", "--count"],
        &[],
    )
    .await;
    assert_eq!(out.status.code(), Some(4));
    let stderr = text(&out.stderr);
    let mut lines = stderr.lines();
    assert_eq!(
        lines.next(),
        Some("tablescan: the app failed (500)"),
        "{stderr}"
    );
    let message = lines.next().unwrap_or_default();
    assert!(
        message.starts_with("  ")
            && message.contains("TABLESCAN_MAX_ROWS_PER_SECOND")
            && !message.contains('{'),
        "{stderr}"
    );
    assert!(
        !stderr.contains("sending it again") && !stderr.contains("may have reached"),
        "{stderr}"
    );
}

/// A proxy that forwards everything to `target`, except that the answer to the first request
/// it sees is read from the app and dropped, the connection closed: an answer lost on the way.
async fn losing_first_answer(target: u16) -> (u16, Arc<AtomicBool>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let lost = Arc::new(AtomicBool::new(false));
    let flag = lost.clone();
    tokio::spawn(async move {
        loop {
            let Ok((mut client, _)) = listener.accept().await else {
                return;
            };
            let mut app = TcpStream::connect(("127.0.0.1", target)).await.unwrap();
            if flag.swap(true, Ordering::SeqCst) {
                tokio::spawn(async move {
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut app).await;
                });
                continue;
            }
            let request = read_message(&mut client).await;
            app.write_all(&request).await.unwrap();
            let _answer = read_message(&mut app).await;
            // The app answered; the caller never hears it.
            drop(client);
        }
    });
    (port, lost)
}

/// One HTTP/1.1 message (head and a Content-Length body) from `stream`.
async fn read_message(stream: &mut TcpStream) -> Vec<u8> {
    let mut bytes = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        let n = stream.read(&mut chunk).await.unwrap();
        assert!(n > 0, "the message ended early");
        bytes.extend_from_slice(&chunk[..n]);
        let Some(head_end) = bytes.windows(4).position(|w| w == b"\r\n\r\n") else {
            continue;
        };
        let head = String::from_utf8_lossy(&bytes[..head_end]).to_ascii_lowercase();
        let length = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .map_or(0, |v| v.trim().parse::<usize>().unwrap());
        if bytes.len() >= head_end + 4 + length {
            return bytes;
        }
    }
}

/// Issue 32, item 8: the command sends an Idempotency-Key with every start and prints it, so a
/// start sent again after its answer was lost answers the scan the first one started: one
/// scan, every row enqueued once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_whose_answer_was_lost_is_sent_again_and_makes_one_scan() {
    let rows: Vec<Entity> = (0..30)
        .map(|n| Entity::new(format!("p{}", n % 3), format!("r{n:02}")))
        .collect();
    let source = table_with(&rows).await;
    let host = Host::start(1, &[]);
    let (port, lost) = losing_first_answer(host.port).await;
    let through_proxy = format!("http://127.0.0.1:{port}");
    let queue = unique("once-");
    let out = tablescan(
        &through_proxy,
        &[
            "start",
            "--table",
            source.name(),
            "--enqueue",
            &queue,
            "--encoding",
            "none",
            "--wait",
        ],
        &[],
    )
    .await;
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(lost.load(Ordering::SeqCst), "the first answer was dropped");
    assert!(
        stderr.contains(
            "no answer to the start (the connection broke before the answer came); sending it \
             again with the same idempotency key"
        ),
        "{stderr}"
    );
    let id = started_id(&stderr);
    let key = stderr
        .split("(idempotency key ")
        .nth(1)
        .and_then(|rest| rest.split(')').next())
        .expect("the key is printed");
    assert!(key.starts_with("tablescan-cli-"), "{key}");
    let listed = scans(&url(&host)).await;
    assert_eq!(listed.len(), 1, "one scan: {listed:?}");
    assert_eq!(listed[0]["id"], id.as_str());
    let messages = drain_queue(&queue, MessageEncoding::Text).await;
    assert_eq!(messages.len(), rows.len(), "every row enqueued once");

    // The key printed gets the same scan again, by hand (with --json: the API's answer on
    // stdout, the key on stderr).
    let again = tablescan(
        &url(&host),
        &[
            "--json",
            "start",
            "--table",
            source.name(),
            "--enqueue",
            &queue,
            "--encoding",
            "none",
            "--idempotency-key",
            key,
        ],
        &[],
    )
    .await;
    assert_eq!(again.status.code(), Some(0), "{}", text(&again.stderr));
    let answer: Value = serde_json::from_slice(&again.stdout).unwrap();
    assert_eq!(answer["id"], id.as_str());
    assert_eq!(
        text(&again.stderr),
        format!("started scan {id} (idempotency key {key})\n")
    );
    assert_eq!(scans(&url(&host)).await.len(), 1);
}
