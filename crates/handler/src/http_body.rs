//! The body of an HTTP trigger's invocation, read with a bound. The host sends the caller's
//! request inside the invocation (and, for a JSON body, its top-level fields once more in the
//! metadata), so a large request makes a larger invocation. Refusing the invocation itself
//! (axum's body limit answers the host a bare 413) makes the host answer the caller 500: the
//! handler must answer with an HTTP response of its own. So an invocation over
//! [`MAX_INVOCATION_BYTES`] is read to its end without being kept (the Functions host takes
//! requests of up to 100 MB) and answered with a 413 naming the body, as a scan request over 1 MiB is.

use axum::body::{Body, Bytes, HttpBody};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use crate::answers::refusal;
use crate::http::MAX_REQUEST_BYTES;

/// The largest invocation the handler keeps: far above any request it takes (scan requests
/// are refused above 1 MiB), so that such a request arrives and is refused by its own check.
pub const MAX_INVOCATION_BYTES: usize = 32 * 1024 * 1024;

/// The invocation's bytes, or the answer that refuses a request too large to keep.
pub async fn read(body: Body) -> Result<Bytes, Response> {
    read_within(body, MAX_INVOCATION_BYTES).await
}

async fn read_within(mut body: Body, limit: usize) -> Result<Bytes, Response> {
    let mut kept: Vec<u8> = Vec::new();
    let mut total: usize = 0;
    loop {
        let frame = std::future::poll_fn(|cx| std::pin::Pin::new(&mut body).poll_frame(cx)).await;
        let Some(frame) = frame else { break };
        // A body that broke off is refused like one that could not be parsed.
        let Ok(frame) = frame else {
            return Err(StatusCode::BAD_REQUEST.into_response());
        };
        let Ok(data) = frame.into_data() else {
            continue;
        };
        total = total.saturating_add(data.len());
        if total <= limit {
            kept.extend_from_slice(&data);
        } else if !kept.is_empty() {
            // Over the limit: nothing more is kept, and what was is let go.
            kept = Vec::new();
        }
    }
    if total > limit {
        tracing::info!(
            bytes = total,
            "an HTTP invocation of {total} bytes was refused: its request is over the limit"
        );
        return Err(refusal(
            StatusCode::PAYLOAD_TOO_LARGE,
            Some("body"),
            format!(
                "the request is far larger than allowed (the host delivered {total} bytes); the \
                 limit is {MAX_REQUEST_BYTES} bytes"
            ),
        )
        .into_response());
    }
    Ok(Bytes::from(kept))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_body_within_the_limit_is_kept_and_one_over_it_is_refused_as_the_api_refuses() {
        let kept = read_within(Body::from("x".repeat(100)), 100).await.unwrap();
        assert_eq!(kept.len(), 100);
        let refused = read_within(Body::from("x".repeat(101)), 100)
            .await
            .unwrap_err();
        // An answer to the host: 200, with the caller's 413 in the `res` output.
        assert_eq!(refused.status(), StatusCode::OK);
        let bytes = axum::body::to_bytes(refused.into_body(), 1 << 20)
            .await
            .unwrap();
        let outcome: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        let res = &outcome["Outputs"]["res"];
        assert_eq!(res["statusCode"], 413, "{outcome}");
        let body: serde_json::Value = serde_json::from_str(res["body"].as_str().unwrap()).unwrap();
        assert_eq!(body["error"]["field"], "body", "{body}");
    }
}
