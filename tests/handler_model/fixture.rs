//! What every case reads, made once per test process: a small source table, and an export of
//! over a hundred blobs (made through the handler itself) with damaged copies of its manifest.

use std::collections::BTreeSet;
use std::sync::OnceLock;

use serde_json::{json, Value};
use tablescan::actions::export::format::sha256_base64;
use tablescan::job::exports::{parse_part, Manifest};
use tablescan::storage::blob::BlobServiceClient;
use tablescan::storage::table::entity::Entity;
use tablescan::storage::ContainerClient;

use crate::common::{self, fast_retry_options, unique_name};
use crate::drive::Drive;
use crate::{Cancel, Case, Damage, Shape};

/// A step whose finish holds more children than this writes some of them ahead (see
/// `Ledger::finish_noting`: 100 operations, less the step's own three).
pub(crate) const CHILDREN_IN_ONE_TRANSACTION: usize = 97;

/// A source table and what it holds.
pub(crate) struct Source {
    pub(crate) name: String,
    pub(crate) keys: BTreeSet<(String, String)>,
    pub(crate) partitions: u64,
}

/// An export of over a hundred blobs (one row each), and damaged copies of its manifest.
pub(crate) struct ExportFixture {
    pub(crate) container: String,
    pub(crate) rows: u64,
    pub(crate) blobs: u64,
    /// The blob a `MissingBlob` case deletes, and its bytes (put back before the retry, and
    /// before every import case, in case an earlier case stopped half-way).
    pub(crate) missing: (String, Vec<u8>),
}

/// What every case reads: made once per test process, through the handler itself.
pub(crate) struct Fixture {
    pub(crate) small: Source,
    pub(crate) export: ExportFixture,
}

pub(crate) static FIXTURE: OnceLock<Fixture> = OnceLock::new();

pub(crate) async fn fixture() -> &'static Fixture {
    if let Some(fixture) = FIXTURE.get() {
        return fixture;
    }
    // Six partitions of six rows and twelve partitions of one.
    let mut rows: Vec<Entity> = (0..36)
        .map(|i| Entity::new(format!("p{}", i % 6), format!("r{i:02}")))
        .collect();
    rows.extend((0..12).map(|i| Entity::new(format!("s{i:02}"), "only")));
    let small = source("hmsmall", &rows).await;
    let wide_rows: Vec<Entity> = (0..110)
        .map(|i| Entity::new(format!("w{i:03}"), "only"))
        .collect();
    let wide = source("hmwide", &wide_rows).await;
    let export = export_fixture(&wide).await;
    FIXTURE.get_or_init(|| Fixture { small, export })
}

pub(crate) async fn source(prefix: &str, rows: &[Entity]) -> Source {
    let table = common::fresh_table(prefix).await;
    common::load(&table, rows).await;
    let keys: BTreeSet<_> = rows
        .iter()
        .map(|r| (r.partition_key.clone(), r.row_key.clone()))
        .collect();
    let partitions = keys.iter().map(|(pk, _)| pk).collect::<BTreeSet<_>>().len() as u64;
    Source {
        name: table.name().to_string(),
        keys,
        partitions,
    }
}

pub(crate) fn container(name: &str) -> ContainerClient {
    BlobServiceClient::new(&common::account(), fast_retry_options())
        .unwrap()
        .container(name)
        .unwrap()
}

/// Exports `wide` a row per step, with no faults, and writes the damaged copies of its
/// manifest part under other prefixes (each with the manifest).
pub(crate) async fn export_fixture(wide: &Source) -> ExportFixture {
    let name = unique_name("hmfixture").to_lowercase();
    let calm = Case {
        shape: Shape::Export,
        page_size: 1,
        faults: Vec::new(),
        lossy: false,
        routes: vec![false],
        side_by_side: 4,
        cancel: Cancel::Never,
    };
    let request = json!({"table": wide.name, "pageSize": 1, "maxRowsPerSecond": "unlimited",
        "action": {"type": "export", "container": name, "prefix": "b/"}});
    let mut drive = Drive::start(&calm, &request).await;
    let status = drive
        .settle()
        .await
        .unwrap_or_else(|e| panic!("the fixture export: {e}"));
    assert_eq!(status["state"], "succeeded", "{status}");
    let blobs = container(&name);
    let manifest_text = blobs.get("b/manifest.json").await.unwrap();
    let manifest = Manifest::parse(&manifest_text).unwrap();
    assert_eq!(manifest.rows, wide.keys.len() as u64);
    assert!(
        manifest.blobs as usize > CHILDREN_IN_ONE_TRANSACTION && manifest.parts.len() == 1,
        "an import of the fixture makes more children than one transaction holds: {} blobs",
        manifest.blobs
    );
    let part = String::from_utf8(blobs.get(&manifest.parts[0].name).await.unwrap()).unwrap();
    let lines: Vec<&str> = part.lines().collect();
    for damage in [
        Damage::TwiceInFinish,
        Damage::TwiceAhead,
        Damage::TwiceAcross,
    ] {
        damaged_copy(&blobs, &manifest, &lines, damage).await;
    }
    let missing = parse_part(part.as_bytes()).unwrap()[lines.len() / 2]
        .name
        .clone();
    let bytes = blobs.get(&missing).await.unwrap();
    ExportFixture {
        container: name,
        rows: manifest.rows,
        blobs: manifest.blobs,
        missing: (missing, bytes),
    }
}

/// Writes the export under `damage`'s prefix as an edited but self-consistent export would be:
/// its data blobs copied, its part listing one blob twice (as `damage` says) under the new
/// prefix, and a manifest naming that part with its SHA-256 and blob count. Only the ledger's
/// refusal of a child chosen twice stands between such an import and a scan that never settles.
pub(crate) async fn damaged_copy(
    blobs: &ContainerClient,
    manifest: &Manifest,
    lines: &[&str],
    damage: Damage,
) {
    let prefix = damage.prefix();
    let mut moved = Vec::with_capacity(lines.len() + 1);
    for line in lines {
        let mut entry: Value = serde_json::from_str(line).unwrap();
        let name = entry["name"].as_str().unwrap().to_string();
        let new_name = format!("{prefix}{}", name.strip_prefix("b/").unwrap());
        let bytes = blobs.get(&name).await.unwrap();
        blobs
            .put(&new_name, bytes, "application/octet-stream")
            .await
            .unwrap();
        entry["name"] = Value::String(new_name);
        moved.push(entry.to_string());
    }
    let (first, last) = (moved[0].clone(), moved[moved.len() - 1].clone());
    match damage {
        Damage::TwiceInFinish => moved.push(last),
        Damage::TwiceAhead => moved.insert(0, first),
        Damage::TwiceAcross => moved.push(first),
        Damage::None | Damage::MissingBlob => unreachable!("not a damaged copy"),
    }
    let text = moved.join("\n") + "\n";
    let part_name = format!("{prefix}manifest/{}/part-00000.ndjson", manifest.scan);
    let mut edited = manifest.clone();
    edited.blobs = moved.len() as u64;
    edited.parts[0].name = part_name.clone();
    edited.parts[0].blobs = moved.len() as u64;
    edited.parts[0].sha256 = Some(sha256_base64(text.as_bytes()));
    blobs
        .put(&part_name, text.into_bytes(), "application/x-ndjson")
        .await
        .unwrap();
    blobs
        .put(
            &format!("{prefix}manifest.json"),
            serde_json::to_vec(&edited).unwrap(),
            "application/json",
        )
        .await
        .unwrap();
}
