//! The Queue client against a real Azurite.

mod common;

use std::time::Duration;

use common::{queues, unique_name};
use tablescan::storage::queue::{
    MessageEncoding, PutOptions, TimeToLive, MAX_BASE64_PAYLOAD_BYTES,
};
use tablescan::storage::{ErrorKind, QueueClient};

async fn fresh_queue() -> QueueClient {
    let queue = queues().queue(&unique_name("q-")).unwrap();
    assert!(queue.create().await.unwrap());
    queue
}

#[tokio::test]
async fn create_is_idempotent_and_delete_removes_the_queue() {
    let queue = fresh_queue().await;
    assert!(
        !queue.create().await.unwrap(),
        "a second create reports the queue existed"
    );
    queue.delete().await.unwrap();
    let err = queue.approximate_count().await.unwrap_err();
    assert_eq!(err.status(), Some(404));
    assert_eq!(err.code(), Some("QueueNotFound"));
}

#[tokio::test]
async fn messages_are_base64_by_default_and_round_trip() {
    let queue = fresh_queue().await;
    let payload = "{\"scan\":\"s1\",\"key\":\"it's <&> 😀\"}".as_bytes();
    queue
        .put_message(payload, &PutOptions::default())
        .await
        .unwrap();

    let peeked = queue.peek(1).await.unwrap();
    assert_eq!(peeked.len(), 1);
    assert_eq!(peeked[0].dequeue_count, 0);
    assert_eq!(
        MessageEncoding::Base64.decode(&peeked[0].text).unwrap(),
        payload
    );
    assert!(peeked[0]
        .text
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "+/=".contains(c)));

    let received = queue.receive(32, Duration::from_secs(30)).await.unwrap();
    assert_eq!(received.len(), 1);
    let message = &received[0];
    assert_eq!(message.dequeue_count, 1);
    assert_eq!(
        MessageEncoding::Base64.decode(&message.text).unwrap(),
        payload
    );
    assert!(
        queue
            .receive(1, Duration::from_secs(30))
            .await
            .unwrap()
            .is_empty(),
        "hidden while owned"
    );

    queue
        .delete_message(&message.id, &message.pop_receipt)
        .await
        .unwrap();
    assert_eq!(queue.approximate_count().await.unwrap(), 0);
}

#[tokio::test]
async fn text_messages_keep_xml_special_characters() {
    let queue = fresh_queue().await;
    let options = PutOptions {
        encoding: MessageEncoding::Text,
        ..PutOptions::default()
    };
    for text in [
        "a < b && c > \"d\" 'e' é",
        "  spaces at both ends  ",
        "lines\r\nand\rreturns\nand\ttabs",
        "",
    ] {
        queue.put_message(text.as_bytes(), &options).await.unwrap();
        let received = queue.receive(1, Duration::from_secs(5)).await.unwrap();
        assert_eq!(received[0].text, text);
        queue
            .delete_message(&received[0].id, &received[0].pop_receipt)
            .await
            .unwrap();
    }
}

#[tokio::test]
async fn update_changes_visibility_text_and_receipt() {
    let queue = fresh_queue().await;
    let options = PutOptions {
        encoding: MessageEncoding::Text,
        ..PutOptions::default()
    };
    queue.put_message(b"first", &options).await.unwrap();
    let message = queue
        .receive(1, Duration::from_secs(60))
        .await
        .unwrap()
        .remove(0);

    let receipt = queue
        .update_message(
            &message.id,
            &message.pop_receipt,
            Duration::ZERO,
            Some("second"),
        )
        .await
        .unwrap();
    assert_ne!(receipt, message.pop_receipt);
    let stale = queue
        .delete_message(&message.id, &message.pop_receipt)
        .await
        .unwrap_err();
    assert_eq!(stale.status(), Some(400), "{stale}");

    let again = queue
        .receive(1, Duration::from_secs(60))
        .await
        .unwrap()
        .remove(0);
    assert_eq!(again.text, "second");
    assert_eq!(again.dequeue_count, 2);
    queue
        .delete_message(&again.id, &again.pop_receipt)
        .await
        .unwrap();
}

#[tokio::test]
async fn counts_visibility_and_time_to_live() {
    let queue = fresh_queue().await;
    let forever = PutOptions {
        time_to_live: TimeToLive::Forever,
        ..PutOptions::default()
    };
    queue.put_message(b"a", &forever).await.unwrap();
    let hidden = PutOptions {
        visibility_timeout: Duration::from_secs(60),
        ..PutOptions::default()
    };
    queue.put_message(b"b", &hidden).await.unwrap();
    assert_eq!(queue.approximate_count().await.unwrap(), 2);
    let visible = queue.receive(32, Duration::from_secs(30)).await.unwrap();
    assert_eq!(visible.len(), 1, "the delayed message is not visible yet");
    assert!(
        visible[0].expiration_time.contains("9999"),
        "{}",
        visible[0].expiration_time
    );
    queue.clear().await.unwrap();
    assert_eq!(queue.approximate_count().await.unwrap(), 0);
}

#[tokio::test]
async fn oversized_messages_and_bad_arguments_are_refused_before_sending() {
    let queue = fresh_queue().await;
    queue
        .put_message(
            &vec![b'x'; MAX_BASE64_PAYLOAD_BYTES],
            &PutOptions::default(),
        )
        .await
        .unwrap();
    let err = queue
        .put_message(
            &vec![b'x'; MAX_BASE64_PAYLOAD_BYTES + 1],
            &PutOptions::default(),
        )
        .await
        .unwrap_err();
    assert!(matches!(err.kind(), ErrorKind::InvalidRequest(_)), "{err}");
    assert!(err.to_string().contains("65536"), "{err}");
    assert!(queue.receive(33, Duration::from_secs(1)).await.is_err());
    assert!(queue.receive(0, Duration::from_secs(1)).await.is_err());
    assert!(queue.receive(1, Duration::ZERO).await.is_err());
    assert!(queues().queue("Bad_Name").is_err());
    assert_eq!(queue.approximate_count().await.unwrap(), 1);
}
