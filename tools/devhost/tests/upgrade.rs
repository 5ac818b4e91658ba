//! A scan in flight across an upgrade: started by this build, then devhost stopped, the
//! handler replaced by another build, devhost started again, and the scan finishes exactly.
//!
//! The other build is this source with one change an ordinary refactoring could make: `ReadRange`
//! declares its serialised fields in another order, so every message and ledger row it writes
//! spells the same work item differently. It must read what this build wrote and compute the
//! same work-item ids (they hash the task in canonical JSON, see `WorkItem::id`); before that
//! rule, a reordered field stranded every scan in flight.
//!
//! The twin is built by cargo from a copy of the crate in the same target directory (only the
//! crate itself compiles again; its dependencies are reused).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use serde_json::json;

mod common;
use common::*;

/// The declarations `ReadRange` has in this build, and the order the twin gives them.
const REORDERINGS: [(&str, &str); 2] = [
    (
        "        #[serde(rename = \"pk\")]\n        partition_keys: KeyRange,\n        prefix: String,\n",
        "        prefix: String,\n        #[serde(rename = \"pk\")]\n        partition_keys: KeyRange,\n",
    ),
    (
        "        #[serde(rename = \"pk\")]\n        partition_key: String,\n        #[serde(rename = \"rk\")]\n        row_keys: KeyRange,\n        prefix: String,\n",
        "        prefix: String,\n        #[serde(rename = \"rk\")]\n        row_keys: KeyRange,\n        #[serde(rename = \"pk\")]\n        partition_key: String,\n",
    ),
];

/// Builds the twin handler once per test process; its path.
fn twin_handler() -> &'static Path {
    static TWIN: OnceLock<PathBuf> = OnceLock::new();
    TWIN.get_or_init(build_twin)
}

fn build_twin() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let profile_dir = handler_binary().parent().unwrap().to_path_buf();
    let target_dir = profile_dir.parent().unwrap().to_path_buf();
    let copy = target_dir.join("upgrade-twin");
    let _ = std::fs::remove_dir_all(&copy);
    copy_tree(&root.join("src"), &copy.join("src"));
    copy_tree(&root.join("benches"), &copy.join("benches"));
    // The crates the handler is made of, each depended on by path.
    for name in [
        "storage", "pace", "engine", "api", "ledger", "actions", "handler",
    ] {
        let dir = format!("crates/{name}");
        copy_tree(&root.join(&dir), &copy.join(&dir));
    }
    std::fs::copy(root.join("Cargo.lock"), copy.join("Cargo.lock")).unwrap();

    // Its own workspace (the copy lies inside this one's target directory), and a binary name
    // of its own so that it never replaces this build's handler.
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
    let workspace_start = manifest.find("[workspace]").expect("a [workspace] table");
    let workspace_end = manifest[workspace_start..]
        .find("\n\n")
        .map_or(manifest.len(), |n| workspace_start + n);
    let manifest = format!(
        "{}[workspace]{}",
        &manifest[..workspace_start],
        &manifest[workspace_end..]
    );
    std::fs::write(copy.join("Cargo.toml"), manifest).unwrap();
    let handler_manifest = copy.join("crates/handler/Cargo.toml");
    let text = std::fs::read_to_string(&handler_manifest).unwrap();
    assert!(
        text.contains("name = \"handler\""),
        "the handler's [[bin]] is named handler"
    );
    let text = text.replace("name = \"handler\"", "name = \"handler-twin\"");
    std::fs::write(&handler_manifest, text).unwrap();

    let item = copy.join("crates/engine/src/item.rs");
    let mut text = std::fs::read_to_string(&item).unwrap();
    for (ours, twins) in REORDERINGS {
        assert!(
            text.contains(ours),
            "crates/engine/src/item.rs no longer declares\n{ours}\nupdate this test's REORDERINGS"
        );
        text = text.replacen(ours, twins, 1);
    }
    std::fs::write(&item, text).unwrap();

    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(cargo)
        .args([
            "build",
            "--offline",
            "-p",
            "tablescan-handler",
            "--bin",
            "handler-twin",
            "--manifest-path",
        ])
        .arg(copy.join("Cargo.toml"))
        // In the profile of the handler beside this test, where the twin is looked for.
        .args(profile_dir.ends_with("release").then_some("--release"))
        .env("CARGO_TARGET_DIR", &target_dir)
        .status()
        .expect("cargo runs");
    assert!(status.success(), "the twin build failed");
    profile_dir.join("handler-twin")
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            copy_tree(&path, &to.join(entry.file_name()));
        } else {
            std::fs::copy(&path, to.join(entry.file_name())).unwrap();
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_scan_started_by_one_build_finishes_under_a_build_with_reordered_task_fields() {
    let twin = twin_handler().to_path_buf();
    let rows = rows();
    let source = table_with(&rows).await;
    let mut host = Host::start(
        2,
        &[
            ("TABLESCAN_STEP_MAX_QUERIES", "1"),
            ("TABLESCAN_STEP_LEASE_SECONDS", "2"),
            // The stopped host held its prefetched messages (for 10 minutes, as the real host
            // does); the re-drive sends those items again well before that.
            ("TABLESCAN_REDRIVE_AFTER_SECONDS", "2"),
        ],
    );
    let copy_name = unique("upgraded");
    let id = host
        .start_scan(json!({
            "table": source.name(),
            "pageSize": 10,
            "action": {"type": "copy", "table": copy_name},
        }))
        .await;
    let before = host.wait_for_steps(&id, 5).await;
    assert_eq!(
        before["state"], "running",
        "the scan must still be in flight when the handler is replaced: {before}"
    );

    // Upgrade and restart: the same app folder, ledger and queues. The new binary is renamed
    // into place (the running handlers keep the old one open) and runs from the restart on.
    let staged = host._dir.0.join("handler.new");
    std::fs::copy(&twin, &staged).unwrap();
    std::fs::rename(&staged, host._dir.0.join("handler")).unwrap();
    host.crash_and_restart();

    let after = host.wait(&id, Duration::from_secs(120)).await;
    assert_eq!(after["state"], "succeeded", "{after}");
    assert_eq!(after["progress"]["rowsRead"], rows.len() as u64, "{after}");
    assert_eq!(after["progress"]["stepsFailed"], 0, "{after}");
    let target = tables().table(&copy_name).unwrap();
    assert_same_rows(&target, &source, "the copy finished by the twin is exact").await;
}
