//! The XML of Queue service messages: the `<QueueMessage>` body of Put and Update, and the
//! `<QueueMessagesList>` answer of Put, Get and Peek.

use quick_xml::events::Event;
use quick_xml::Reader;

/// The request body carrying one message text (escaped for XML).
pub(crate) fn message_body(text: &str) -> String {
    format!(
        "<QueueMessage><MessageText>{}</MessageText></QueueMessage>",
        quick_xml::escape::escape(text)
    )
}

/// The fields of one `<QueueMessage>` element, by element name.
pub(crate) type RawMessage = Vec<(String, String)>;

/// Reads every `<QueueMessage>` of a `<QueueMessagesList>`.
pub(crate) fn parse_message_list(xml: &[u8]) -> Result<Vec<RawMessage>, String> {
    let mut reader = Reader::from_reader(xml);
    let mut messages = Vec::new();
    let mut current: Option<RawMessage> = None;
    let mut field: Option<String> = None;
    let mut buffer = Vec::new();
    loop {
        match reader.read_event_into(&mut buffer) {
            Ok(Event::Start(start)) => {
                let name = String::from_utf8_lossy(start.local_name().as_ref()).into_owned();
                if name == "QueueMessage" {
                    current = Some(Vec::new());
                } else if current.is_some() {
                    field = Some(name);
                }
            }
            Ok(Event::Empty(start)) => {
                if let Some(message) = current.as_mut() {
                    message.push((
                        String::from_utf8_lossy(start.local_name().as_ref()).into_owned(),
                        String::new(),
                    ));
                }
            }
            Ok(Event::Text(text)) => {
                if let (Some(message), Some(name)) = (current.as_mut(), field.as_ref()) {
                    let value = text
                        .decode()
                        .map_err(|e| format!("bad text in {name}: {e}"))?;
                    let value = quick_xml::escape::unescape(&value)
                        .map_err(|e| format!("bad escape in {name}: {e}"))?
                        .into_owned();
                    append(message, name, &value);
                }
            }
            Ok(Event::GeneralRef(reference)) => {
                if let (Some(message), Some(name)) = (current.as_mut(), field.as_ref()) {
                    let entity = String::from_utf8_lossy(&reference).into_owned();
                    let value = quick_xml::escape::unescape(&format!("&{entity};"))
                        .map_err(|e| format!("bad escape in {name}: {e}"))?
                        .into_owned();
                    append(message, name, &value);
                }
            }
            Ok(Event::CData(data)) => {
                if let (Some(message), Some(name)) = (current.as_mut(), field.as_ref()) {
                    append(message, name, &String::from_utf8_lossy(&data));
                }
            }
            Ok(Event::End(end)) => {
                let name = end.local_name();
                if name.as_ref() == b"QueueMessage" {
                    messages.extend(current.take());
                } else if field.as_deref().map(str::as_bytes) == Some(name.as_ref()) {
                    if let (Some(message), Some(done)) = (current.as_mut(), field.take()) {
                        if !message.iter().any(|(n, _)| *n == done) {
                            message.push((done, String::new()));
                        }
                    }
                }
            }
            Ok(Event::Eof) => return Ok(messages),
            Ok(_) => {}
            Err(e) => return Err(format!("the message list is not valid XML: {e}")),
        }
        buffer.clear();
    }
}

/// Text of one element may arrive in several events (text, then an entity reference, ...).
fn append(message: &mut RawMessage, name: &str, value: &str) {
    match message.iter_mut().find(|(n, _)| n == name) {
        Some((_, existing)) => existing.push_str(value),
        None => message.push((name.to_string(), value.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_text_is_escaped_and_read_back() {
        let text = "a < b && c > \"d\" 'e'";
        let body = message_body(text);
        assert!(!body[26..body.len() - 29].contains('<'), "{body}");
        let list = format!(
            "<?xml version=\"1.0\" encoding=\"utf-8\"?><QueueMessagesList><QueueMessage>\
             <MessageId>id-1</MessageId><DequeueCount>2</DequeueCount>{}</QueueMessage></QueueMessagesList>",
            &body["<QueueMessage>".len()..body.len() - "</QueueMessage>".len()]
        );
        let messages = parse_message_list(list.as_bytes()).unwrap();
        assert_eq!(messages.len(), 1);
        let get = |name: &str| {
            messages[0]
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.as_str())
        };
        assert_eq!(get("MessageId"), Some("id-1"));
        assert_eq!(get("DequeueCount"), Some("2"));
        assert_eq!(get("MessageText"), Some(text));
    }

    #[test]
    fn empty_lists_and_empty_text() {
        assert!(parse_message_list(b"<QueueMessagesList />")
            .unwrap()
            .is_empty());
        let one = parse_message_list(
            b"<QueueMessagesList><QueueMessage><MessageId>x</MessageId><MessageText></MessageText></QueueMessage></QueueMessagesList>",
        )
        .unwrap();
        assert_eq!(
            one[0],
            vec![
                ("MessageId".to_string(), "x".to_string()),
                ("MessageText".to_string(), String::new())
            ]
        );
    }

    #[test]
    fn broken_xml_is_an_error() {
        assert!(
            parse_message_list(b"<QueueMessagesList><QueueMessage><MessageId>x</Oops>").is_err()
        );
    }
}
