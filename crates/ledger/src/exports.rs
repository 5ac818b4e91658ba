//! What an export leaves behind, and the form of what the ledger keeps of it.
//!
//! An export's blobs sit under its prefix:
//!
//! ```text
//! <prefix>manifest.json                      what was exported, and the list of parts
//! <prefix>manifest/<scan>/part-00000.ndjson  one line per data blob (up to 1,000 a part)
//! <prefix>data/<scan>/<item>.<attempt>.ndjson.gz
//! ```
//!
//! Every blob an export writes but `manifest.json` names its scan: two exports started at
//! once into one empty prefix (both pass the start's check) never overwrite each other's
//! parts, so the manifest that lands last still lists its own export whole. The manifest
//! records each part's SHA-256, and an import reads the parts it names and checks them.
//!
//! A step's finish records its blob in a `blob:<item>` row of the ledger (in the same
//! transaction that marks the step done), so exactly the blobs of counted steps are recorded,
//! once each. The manifest is written from those rows when every step is done; an import reads
//! the manifest, never a listing, so a blob a crashed or superseded attempt left behind is
//! never read twice (and is deleted when the manifest is written).
//!
//! Only the forms are here (the blobs' names, a `blob:` row, the manifest), below the ledger's
//! operations: `ledger::finish` writes the rows, `export_records` reads them and keeps the
//! manifest's marks on the scan row.

use serde::{Deserialize, Serialize};

use super::rows::{self, int, number, text};
use tablescan_api::{Compression, ScanSpec};
use tablescan_storage::table::entity::{Entity, Value};

/// The manifest format written by this version: 2 says `complete` (format 1, written before
/// it, has no such field, and is read as it always was).
pub const MANIFEST_FORMAT: u32 = 2;
/// The oldest manifest format this version reads.
pub const OLDEST_MANIFEST_FORMAT: u32 = 1;
/// What a manifest says it is, so that an import refuses any other JSON file.
pub const MANIFEST_KIND: &str = "tablescan-export";
/// The most data blobs one manifest part lists (a page of the ledger's `blob:` rows).
pub const BLOBS_PER_PART: usize = 1000;

/// Where an export's blobs are, under its prefix (which ends in `/` unless empty).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout<'a> {
    pub prefix: &'a str,
}

impl Layout<'_> {
    pub fn manifest(&self) -> String {
        format!("{}manifest.json", self.prefix)
    }

    /// Part `index` of scan `scan`'s manifest. (Exports before parts were named by their scan
    /// wrote `<prefix>manifest/part-00000.ndjson`; an import reads the names the manifest
    /// gives, so their manifests still import.)
    pub fn part(&self, scan: &str, index: u32) -> String {
        format!("{}manifest/{scan}/part-{index:05}.ndjson", self.prefix)
    }

    /// Where every manifest part is (of any scan, and of exports before parts were named by
    /// their scan).
    pub fn parts(&self) -> String {
        format!("{}manifest/", self.prefix)
    }

    /// Where every data blob of scan `scan` is.
    pub fn data_of(&self, scan: &str) -> String {
        format!("{}data/{scan}/", self.prefix)
    }

    /// The blob the attempt `attempt` of step `item` writes.
    pub fn data(&self, scan: &str, item: &str, attempt: u32, compression: Compression) -> String {
        format!(
            "{}{item}.{attempt}.{}",
            self.data_of(scan),
            compression.extension()
        )
    }
}

/// A data blob: one line of a manifest part, and what a `blob:` row of the ledger holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BlobEntry {
    /// The blob's full name in its container.
    pub name: String,
    pub rows: u64,
    pub bytes: u64,
    /// SHA-256 of its bytes, base64.
    pub sha256: String,
}

impl BlobEntry {
    pub fn to_entity(&self, scan: &str, item: &str) -> Entity {
        Entity::new(scan, rows::blob_key(item))
            .with("name", Value::String(self.name.clone()))
            .with("rows", int(self.rows))
            .with("bytes", int(self.bytes))
            .with("sha256", Value::String(self.sha256.clone()))
    }

    pub fn from_entity(entity: &Entity) -> Option<Self> {
        Some(BlobEntry {
            name: text(entity, "name")?,
            rows: number(entity, "rows"),
            bytes: number(entity, "bytes"),
            sha256: text(entity, "sha256")?,
        })
    }
}

/// `<prefix>manifest.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Manifest {
    /// Always [`MANIFEST_KIND`].
    pub kind: String,
    pub format: u32,
    /// Written only when every step of the export is done and none was dropped or failed: an
    /// import refuses a manifest (of format 2 on) that does not say so.
    #[serde(default)]
    pub complete: bool,
    /// The scan that wrote the export, and the request it was started with.
    pub scan: String,
    pub spec: ScanSpec,
    /// The table exported (also in `spec`), and its account's setting name.
    pub table: String,
    pub compression: Compression,
    pub rows: u64,
    pub blobs: u64,
    pub bytes: u64,
    /// The parts, in order: each lists its blobs, one JSON object per line.
    pub parts: Vec<PartSummary>,
    /// When the scan was started and when the manifest was written (RFC 3339).
    pub started_at: String,
    pub written_at: String,
}

/// One part of a manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartSummary {
    pub name: String,
    pub blobs: u64,
    pub rows: u64,
    /// SHA-256 of the part's bytes, base64 (`None` in manifests written before it was
    /// recorded: such parts are read unchecked).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
}

impl Manifest {
    /// Reads a manifest blob; why not, in a sentence.
    pub fn parse(bytes: &[u8]) -> Result<Manifest, String> {
        let value: serde_json::Value = serde_json::from_slice(bytes)
            .map_err(|e| format!("it is not JSON ({e}); is it a tablescan manifest?"))?;
        if value.get("kind").and_then(|k| k.as_str()) != Some(MANIFEST_KIND) {
            return Err(format!(
                "it is not a tablescan manifest (its \"kind\" is not {MANIFEST_KIND:?})"
            ));
        }
        let format = value.get("format").and_then(|f| f.as_u64()).unwrap_or(0);
        if !(u64::from(OLDEST_MANIFEST_FORMAT)..=u64::from(MANIFEST_FORMAT)).contains(&format) {
            return Err(format!(
                "it is of manifest format {format}; this version reads formats \
                 {OLDEST_MANIFEST_FORMAT} to {MANIFEST_FORMAT}"
            ));
        }
        let manifest: Manifest =
            serde_json::from_value(value).map_err(|e| format!("it is malformed: {e}"))?;
        if format >= 2 && !manifest.complete {
            return Err(
                "it does not describe a whole export (it is not marked complete): the export \
                 was cancelled or failed before all of its rows were written"
                    .into(),
            );
        }
        Ok(manifest)
    }
}

/// The lines of a manifest part, each a [`BlobEntry`]; why not, naming the line.
pub fn parse_part(bytes: &[u8]) -> Result<Vec<BlobEntry>, String> {
    let text = std::str::from_utf8(bytes).map_err(|_| "it is not UTF-8 text".to_string())?;
    text.lines()
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty())
        .map(|(n, line)| {
            serde_json::from_str(line)
                .map_err(|e| format!("line {} is not a blob entry: {e}", n + 1))
        })
        .collect()
}

/// The text of a manifest part.
pub fn part_text(entries: &[BlobEntry]) -> String {
    let mut text = String::new();
    for entry in entries {
        text.push_str(&serde_json::to_string(entry).expect("a blob entry serialises"));
        text.push('\n');
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_sit_under_the_prefix() {
        let layout = Layout { prefix: "b/2026/" };
        assert_eq!(layout.manifest(), "b/2026/manifest.json");
        assert_eq!(layout.part("s1", 3), "b/2026/manifest/s1/part-00003.ndjson");
        assert!(layout.part("s1", 3).starts_with(&layout.parts()));
        assert_eq!(
            layout.data("s1", "item", 2, Compression::Gzip),
            "b/2026/data/s1/item.2.ndjson.gz"
        );
        assert!(layout
            .data("s1", "item", 2, Compression::None)
            .starts_with(&layout.data_of("s1")));
        assert_eq!(Layout { prefix: "" }.manifest(), "manifest.json");
    }

    #[test]
    fn parts_and_records_round_trip() {
        let entries = vec![
            BlobEntry {
                name: "p/data/s/a.1.ndjson.gz".into(),
                rows: 1000,
                bytes: 12345,
                sha256: "x".into(),
            },
            BlobEntry {
                name: "p/data/s/b.3.ndjson.gz".into(),
                rows: 7,
                bytes: 99,
                sha256: "y".into(),
            },
        ];
        assert_eq!(parse_part(part_text(&entries).as_bytes()).unwrap(), entries);
        let row = entries[0].to_entity("s", "a");
        assert_eq!(BlobEntry::from_entity(&row).unwrap(), entries[0]);
        let broken = parse_part(b"{\"name\":\"a\"}\n").unwrap_err();
        assert!(broken.contains("line 1"), "{broken}");
    }

    #[test]
    fn a_part_summary_without_its_sha256_still_reads() {
        let old: PartSummary =
            serde_json::from_str(r#"{"name":"p/manifest/part-00000.ndjson","blobs":2,"rows":9}"#)
                .unwrap();
        assert_eq!(old.sha256, None);
        let new = PartSummary {
            sha256: Some("x".into()),
            ..old.clone()
        };
        let text = serde_json::to_string(&new).unwrap();
        assert!(text.contains("\"sha256\":\"x\""), "{text}");
        assert!(!serde_json::to_string(&old).unwrap().contains("sha256"));
    }

    #[test]
    fn only_tablescan_manifests_are_read() {
        assert!(Manifest::parse(b"{\"kind\":\"other\"}")
            .unwrap_err()
            .contains("not a tablescan manifest"));
        assert!(Manifest::parse(b"not json")
            .unwrap_err()
            .contains("not JSON"));
        let later = format!("{{\"kind\":\"{MANIFEST_KIND}\",\"format\":99}}");
        assert!(Manifest::parse(later.as_bytes())
            .unwrap_err()
            .contains("format 99"));
    }

    fn spec() -> ScanSpec {
        ScanSpec::parse(
            r#"{"table":"logs","action":{"type":"count"}}"#,
            &|name: &str| {
                (name == "AzureWebJobsStorage").then(|| "UseDevelopmentStorage=true".into())
            },
        )
        .expect("a valid spec")
    }

    fn manifest_text(format: u32, complete: Option<bool>) -> String {
        let mut manifest = serde_json::json!({
            "kind": MANIFEST_KIND, "format": format, "scan": "s",
            "spec": serde_json::to_value(spec()).unwrap(),
            "table": "t", "compression": "gzip", "rows": 1, "blobs": 1, "bytes": 1,
            "parts": [], "startedAt": "2026-11-25T00:00:00Z", "writtenAt": "2026-11-25T00:00:00Z",
        });
        if let Some(complete) = complete {
            manifest["complete"] = complete.into();
        }
        manifest.to_string()
    }

    #[test]
    fn a_manifest_not_marked_complete_is_refused_from_format_2_on() {
        let read = |format, complete| Manifest::parse(manifest_text(format, complete).as_bytes());
        assert!(read(2, Some(true)).unwrap().complete);
        for incomplete in [Some(false), None] {
            let why = read(2, incomplete).unwrap_err();
            assert!(why.contains("not marked complete"), "{why}");
        }
        // Format 1 had no such mark: read as it always was.
        assert!(!read(1, None).unwrap().complete);
    }
}
