"""Pages through a whole table with the official Azure Tables SDK (azure-data-tables).

Usage: page_through.py CONNECTION_STRING TABLE
Prints one JSON line: {"rows": N, "pages": P, "seconds": S}, timing only the page-through
(not interpreter start-up or imports), so it compares with the Rust side's timing.
"""
import json
import sys
import time

from azure.data.tables import TableClient


def main() -> None:
    connection_string, table = sys.argv[1], sys.argv[2]
    client = TableClient.from_connection_string(connection_string, table_name=table)
    started = time.perf_counter()
    rows = pages = 0
    for page in client.list_entities(results_per_page=1000).by_page():
        pages += 1
        for _entity in page:
            rows += 1
    seconds = time.perf_counter() - started
    print(json.dumps({"rows": rows, "pages": pages, "seconds": seconds}))


if __name__ == "__main__":
    main()
