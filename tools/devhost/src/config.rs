//! What devhost reads: host.json, every `<Function>/function.json` directly under the script
//! root, and the app settings of local.settings.json (or its .example) — the same files
//! `func start` reads, and no others.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

/// The parts of host.json devhost acts on.
#[derive(Debug, Clone)]
pub struct HostConfig {
    pub executable: String,
    pub arguments: Vec<String>,
    pub working_directory: String,
    pub forwarding: bool,
    pub function_timeout: Duration,
    pub route_prefix: String,
    pub queues: QueueSettings,
}

/// `extensions.queues`, with the Queues extension's defaults (local host: 2 s polling).
#[derive(Debug, Clone, PartialEq)]
pub struct QueueSettings {
    pub batch_size: u8,
    pub new_batch_threshold: usize,
    pub max_polling_interval: Duration,
    pub visibility_timeout: Duration,
    pub max_dequeue_count: u32,
    pub base64: bool,
}

/// One binding of a function.json.
#[derive(Debug, Clone)]
pub struct Binding {
    pub name: String,
    pub kind: String,
    pub direction: String,
    pub queue_name: Option<String>,
    pub connection: String,
    pub route: Option<String>,
    pub methods: Vec<String>,
    /// An HTTP trigger's `authLevel`: `anonymous`, `function` (the host's default) or `admin`.
    pub auth_level: String,
    pub binary: bool,
    /// A timer trigger's `schedule` and `runOnStartup`.
    pub schedule: Option<String>,
    pub run_on_startup: bool,
}

/// A function: its folder name and bindings.
#[derive(Debug, Clone)]
pub struct Function {
    pub name: String,
    pub bindings: Vec<Binding>,
}

impl Function {
    pub fn trigger(&self) -> Option<&Binding> {
        self.bindings
            .iter()
            .find(|b| b.direction == "in" && b.kind.ends_with("Trigger"))
    }

    pub fn outputs(&self) -> impl Iterator<Item = &Binding> {
        self.bindings.iter().filter(|b| b.direction == "out")
    }

    /// HTTP in and out and nothing else: the only functions forwarding mode applies to.
    pub fn is_http_in_and_out(&self) -> bool {
        let inputs: Vec<_> = self
            .bindings
            .iter()
            .filter(|b| b.direction == "in")
            .collect();
        let outputs: Vec<_> = self.outputs().collect();
        inputs.len() == 1
            && inputs[0].kind == "httpTrigger"
            && outputs.len() == 1
            && outputs[0].kind == "http"
    }
}

/// Parses `hh:mm:ss` (optionally `d.hh:mm:ss` and fractional seconds), as host.json writes
/// TimeSpans; `-1` means no limit.
pub fn parse_timespan(text: &str) -> Option<Duration> {
    let text = text.trim();
    if text == "-1" {
        return Some(Duration::MAX);
    }
    let (days, rest) = match text.split_once('.') {
        Some((d, rest)) if !d.contains(':') => (d.parse::<u64>().ok()?, rest),
        _ => (0, text),
    };
    let parts: Vec<&str> = rest.split(':').collect();
    let [h, m, s] = parts.as_slice() else {
        return None;
    };
    let seconds: f64 = s.parse().ok()?;
    let total = days as f64 * 86400.0
        + h.parse::<f64>().ok()? * 3600.0
        + m.parse::<f64>().ok()? * 60.0
        + seconds;
    (total >= 0.0).then(|| Duration::from_secs_f64(total))
}

fn get<'a>(value: &'a Value, path: &[&str]) -> Option<&'a Value> {
    path.iter().try_fold(value, |v, key| {
        v.as_object()?
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(key))
            .map(|(_, v)| v)
    })
}

impl HostConfig {
    pub fn load(script_root: &Path) -> Result<HostConfig, String> {
        let path = script_root.join("host.json");
        let text = std::fs::read_to_string(&path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let host: Value = serde_json::from_str(&text)
            .map_err(|e| format!("{} is not JSON: {e}", path.display()))?;
        Self::from_json(&host)
    }

    pub fn from_json(host: &Value) -> Result<HostConfig, String> {
        let section = get(host, &["customHandler"])
            .or_else(|| get(host, &["httpWorker"]))
            .ok_or("host.json has no customHandler section")?;
        let executable = get(section, &["description", "defaultExecutablePath"])
            .and_then(Value::as_str)
            .ok_or("host.json has no customHandler.description.defaultExecutablePath")?
            .to_string();
        let arguments = get(section, &["description", "arguments"])
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default();
        let working_directory = get(section, &["description", "workingDirectory"])
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let forwarding = get(section, &["enableForwardingHttpRequest"])
            .and_then(Value::as_bool)
            .unwrap_or(false);
        let timespan = |path: &[&str], default: Duration| -> Result<Duration, String> {
            match get(host, path).and_then(Value::as_str) {
                None => Ok(default),
                Some(text) => parse_timespan(text).ok_or_else(|| {
                    format!("host.json {} is not a TimeSpan: {text}", path.join("."))
                }),
            }
        };
        let number = |path: &[&str], default: u64| {
            get(host, path).and_then(Value::as_u64).unwrap_or(default)
        };
        let batch_size = number(&["extensions", "queues", "batchSize"], 16).clamp(1, 32) as u8;
        let queues = QueueSettings {
            batch_size,
            // Locally the threshold is (batchSize / 2) * processor count.
            new_batch_threshold: number(
                &["extensions", "queues", "newBatchThreshold"],
                u64::from(batch_size / 2)
                    * std::thread::available_parallelism().map_or(1, |n| n.get() as u64),
            ) as usize,
            max_polling_interval: timespan(
                &["extensions", "queues", "maxPollingInterval"],
                Duration::from_secs(2),
            )?,
            visibility_timeout: timespan(
                &["extensions", "queues", "visibilityTimeout"],
                Duration::ZERO,
            )?,
            max_dequeue_count: number(&["extensions", "queues", "maxDequeueCount"], 5).max(1)
                as u32,
            base64: get(host, &["extensions", "queues", "messageEncoding"])
                .and_then(Value::as_str)
                .is_none_or(|e| !e.eq_ignore_ascii_case("none")),
        };
        Ok(HostConfig {
            executable,
            arguments,
            working_directory,
            forwarding,
            // Locally (as under `func start`) the default is 30 minutes.
            function_timeout: timespan(&["functionTimeout"], Duration::from_secs(30 * 60))?,
            route_prefix: get(host, &["extensions", "http", "routePrefix"])
                .and_then(Value::as_str)
                .unwrap_or("api")
                .to_string(),
            queues,
        })
    }
}

/// Every function under the script root, by folder name.
pub fn load_functions(script_root: &Path) -> Result<Vec<Function>, String> {
    let mut functions = Vec::new();
    let entries = std::fs::read_dir(script_root)
        .map_err(|e| format!("cannot read {}: {e}", script_root.display()))?;
    for entry in entries.flatten() {
        let path = entry.path().join("function.json");
        if !path.is_file() {
            continue;
        }
        let text = std::fs::read_to_string(&path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let json: Value = serde_json::from_str(&text)
            .map_err(|e| format!("{} is not JSON: {e}", path.display()))?;
        let bindings = json["bindings"]
            .as_array()
            .ok_or_else(|| format!("{} has no bindings", path.display()))?
            .iter()
            .map(|b| Binding {
                name: b["name"].as_str().unwrap_or_default().to_string(),
                kind: b["type"].as_str().unwrap_or_default().to_string(),
                direction: b["direction"].as_str().unwrap_or_default().to_string(),
                queue_name: b["queueName"].as_str().map(str::to_lowercase),
                connection: b["connection"]
                    .as_str()
                    .unwrap_or("AzureWebJobsStorage")
                    .to_string(),
                route: b["route"].as_str().map(str::to_string),
                auth_level: b["authLevel"]
                    .as_str()
                    .unwrap_or("function")
                    .to_ascii_lowercase(),
                methods: b["methods"]
                    .as_array()
                    .map(|m| {
                        m.iter()
                            .filter_map(|v| v.as_str().map(str::to_ascii_uppercase))
                            .collect()
                    })
                    .unwrap_or_default(),
                binary: b["dataType"].as_str() == Some("binary"),
                schedule: b["schedule"].as_str().map(str::to_string),
                run_on_startup: b["runOnStartup"].as_bool().unwrap_or(false),
            })
            .collect();
        functions.push(Function {
            name: entry.file_name().to_string_lossy().into_owned(),
            bindings,
        });
    }
    functions.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(functions)
}

/// App settings: `Values` of local.settings.json, else of local.settings.json.example, looked
/// for in the script root and then in the current folder (the repository root).
pub fn load_settings(script_root: &Path) -> BTreeMap<String, String> {
    let candidates: Vec<PathBuf> = [script_root, Path::new(".")]
        .iter()
        .flat_map(|dir| {
            [
                dir.join("local.settings.json"),
                dir.join("local.settings.json.example"),
            ]
        })
        .collect();
    for path in candidates {
        if let Ok(text) = std::fs::read_to_string(&path) {
            if let Ok(json) = serde_json::from_str::<Value>(&text) {
                if let Some(values) = json["Values"].as_object() {
                    return values
                        .iter()
                        .map(|(k, v)| {
                            (
                                k.clone(),
                                v.as_str().map_or_else(|| v.to_string(), str::to_string),
                            )
                        })
                        .collect();
                }
            }
        }
    }
    BTreeMap::new()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timespans() {
        assert_eq!(parse_timespan("00:10:00"), Some(Duration::from_secs(600)));
        assert_eq!(parse_timespan("00:00:02"), Some(Duration::from_secs(2)));
        assert_eq!(
            parse_timespan("00:00:00.5"),
            Some(Duration::from_millis(500))
        );
        assert_eq!(
            parse_timespan("1.00:00:00"),
            Some(Duration::from_secs(86400))
        );
        assert_eq!(parse_timespan("-1"), Some(Duration::MAX));
        assert_eq!(parse_timespan("ten minutes"), None);
    }

    #[test]
    fn the_projects_host_json_is_understood() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let host = HostConfig::load(&root).unwrap();
        assert_eq!(host.executable, "handler");
        assert_eq!(host.function_timeout, Duration::from_secs(600));
        assert_eq!(host.queues.batch_size, 16);
        assert_eq!(host.queues.new_batch_threshold, 8);
        assert_eq!(host.queues.visibility_timeout, Duration::from_secs(30));
        assert!(host.queues.base64);
        let functions = load_functions(&root.join("function_app")).unwrap();
        let range = functions.iter().find(|f| f.name == "ScanRange").unwrap();
        assert_eq!(
            range.trigger().unwrap().queue_name.as_deref(),
            Some("tablescan-range")
        );
        let get = functions.iter().find(|f| f.name == "GetScan").unwrap();
        assert!(get.is_http_in_and_out());
        let start = functions.iter().find(|f| f.name == "StartScan").unwrap();
        assert!(
            !start.is_http_in_and_out(),
            "a queue output makes it payload mode whatever the flags"
        );
    }

    #[test]
    fn defaults_follow_the_queues_extension() {
        let host = HostConfig::from_json(
            &serde_json::json!({"customHandler": {"description": {"defaultExecutablePath": "h"}}}),
        )
        .unwrap();
        assert_eq!(host.queues.max_dequeue_count, 5);
        assert_eq!(host.queues.visibility_timeout, Duration::ZERO);
        assert_eq!(host.queues.max_polling_interval, Duration::from_secs(2));
        assert_eq!(host.function_timeout, Duration::from_secs(1800));
        assert!(HostConfig::from_json(&serde_json::json!({})).is_err());
    }
}
