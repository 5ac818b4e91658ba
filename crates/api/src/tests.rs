//! The request parser: defaults, each action, each refusal naming its field, the summary and
//! the row conditions.

use super::*;
use tablescan_engine::step::Strategy;

const DEV: &str = "UseDevelopmentStorage=true";

fn settings(name: &str) -> Option<String> {
    match name {
        "AzureWebJobsStorage" | "Other" => Some(DEV.into()),
        "Broken" => Some("AccountName=a;AccountKey=!!notbase64!!".into()),
        _ => None,
    }
}

fn parse(body: &str) -> Result<ScanSpec, SpecError> {
    ScanSpec::parse(body, &settings)
}

#[test]
fn exports_name_a_container_and_a_prefix_that_ends_in_a_slash() {
    let spec = parse(
        r#"{"table":"orders","action":{"type":"export","container":"backups",
            "prefix":"orders/2026-11-25","connection":"Other"}}"#,
    )
    .unwrap();
    assert_eq!(
        spec.action,
        ActionSpec::Export {
            container: "backups".into(),
            prefix: "orders/2026-11-25/".into(),
            connection: "Other".into(),
            compression: Compression::Gzip,
        }
    );
    assert!(spec
        .summary()
        .contains("export into blobs backups/orders/2026-11-25/*"));
    let plain = parse(
        r#"{"table":"orders","action":{"type":"export","container":"backups","compression":"none"}}"#,
    )
    .unwrap();
    assert!(matches!(
        plain.action,
        ActionSpec::Export { compression: Compression::None, ref prefix, .. } if prefix.is_empty()
    ));
    for (body, field) in [
        (
            r#"{"table":"orders","action":{"type":"export"}}"#,
            "action.container",
        ),
        (
            r#"{"table":"orders","action":{"type":"export","container":"No"}}"#,
            "action.container",
        ),
        (
            r#"{"table":"orders","action":{"type":"export","container":"ok1","compression":"zip"}}"#,
            "action.compression",
        ),
        (
            r#"{"table":"orders","action":{"type":"export","container":"ok1","prefix":"/abs"}}"#,
            "action.prefix",
        ),
        (
            r#"{"table":"orders","action":{"type":"export","container":"ok1","prefix":"a\u0001"}}"#,
            "action.prefix",
        ),
        (
            r#"{"table":"orders","action":{"type":"export","container":"ok1","connection":"Missing"}}"#,
            "action.connection",
        ),
    ] {
        assert_eq!(parse(body).unwrap_err().field, field, "{body}");
    }
    let long = format!(
        r#"{{"table":"orders","action":{{"type":"export","container":"ok1","prefix":"{}"}}}}"#,
        "a".repeat(MAX_EXPORT_PREFIX_CHARS + 1)
    );
    assert_eq!(parse(&long).unwrap_err().field, "action.prefix");
}

#[test]
fn imports_read_an_export_into_a_copy_or_a_count_of_every_row() {
    let spec = parse(
        r#"{"import":{"container":"backups","prefix":"orders"},
            "action":{"type":"copy","table":"restored","mode":"insert"}}"#,
    )
    .unwrap();
    let import = spec.import.as_ref().unwrap();
    assert_eq!(import.prefix, "orders/");
    assert_eq!(import.connection, DEFAULT_CONNECTION);
    assert_eq!(import.manifest, None);
    assert!(spec
        .summary()
        .contains("import of the export backups/orders/*"));
    // Stored and read back as the ledger does.
    let stored: ScanSpec = serde_json::from_str(&serde_json::to_string(&spec).unwrap()).unwrap();
    assert_eq!(stored, spec);
    assert!(parse(r#"{"import":{"container":"backups"},"action":{"type":"count"}}"#).is_ok());
    let by_manifest = parse(
        r#"{"import":{"container":"backups","prefix":"orders/manifest.json"},"action":{"type":"count"}}"#,
    )
    .unwrap();
    assert_eq!(by_manifest.import.unwrap().prefix, "orders/");
    for (body, field) in [
        (
            r#"{"import":{"container":"bk1"},"table":"t","action":{"type":"count"}}"#,
            "table",
        ),
        (
            r#"{"import":{"container":"bk1"},"connection":"Other","action":{"type":"count"}}"#,
            "connection",
        ),
        (
            r#"{"import":{"container":"bk1"},"action":{"type":"delete"}}"#,
            "action.type",
        ),
        (
            r#"{"import":{"container":"bk1"},"action":{"type":"export","container":"bk2"}}"#,
            "action.type",
        ),
        (
            r#"{"import":{"container":"bk1"},"scope":{"prefix":"a"},"action":{"type":"count"}}"#,
            "scope",
        ),
        (
            r#"{"import":{"container":"bk1"},"filter":"n eq 1","action":{"type":"count"}}"#,
            "filter",
        ),
        (
            r#"{"import":{"container":"bk1"},"olderThan":"P1D","action":{"type":"count"}}"#,
            "olderThan",
        ),
        (
            r#"{"import":{"container":"bk1"},"strategy":"serial","action":{"type":"count"}}"#,
            "strategy",
        ),
        (
            r#"{"import":{"container":"bk1"},"select":["a"],"action":{"type":"copy","table":"target2","mode":"merge"}}"#,
            "select",
        ),
        (
            r#"{"import":{"container":"B"},"action":{"type":"count"}}"#,
            "import.container",
        ),
        (
            r#"{"import":{"container":"bk1","extra":1},"action":{"type":"count"}}"#,
            "import.extra",
        ),
        (r#"{"import":"b1","action":{"type":"count"}}"#, "import"),
    ] {
        assert_eq!(parse(body).unwrap_err().field, field, "{body}");
    }
}

#[test]
fn a_minimal_request_gets_defaults() {
    let spec = parse(r#"{"table":"orders","action":{"type":"count"}}"#).unwrap();
    assert_eq!(spec.connection, "AzureWebJobsStorage");
    assert_eq!(spec.strategy, Strategy::Prefix);
    assert_eq!(spec.page_size, 1000);
    assert_eq!(spec.scope, Scope::default());
    assert_eq!(spec.action, ActionSpec::Count);
    let normalised = serde_json::to_value(&spec).unwrap();
    assert_eq!(normalised["action"]["type"], "count");
    assert_eq!(normalised["pageSize"], 1000);
}

#[test]
fn the_rate_cap_is_the_default_a_number_or_unlimited() {
    let with = |extra: &str| {
        parse(&format!(
            r#"{{"table":"things","action":{{"type":"count"}}{extra}}}"#
        ))
    };
    assert_eq!(
        with("").unwrap().max_rows_per_second,
        DEFAULT_MAX_ROWS_PER_SECOND
    );
    assert_eq!(DEFAULT_MAX_ROWS_PER_SECOND, None, "unlimited unless asked");
    assert_eq!(
        with(r#","maxRowsPerSecond":2000"#)
            .unwrap()
            .max_rows_per_second,
        Some(2000)
    );
    assert_eq!(
        with(r#","maxRowsPerSecond":"unlimited""#)
            .unwrap()
            .max_rows_per_second,
        None
    );
    for bad in ["0", "-5", "1.5", "\"fast\"", "true", "20000000"] {
        let e = with(&format!(r#","maxRowsPerSecond":{bad}"#)).unwrap_err();
        assert_eq!(e.field, "maxRowsPerSecond", "{bad}");
    }
    let settings =
        |name: &str| (name == DEFAULT_CONNECTION).then(|| "UseDevelopmentStorage=true".into());
    // The app's own default (TABLESCAN_MAX_ROWS_PER_SECOND) applies to requests naming none.
    let spec = ScanSpec::parse_with(
        r#"{"table":"things","action":{"type":"count"}}"#,
        &settings,
        Some(4_000),
    )
    .unwrap();
    assert_eq!(spec.max_rows_per_second, Some(4_000));
    // Shown in the stored spec when set; a spec stored without it reads as uncapped.
    let stored = serde_json::to_value(with(r#","maxRowsPerSecond":2000"#).unwrap()).unwrap();
    assert_eq!(stored["maxRowsPerSecond"], 2000);
    let mut old = stored.clone();
    old.as_object_mut().unwrap().remove("maxRowsPerSecond");
    let old: ScanSpec = serde_json::from_value(old).unwrap();
    assert_eq!(old.max_rows_per_second, None);
}

#[test]
fn the_default_cap_setting_is_a_number_or_unlimited() {
    assert_eq!(parse_rate_cap(" 2500 "), Ok(Some(2500)));
    assert_eq!(parse_rate_cap("Unlimited"), Ok(None));
    for bad in ["", "0", "fast", "1e4", "99999999999"] {
        assert!(
            parse_rate_cap(bad).unwrap_err().contains("unlimited"),
            "{bad}"
        );
    }
}

#[test]
fn an_enqueue_names_one_queue_or_several() {
    let spec = |action: &str| {
        parse(&format!(
            r#"{{"table":"things","action":{{"type":"enqueue",{action}}}}}"#
        ))
    };
    let one = spec(r#""queues":["only"]"#).unwrap();
    assert_eq!(one.action.target_queues(), ["only"]);
    assert!(serde_json::to_value(&one).unwrap()["action"]
        .get("queues")
        .is_none());
    let three = spec(r#""queues":["q-a","q-b","q-c"]"#).unwrap();
    assert_eq!(three.action.target_queues(), ["q-a", "q-b", "q-c"]);
    let stored = serde_json::to_value(&three).unwrap();
    assert_eq!(stored["action"]["queue"], "q-a");
    assert_eq!(
        stored["action"]["queues"],
        serde_json::json!(["q-a", "q-b", "q-c"])
    );
    let back: ScanSpec = serde_json::from_value(stored).unwrap();
    assert_eq!(back, three);
    for (bad, field) in [
        (r#""queues":[]"#, "action.queues"),
        (r#""queues":"q-a""#, "action.queues"),
        (r#""queues":["q-a","q-a"]"#, "action.queues[1]"),
        (r#""queues":["q-a","Bad_Name"]"#, "action.queues[1]"),
        (r#""queues":["q-a"],"queue":"q-b""#, "action.queues"),
    ] {
        assert_eq!(spec(bad).unwrap_err().field, field, "{bad}");
    }
    let many: Vec<String> = (0..65).map(|i| format!("\"q{i:03}\"")).collect();
    let e = spec(&format!(r#""queues":[{}]"#, many.join(","))).unwrap_err();
    assert_eq!(e.field, "action.queues");
}

#[test]
fn rows_per_message_is_a_whole_number_up_to_a_page() {
    let enqueue = |extra: &str| {
        parse(&format!(
            r#"{{"table":"orders","action":{{"type":"enqueue","queue":"out-q"{extra}}}}}"#
        ))
    };
    let rows_of = |spec: ScanSpec| match spec.action {
        ActionSpec::Enqueue {
            rows_per_message, ..
        } => rows_per_message,
        other => panic!("{other:?}"),
    };
    assert_eq!(rows_of(enqueue(r#","rowsPerMessage":50"#).unwrap()), 50);
    for bad in ["0", "1001", "2.5", "\"5\"", "-1", "true"] {
        let e = enqueue(&format!(r#","rowsPerMessage":{bad}"#)).unwrap_err();
        assert_eq!(e.field, "action.rowsPerMessage", "{bad}");
    }
    // One row per message by default, and then not written into the normalised request
    // (which scans started before the field existed recorded without it).
    let plain = enqueue("").unwrap();
    let normalised = serde_json::to_value(&plain).unwrap();
    assert!(normalised["action"].get("rowsPerMessage").is_none());
    let read_back: ScanSpec = serde_json::from_value(normalised).unwrap();
    assert_eq!(rows_of(read_back), 1);
    let batched = serde_json::to_value(enqueue(r#","rowsPerMessage":7"#).unwrap()).unwrap();
    assert_eq!(batched["action"]["rowsPerMessage"], 7);
}

#[test]
fn every_action_parses() {
    let spec = parse(
        r#"{"table":"orders","connection":"Other","scope":{"prefix":"a","after":"a1","before":"a9"},
            "strategy":"serial","pageSize":5,"select":["x","PartitionKey","x"],
            "action":{"type":"enqueue","queue":"out-q","per":"partition","encoding":"none"}}"#,
    )
    .unwrap();
    assert_eq!(spec.select, Some(vec!["x".to_string()]));
    assert_eq!(
        spec.action,
        ActionSpec::Enqueue {
            queue: "out-q".into(),
            queues: Vec::new(),
            connection: "AzureWebJobsStorage".into(),
            per: Per::Partition,
            encoding: Encoding::None,
            rows_per_message: 1,
        }
    );
    assert!(matches!(
        parse(r#"{"table":"t12","action":{"type":"copy","table":"t13"}}"#)
            .unwrap()
            .action,
        ActionSpec::Copy { .. }
    ));
    assert!(matches!(
        parse(r#"{"table":"t12","action":{"type":"delete"}}"#)
            .unwrap()
            .action,
        ActionSpec::Delete
    ));
    assert!(matches!(
        parse(r#"{"table":"t12","action":{"type":"partition-keys","queue":"keys"}}"#)
            .unwrap()
            .action,
        ActionSpec::PartitionKeys {
            encoding: Encoding::Base64,
            ..
        }
    ));
}

#[test]
fn each_bad_field_is_named() {
    let cases = [
        ("not json", "body"),
        ("[1]", "body"),
        (r#"{"action":{"type":"count"}}"#, "table"),
        (r#"{"table":5,"action":{"type":"count"}}"#, "table"),
        (r#"{"table":"no-dash","action":{"type":"count"}}"#, "table"),
        (r#"{"table":"orders"}"#, "action"),
        (r#"{"table":"orders","action":"count"}"#, "action"),
        (r#"{"table":"orders","action":{}}"#, "action.type"),
        (
            r#"{"table":"orders","action":{"type":"explode"}}"#,
            "action.type",
        ),
        (
            r#"{"table":"orders","action":{"type":"copy"}}"#,
            "action.table",
        ),
        (
            r#"{"table":"orders","action":{"type":"copy","table":"x"}}"#,
            "action.table",
        ),
        (
            r#"{"table":"orders","action":{"type":"enqueue","queue":"Bad_Q"}}"#,
            "action.queue",
        ),
        (
            r#"{"table":"orders","action":{"type":"enqueue","queue":"q12","per":"cell"}}"#,
            "action.per",
        ),
        (
            r#"{"table":"orders","action":{"type":"enqueue","queue":"q12","encoding":"hex"}}"#,
            "action.encoding",
        ),
        (
            r#"{"table":"orders","action":{"type":"count","extra":1}}"#,
            "action.extra",
        ),
        (
            r#"{"table":"orders","connection":"Missing","action":{"type":"count"}}"#,
            "connection",
        ),
        (
            r#"{"table":"orders","connection":"Broken","action":{"type":"count"}}"#,
            "connection",
        ),
        (
            r#"{"table":"orders","connection":"DefaultEndpointsProtocol=https;AccountName=x","action":{"type":"count"}}"#,
            "connection",
        ),
        (
            r#"{"table":"orders","strategy":"fast","action":{"type":"count"}}"#,
            "strategy",
        ),
        (
            r#"{"table":"orders","pageSize":0,"action":{"type":"count"}}"#,
            "pageSize",
        ),
        (
            r#"{"table":"orders","pageSize":1001,"action":{"type":"count"}}"#,
            "pageSize",
        ),
        (
            r#"{"table":"orders","pageSize":2.5,"action":{"type":"count"}}"#,
            "pageSize",
        ),
        (
            r#"{"table":"orders","pageSize":"10","action":{"type":"count"}}"#,
            "pageSize",
        ),
        (
            r#"{"table":"orders","select":"a","action":{"type":"count"}}"#,
            "select",
        ),
        (
            r#"{"table":"orders","select":["a b"],"action":{"type":"count"}}"#,
            "select[0]",
        ),
        (
            r#"{"table":"orders","select":[1],"action":{"type":"count"}}"#,
            "select[0]",
        ),
        (
            r#"{"table":"orders","scope":"a","action":{"type":"count"}}"#,
            "scope",
        ),
        (
            r#"{"table":"orders","scope":{"prefix":"a/b"},"action":{"type":"count"}}"#,
            "scope.prefix",
        ),
        (
            r#"{"table":"orders","scope":{"after":"x","from":"y"},"action":{"type":"count"}}"#,
            "scope.from",
        ),
        (
            r#"{"table":"orders","action":{"type":"count"},"unknown":true}"#,
            "unknown",
        ),
        (
            r#"{"table":"orders","scope":{"after":"B","before":"A"},"action":{"type":"count"}}"#,
            "scope.before",
        ),
        (
            r#"{"table":"orders","scope":{"after":"A","before":"A"},"action":{"type":"count"}}"#,
            "scope.before",
        ),
        (
            r#"{"table":"orders","scope":{"prefix":"m","before":"k"},"action":{"type":"count"}}"#,
            "scope.prefix",
        ),
        (
            r#"{"table":"orders","scope":{"prefix":"m","after":"n"},"action":{"type":"count"}}"#,
            "scope.prefix",
        ),
        (
            r#"{"table":"orders","select":["Name"],"action":{"type":"delete"}}"#,
            "select",
        ),
        (
            r#"{"table":"orders","action":{"type":"count"},"action":{"type":"delete"}}"#,
            "action",
        ),
        (
            r#"{"table":"orders","action":{"type":"count","type":"delete"}}"#,
            "action.type",
        ),
    ];
    for (body, field) in cases {
        let err = parse(body).unwrap_err();
        assert_eq!(err.field, field, "{body}: {err}");
    }
    let too_long = format!(
        r#"{{"table":"orders","scope":{{"before":"{}"}},"action":{{"type":"count"}}}}"#,
        "k".repeat(513)
    );
    assert_eq!(parse(&too_long).unwrap_err().field, "scope.before");
}

#[test]
fn a_summary_says_what_where_and_how_fast() {
    let spec = parse(
        r#"{"table":"orders","scope":{"prefix":"m","after":"m1"},"maxRowsPerSecond":900,
            "action":{"type":"copy","table":"backup"}}"#,
    )
    .unwrap();
    assert_eq!(
        spec.summary(),
        r#"copy (replace) into table "backup" of AzureWebJobsStorage over table "orders" of AzureWebJobsStorage; prefix "m", after "m1"; at most 900 entities/s"#
    );
    let spec = parse(r#"{"table":"orders","dryRun":true,"action":{"type":"delete"}}"#).unwrap();
    assert!(
        spec.summary().starts_with("DRY RUN of delete over"),
        "{}",
        spec.summary()
    );
    let spec = parse(
        r#"{"table":"orders","maxRowsPerSecond":"unlimited",
            "action":{"type":"enqueue","queues":["qqq1","qqq2"]}}"#,
    )
    .unwrap();
    let summary = spec.summary();
    assert!(
        summary.starts_with(r#"enqueue into queues "qqq1", "qqq2" of AzureWebJobsStorage over"#),
        "{summary}"
    );
    assert!(summary.ends_with("every PartitionKey; no cap"), "{summary}");
}

#[test]
fn scopes_that_hold_keys_are_accepted() {
    for scope in [
        r#"{"after":"a","before":"b"}"#,
        r#"{"prefix":"m","after":"m5"}"#,
        r#"{"prefix":"m","after":"l","before":"n"}"#,
        r#"{"prefix":"m","before":"m0"}"#,
        r#"{"after":"a","before":"a0"}"#,
    ] {
        let body = format!(r#"{{"table":"orders","scope":{scope},"action":{{"type":"count"}}}}"#);
        assert!(parse(&body).is_ok(), "{scope}: {:?}", parse(&body).err());
    }
}

#[test]
fn connection_errors_never_echo_the_setting_value() {
    let err =
        parse(r#"{"table":"orders","connection":"Broken","action":{"type":"count"}}"#).unwrap_err();
    assert!(!err.message.contains("notbase64"), "{err}");
}

#[test]
fn copy_modes_dry_runs_and_row_failure_limits_are_parsed_and_stored() {
    let spec = parse(
        r#"{"table":"orders","select":["Name"],"dryRun":true,"maxRowFailures":0,
            "action":{"type":"copy","table":"backup","mode":"merge"}}"#,
    )
    .unwrap();
    assert!(spec.dry_run);
    assert_eq!(spec.max_row_failures, Some(0));
    assert!(matches!(
        spec.action,
        ActionSpec::Copy {
            mode: CopyMode::Merge,
            ..
        }
    ));
    let stored = serde_json::to_value(&spec).unwrap();
    assert_eq!(stored["action"]["mode"], "merge");
    assert_eq!(stored["dryRun"], true);
    assert_eq!(stored["maxRowFailures"], 0);
    // A spec stored before these fields existed reads as a plain copy that replaces.
    let old: ScanSpec = serde_json::from_value(serde_json::json!({
        "table": "orders", "connection": "AzureWebJobsStorage", "scope": {"prefix": "",
        "after": null, "before": null}, "strategy": "prefix", "pageSize": 1000,
        "select": null, "action": {"type": "copy", "table": "b",
        "connection": "AzureWebJobsStorage"}
    }))
    .unwrap();
    assert!(!old.dry_run);
    assert_eq!(old.max_row_failures, None);
    assert!(matches!(
        old.action,
        ActionSpec::Copy {
            mode: CopyMode::Replace,
            ..
        }
    ));
    let plain = parse(r#"{"table":"orders","action":{"type":"copy","table":"backup"}}"#).unwrap();
    let stored = serde_json::to_value(&plain).unwrap();
    assert!(stored["action"].get("mode").is_none());
    assert!(stored.get("dryRun").is_none());
}

#[test]
fn bad_modes_dry_runs_and_limits_name_their_field() {
    let refused = |body: &str| parse(body).unwrap_err();
    let e =
        refused(r#"{"table":"things","select":["A"],"action":{"type":"copy","table":"backup"}}"#);
    assert_eq!(e.field, "select");
    assert!(e.message.contains("\"merge\""), "{e}");
    let e = refused(
        r#"{"table":"things","select":["A"],"action":{"type":"copy","table":"backup","mode":"replace"}}"#,
    );
    assert_eq!(e.field, "select");
    let e =
        refused(r#"{"table":"things","action":{"type":"copy","table":"backup","mode":"upsert"}}"#);
    assert_eq!(e.field, "action.mode");
    let e = refused(r#"{"table":"things","dryRun":"yes","action":{"type":"delete"}}"#);
    assert_eq!(e.field, "dryRun");
    let e = refused(r#"{"table":"things","dryRun":true,"action":{"type":"count"}}"#);
    assert_eq!(e.field, "dryRun");
    for bad in ["-1", "1.5", "\"all\"", "99999999999"] {
        let e = refused(&format!(
            r#"{{"table":"things","maxRowFailures":{bad},"action":{{"type":"delete"}}}}"#
        ));
        assert_eq!(e.field, "maxRowFailures", "{bad}");
    }
    // Insert mode may select: it writes new rows with those properties only, on purpose.
    parse(r#"{"table":"things","select":["A"],"action":{"type":"copy","table":"backup","mode":"insert"}}"#)
        .unwrap();
}

#[test]
fn a_filter_is_checked_and_stored_as_it_will_be_sent() {
    let spec = parse(
        r#"{"table":"logs","filter":"Level eq 'Debug'  and Size gt 10","action":{"type":"delete"}}"#,
    )
    .unwrap();
    assert_eq!(
        spec.filter.as_deref(),
        Some("Level eq 'Debug' and Size gt 10")
    );
    assert_eq!(
        spec.row_filter().unwrap().unwrap().as_str(),
        "Level eq 'Debug' and Size gt 10"
    );
    let e = parse(r#"{"table":"logs","filter":"Level eq Debug","action":{"type":"count"}}"#)
        .unwrap_err();
    assert_eq!(e.field, "filter");
    assert!(e.message.starts_with("at character 10:"), "{e}");
    assert!(parse(r#"{"table":"logs","action":{"type":"count"}}"#)
        .unwrap()
        .row_filter()
        .unwrap()
        .is_none());
}

#[test]
fn older_than_is_resolved_once_and_joins_the_filter() {
    let now = time::macros::datetime!(2026-11-24 12:00:00 UTC);
    let at = |body: &str| ScanSpec::parse_at(body, &settings, None, now);
    let spec = at(
        r#"{"table":"logs","olderThan":"P90D","filter":"Level eq 'Debug'","action":{"type":"delete"}}"#,
    )
    .unwrap();
    let older = spec.older_than.clone().unwrap();
    assert_eq!(older.age, "P90D");
    assert_eq!(older.before, "2026-08-26T12:00:00.0000000Z");
    assert_eq!(
        spec.row_filter().unwrap().unwrap().as_str(),
        "Timestamp lt datetime'2026-08-26T12:00:00.0000000Z' and Level eq 'Debug'"
    );
    for (age, before) in [
        ("PT12H", "2026-11-24T00:00:00.0000000Z"),
        ("P1DT6H30M", "2026-11-23T05:30:00.0000000Z"),
        ("PT90S", "2026-11-24T11:58:30.0000000Z"),
    ] {
        let spec = at(&format!(
            r#"{{"table":"logs","olderThan":"{age}","action":{{"type":"count"}}}}"#
        ))
        .unwrap();
        assert_eq!(spec.older_than.unwrap().before, before, "{age}");
    }
    for bad in [
        "90D",
        "P3M",
        "P1Y",
        "P2W",
        "PT",
        "P0D",
        "P",
        "P5",
        "PT5D",
        "P1H",
        "P99999999D",
        "-P1D",
    ] {
        let e = at(&format!(
            r#"{{"table":"logs","olderThan":"{bad}","action":{{"type":"count"}}}}"#
        ))
        .unwrap_err();
        assert_eq!(e.field, "olderThan", "{bad}");
        assert!(e.message.contains("P90D"), "{bad}: {e}");
    }
    // A start retried a minute later is the same request.
    let later = ScanSpec::parse_at(
        r#"{"table":"logs","olderThan":"P90D","filter":"Level eq 'Debug'","action":{"type":"delete"}}"#,
        &settings,
        None,
        now + time::Duration::MINUTE,
    )
    .unwrap();
    assert_ne!(later, spec);
    assert!(later.same_request(&spec));
    let other = at(r#"{"table":"logs","olderThan":"P91D","filter":"Level eq 'Debug'","action":{"type":"delete"}}"#).unwrap();
    assert!(!other.same_request(&spec));
    // With olderThan, the filter leaves room for its comparison.
    let ten = (0..11)
        .map(|n| format!("A eq {n}"))
        .collect::<Vec<_>>()
        .join(" or ");
    let e = at(&format!(
        r#"{{"table":"logs","olderThan":"P1D","filter":"{ten}","action":{{"type":"count"}}}}"#
    ))
    .unwrap_err();
    assert_eq!(e.field, "filter");
}

#[test]
fn row_key_bounds_become_conditions_on_every_row() {
    let spec = parse(
        r#"{"table":"events","scope":{"prefix":"dev","rowPrefix":"2025-","rowBefore":"2025-07"},
            "filter":"Level eq 'Error'","action":{"type":"count"}}"#,
    )
    .unwrap();
    assert_eq!(spec.scope.row_prefix, "2025-");
    assert_eq!(
        spec.row_filter().unwrap().unwrap().as_str(),
        "(RowKey ge '2025-' and RowKey lt '2025-07') and Level eq 'Error'"
    );
    let stored = serde_json::to_value(&spec).unwrap();
    assert_eq!(stored["scope"]["rowPrefix"], "2025-");
    assert_eq!(stored["scope"]["rowBefore"], "2025-07");
    assert!(stored["scope"].get("rowAfter").is_none());
    for (scope, field) in [
        (r#"{"rowAfter":"b","rowBefore":"a"}"#, "scope.rowBefore"),
        (r#"{"rowPrefix":"z","rowBefore":"m"}"#, "scope.rowPrefix"),
        (r#"{"rowPrefix":"a/b"}"#, "scope.rowPrefix"),
    ] {
        let e = parse(&format!(
            r#"{{"table":"events","scope":{scope},"action":{{"type":"count"}}}}"#
        ))
        .unwrap_err();
        assert_eq!(e.field, field, "{scope}");
    }
}
