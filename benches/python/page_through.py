"""Pages through a whole table with the official Azure Tables SDK (azure-data-tables).

Usage: page_through.py CONNECTION_STRING TABLE
Prints one JSON line: {"rows": N, "pages": P, "seconds": S, "steady_rows_per_second": R},
timing only the page-through (not interpreter start-up, imports or client creation), so it
compares with the Rust side's timing. R is the rate after the first 10 seconds, or null when
the run was too short for one (see timing.py).
"""
import json
import sys

from azure.data.tables import TableClient

from timing import Progress


def main() -> None:
    connection_string, table = sys.argv[1], sys.argv[2]
    client = TableClient.from_connection_string(connection_string, table_name=table)
    progress = Progress()
    pages = 0
    for page in client.list_entities(results_per_page=1000).by_page():
        pages += 1
        progress.add(sum(1 for _entity in page))
    print(json.dumps({"pages": pages, **progress.result()}))


if __name__ == "__main__":
    main()
