//! The XML of Queue service messages: the `<QueueMessage>` body of Put and Update, and the
//! `<QueueMessagesList>` answer of Put, Get and Peek, through quick-xml's serde support (it
//! keeps an element's text as sent, spaces and line breaks included, and resolves escapes).

use serde::{Deserialize, Serialize};

/// The body of Put and Update Message.
#[derive(Serialize)]
#[serde(rename = "QueueMessage")]
struct MessageBody<'a> {
    #[serde(rename = "MessageText")]
    message_text: &'a str,
}

/// The request body carrying one message text (escaped for XML). A carriage return goes as a
/// character reference: raw, an XML parser reads it as a line feed (end-of-line handling).
pub(crate) fn message_body(text: &str) -> Result<String, String> {
    quick_xml::se::to_string(&MessageBody { message_text: text })
        .map(|body| body.replace('\r', "&#13;"))
        .map_err(|e| format!("the message cannot be written as XML: {e}"))
}

/// A `<QueueMessagesList>`: what Put, Get and Peek answer.
#[derive(Deserialize, Default)]
struct MessageList {
    #[serde(rename = "QueueMessage", default)]
    messages: Vec<ListedMessage>,
}

/// One `<QueueMessage>` of a list; a field the operation does not answer (Peek gives no pop
/// receipt, Put no text) is empty.
#[derive(Deserialize, Default, Debug, PartialEq)]
#[serde(rename_all = "PascalCase", default)]
pub(crate) struct ListedMessage {
    pub message_id: String,
    pub pop_receipt: String,
    pub dequeue_count: u32,
    pub insertion_time: String,
    pub expiration_time: String,
    pub time_next_visible: String,
    pub message_text: String,
}

/// Reads every `<QueueMessage>` of a `<QueueMessagesList>`.
pub(crate) fn parse_message_list(xml: &[u8]) -> Result<Vec<ListedMessage>, String> {
    let text =
        std::str::from_utf8(xml).map_err(|e| format!("the message list is not UTF-8: {e}"))?;
    quick_xml::de::from_str::<MessageList>(text)
        .map(|list| list.messages)
        .map_err(|e| format!("the message list is not valid: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_text_is_escaped_and_read_back_as_sent() {
        for text in [
            "a < b && c > \"d\" 'e'",
            "  spaces at both ends  ",
            "line\nbreaks\r\nand\ttabs",
            "",
            "é中😀",
        ] {
            let body = message_body(text).unwrap();
            assert_eq!(
                body.matches('<').count(),
                if text.is_empty() { 3 } else { 4 },
                "{body}"
            );
            let list = format!(
                "<?xml version=\"1.0\" encoding=\"utf-8\"?><QueueMessagesList>{}</QueueMessagesList>",
                body.replacen(
                    "<QueueMessage>",
                    "<QueueMessage><MessageId>id-1</MessageId><DequeueCount>2</DequeueCount>",
                    1
                )
            );
            let messages = parse_message_list(list.as_bytes()).unwrap();
            assert_eq!(messages.len(), 1);
            assert_eq!(messages[0].message_id, "id-1");
            assert_eq!(messages[0].dequeue_count, 2);
            assert_eq!(messages[0].message_text, text, "{body}");
        }
    }

    #[test]
    fn empty_lists_and_empty_text() {
        assert!(parse_message_list(b"<QueueMessagesList />")
            .unwrap()
            .is_empty());
        assert!(
            parse_message_list(b"<QueueMessagesList></QueueMessagesList>")
                .unwrap()
                .is_empty()
        );
        let one = parse_message_list(
            b"<QueueMessagesList><QueueMessage><MessageId>x</MessageId><MessageText></MessageText></QueueMessage></QueueMessagesList>",
        )
        .unwrap();
        assert_eq!(
            one,
            vec![ListedMessage {
                message_id: "x".into(),
                ..ListedMessage::default()
            }]
        );
        let many = parse_message_list(
            b"<QueueMessagesList><QueueMessage><MessageId>a</MessageId></QueueMessage>\
              <QueueMessage><MessageId>b</MessageId><MessageText/></QueueMessage></QueueMessagesList>",
        )
        .unwrap();
        assert_eq!(many.len(), 2);
    }

    #[test]
    fn broken_xml_is_an_error() {
        assert!(
            parse_message_list(b"<QueueMessagesList><QueueMessage><MessageId>x</Oops>").is_err()
        );
        assert!(parse_message_list(
            b"<QueueMessagesList><QueueMessage><DequeueCount>many</DequeueCount></QueueMessage></QueueMessagesList>"
        )
        .is_err());
    }
}
