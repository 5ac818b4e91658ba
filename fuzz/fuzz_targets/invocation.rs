//! Whatever the host sends the handler: the invocation envelope, the HTTP request inside it,
//! and the scan request in its body. Nothing may panic; a scan request that is accepted must
//! be one the handler can store and read back.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tablescan::functions::protocol::Invocation;
use tablescan::job::ScanSpec;

/// Two connection settings, as an app would have.
fn settings(name: &str) -> Option<String> {
    match name {
        "AzureWebJobsStorage" | "Other" => Some("UseDevelopmentStorage=true".into()),
        _ => None,
    }
}

fuzz_target!(|data: &[u8]| {
    if let Ok(invocation) = Invocation::parse(data) {
        let _ = invocation.queue_message("item");
        let _ = invocation.dequeue_count();
        let _ = invocation.message_id();
        if let Ok(request) = invocation.http_request("req") {
            let _ = request.param("id");
            if let Some(body) = &request.body {
                check_spec(body);
            }
        }
    }
    if let Ok(text) = std::str::from_utf8(data) {
        check_spec(text);
    }
});

fn check_spec(body: &str) {
    if let Ok(spec) = ScanSpec::parse(body, &settings) {
        let stored = serde_json::to_string(&spec).expect("an accepted spec serialises");
        let read: ScanSpec = serde_json::from_str(&stored).expect("a stored spec reads back");
        assert_eq!(read, spec);
    }
}
