//! The form of an export's data blobs, written by the export action and read by an import.
//!
//! A data blob is newline-delimited JSON: one row per line, in the entity form the enqueue
//! action writes (keys, every property, and an `@odata.type` annotation wherever JSON alone
//! cannot tell the type), so every EDM type comes back as it was. The rows come in chunks of at
//! most a page; compressed, each chunk is a gzip member of its own (with its own CRC). A file of
//! several members is still one ordinary gzip file (`gunzip`, `zcat` and every gzip library
//! read it whole), and an import that must stop mid-blob can resume at the start of a member
//! with a range read instead of inflating the blob from its beginning again.

use std::io::{Read, Write};

use base64::Engine;

use tablescan_storage::table::entity::Entity;

/// How a data blob is compressed (the scan's `compression`, mapped by `functions::plan`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    /// gzip, a member per chunk.
    Gzip,
    /// Plain newline-delimited JSON.
    None,
}

impl Compression {
    /// The data blobs' content type.
    pub fn content_type(self) -> &'static str {
        match self {
            Compression::Gzip => "application/gzip",
            Compression::None => "application/x-ndjson",
        }
    }
}

/// The most rows of plain JSON an import takes as one chunk (a compressed blob's chunks are
/// its members, as the export wrote them: a page each).
const PLAIN_CHUNK_ROWS: usize = 1000;

/// Why a blob cannot be read as export data.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FormatError {
    /// The compressed data is damaged or cut short (a member's CRC or length does not match,
    /// or its deflate stream is broken).
    #[error("its gzip data is damaged at byte {offset}: {why}")]
    Corrupt { offset: u64, why: String },
    /// A chunk is not UTF-8 text.
    #[error("its data at byte {offset} is not UTF-8 text")]
    NotText { offset: u64 },
}

/// One chunk of rows as written: the rows' lines, and the bytes of the blob it took.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk {
    pub text: String,
    /// How many bytes of the blob (from where it started) this chunk was.
    pub length: usize,
}

/// One chunk of `rows`: their lines, each ending in a newline, compressed as asked.
pub fn encode_chunk(rows: &[Entity], compression: Compression) -> Vec<u8> {
    let mut text = String::with_capacity(rows.len() * 256);
    for row in rows {
        text.push_str(&row.to_json());
        text.push('\n');
    }
    match compression {
        Compression::None => text.into_bytes(),
        Compression::Gzip => {
            // Level 6, the gzip default: level 1 writes a quarter more bytes for little less
            // work next to the JSON encoding itself.
            let mut encoder = flate2::write::GzEncoder::new(
                Vec::with_capacity(text.len() / 4),
                flate2::Compression::default(),
            );
            encoder
                .write_all(text.as_bytes())
                .expect("writing into memory cannot fail");
            encoder.finish().expect("writing into memory cannot fail")
        }
    }
}

/// The chunk at the start of `data` (which begins at byte `offset` of its blob), or `None` at
/// its end.
pub fn next_chunk(
    data: &[u8],
    offset: u64,
    compression: Compression,
) -> Result<Option<Chunk>, FormatError> {
    if data.is_empty() {
        return Ok(None);
    }
    match compression {
        Compression::None => {
            let mut length = 0;
            for _ in 0..PLAIN_CHUNK_ROWS {
                match data[length..].iter().position(|b| *b == b'\n') {
                    Some(end) => length += end + 1,
                    None => {
                        length = data.len();
                        break;
                    }
                }
                if length == data.len() {
                    break;
                }
            }
            let text = std::str::from_utf8(&data[..length])
                .map_err(|_| FormatError::NotText { offset })?;
            Ok(Some(Chunk {
                text: text.to_string(),
                length,
            }))
        }
        Compression::Gzip => {
            // The bufread decoder takes from `rest` exactly the bytes of one member.
            let mut rest = data;
            let mut decoder = flate2::bufread::GzDecoder::new(&mut rest);
            let mut bytes = Vec::new();
            decoder
                .read_to_end(&mut bytes)
                .map_err(|e| FormatError::Corrupt {
                    offset,
                    why: e.to_string(),
                })?;
            drop(decoder);
            let length = data.len() - rest.len();
            let text = String::from_utf8(bytes).map_err(|_| FormatError::NotText { offset })?;
            Ok(Some(Chunk { text, length }))
        }
    }
}

/// One line of a chunk as a row; why not, in a sentence.
pub fn parse_line(line: &str) -> Result<Entity, String> {
    match serde_json::from_str::<serde_json::Value>(line) {
        Ok(serde_json::Value::Object(object)) => Entity::from_json(object),
        Ok(_) => Err("the line is not a JSON object".into()),
        Err(e) => Err(format!("the line is not JSON: {e}")),
    }
}

/// The SHA-256 of `data`, in base64: the checksum a manifest records for each blob.
pub fn sha256_base64(data: &[u8]) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, data);
    base64::engine::general_purpose::STANDARD.encode(digest.as_ref())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tablescan_storage::table::entity::Value;

    fn rows(n: usize, from: usize) -> Vec<Entity> {
        (from..from + n)
            .map(|i| {
                Entity::new(format!("p{}", i / 7), format!("r{i}"))
                    .with("n", Value::Int64(i as i64))
                    .with("text", Value::String("x".repeat(i % 50)))
            })
            .collect()
    }

    fn read_all(blob: &[u8], compression: Compression) -> Vec<Entity> {
        let mut offset = 0;
        let mut out = Vec::new();
        while let Some(chunk) = next_chunk(&blob[offset..], offset as u64, compression).unwrap() {
            for line in chunk.text.lines() {
                out.push(parse_line(line).unwrap());
            }
            offset += chunk.length;
        }
        out
    }

    #[test]
    fn chunks_read_back_as_written_and_resume_at_any_chunk() {
        for compression in [Compression::Gzip, Compression::None] {
            let (a, b, c) = (rows(1000, 0), rows(3, 1000), rows(500, 1003));
            let mut blob = encode_chunk(&a, compression);
            let second = blob.len();
            blob.extend(encode_chunk(&b, compression));
            blob.extend(encode_chunk(&c, compression));
            let all: Vec<Entity> = a.iter().chain(&b).chain(&c).cloned().collect();
            assert_eq!(read_all(&blob, compression), all, "{compression:?}");
            // From the second chunk on, as an import resumes with a range read.
            let rest = read_all(&blob[second..], compression);
            assert_eq!(rest, all[1000..], "{compression:?}");
        }
    }

    #[test]
    fn a_gzip_blob_of_members_is_one_ordinary_gzip_file() {
        let mut blob = encode_chunk(&rows(10, 0), Compression::Gzip);
        blob.extend(encode_chunk(&rows(10, 10), Compression::Gzip));
        let mut text = String::new();
        flate2::read::MultiGzDecoder::new(&blob[..])
            .read_to_string(&mut text)
            .unwrap();
        assert_eq!(text.lines().count(), 20);
    }

    #[test]
    fn damage_is_found_and_placed() {
        let mut blob = encode_chunk(&rows(100, 0), Compression::Gzip);
        let first = blob.len();
        blob.extend(encode_chunk(&rows(100, 100), Compression::Gzip));
        let middle = first + (blob.len() - first) / 2;
        blob[middle] ^= 0x55;
        assert!(next_chunk(&blob, 0, Compression::Gzip).unwrap().is_some());
        let error = next_chunk(&blob[first..], first as u64, Compression::Gzip).unwrap_err();
        assert!(
            matches!(error, FormatError::Corrupt { offset, .. } if offset == first as u64),
            "{error}"
        );
        // Cut short.
        let cut = &blob[..first - 3];
        assert!(next_chunk(cut, 0, Compression::Gzip).is_err());
        // Not gzip at all.
        assert!(next_chunk(b"{\"PartitionKey\":1}\n", 0, Compression::Gzip).is_err());
    }

    #[test]
    fn bad_lines_say_why() {
        assert!(parse_line("[1]").unwrap_err().contains("not a JSON object"));
        assert!(parse_line("{oops").unwrap_err().contains("not JSON"));
        assert!(parse_line(r#"{"RowKey":"a"}"#).is_err());
        assert!(parse_line(
            r#"{"PartitionKey":"a","RowKey":"b","n":"x","n@odata.type":"Edm.Int64"}"#
        )
        .is_err());
    }

    #[test]
    fn a_checksum_is_sha256_in_base64() {
        assert_eq!(
            sha256_base64(b"abc"),
            "ungWv48Bz+pBQUDeXa4iI7ADYaOWF3qctBD/YfIAFa0="
        );
    }
}
