//! Export and import prefixes that would leave their container are refused at the API.

use super::*;

fn settings(name: &str) -> Option<String> {
    (name == DEFAULT_CONNECTION).then(|| "UseDevelopmentStorage=true".to_string())
}

/// A `..` (or `.`) segment in a prefix, in any spelling URL parsers resolve, is a 400 naming
/// the field: the URL parser removes dot segments, so `"../$web/"` would write a table's rows
/// into the static website container, and `"../azure-webjobs-secrets/"` past the guard on the
/// host's own containers.
#[test]
fn a_prefix_with_a_dot_segment_is_refused_naming_its_field() {
    let prefixes = [
        "../$web/",
        "../azure-webjobs-secrets",
        "a/../../b",
        "%2e%2e/$web/",
        "%2E%2e/x",
        ".%2e/x",
        "%2e./x",
        "./x",
        "a/./b",
        "..\\$web\\",
        "%252e%252e/x",
        "..",
    ];
    for prefix in prefixes {
        let export = serde_json::json!({"table": "orders",
            "action": {"type": "export", "container": "backups", "prefix": prefix}});
        let error = ScanSpec::parse(&export.to_string(), &settings).unwrap_err();
        assert_eq!(error.field, "action.prefix", "{prefix}: {error}");
        assert!(error.message.contains("'..' segment"), "{prefix}: {error}");
        let import = serde_json::json!({"import": {"container": "backups", "prefix": prefix},
            "action": {"type": "count"}});
        let error = ScanSpec::parse(&import.to_string(), &settings).unwrap_err();
        assert_eq!(error.field, "import.prefix", "{prefix}: {error}");
    }
    // Dots inside a name are fine.
    for prefix in ["a..b/", "v1.2/", "...x/", ".hidden/"] {
        let export = serde_json::json!({"table": "orders",
            "action": {"type": "export", "container": "backups", "prefix": prefix}});
        assert!(
            ScanSpec::parse(&export.to_string(), &settings).is_ok(),
            "{prefix}"
        );
    }
}
