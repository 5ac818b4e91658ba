//! scripts/publish checks its prerequisites before it sends anything, and says what is missing;
//! with stand-ins for `func` and `az` that record their calls, it publishes what the package
//! holds the way each tool needs. (Publishing for real needs an Azure subscription; these
//! machines have none.)

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

/// A folder of stand-ins for `func` and `az` that record how they were called (and, for
/// `func`, what the folder it publishes holds) in `record`.
fn fake_azure_tools(record: &std::path::Path, with_func: bool, n: u32) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("publish-fakes-{}-{n}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let az = format!(
        "#!/bin/sh\necho \"az $*\" >> '{}'\nexit 0\n",
        record.display()
    );
    std::fs::write(dir.join("az"), az).unwrap();
    if with_func {
        let func = format!(
            "#!/bin/sh\n{{ echo \"func $*\"; find . -type f | sort; [ -x handler ] && echo executable; cat local.settings.json; }} >> '{}'\n",
            record.display()
        );
        std::fs::write(dir.join("func"), func).unwrap();
    }
    for tool in ["az", "func"] {
        let path = dir.join(tool);
        if path.exists() {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
    }
    dir
}

/// A small package: an executable handler and a host.json, zipped as scripts/package does.
fn small_package(dir: &std::path::Path) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let app = dir.join("app");
    std::fs::create_dir_all(app.join("GetScan")).unwrap();
    std::fs::write(app.join("handler"), "#!/bin/sh\n").unwrap();
    std::fs::set_permissions(app.join("handler"), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(app.join("host.json"), "{}").unwrap();
    std::fs::write(app.join("GetScan/function.json"), "{}").unwrap();
    let zip = dir.join("package.zip");
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/lib/zip_app.py");
    let status = Command::new("python3")
        .arg(script)
        .arg(&app)
        .arg(&zip)
        .status()
        .unwrap();
    assert!(status.success());
    zip
}

/// A folder with a small package, the stand-ins and their record; removed when dropped.
struct Publishing {
    dir: std::path::PathBuf,
    fakes: std::path::PathBuf,
    record: std::path::PathBuf,
    zip: std::path::PathBuf,
}

impl Publishing {
    fn new(with_func: bool) -> Publishing {
        // One folder per test: tests of one process run side by side.
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("publish-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let record = dir.join("record.txt");
        let fakes = fake_azure_tools(&record, with_func, n);
        let zip = small_package(&dir);
        Publishing {
            dir,
            fakes,
            record,
            zip,
        }
    }

    /// Publishes the package to app `demo` in group `rg` with this PATH.
    fn publish_to_demo(&self, path: &str) -> (bool, String) {
        let zip = self.zip.to_str().unwrap();
        publish(
            &["--app", "demo", "--resource-group", "rg", "--package", zip],
            path,
        )
    }

    /// What the stand-ins recorded.
    fn calls(&self) -> String {
        std::fs::read_to_string(&self.record).unwrap_or_default()
    }
}

impl Drop for Publishing {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
        let _ = std::fs::remove_dir_all(&self.fakes);
    }
}

#[test]
fn with_core_tools_it_publishes_the_unpacked_package_as_a_custom_handler() {
    let publishing = Publishing::new(true);
    let path = format!(
        "{}:{}",
        publishing.fakes.display(),
        std::env::var("PATH").unwrap()
    );
    let (ok, err) = publishing.publish_to_demo(&path);
    let calls = publishing.calls();
    assert!(ok, "{err}\n{calls}");
    assert!(
        calls.contains("az account show"),
        "signed-in check first: {calls}"
    );
    assert!(
        calls.contains("az functionapp show --name demo --resource-group rg"),
        "{calls}"
    );
    assert!(
        calls.contains("func azure functionapp publish demo"),
        "{calls}"
    );
    for file in [
        "./handler",
        "./host.json",
        "./GetScan/function.json",
        "./.funcignore",
    ] {
        assert!(
            calls.contains(file),
            "{file} in the published folder: {calls}"
        );
    }
    assert!(
        calls.contains("executable"),
        "the handler keeps its execute bit: {calls}"
    );
    assert!(
        calls.contains("\"FUNCTIONS_WORKER_RUNTIME\": \"custom\""),
        "{calls}"
    );
}

#[test]
fn without_core_tools_it_zip_deploys_with_the_azure_cli() {
    let publishing = Publishing::new(false);
    let zip = &publishing.zip;
    // Only the fakes and the basic tools: no real `func` can be found.
    let basic = path_without_azure_tools();
    let path = format!("{}:{basic}", publishing.fakes.display());
    let (ok, err) = publish(
        &["--app", "demo", "--package", zip.to_str().unwrap()],
        &path,
    );
    assert!(!ok, "the Azure CLI needs the resource group");
    assert!(err.contains("needs --resource-group"), "{err}");
    let (ok, err) = publishing.publish_to_demo(&path);
    let calls = publishing.calls();
    let _ = std::fs::remove_dir_all(&basic);
    assert!(ok, "{err}\n{calls}");
    assert!(
        calls.contains(&format!(
            "az functionapp deployment source config-zip --name demo --resource-group rg --src {}",
            zip.display()
        )),
        "{calls}"
    );
}

/// An app that runs from a package in Blob storage (the Linux Consumption template: no account
/// keys, the app reads its package with its identity) gets the package uploaded to that blob
/// with the publisher's own sign-in, and is restarted; neither Core Tools nor zip deploy runs.
#[test]
fn an_app_that_runs_from_a_blob_gets_its_package_uploaded_there() {
    let publishing = Publishing::new(true);
    let url = "https://tsabc.blob.core.windows.net/app-package/tablescan.zip";
    let az = format!(
        "#!/bin/sh\necho \"az $*\" >> '{}'\n[ \"$1 $2 $3\" = \"functionapp config appsettings\" ] && echo '{url}'\nexit 0\n",
        publishing.record.display()
    );
    std::fs::write(publishing.fakes.join("az"), az).unwrap();
    let path = format!(
        "{}:{}",
        publishing.fakes.display(),
        std::env::var("PATH").unwrap()
    );
    let (ok, err) = publishing.publish_to_demo(&path);
    let calls = publishing.calls();
    assert!(ok, "{err}\n{calls}");
    assert!(
        calls.contains(&format!(
            "az storage blob upload --auth-mode login --blob-url {url} --file {} --overwrite",
            publishing.zip.display()
        )),
        "{calls}"
    );
    assert!(
        calls.contains("az functionapp restart --name demo --resource-group rg"),
        "{calls}"
    );
    assert!(!calls.contains("func azure"), "{calls}");
    assert!(!calls.contains("config-zip"), "{calls}");
}
