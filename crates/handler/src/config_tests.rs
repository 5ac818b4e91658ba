use std::collections::HashMap;
use std::io::ErrorKind;
use std::time::Duration;

use super::*;
use crate::allowlist::EntryProblem;

/// A self-signed certificate (no key kept): a file of it is a good `TABLESCAN_TRUSTED_CA_FILE`.
const CERTIFICATE: &str = "-----BEGIN CERTIFICATE-----
MIIBmDCCAT2gAwIBAgIUISaG1WcRWltLF1VHzu5yn2aBREAwCgYIKoZIzj0EAwIw
IDEeMBwGA1UEAwwVdGFibGVzY2FuIGNvbmZpZyB0ZXN0MCAXDTI2MTEyNjA1NDQ0
NVoYDzIxMjYxMTAyMDU0NDQ1WjAgMR4wHAYDVQQDDBV0YWJsZXNjYW4gY29uZmln
IHRlc3QwWTATBgcqhkjOPQIBBggqhkjOPQMBBwNCAAS6XZ+zkPjFZjQUOfpL1eOW
UYNivudIibHipWpARnKEfQnYz4+biHcXAxjEI1rCfxqsVDahC4lIeSOPTTSZfURB
o1MwUTAdBgNVHQ4EFgQUwHPuvt2c2+/UBxw3wXzAkZFTRKYwHwYDVR0jBBgwFoAU
wHPuvt2c2+/UBxw3wXzAkZFTRKYwDwYDVR0TAQH/BAUwAwEB/zAKBggqhkjOPQQD
AgNJADBGAiEA/t5W8F/DUe+1artAj/p+/hPZMA8oeQldfVRygzodTKcCIQCSO6+U
vyZ5tCJ5dIdZpzoOnkdkZS8Wx0cvx8KmgljhMQ==
-----END CERTIFICATE-----
";

fn lookup(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let map: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    move |name: &str| map.get(name).cloned()
}

/// A file in a folder of this test's own, removed when dropped.
struct TempFile(std::path::PathBuf);

impl TempFile {
    fn new(name: &str, text: &str) -> TempFile {
        let dir = std::env::temp_dir().join(format!(
            "tablescan-config-{}-{}",
            std::process::id(),
            uuid::Uuid::new_v4().simple()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(name), text).unwrap();
        TempFile(dir.join(name))
    }

    fn path(&self) -> &str {
        self.0.to_str().unwrap()
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(self.0.parent().unwrap());
    }
}

/// The one error reading `setting` = `value` gives.
fn error_of(setting: Setting, value: &str) -> SettingError {
    let settings = lookup(&[(setting.name(), value)]);
    if setting == Setting::Log {
        return log_filter(&settings).expect_err(value);
    }
    let ConfigError(mut errors) = Config::parse(&settings).expect_err(value);
    assert_eq!(errors.len(), 1, "{value:?}: {errors:?}");
    errors.remove(0)
}

#[test]
fn every_bad_value_is_an_error_naming_its_setting_and_what_was_wrong() {
    use Problem::*;
    use Setting::*;
    let no_pem = TempFile::new("notes.txt", "not a certificate\n");
    let entry = |position, problem| NotAnAllowlist(AllowlistError::Entry { position, problem });
    let range = |min, max| OutOfRange { min, max };
    let cases: Vec<(Setting, &str, Problem)> = vec![
        (StepMaxQueries, "twenty", NotANumber),
        (StepMaxQueries, "0", Zero),
        (StepMaxQueries, "1001", range(1, 1000)),
        (StepMaxSeconds, "15s", NotANumber),
        (StepMaxSeconds, "-1", NotANumber),
        (StepMaxSeconds, "1.5", NotANumber),
        (StepMaxSeconds, "301", range(1, 300)),
        (StepMaxSeconds, "99999999999999999999999", range(1, 300)),
        (StepLeaseSeconds, "1m", NotANumber),
        (StepLeaseSeconds, "0", Zero),
        (StepLeaseSeconds, "3601", range(1, 3600)),
        (RedriveAfterSeconds, "15 minutes", NotANumber),
        (RedriveAfterSeconds, "604801", range(1, 604_800)),
        (OutageWindowSeconds, "0", Zero),
        (OutageWindowSeconds, "604801", range(1, 604_800)),
        (
            LedgerTable,
            "scan_ledger",
            NotATableName {
                rule: "it may contain only ASCII letters and digits",
            },
        ),
        (
            LedgerTable,
            "ab",
            NotATableName {
                rule: "it must be 3 to 63 characters long",
            },
        ),
        (
            LedgerTable,
            "1ledger",
            NotATableName {
                rule: "it must start with a letter",
            },
        ),
        (LedgerConnection, "Ledger Storage", NotAConnectionName),
        (MaxRowsPerSecond, "lots", NotANumber),
        (MaxRowsPerSecond, "0", Zero),
        (MaxRowsPerSecond, "10000001", range(1, 10_000_000)),
        (Connections, "DATA", entry(1, EntryProblem::NoAccess)),
        (
            Connections,
            "DATA:rwx",
            entry(1, EntryProblem::UnknownAccess),
        ),
        (Connections, "", NotAnAllowlist(AllowlistError::Empty)),
        (
            TrustedCaFile,
            "/nonexistent/ca.pem",
            Unreadable(ErrorKind::NotFound),
        ),
        (TrustedCaFile, no_pem.path(), NoCertificate),
    ];
    for (setting, value, problem) in cases {
        let error = error_of(setting, value);
        assert_eq!(
            (error.setting, &error.problem),
            (setting, &problem),
            "{value:?}"
        );
        let message = error.to_string();
        assert!(
            message.starts_with(&format!("the app setting {}", setting.name())),
            "{message}"
        );
        // Never quoted where a pasted connection string may stand.
        if !matches!(setting, Connections | LedgerConnection) {
            assert!(message.contains(&format!("{value:?}")), "quoted: {message}");
        }
        if let OutOfRange { min, max } = problem {
            assert!(message.contains(&format!("{min} to {max}")), "{message}");
        }
    }
    // The log filter: its parser's reason, and the value.
    let error = error_of(Log, "info,tablescan=loud");
    assert_eq!(error.setting, Log);
    assert!(matches!(error.problem, NotALogFilter(_)), "{error:?}");
    assert!(
        error.to_string().contains("\"info,tablescan=loud\""),
        "{error}"
    );
}

#[test]
fn every_setting_the_handler_reads_has_a_bad_value_that_names_it() {
    let no_pem = TempFile::new("empty.pem", "");
    for setting in Setting::ALL {
        let bad = match setting {
            Setting::TrustedCaFile => no_pem.path(),
            Setting::Connections => "DATA",
            Setting::Log => "info,tablescan=loud",
            _ => "15s!",
        };
        let error = error_of(setting, bad);
        assert_eq!(error.setting, setting);
        assert!(error.to_string().contains(setting.name()), "{error}");
    }
}

#[test]
fn the_list_of_connections_is_never_echoed() {
    let pasted = "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=c2VjcmV0";
    let error = error_of(Setting::Connections, pasted);
    assert_eq!(error.value, None);
    let message = error.to_string();
    assert!(
        !message.contains("c2VjcmV0") && !message.contains("acct"),
        "{message}"
    );
}

/// The list's own refusal of a pasted connection string (`allowlist`), as the config reports
/// it: named by its setting, without a word of the string.
#[test]
fn a_connection_string_pasted_into_the_list_is_named_by_its_setting_and_not_echoed() {
    let pasted = "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=c2VjcmV0;\
                  BlobEndpoint=https://acct.blob.core.windows.net/";
    let named =
        Config::parse(&|name: &str| (name == CONNECTIONS_SETTING).then(|| pasted.to_string()))
            .unwrap_err()
            .to_string();
    assert!(
        named.starts_with("the app setting TABLESCAN_CONNECTIONS "),
        "{named}"
    );
    assert!(
        !named.contains("c2VjcmV0") && !named.contains("acct"),
        "{named}"
    );
}

#[test]
fn every_bad_setting_is_reported_at_once() {
    let settings = lookup(&[
        ("TABLESCAN_STEP_MAX_SECONDS", "15s"),
        ("TABLESCAN_STEP_MAX_QUERIES", "20"),
        ("TABLESCAN_LEDGER_TABLE", "scan-ledger"),
    ]);
    let error = Config::parse(&settings).unwrap_err();
    let named: Vec<Setting> = error.0.iter().map(|e| e.setting).collect();
    assert_eq!(named, [Setting::StepMaxSeconds, Setting::LedgerTable]);
    let message = error.to_string();
    assert!(
        message.contains("TABLESCAN_STEP_MAX_SECONDS")
            && message.contains("TABLESCAN_LEDGER_TABLE"),
        "{message}"
    );
}

#[test]
fn absent_settings_give_the_documented_defaults() {
    let config = Config::parse(&lookup(&[])).unwrap();
    assert_eq!(config.budget.max_queries, 20);
    assert_eq!(config.budget.max_duration, Duration::from_secs(15));
    assert_eq!(config.lease, Duration::from_secs(60));
    assert_eq!(config.redrive_after, Duration::from_secs(900));
    assert_eq!(config.outage_window, Duration::from_secs(1800));
    assert_eq!(config.ledger_table, "tablescanledger");
    assert_eq!(config.ledger_connection, "AzureWebJobsStorage");
    assert_eq!(config.default_cap, None);
    assert_eq!(config.connections, None);
    assert!(config.trusted_roots.is_none());
    assert!(log_filter(&lookup(&[])).is_ok());
}

#[test]
fn empty_settings_give_the_defaults_but_an_empty_list_of_connections_is_refused() {
    let every_empty: Vec<(&str, &str)> = Setting::ALL
        .iter()
        .filter(|s| **s != Setting::Connections)
        .map(|s| (s.name(), " "))
        .collect();
    let config = Config::parse(&lookup(&every_empty)).unwrap();
    assert_eq!(config.budget.max_duration, Duration::from_secs(15));
    assert_eq!(config.ledger_connection, "AzureWebJobsStorage");
    assert!(config.trusted_roots.is_none());
    assert!(log_filter(&lookup(&every_empty)).is_ok());
    assert!(Config::parse(&lookup(&[("TABLESCAN_CONNECTIONS", "")])).is_err());
}

#[test]
fn a_ledger_connection_that_is_not_a_name_is_not_echoed() {
    let pasted = "DefaultEndpointsProtocol=https;AccountName=a;AccountKey=c2VjcmV0";
    let error = error_of(Setting::LedgerConnection, pasted);
    assert_eq!(error.problem, Problem::NotAConnectionName);
    assert!(!error.to_string().contains("AccountKey"), "{error}");
    assert!(error.to_string().contains("TABLESCAN_LEDGER_CONNECTION"));
}

#[test]
fn good_values_are_read_as_given_at_the_edges_of_their_ranges() {
    let ca = TempFile::new("ca.pem", CERTIFICATE);
    let config = Config::parse(&lookup(&[
        ("TABLESCAN_STEP_MAX_QUERIES", "1000"),
        ("TABLESCAN_STEP_MAX_SECONDS", " 300 "),
        ("TABLESCAN_STEP_LEASE_SECONDS", "1"),
        ("TABLESCAN_REDRIVE_AFTER_SECONDS", "604800"),
        ("TABLESCAN_OUTAGE_WINDOW_SECONDS", "3"),
        ("TABLESCAN_LEDGER_TABLE", "myLedger2"),
        ("TABLESCAN_LEDGER_CONNECTION", "LEDGER_STORAGE"),
        ("TABLESCAN_MAX_ROWS_PER_SECOND", "10000000"),
        ("TABLESCAN_CONNECTIONS", "Orders:ro, Backup:rw"),
        ("TABLESCAN_TRUSTED_CA_FILE", ca.path()),
    ]))
    .unwrap();
    assert_eq!(config.budget.max_queries, 1000);
    assert_eq!(config.budget.max_duration, Duration::from_secs(300));
    assert_eq!(config.lease, Duration::from_secs(1));
    assert_eq!(config.redrive_after, Duration::from_secs(604_800));
    assert_eq!(config.outage_window, Duration::from_secs(3));
    assert_eq!(config.ledger_table, "myLedger2");
    assert_eq!(config.ledger_connection, "LEDGER_STORAGE");
    assert_eq!(config.default_cap, Some(10_000_000));
    assert_eq!(
        config.connections,
        Some(Allowlist::parse("Orders:ro,Backup:rw").unwrap())
    );
    assert_eq!(config.trusted_roots.unwrap().certificates().len(), 1);
    for unlimited in ["unlimited", "Unlimited"] {
        let settings = lookup(&[("TABLESCAN_MAX_ROWS_PER_SECOND", unlimited)]);
        assert_eq!(Config::parse(&settings).unwrap().default_cap, None);
    }
    let settings = lookup(&[("TABLESCAN_LOG", "info,crate::pacing=debug")]);
    assert!(log_filter(&settings).is_ok());
}
