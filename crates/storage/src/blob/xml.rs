//! The XML of the Blob service: the `<BlockList>` body of Put Block List, and the
//! `<EnumerationResults>` answer of List Blobs, through quick-xml's serde support.

use serde::{Deserialize, Serialize};

/// The body of Put Block List: every block, in order, from the latest uploaded.
#[derive(Serialize)]
#[serde(rename = "BlockList")]
struct BlockList<'a> {
    #[serde(rename = "Latest")]
    latest: &'a [String],
}

/// The Put Block List body committing `ids` (base64 block ids) in that order.
pub(crate) fn block_list_body(ids: &[String]) -> Result<String, String> {
    quick_xml::se::to_string(&BlockList { latest: ids })
        .map(|body| format!("<?xml version=\"1.0\" encoding=\"utf-8\"?>{body}"))
        .map_err(|e| format!("the block list cannot be written as XML: {e}"))
}

/// The answer of List Blobs.
#[derive(Deserialize, Default)]
#[serde(rename_all = "PascalCase", default)]
struct EnumerationResults {
    blobs: Blobs,
    next_marker: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Blobs {
    #[serde(rename = "Blob")]
    blobs: Vec<ListedBlob>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "PascalCase", default)]
struct ListedBlob {
    name: String,
    properties: Properties,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Properties {
    #[serde(rename = "Content-Length")]
    content_length: u64,
    #[serde(rename = "Etag")]
    etag: String,
    #[serde(rename = "Content-MD5")]
    content_md5: Option<String>,
}

/// One blob of a listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlobItem {
    pub name: String,
    pub size: u64,
    pub etag: String,
    /// The base64 MD5 the service keeps for a blob written in one request, if any.
    pub content_md5: Option<String>,
}

/// The blobs of one page of List Blobs, and the marker of the next page (`None` at the end).
pub(crate) fn parse_blob_list(xml: &[u8]) -> Result<(Vec<BlobItem>, Option<String>), String> {
    let text = std::str::from_utf8(xml).map_err(|e| format!("the blob list is not UTF-8: {e}"))?;
    let results = quick_xml::de::from_str::<EnumerationResults>(text)
        .map_err(|e| format!("the blob list is not valid: {e}"))?;
    let blobs = results
        .blobs
        .blobs
        .into_iter()
        .map(|b| BlobItem {
            name: b.name,
            size: b.properties.content_length,
            etag: b.properties.etag,
            content_md5: b.properties.content_md5.filter(|m| !m.is_empty()),
        })
        .collect();
    let next = results.next_marker.filter(|m| !m.is_empty());
    Ok((blobs, next))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_block_list_commits_its_blocks_in_order() {
        let body = block_list_body(&["AAA=".into(), "AAE=".into()]).unwrap();
        assert!(
            body.ends_with("<BlockList><Latest>AAA=</Latest><Latest>AAE=</Latest></BlockList>"),
            "{body}"
        );
    }

    #[test]
    fn a_listing_gives_names_sizes_and_the_next_marker() {
        let xml = br#"<?xml version="1.0" encoding="utf-8"?><EnumerationResults ServiceEndpoint="http://127.0.0.1:10000/devstoreaccount1" ContainerName="c"><Prefix>x/</Prefix><MaxResults>2</MaxResults><Blobs><Blob><Name>x/a &amp; b</Name><Properties><Content-Length>12</Content-Length><Etag>0x1</Etag><Content-MD5>abc=</Content-MD5></Properties></Blob><Blob><Name>x/c</Name><Properties><Content-Length>0</Content-Length><Etag>0x2</Etag><Content-MD5 /></Properties></Blob></Blobs><NextMarker>x/d</NextMarker></EnumerationResults>"#;
        let (blobs, next) = parse_blob_list(xml).unwrap();
        assert_eq!(blobs.len(), 2);
        assert_eq!(blobs[0].name, "x/a & b");
        assert_eq!(blobs[0].size, 12);
        assert_eq!(blobs[0].content_md5.as_deref(), Some("abc="));
        assert_eq!(blobs[1].content_md5, None);
        assert_eq!(next.as_deref(), Some("x/d"));
        let last = br#"<EnumerationResults><Blobs /><NextMarker /></EnumerationResults>"#;
        assert_eq!(parse_blob_list(last).unwrap(), (vec![], None));
    }
}
