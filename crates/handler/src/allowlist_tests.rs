//! The allowlist's syntax and its decisions.

use super::*;

const DEV: &str = "UseDevelopmentStorage=true";

fn list(text: &str) -> Allowlist {
    Allowlist::parse(text).unwrap_or_else(|e| panic!("{text:?}: {e}"))
}

fn spec(body: &str) -> ScanSpec {
    ScanSpec::parse_unresolved_at(body, None, time::OffsetDateTime::now_utc()).unwrap()
}

fn settings(name: &str) -> Option<String> {
    match name {
        "AzureWebJobsStorage" | "Orders" | "Backup" | "Unlisted" => Some(DEV.into()),
        "Broken" => Some("AccountName=a;AccountKey=!!notbase64!!".into()),
        _ => None,
    }
}

#[test]
fn entries_name_a_connection_and_its_access() {
    let allowlist = list(" Orders:ro , Backup:RW,My:Conn:rw,, ");
    assert_eq!(allowlist.access("Orders"), Some(Access::Read));
    assert_eq!(allowlist.access("Backup"), Some(Access::Write));
    assert_eq!(allowlist.access("My:Conn"), Some(Access::Write));
    assert_eq!(allowlist.access("orders"), None, "names match exactly");
    assert_eq!(allowlist.access("Other"), None);
    assert_eq!(list("A : ro").access("A"), Some(Access::Read));
}

#[test]
fn values_that_cannot_be_read_say_where_and_never_echo_what_is_not_a_name() {
    let entry = |position, problem| AllowlistError::Entry { position, problem };
    for (text, error) in [
        ("", AllowlistError::Empty),
        (" , ,", AllowlistError::Empty),
        ("Orders", entry(1, EntryProblem::NoAccess)),
        ("Orders:", entry(1, EntryProblem::NoAccess)),
        (
            "Orders:ro,Backup:rwx",
            entry(2, EntryProblem::UnknownAccess),
        ),
        ("Orders:read", entry(1, EntryProblem::UnknownAccess)),
        (":rw", entry(1, EntryProblem::NotAName)),
        ("Or ders:rw", entry(1, EntryProblem::NotAName)),
        (
            "A:ro,,Orders:ro,Orders:rw",
            entry(4, EntryProblem::Twice("Orders".into())),
        ),
    ] {
        assert_eq!(Allowlist::parse(text), Err(error), "{text:?}");
    }
    // A connection string pasted into the setting: refused without a word of it.
    let pasted = "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=c2VjcmV0;\
                  BlobEndpoint=https://acct.blob.core.windows.net/";
    let why = Allowlist::parse(pasted).unwrap_err().to_string();
    assert!(!why.contains("c2VjcmV0") && !why.contains("acct"), "{why}");
    assert!(why.contains("entry 1"), "{why}");
}

#[test]
fn the_apps_own_storage_is_read_only_unless_listed() {
    assert_eq!(
        list("Orders:rw").access(STORAGE_CONNECTION),
        Some(Access::Read)
    );
    assert!(!list("Orders:rw").allows(STORAGE_CONNECTION, Access::Write));
    assert!(list("AzureWebJobsStorage:rw").allows(STORAGE_CONNECTION, Access::Write));
    assert_eq!(
        list("Orders:rw,AzureWebJobsStorage:ro").access(STORAGE_CONNECTION),
        Some(Access::Read)
    );
}

#[test]
fn destructive_actions_and_targets_need_read_write() {
    let allowlist = list("Orders:ro,Backup:rw");
    let refused = |body: &str| allowlist.permits(&spec(body)).err().map(|e| e.field);
    // Reads of a read-only connection.
    for body in [
        r#"{"table":"tab1","connection":"Orders","action":{"type":"count"}}"#,
        r#"{"table":"tab1","connection":"Orders","dryRun":true,"action":{"type":"delete"}}"#,
        r#"{"table":"tab1","connection":"Orders","dryRun":true,"action":{"type":"copy","table":"tab2","connection":"Orders"}}"#,
        r#"{"table":"tab1","connection":"Orders","action":{"type":"copy","table":"tab2","connection":"Backup"}}"#,
        r#"{"import":{"container":"cont1","connection":"Orders"},"action":{"type":"copy","table":"tab2","connection":"Backup"}}"#,
        r#"{"table":"tab1","action":{"type":"count"}}"#,
        r#"{"table":"tab1","connection":"Backup","action":{"type":"delete"}}"#,
    ] {
        assert_eq!(refused(body), None, "{body}");
    }
    for (body, field) in [
        (
            r#"{"table":"tab1","connection":"Orders","action":{"type":"delete"}}"#,
            "connection",
        ),
        (
            r#"{"table":"tab1","connection":"Orders","action":{"type":"update","remove":["x"]}}"#,
            "connection",
        ),
        (
            r#"{"table":"tab1","action":{"type":"delete"}}"#,
            "connection",
        ),
        (
            r#"{"table":"tab1","connection":"Backup","action":{"type":"copy","table":"tab2","connection":"Orders"}}"#,
            "action.connection",
        ),
        (
            r#"{"import":{"container":"cont1","connection":"Backup"},"action":{"type":"copy","table":"tab2","connection":"Orders"}}"#,
            "action.connection",
        ),
        (
            r#"{"table":"tab1","connection":"Backup","action":{"type":"export","container":"cont1","connection":"Orders"}}"#,
            "action.connection",
        ),
        (
            r#"{"table":"tab1","connection":"Backup","action":{"type":"enqueue","queue":"queue1","connection":"Orders"}}"#,
            "action.connection",
        ),
        (
            r#"{"table":"tab1","connection":"Backup","action":{"type":"partition-keys","queue":"queue1","connection":"Orders"}}"#,
            "action.connection",
        ),
        (
            r#"{"table":"tab1","connection":"Other","action":{"type":"count"}}"#,
            "connection",
        ),
        (
            r#"{"import":{"container":"cont1","connection":"Other"},"action":{"type":"count"}}"#,
            "import.connection",
        ),
    ] {
        assert_eq!(refused(body), Some(field), "{body}");
    }
}

/// Not listed, listed and not set, listed and broken, or set nowhere: one answer, so that the
/// answer tells nothing of the app's settings.
#[test]
fn every_unusable_connection_gets_the_same_words() {
    let allowlist = list("Orders:ro,Backup:rw,Missing:rw,Broken:rw");
    for (template, access) in [
        (
            r#"{"table":"tab1","connection":"NAME","action":{"type":"count"}}"#,
            Access::Read,
        ),
        (
            r#"{"table":"tab1","connection":"Backup","action":{"type":"copy","table":"tab2","connection":"NAME"}}"#,
            Access::Write,
        ),
    ] {
        let mut answers = Vec::new();
        for name in ["Unlisted", "Missing", "Broken", "Nowhere"] {
            let refused = allowlist
                .check(&spec(&template.replace("NAME", name)), &settings)
                .unwrap_err();
            assert_eq!(refused.access, access);
            answers.push(refused.to_string().replace(name, "NAME"));
        }
        assert!(answers.iter().all(|a| *a == answers[0]), "{answers:#?}");
        assert!(!answers[0].contains("notbase64") && !answers[0].contains("exist"));
    }
    // A listed connection that works passes.
    let fine = r#"{"table":"tab1","connection":"Orders","action":{"type":"copy","table":"tab2","connection":"Backup"}}"#;
    assert_eq!(allowlist.check(&spec(fine), &settings), Ok(()));
}
