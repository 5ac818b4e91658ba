//! `GET /api/ui`: one self-contained page to watch, start and manage scans (docs/ui.md).
//!
//! The page is HTML, CSS and JavaScript compiled into the handler (`include_str!`): no CDN, no
//! build step, nothing fetched but the app's own HTTP API, which it calls exactly as the
//! `tablescan` command does, with the function key in `x-functions-key`.
//!
//! The page itself is anonymous (its function.json says so): a browser cannot send a header
//! when it navigates, so a key-protected page would need the key in the query string, where it
//! reaches the server, its logs and the browser's history. The page is the same public text
//! for everyone and holds no data; the key is entered once in the page, or passed in the
//! address's fragment (`#key=...`, which browsers never send), kept in the tab's session
//! storage and sent with every API request, so the data stays behind the same function key as
//! the API. A Content-Security-Policy pins the page's one script and one style sheet by hash,
//! lets it talk to its own origin only, and forbids framing.

use std::sync::OnceLock;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use base64::Engine;

use super::names::HTTP_RESPONSE;
use super::protocol::{Failure, Invocation, Outcome};

const HTML: &str = include_str!("ui/page.html");
const CSS: &str = include_str!("ui/page.css");
/// The script, in parts of one concern each, joined in this order into one `<script>`.
const SCRIPTS: [&str; 6] = [
    include_str!("ui/api.js"),
    include_str!("ui/chart.js"),
    include_str!("ui/list.js"),
    include_str!("ui/scan.js"),
    include_str!("ui/start.js"),
    include_str!("ui/main.js"),
];

/// The page as served, and its Content-Security-Policy.
struct Page {
    html: String,
    policy: String,
}

fn sha256_source(text: &str) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, text.as_bytes());
    format!(
        "'sha256-{}'",
        base64::engine::general_purpose::STANDARD.encode(digest.as_ref())
    )
}

/// Assembled once: the HTML with its style and script put in, and a policy that allows
/// exactly those two (by their SHA-256) and requests to the page's own origin.
fn assembled() -> &'static Page {
    static PAGE: OnceLock<Page> = OnceLock::new();
    PAGE.get_or_init(|| {
        let script = SCRIPTS.join("\n");
        let policy = format!(
            "default-src 'none'; script-src {}; style-src {}; connect-src 'self'; img-src data:; \
             base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
            sha256_source(&script),
            sha256_source(CSS)
        );
        let html = HTML
            .replacen("/*STYLE*/", CSS, 1)
            .replacen("/*SCRIPT*/", &script, 1);
        Page { html, policy }
    })
}

/// `GET /api/ui`: the page, whatever the request's query (the key travels in the fragment).
pub fn page_answer(body: &[u8]) -> Response {
    if let Err(why) = Invocation::parse(body) {
        return Failure::new(StatusCode::BAD_REQUEST, why).into_response();
    }
    let page = assembled();
    Outcome::default()
        .http_text(
            HTTP_RESPONSE,
            StatusCode::OK,
            &page.html,
            &[
                ("Content-Type", "text/html; charset=utf-8".into()),
                ("Content-Security-Policy", page.policy.clone()),
                ("X-Frame-Options", "DENY".into()),
                ("X-Content-Type-Options", "nosniff".into()),
                ("Referrer-Policy", "no-referrer".into()),
                ("Cache-Control", "no-cache".into()),
            ],
        )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The placeholders are filled, and the policy's hashes are those of what was put in.
    #[test]
    fn the_page_holds_its_style_and_script_and_the_policy_pins_them() {
        let page = assembled();
        assert!(!page.html.contains("/*STYLE*/") && !page.html.contains("/*SCRIPT*/"));
        let script = SCRIPTS.join("\n");
        assert!(page.html.contains(&format!("<script>{script}</script>")));
        assert!(page.html.contains(&format!("<style>{CSS}</style>")));
        assert!(page.policy.contains(&sha256_source(&script)));
        assert!(page.policy.contains(&sha256_source(CSS)));
        assert!(page.policy.contains("frame-ancestors 'none'"));
        // Nothing is loaded from elsewhere: no external script, style sheet or font.
        for needle in ["src=\"http", "href=\"http", "@import", "url(http"] {
            assert!(!page.html.contains(needle), "{needle}");
        }
    }

    /// The page is small enough to serve in one answer and to read.
    #[test]
    fn every_part_of_the_page_is_a_small_file() {
        for part in SCRIPTS.iter().chain([&HTML, &CSS]) {
            assert!(part.lines().count() < 900);
        }
    }

    /// The number a script's `const NAME = <digits>` sets.
    fn constant(script: &str, name: &str) -> u64 {
        let at = script
            .find(&format!("const {name} = "))
            .unwrap_or_else(|| panic!("no {name}"));
        let digits: String = script[at + name.len() + 9..]
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        digits.parse().unwrap()
    }

    /// The page costs the ledger no more than `tablescan status --watch`, one status read a
    /// second (issue 37): a list page of `LIST_LIMIT` scans is that many status reads, so the
    /// list may be read again every `LIST_LIMIT` seconds at most often, and a scan's page
    /// every second. The earlier counts the list looks up for its ETAs (a list page of
    /// `COUNTS_LIMIT`) are kept at least ten times as long.
    #[test]
    fn the_page_reads_no_more_often_than_the_watch() {
        let script = SCRIPTS.join("\n");
        let limit = constant(&script, "LIST_LIMIT");
        assert!(script.contains("limit: String(LIST_LIMIT)"));
        assert!(
            constant(&script, "LIST_REFRESH_MS") >= 1000 * limit,
            "the list is read again faster than one status read a second"
        );
        assert!(constant(&script, "SCAN_REFRESH_MS") >= 1000);
        let counts = constant(&script, "COUNTS_LIMIT");
        assert!(script.contains("limit: String(COUNTS_LIMIT)"));
        assert!(constant(&script, "COUNTS_KEPT_MS") >= 10_000 * counts);
    }

    #[tokio::test]
    async fn the_answer_is_html_with_its_policy() {
        let invocation = serde_json::json!({
            "Data": { "req": { "Url": "http://x/api/ui", "Method": "GET", "Query": {},
                                "Headers": {}, "Params": {} } },
            "Metadata": {}
        });
        let response = page_answer(invocation.to_string().as_bytes());
        assert_eq!(response.status(), StatusCode::OK);
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        let outcome: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        let res = &outcome["Outputs"]["res"];
        assert_eq!(res["statusCode"], 200);
        assert_eq!(res["headers"]["Content-Type"], "text/html; charset=utf-8");
        assert!(res["headers"]["Content-Security-Policy"]
            .as_str()
            .unwrap()
            .contains("connect-src 'self'"));
        assert!(res["body"].as_str().unwrap().starts_with("<!doctype html>"));
    }
}
