//! What a scan must never act on, checked when it starts: the app's own work queues and their
//! poison queues (rows enqueued there would be taken for work items and fail, thousands of
//! times), the ledger table (a copy into it or a delete of it destroys every scan's record), and
//! its own source as a copy's target (a copy of a table onto itself rewrites every row for
//! nothing, or, with `select`, strips them).
//!
//! Storage is named by its account, its service and its name (`functions::account`), so a queue
//! called `tablescan-range` in another account is allowed: only the app's own are protected,
//! through whichever URL of their account a connection reaches them.

use super::account::AccountService;
use super::reach::Service;
use tablescan_api::{ActionSpec, ScanSpec};

/// A table, a queue or a container: the account and service it lives in, and its name.
#[derive(Debug, Clone)]
pub struct Place {
    pub account: AccountService,
    pub name: String,
}

impl Place {
    /// The place `name` of `service` at `endpoint` (the service's base URL, in any of the
    /// forms its account answers at).
    pub fn new(service: Service, endpoint: &str, name: &str) -> Place {
        Place {
            account: AccountService::of(service, endpoint),
            name: name.to_string(),
        }
    }

    /// Whether both name the same storage: the same service of the same account, and the same
    /// name (table and queue names are case-insensitive).
    fn is(&self, other: &Place) -> bool {
        self.account == other.account && self.name.eq_ignore_ascii_case(&other.name)
    }
}

/// The app's own storage.
#[derive(Debug, Clone)]
pub struct Protected {
    pub ledger: Place,
    /// The work queues; their poison queues (`<name>-poison`) are protected with them.
    pub work_queues: Vec<Place>,
}

impl Protected {
    fn is_app_queue(&self, queue: &Place) -> bool {
        self.work_queues.iter().any(|own| {
            let poison = Place {
                account: own.account.clone(),
                name: format!("{}-poison", own.name),
            };
            own.is(queue) || poison.is(queue)
        })
    }
}

/// Where a scan reads and writes, resolved to endpoints.
#[derive(Debug, Clone)]
pub struct Touches {
    pub source: Place,
    pub target_table: Option<Place>,
    pub target_queues: Vec<Place>,
}

/// Why a scan may not start: the request field at fault and what to do.
#[derive(Debug, Clone, PartialEq)]
pub struct Refused {
    pub field: &'static str,
    pub message: String,
}

/// Refuses a scan that would write to, or delete from, the app's own storage, or copy a table
/// onto itself. Reading the ledger (a count of it) is allowed.
pub fn check(spec: &ScanSpec, touches: &Touches, protected: &Protected) -> Result<(), Refused> {
    if matches!(spec.action, ActionSpec::Delete | ActionSpec::Update { .. })
        && touches.source.is(&protected.ledger)
    {
        return Err(Refused {
            field: "table",
            message: format!(
                "{:?} is tablescan's ledger, which holds every scan's record: it cannot be \
                 deleted from or updated by a scan",
                spec.table
            ),
        });
    }
    if let Some(target) = &touches.target_table {
        if target.is(&protected.ledger) {
            return Err(Refused {
                field: "action.table",
                message: format!(
                    "{:?} is tablescan's ledger, which holds every scan's record: a copy cannot \
                     write into it",
                    target.name
                ),
            });
        }
        if target.is(&touches.source) {
            return Err(Refused {
                field: "action.table",
                message: format!(
                    "the copy's target is its source ({:?} in the same account): name another \
                     table",
                    target.name
                ),
            });
        }
    }
    for queue in &touches.target_queues {
        if protected.is_app_queue(queue) {
            let field = match &spec.action {
                ActionSpec::Enqueue { queues, .. } if !queues.is_empty() => "action.queues",
                _ => "action.queue",
            };
            return Err(Refused {
                field,
                message: format!(
                    "{:?} is one of tablescan's own work queues (or its poison queue): rows put \
                     there would be taken for work items; name another queue",
                    queue.name
                ),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tablescan_api::ScanSpec;

    const APP: &str = "http://127.0.0.1:10001/devstoreaccount1";
    const APP_TABLES: &str = "http://127.0.0.1:10002/devstoreaccount1";
    const OTHER: &str = "https://other.queue.core.windows.net";

    fn protected() -> Protected {
        Protected {
            ledger: Place::new(Service::Table, APP_TABLES, "tablescanledger"),
            work_queues: vec![
                Place::new(Service::Queue, APP, "tablescan-range"),
                Place::new(Service::Queue, APP, "tablescan-partition"),
            ],
        }
    }

    fn spec(json: &str) -> ScanSpec {
        let settings = |name: &str| {
            (name == "AzureWebJobsStorage").then(|| "UseDevelopmentStorage=true".to_string())
        };
        ScanSpec::parse_with(json, &settings, None).unwrap()
    }

    fn touches(source: &str, table: Option<(&str, &str)>, queues: &[(&str, &str)]) -> Touches {
        Touches {
            source: Place::new(Service::Table, APP_TABLES, source),
            target_table: table.map(|(e, n)| Place::new(Service::Table, e, n)),
            target_queues: queues
                .iter()
                .map(|(e, n)| Place::new(Service::Queue, e, n))
                .collect(),
        }
    }

    #[test]
    fn the_apps_queues_and_their_poison_queues_are_refused_as_targets() {
        let enqueue =
            spec(r#"{"table":"trial","action":{"type":"enqueue","queue":"tablescan-range"}}"#);
        for queue in [
            "tablescan-range",
            "tablescan-partition-poison",
            "TABLESCAN-RANGE",
        ] {
            let refused = check(
                &enqueue,
                &touches("trial", None, &[(APP, queue)]),
                &protected(),
            );
            assert_eq!(refused.unwrap_err().field, "action.queue", "{queue}");
        }
        // The same names in another account, and other names in the app's, are fine.
        assert!(check(
            &enqueue,
            &touches("trial", None, &[(OTHER, "tablescan-range")]),
            &protected()
        )
        .is_ok());
        assert!(check(
            &enqueue,
            &touches("trial", None, &[(APP, "rows")]),
            &protected()
        )
        .is_ok());
        let spread = spec(
            r#"{"table":"trial","action":{"type":"enqueue","queues":["aaa","tablescan-range-poison"]}}"#,
        );
        let refused = check(
            &spread,
            &touches(
                "trial",
                None,
                &[(APP, "aaa"), (APP, "tablescan-range-poison")],
            ),
            &protected(),
        );
        assert_eq!(refused.unwrap_err().field, "action.queues");
    }

    #[test]
    fn the_ledger_is_neither_copied_into_nor_deleted_from_but_may_be_counted() {
        let copy = spec(r#"{"table":"trial","action":{"type":"copy","table":"TablescanLedger"}}"#);
        let into = touches("trial", Some((APP_TABLES, "TablescanLedger")), &[]);
        assert_eq!(
            check(&copy, &into, &protected()).unwrap_err().field,
            "action.table"
        );
        let delete = spec(r#"{"table":"tablescanledger","action":{"type":"delete"}}"#);
        let refused = check(
            &delete,
            &touches("tablescanledger", None, &[]),
            &protected(),
        );
        assert_eq!(refused.unwrap_err().field, "table");
        let count = spec(r#"{"table":"tablescanledger","action":{"type":"count"}}"#);
        assert!(check(&count, &touches("tablescanledger", None, &[]), &protected()).is_ok());
    }

    /// The same account reached through another URL is the same account: the guard compares
    /// accounts by name and service, not endpoint strings (the old comparison let every form
    /// below through but the first two).
    #[test]
    fn the_apps_storage_is_recognised_through_every_url_of_its_account() {
        let key = tablescan_storage::connection_string::EMULATOR_KEY;
        let from_connection_string = |text: &str| {
            tablescan_storage::StorageAccount::from_connection_string(text)
                .unwrap()
                .table_endpoint()
                .unwrap()
                .as_str()
                .to_string()
        };
        let azure = "https://acct.table.core.windows.net";
        let azure_forms = [
            "https://ACCT.table.core.windows.net/".to_string(),
            "https://acct.table.core.windows.net:443".to_string(),
            "http://acct.table.core.windows.net".to_string(),
            "http://Acct.Table.Core.Windows.Net:80/".to_string(),
            "https://acct-secondary.table.core.windows.net".to_string(),
            from_connection_string(&format!(
                "AccountName=acct;AccountKey={key};EndpointSuffix=core.windows.net"
            )),
            from_connection_string(&format!(
                "AccountName=acct;AccountKey={key};TableEndpoint=https://Acct.Table.Core.Windows.Net/"
            )),
        ];
        let emulator_forms = [
            format!("{APP_TABLES}/"),
            "HTTP://127.0.0.1:10002/DevStoreAccount1".to_string(),
            "http://localhost:10002/devstoreaccount1".to_string(),
            "http://[::1]:10002/devstoreaccount1/".to_string(),
            "http://devstoreaccount1.table.localhost:10002".to_string(),
            from_connection_string("UseDevelopmentStorage=true"),
        ];
        for (ledger, forms) in [(azure, &azure_forms[..]), (APP_TABLES, &emulator_forms[..])] {
            let protected = Protected {
                ledger: Place::new(Service::Table, ledger, "tablescanledger"),
                work_queues: Vec::new(),
            };
            let copy =
                spec(r#"{"table":"trial","action":{"type":"copy","table":"tablescanledger"}}"#);
            let delete = spec(r#"{"table":"tablescanledger","action":{"type":"delete"}}"#);
            for form in forms.iter() {
                let into = touches("trial", Some((form.as_str(), "TablescanLedger")), &[]);
                assert_eq!(
                    check(&copy, &into, &protected).map_err(|r| r.field),
                    Err("action.table"),
                    "a copy into the ledger through {form}"
                );
                let from = Touches {
                    source: Place::new(Service::Table, form, "tablescanledger"),
                    target_table: None,
                    target_queues: Vec::new(),
                };
                assert_eq!(
                    check(&delete, &from, &protected).map_err(|r| r.field),
                    Err("table"),
                    "a delete of the ledger through {form}"
                );
            }
        }
        // The app's queues through another URL of the emulator.
        let enqueue =
            spec(r#"{"table":"trial","action":{"type":"enqueue","queue":"tablescan-range"}}"#);
        for form in [
            "http://localhost:10001/devstoreaccount1/",
            "http://127.0.0.1:10001/DEVSTOREACCOUNT1",
        ] {
            let refused = check(
                &enqueue,
                &touches("trial", None, &[(form, "tablescan-range")]),
                &protected(),
            );
            assert_eq!(refused.map_err(|r| r.field), Err("action.queue"), "{form}");
        }
        // Other accounts, and a name that merely starts like the app's, stay allowed.
        let copy = spec(r#"{"table":"trial","action":{"type":"copy","table":"tablescanledger"}}"#);
        for other in [
            "https://other.table.core.windows.net",
            "https://acctx.table.core.windows.net",
            "http://127.0.0.1:10002/otheraccount",
        ] {
            let into = touches("trial", Some((other, "tablescanledger")), &[]);
            assert!(check(&copy, &into, &protected()).is_ok(), "{other}");
        }
    }

    #[test]
    fn a_copy_onto_its_own_source_is_refused_but_not_onto_a_namesake_elsewhere() {
        let copy = spec(r#"{"table":"orders","action":{"type":"copy","table":"Orders"}}"#);
        let onto_itself = touches("orders", Some((APP_TABLES, "Orders")), &[]);
        let refused = check(&copy, &onto_itself, &protected()).unwrap_err();
        assert_eq!(refused.field, "action.table");
        assert!(refused.message.contains("source"), "{}", refused.message);
        let elsewhere = touches(
            "orders",
            Some(("https://backup.table.core.windows.net", "orders")),
            &[],
        );
        assert!(check(&copy, &elsewhere, &protected()).is_ok());
    }
}
