//! Running the `tablescan` command against a devhost, and reading what it printed.

use std::path::PathBuf;
use std::process::Output;
use std::time::Duration;

use super::Host;

/// The `tablescan` binary built beside devhost (`cargo build --workspace --bins`).
pub fn tablescan_binary() -> PathBuf {
    let devhost = PathBuf::from(env!("CARGO_BIN_EXE_devhost"));
    let cli = devhost.with_file_name("tablescan");
    assert!(
        cli.is_file(),
        "no tablescan command at {}: build it with `cargo build -p tablescan-cli`",
        cli.display()
    );
    cli
}

/// Runs `tablescan --url <url> args...` with `env` and returns its output.
pub async fn tablescan(url: &str, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = tokio::process::Command::new(tablescan_binary());
    command
        .arg("--url")
        .arg(url)
        .args(args)
        .env_remove("TABLESCAN_FUNCTION_KEY")
        .envs(env.iter().copied());
    tokio::time::timeout(Duration::from_secs(240), command.output())
        .await
        .expect("the command ends")
        .expect("the command runs")
}

pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

pub fn url(host: &Host) -> String {
    format!("http://127.0.0.1:{}", host.port)
}

/// The scan id a start printed on stderr (`started scan <id> (idempotency key ...)`).
pub fn started_id(stderr: &str) -> String {
    stderr
        .lines()
        .find_map(|l| l.strip_prefix("started scan "))
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("no start announced: {stderr}"))
        .to_string()
}

/// `text` with what differs from run to run replaced: scan ids (32 hex digits) by `<id>`,
/// `names` (tables, queues, containers of this run) by their placeholders, the time a scan took
/// by `<time>`, the age column of a list by `<age>`, and a list's "more" place by `<place>`.
pub fn normalised(text: &str, names: &[(&str, &str)]) -> String {
    let mut out = String::new();
    for line in text.lines() {
        let mut line = line.to_string();
        // A list line: id (32), state (10), rows read (12), age (4), each two spaces apart.
        let is_hex = |s: &str| s.bytes().all(|b| b.is_ascii_hexdigit());
        if line.len() > 66 && line.is_char_boundary(64) && is_hex(&line[..32]) {
            line.replace_range(60..64, "<age>");
        }
        for (name, placeholder) in names {
            line = line.replace(name, placeholder);
        }
        let words: Vec<String> = line
            .split(' ')
            .map(|word| {
                let place = word.split_once('-').is_some_and(|(n, id)| {
                    n.len() == 19 && n.bytes().all(|b| b.is_ascii_digit()) && id.len() == 32
                });
                let bare = word.trim_end_matches([':', ',', ')', '.']);
                if bare.len() == 32 && is_hex(bare) {
                    format!("<id>{}", &word[32..])
                } else if place {
                    "<place>".to_string()
                } else {
                    word.to_string()
                }
            })
            .collect();
        line = words.join(" ");
        // A compressed blob's size moves with the rows' timestamps.
        if let Some((head, tail)) = line.split_once(" blob (").or(line.split_once(" blobs (")) {
            if let Some((_, rest)) = tail.split_once(" bytes)") {
                let noun = if line.contains(" blobs (") {
                    "blobs"
                } else {
                    "blob"
                };
                line = format!("{head} {noun} (<size> bytes){rest}");
            }
        }
        if let Some(start) = line.find("took            ") {
            line = format!("{}took            <time>", &line[..start]);
        }
        out.push_str(&line);
        out.push('\n');
    }
    out
}
