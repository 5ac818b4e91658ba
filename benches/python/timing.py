"""What the benchmark scripts share: a clock started when the timed work begins, and the rate
after the first seconds of a run.

The end-to-end benchmark reports, beside the whole run, rows per second after the first 10
seconds: the rate a long run settles at, without the start (connections, the first pages).
tools/devhost/src/bin/e2e_bench.rs computes the same figure for tablescan from its status.
"""
import time

# Seconds at the start of a run that the steady rate leaves out.
WARM_UP_SECONDS = 10.0
# Fewer seconds than this after the warm-up are too few for a rate: the run reports none.
MIN_STEADY_SECONDS = 5.0


class Progress:
    """Rows done since the clock started, and how many were done when the warm-up ended."""

    def __init__(self) -> None:
        self.started = time.perf_counter()
        self.rows = 0
        self.mark = None  # (seconds, rows) at the first addition after the warm-up

    def add(self, rows: int) -> None:
        self.rows += rows
        elapsed = time.perf_counter() - self.started
        if self.mark is None and elapsed >= WARM_UP_SECONDS:
            self.mark = (elapsed, self.rows)

    def result(self) -> dict:
        """Seconds since the start, rows, and the steady rate (None for a run too short)."""
        seconds = time.perf_counter() - self.started
        steady = None
        if self.mark is not None and seconds - self.mark[0] >= MIN_STEADY_SECONDS:
            steady = (self.rows - self.mark[1]) / (seconds - self.mark[0])
        return {"rows": self.rows, "seconds": seconds, "steady_rows_per_second": steady}
