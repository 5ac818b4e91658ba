//! scripts/publish checks its prerequisites before it sends anything, and says what is missing.
//! (Publishing itself needs an Azure subscription; these machines have none.)

use std::process::Command;

fn publish(args: &[&str], path: &str) -> (bool, String) {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/publish");
    let output = Command::new("bash")
        .arg(script)
        .args(args)
        .env("PATH", path)
        .output()
        .unwrap();
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// A PATH with the basic tools and neither `func` nor `az`.
fn path_without_azure_tools() -> String {
    let dir = std::env::temp_dir().join(format!("publish-path-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for tool in [
        "bash", "dirname", "cat", "mktemp", "rm", "python3", "printf",
    ] {
        if let Ok(found) = which(tool) {
            let _ = std::os::unix::fs::symlink(found, dir.join(tool));
        }
    }
    dir.to_string_lossy().into_owned()
}

fn which(tool: &str) -> Result<std::path::PathBuf, ()> {
    std::env::var("PATH")
        .unwrap_or_default()
        .split(':')
        .map(|d| std::path::Path::new(d).join(tool))
        .find(|p| p.is_file())
        .ok_or(())
}

#[test]
fn without_an_app_name_it_says_how_to_call_it() {
    let (ok, err) = publish(&[], &std::env::var("PATH").unwrap());
    assert!(!ok);
    assert!(
        err.contains("--app is required") && err.contains("usage: scripts/publish"),
        "{err}"
    );
}

#[test]
fn without_core_tools_or_the_azure_cli_it_names_both_and_sends_nothing() {
    let path = path_without_azure_tools();
    let (ok, err) = publish(&["--app", "demo"], &path);
    let _ = std::fs::remove_dir_all(&path);
    assert!(!ok);
    assert!(
        err.contains("neither Azure Functions Core Tools (func) nor the Azure CLI (az)"),
        "{err}"
    );
    assert!(err.contains("az login"), "{err}");
}

#[test]
fn unknown_arguments_are_refused() {
    let (ok, err) = publish(
        &["--app", "demo", "--force"],
        &std::env::var("PATH").unwrap(),
    );
    assert!(!ok);
    assert!(err.contains("unknown argument --force"), "{err}");
}
