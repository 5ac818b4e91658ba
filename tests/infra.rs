//! The ARM templates of infra/: no tool that validates ARM or Bicep without an Azure login
//! installs from the registries these machines reach, so this test checks what a deployment
//! would otherwise fail on late: the document's shape, every expression's brackets and quotes,
//! every parameter and variable it names declared (and every declared one used), every
//! `dependsOn` naming a resource of the template, API versions, and the settings the handler
//! and the host need on each plan.

use std::collections::BTreeSet;
use std::path::Path;

use serde_json::Value;
use tablescan::functions::names::{EXPORT_QUEUE, PARTITION_QUEUE, RANGE_QUEUE, STORAGE_CONNECTION};

fn template(name: &str) -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("infra")
        .join(name);
    let text = std::fs::read_to_string(&path).unwrap();
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every string in the document, with its JSON path.
fn strings<'a>(value: &'a Value, path: String, out: &mut Vec<(String, &'a str)>) {
    match value {
        Value::String(s) => out.push((path, s)),
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                strings(item, format!("{path}[{i}]"), out);
            }
        }
        Value::Object(map) => {
            for (key, item) in map {
                strings(item, format!("{path}.{key}"), out);
            }
        }
        _ => {}
    }
}

/// Checks an ARM expression's quotes and parentheses; returns the names it passes to
/// `function('...')` for the given function.
fn check_expression(path: &str, text: &str) -> Vec<(String, String)> {
    let inner = &text[1..text.len() - 1];
    let (mut depth, mut quoted, mut calls) = (0i32, false, Vec::new());
    let chars: Vec<char> = inner.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if quoted {
            if c == '\'' {
                if chars.get(i + 1) == Some(&'\'') {
                    i += 1; // an escaped quote
                } else {
                    quoted = false;
                }
            }
        } else {
            match c {
                '\'' => quoted = true,
                '(' => depth += 1,
                ')' => depth -= 1,
                _ => {}
            }
            assert!(depth >= 0, "{path}: unbalanced ')' in {text}");
        }
        i += 1;
    }
    assert!(
        !quoted && depth == 0,
        "{path}: unbalanced quotes or parentheses in {text}"
    );
    for function in ["parameters", "variables"] {
        let mut rest = inner;
        while let Some(at) = rest.find(&format!("{function}('")) {
            let after = &rest[at + function.len() + 2..];
            let end = after.find('\'').unwrap();
            calls.push((function.to_string(), after[..end].to_string()));
            rest = &after[end..];
        }
    }
    calls
}

fn check_template(name: &str) -> Value {
    let doc = template(name);
    assert_eq!(
        doc["$schema"],
        "https://schema.management.azure.com/schemas/2019-04-01/deploymentTemplate.json#"
    );
    assert!(doc["contentVersion"].is_string());
    let declared = |section: &str| -> BTreeSet<String> {
        doc[section]
            .as_object()
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default()
    };
    let (parameters, variables) = (declared("parameters"), declared("variables"));
    let mut all = Vec::new();
    strings(&doc, String::new(), &mut all);
    let mut used: BTreeSet<(String, String)> = BTreeSet::new();
    for (path, text) in &all {
        if text.starts_with('[') && !text.starts_with("[[") {
            assert!(
                text.ends_with(']'),
                "{name}{path}: an expression must end with ']'"
            );
            used.extend(check_expression(&format!("{name}{path}"), text));
        }
    }
    for (function, referenced) in &used {
        let known = if function == "parameters" {
            &parameters
        } else {
            &variables
        };
        assert!(
            known.contains(referenced),
            "{name}: {function}('{referenced}') is not declared"
        );
    }
    for p in &parameters {
        assert!(
            used.contains(&("parameters".into(), p.clone())),
            "{name}: parameter {p} is unused"
        );
    }
    for v in &variables {
        assert!(
            used.contains(&("variables".into(), v.clone())),
            "{name}: variable {v} is unused"
        );
    }
    let resources = doc["resources"].as_array().expect("resources");
    let types: BTreeSet<&str> = resources
        .iter()
        .map(|r| r["type"].as_str().unwrap())
        .collect();
    for resource in resources {
        let kind = resource["type"].as_str().unwrap();
        let version = resource["apiVersion"].as_str().unwrap_or_default();
        assert!(
            version.len() >= 10
                && version[..10]
                    .chars()
                    .all(|c| c.is_ascii_digit() || c == '-'),
            "{name}: {kind} has no dated apiVersion"
        );
        assert!(resource["name"].is_string(), "{name}: {kind} has no name");
        for dependency in resource["dependsOn"].as_array().into_iter().flatten() {
            let text = dependency.as_str().unwrap();
            let target = text
                .strip_prefix("[resourceId('")
                .and_then(|t| t.split('\'').next())
                .unwrap_or_else(|| panic!("{name}: dependsOn {text} is not a resourceId"));
            assert!(
                types.contains(target),
                "{name}: {kind} depends on {target}, not in the template"
            );
        }
    }
    for queue in [RANGE_QUEUE, PARTITION_QUEUE, EXPORT_QUEUE] {
        assert!(
            resources.iter().any(|r| r["type"]
                == "Microsoft.Storage/storageAccounts/queueServices/queues"
                && r["name"].as_str().unwrap().contains(&format!("'{queue}'"))),
            "{name}: the {queue} queue is created up front"
        );
    }
    for (path, text) in &all {
        assert!(
            !text.contains("AccountKey=") && !text.contains("listKeys("),
            "{name}{path}: an account key read or written (the app connects by identity)"
        );
    }
    check_identity(name, &doc);
    doc
}

/// The built-in roles the app's identity needs on its storage account, by id (Azure's built-in
/// role definitions): blobs for the host's own use (leases, keys) and the deployment package,
/// queues for work items, tables for the ledger.
const APP_ROLES: [(&str, &str); 3] = [
    (
        "Storage Blob Data Owner",
        "b7e6dc6d-f1e8-4753-8033-0f276bb0955b",
    ),
    (
        "Storage Queue Data Contributor",
        "974c5e8b-45b9-4653-ba55-5f855dd0fb88",
    ),
    (
        "Storage Table Data Contributor",
        "0a9a7e1f-b9d0-4cc4-a60d-0319b160aaa3",
    ),
];

/// The app reaches its storage by its managed identity: Shared Key is off on the account, the
/// identity holds each data role, and the host storage setting is the identity form, which the
/// handler resolves (with the platform's identity endpoint) to token-authorised clients.
fn check_identity(name: &str, doc: &Value) {
    let storage = resource(doc, "Microsoft.Storage/storageAccounts");
    assert_eq!(
        storage["properties"]["allowSharedKeyAccess"], false,
        "{name}: Shared Key access is off"
    );
    let site = site(doc);
    assert_eq!(site["identity"]["type"], "SystemAssigned", "{name}");
    let variables = &doc["variables"];
    let assignments: Vec<&Value> = doc["resources"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["type"] == "Microsoft.Authorization/roleAssignments")
        .collect();
    for (role, id) in APP_ROLES {
        let granted = assignments.iter().any(|a| {
            let definition = a["properties"]["roleDefinitionId"].as_str().unwrap();
            let variable = definition
                .split("variables('roles').")
                .nth(1)
                .and_then(|rest| rest.strip_suffix(")]"))
                .unwrap_or_default();
            variables["roles"][variable] == id
                && a["properties"]["principalId"]
                    .as_str()
                    .unwrap()
                    .contains("'full').identity.principalId")
                && a["scope"]
                    .as_str()
                    .unwrap()
                    .contains("variables('storageName')")
                && a.get("condition").is_none()
        });
        assert!(granted, "{name}: the app's identity is given {role} ({id})");
    }
    let settings = app_settings(site);
    assert!(
        !settings.iter().any(|(n, _)| n == STORAGE_CONNECTION),
        "{name}: no connection string for the host storage"
    );
    // What the handler makes of these settings on the platform (values as Azure fills them in).
    let lookup = |setting: &str| -> Option<String> {
        match setting {
            "IDENTITY_ENDPOINT" => Some("http://localhost:8081/msi/token".into()),
            "IDENTITY_HEADER" => Some("header".into()),
            _ => settings.iter().find(|(n, _)| n == setting).map(|(_, v)| {
                match v.rsplit_once(".primaryEndpoints.") {
                    Some((_, service)) => format!(
                        "https://tsabc.{}.core.windows.net/",
                        service.trim_end_matches(']')
                    ),
                    None => v.clone(),
                }
            }),
        }
    };
    let account = tablescan::storage::connection::resolve(
        STORAGE_CONNECTION,
        &lookup,
        &tablescan::storage::token::TokenCredentials::default(),
    )
    .unwrap_or_else(|e| panic!("{name}: {e}"));
    assert!(
        matches!(
            account.credential(),
            tablescan::storage::credential::Credential::Bearer(_)
        ),
        "{name}: the handler connects by token"
    );
    assert_eq!(
        account.table_endpoint().unwrap().as_str(),
        "https://tsabc.table.core.windows.net"
    );
    assert_eq!(
        account.queue_endpoint().unwrap().as_str(),
        "https://tsabc.queue.core.windows.net"
    );
}

/// The template's one resource of type `kind`.
fn resource<'a>(doc: &'a Value, kind: &str) -> &'a Value {
    doc["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["type"] == kind)
        .unwrap_or_else(|| panic!("no {kind}"))
}

fn site(doc: &Value) -> &Value {
    resource(doc, "Microsoft.Web/sites")
}

fn app_settings(site: &Value) -> Vec<(String, String)> {
    site["properties"]["siteConfig"]["appSettings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["name"].as_str().unwrap().into(),
                s["value"].as_str().unwrap().into(),
            )
        })
        .collect()
}

#[test]
fn the_flex_consumption_template_is_well_formed_and_runs_the_custom_handler() {
    let doc = check_template("flex-consumption.json");
    let site = site(&doc);
    let config = &site["properties"]["functionAppConfig"];
    assert_eq!(config["runtime"]["name"], "custom");
    assert_eq!(config["deployment"]["storage"]["type"], "blobContainer");
    assert!(config["scaleAndConcurrency"]["maximumInstanceCount"].is_string());
    let settings = app_settings(site);
    let names: BTreeSet<&str> = settings.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        config["deployment"]["storage"]["authentication"]["type"], "SystemAssignedIdentity",
        "the package is read by the app's identity"
    );
    // Flex takes the runtime from functionAppConfig and refuses these settings.
    assert!(!names.contains("FUNCTIONS_WORKER_RUNTIME"));
    assert!(!names.contains("FUNCTIONS_EXTENSION_VERSION"));
    let plan = resource(&doc, "Microsoft.Web/serverfarms");
    assert_eq!(plan["sku"]["tier"], "FlexConsumption");
}

#[test]
fn the_linux_consumption_template_is_well_formed_and_runs_the_custom_handler() {
    let doc = check_template("linux-consumption.json");
    let site = site(&doc);
    let settings = app_settings(site);
    assert!(settings.contains(&("FUNCTIONS_WORKER_RUNTIME".into(), "custom".into())));
    assert!(settings.contains(&("FUNCTIONS_EXTENSION_VERSION".into(), "~4".into())));
    assert!(site["properties"]["siteConfig"]["functionAppScaleLimit"].is_string());
    // Linux Consumption runs only from a package URL: a blob the app reads with its identity
    // (scripts/publish uploads it with the publisher's sign-in, given the role below).
    let package = settings
        .iter()
        .find(|(n, _)| n == "WEBSITE_RUN_FROM_PACKAGE")
        .map(|(_, v)| v.as_str())
        .unwrap();
    assert!(
        package.contains("primaryEndpoints.blob") && package.contains("tablescan.zip"),
        "{package}"
    );
    assert!(settings.contains(&(
        "WEBSITE_RUN_FROM_PACKAGE_BLOB_MI_RESOURCE_ID".into(),
        "SystemAssigned".into()
    )));
    let publisher = doc["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| {
            r["type"] == "Microsoft.Authorization/roleAssignments"
                && r["properties"]["principalId"] == "[parameters('publisherPrincipalId')]"
        })
        .expect("a role for the publisher");
    assert_eq!(
        publisher["condition"],
        "[not(empty(parameters('publisherPrincipalId')))]"
    );
    assert_eq!(
        doc["variables"]["roles"]["blobDataContributor"], "ba92f5b4-2d11-453d-a403-e96b0029c9fe",
        "Storage Blob Data Contributor"
    );
    let plan = resource(&doc, "Microsoft.Web/serverfarms");
    assert_eq!(plan["sku"]["name"], "Y1");
}

#[test]
fn the_expression_check_catches_what_a_deployment_would_refuse() {
    let result =
        std::panic::catch_unwind(|| check_expression("x", "[format('{0}', parameters('a')]"));
    assert!(result.is_err(), "a missing parenthesis");
    let result = std::panic::catch_unwind(|| check_expression("x", "[parameters('a)]"));
    assert!(result.is_err(), "an open quote");
    assert_eq!(
        check_expression("x", "[format('it''s {0}', variables('b'))]"),
        vec![("variables".to_string(), "b".to_string())]
    );
}
