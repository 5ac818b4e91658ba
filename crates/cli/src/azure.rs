//! `--app NAME --resource-group G`: the app's URL and a function key, asked of the Azure CLI,
//! so that a user signed in with `az login` needs neither.

use tokio::process::Command;

/// The app's base URL and its default function key.
pub async fn find_app(app: &str, group: &str) -> Result<(String, String), String> {
    let host = az(&[
        "functionapp",
        "show",
        "--name",
        app,
        "--resource-group",
        group,
        "--query",
        "defaultHostName",
        "--output",
        "tsv",
    ])
    .await?;
    let key = az(&[
        "functionapp",
        "keys",
        "list",
        "--name",
        app,
        "--resource-group",
        group,
        "--query",
        "functionKeys.default",
        "--output",
        "tsv",
    ])
    .await?;
    if host.is_empty() {
        return Err(format!(
            "the Azure CLI found no address for app {app} in {group}"
        ));
    }
    if key.is_empty() {
        return Err(format!(
            "app {app} has no default function key; pass one with --key"
        ));
    }
    Ok((format!("https://{host}"), key))
}

/// Runs `az` and returns its trimmed output, or what went wrong in a sentence.
async fn az(args: &[&str]) -> Result<String, String> {
    let output = Command::new("az").args(args).output().await.map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            "--app needs the Azure CLI (az), which is not installed: install it \
             (python3 -m pip install azure-cli) and sign in with `az login`, or pass --url and \
             --key instead"
                .to_string()
        } else {
            format!("the Azure CLI could not be run: {e}")
        }
    })?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let first = stderr
            .lines()
            .map(str::trim)
            .find(|l| !l.is_empty())
            .unwrap_or("no message");
        return Err(format!(
            "the Azure CLI failed (az {}): {first}",
            args[..2].join(" ")
        ));
    }
    Ok(String::from_utf8_lossy(&output.stdout).trim().to_string())
}
