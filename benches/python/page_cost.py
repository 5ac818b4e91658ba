"""What one page of a query costs Azurite's processor, by what the query asks for.

Usage: page_cost.py CONNECTION_STRING TABLE EMULATOR_PID [ROUNDS]

Reads the whole table serially in pages of 1,000 with the official SDK, three ways (every
property; keys only; keys only within a PartitionKey range that holds every row, as a prefix
scan's queries are), ROUNDS times each (2 by default), and prints for each read the wall-clock
seconds and the emulator's processor time (user and system, from /proc/EMULATOR_PID/stat) per
page. Azurite answers a query by interpreting its filter over every row of the table and sorting
the rows that match, so a page of a query over the whole table costs about the same whatever
properties it returns (docs/scan.md, "Measured"); narrower queries cost it less.

To run it by hand on the end-to-end benchmark's table (100,000 NuGet-like rows, `benche2e`):

    scripts/azurite start --free-ports --state /tmp/az >/dev/null
    conn=$(scripts/azurite env --state /tmp/az)
    TABLESCAN_BENCH_STORAGE=$conn TABLESCAN_BENCH_PYTHON=target/bench-venv/bin/python \
      TABLESCAN_BENCH_APP=target/bench-app target/release/e2e_bench --only count --rounds 1
    target/bench-venv/bin/python benches/python/page_cost.py "$conn" benche2e "$(cat /tmp/az/pid)"
    scripts/azurite stop --state /tmp/az
"""
import os
import sys
import time

from azure.data.tables import TableClient


def processor_seconds(pid: int) -> float:
    """The emulator's user and system time so far."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    connection_string, table, pid = sys.argv[1], sys.argv[2], int(sys.argv[3])
    rounds = int(sys.argv[4]) if len(sys.argv) > 4 else 2
    client = TableClient.from_connection_string(connection_string, table_name=table)
    keys = ["PartitionKey", "RowKey"]
    reads = [
        ("every property", lambda: client.list_entities(results_per_page=1000)),
        ("keys only", lambda: client.list_entities(results_per_page=1000, select=keys)),
        (
            "keys only, within a PartitionKey range",
            lambda: client.query_entities(
                "PartitionKey ge '0' and PartitionKey lt '~'",
                results_per_page=1000,
                select=keys,
            ),
        ),
    ]
    for round_ in range(1, rounds + 1):
        for name, read in reads:
            busy, started = processor_seconds(pid), time.monotonic()
            rows = pages = 0
            for page in read().by_page():
                pages += 1
                rows += sum(1 for _entity in page)
            seconds = time.monotonic() - started
            busy = processor_seconds(pid) - busy
            print(
                f"round {round_}, {name}: {rows} rows in {pages} pages, {seconds:.2f} s, "
                f"emulator {busy:.2f} s ({1000 * busy / max(pages, 1):.1f} ms a page)"
            )


if __name__ == "__main__":
    main()
