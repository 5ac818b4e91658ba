"""Copies a whole table into another with the official Azure Tables SDK (azure-data-tables),
serially, as a user's script would: read a page of 1,000 rows, write it in transactions of up
to 100 rows, one PartitionKey each (a transaction holds one partition only), upserting each row,
then read the next page.

Usage: sdk_copy.py CONNECTION_STRING SOURCE TARGET
Prints one JSON line: {"rows": N, "pages": P, "transactions": T, "seconds": S,
"steady_rows_per_second": R}. The clock starts after the clients are created; it includes
creating the target table, as tablescan's timing includes its copy creating the target. R is
the rate of rows written after the first 10 seconds (see timing.py).

Named sdk_copy.py, not copy.py: a script's folder comes first on the import path, and a
copy.py there would hide the standard library's copy module from the SDK.
"""
import json
import sys

from azure.data.tables import TableClient

from timing import Progress

MAX_TRANSACTION = 100


def transactions(page):
    """The page's entities in order, cut into runs of one PartitionKey of at most 100."""
    run = []
    for entity in page:
        if run and (
            len(run) == MAX_TRANSACTION or run[0]["PartitionKey"] != entity["PartitionKey"]
        ):
            yield run
            run = []
        run.append(entity)
    if run:
        yield run


def main() -> None:
    connection_string, source_name, target_name = sys.argv[1], sys.argv[2], sys.argv[3]
    source = TableClient.from_connection_string(connection_string, table_name=source_name)
    target = TableClient.from_connection_string(connection_string, table_name=target_name)
    progress = Progress()
    target.create_table()
    pages = sent = 0
    for page in source.list_entities(results_per_page=1000).by_page():
        pages += 1
        for run in transactions(page):
            target.submit_transaction([("upsert", entity) for entity in run])
            sent += 1
            progress.add(len(run))
    print(json.dumps({"pages": pages, "transactions": sent, **progress.result()}))


if __name__ == "__main__":
    main()
