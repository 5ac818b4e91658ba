//! Queue messages as work items: anything may arrive on the queues. Decoding never panics, and
//! an item that decodes encodes to an item that decodes to the same thing, with the same id.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tablescan::job::WorkItem;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(item) = WorkItem::decode(text) {
        let again = WorkItem::decode(&item.encode()).expect("an encoded item decodes");
        assert_eq!(again, item);
        assert_eq!(again.id(), item.id());
        let _ = item.task.clone();
    }
});
