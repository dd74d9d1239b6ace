#!/usr/bin/env python3
"""The report of bench/durability_bench.py: issue 13's goal table from the runs it recorded.

bench/durability_bench.py measures; this module only computes and prints, so that a run's JSON
(--json) can be printed again without measuring anything:

  python3 bench/durability_report.py results.json

A record is one run of one system at one client count in one round:
  {"round": 0, "system": "sync", "clients": 64, "ok_per_second": ..., "p99_ms": ...,
   "journal": {"calls_per_write": ..., "writes_per_second": ..., ...} or None, ...}
system is "reference" (the answer-at-once gRPC server), a ledgerd --durability mode ("sync",
"none", "async") or "postgres".

Every ratio is computed within a round (its two runs ran minutes apart at most, so the machine's
noise hits both alike) and the median of those per-round ratios is reported, with their min–max.
A goal is PASS when that median meets it; "rounds meeting" says how often a single round did.
"""
import json
import math
import statistics
import sys

SYSTEM_NAMES = {
    "reference": "answer-at-once gRPC server (the ceiling)",
    "none": "ledgerd `--durability=none`",
    "sync": "ledgerd `--durability=sync` (default)",
    "async": "ledgerd `--durability=async`",
    "postgres": "PostgreSQL 15, `synchronous_commit=on`, same client count",
}

# Issue 13's goals, as (label, numerator, denominator, target, kind). A numerator or denominator
# is (system, clients, figure); clients "best" is PostgreSQL at its best client count. kind
# "at_least" means ratio >= target, "at_most" ratio <= target.
GOALS = (
    ("sync ≥ 0.80× answer-at-once, 64 in flight",
     ("sync", 64, "ok_per_second"), ("reference", 64, "ok_per_second"), 0.80, "at_least"),
    ("sync ≥ 0.50× answer-at-once, 16 in flight",
     ("sync", 16, "ok_per_second"), ("reference", 16, "ok_per_second"), 0.50, "at_least"),
    ("sync ≥ 0.90× none, 256 in flight",
     ("sync", 256, "ok_per_second"), ("none", 256, "ok_per_second"), 0.90, "at_least"),
    ("sync ≥ 3× PostgreSQL, 16 clients each",
     ("sync", 16, "ok_per_second"), ("postgres", 16, "ok_per_second"), 3.0, "at_least"),
    ("sync ≥ 3× PostgreSQL, 64 clients each",
     ("sync", 64, "ok_per_second"), ("postgres", 64, "ok_per_second"), 3.0, "at_least"),
    ("sync at 16 ≥ 3× PostgreSQL at its best client count",
     ("sync", 16, "ok_per_second"), ("postgres", "best", "ok_per_second"), 3.0, "at_least"),
    ("sync at 64 ≥ 3× PostgreSQL at its best client count",
     ("sync", 64, "ok_per_second"), ("postgres", "best", "ok_per_second"), 3.0, "at_least"),
    ("sync p99 ≤ 2× none p99, 64 in flight",
     ("sync", 64, "p99_ms"), ("none", 64, "p99_ms"), 2.0, "at_most"),
)


def is_number(value):
    return isinstance(value, (int, float)) and not math.isnan(value)


def figure(record, key):
    """A record's figure; journal figures (calls_per_write, ...) live under "journal"."""
    if key in record:
        return record[key]
    journal = record.get("journal") or {}
    return journal.get(key, float("nan"))


class Runs:
    """The records of one benchmark, indexed by (system, clients) and round."""

    def __init__(self, records):
        self.records = records
        self.rounds = sorted({r["round"] for r in records})
        self.by_cell = {}
        for record in records:
            self.by_cell.setdefault((record["system"], record["clients"]), {})[record["round"]] = \
                record
        self.postgres_best = self._postgres_best()

    def _postgres_best(self):
        """PostgreSQL's client count with the highest median tps, or None."""
        medians = {clients: median(self.values("postgres", clients, "ok_per_second"))
                   for (system, clients) in self.by_cell if system == "postgres"}
        medians = {c: m for c, m in medians.items() if is_number(m)}
        return max(medians, key=medians.get) if medians else None

    def resolve(self, clients):
        return self.postgres_best if clients == "best" else clients

    def values(self, system, clients, key):
        cell = self.by_cell.get((system, self.resolve(clients)), {})
        return [figure(cell[r], key) for r in sorted(cell)]

    def ratios(self, numerator, denominator):
        """Per-round ratios numerator / denominator, for the rounds that measured both."""
        top = self.by_cell.get((numerator[0], self.resolve(numerator[1])), {})
        bottom = self.by_cell.get((denominator[0], self.resolve(denominator[1])), {})
        ratios = []
        for round_index in sorted(set(top) & set(bottom)):
            a, b = figure(top[round_index], numerator[2]), figure(bottom[round_index],
                                                                  denominator[2])
            if is_number(a) and is_number(b) and b > 0:
                ratios.append(a / b)
        return ratios


def median(values):
    values = [v for v in values if is_number(v)]
    return statistics.median(values) if values else float("nan")


def spread(values, digits):
    """'median (min–max)', or '—' when nothing was measured."""
    values = [v for v in values if is_number(v)]
    if not values:
        return "—"
    text = f"{statistics.median(values):,.{digits}f}"
    if len(values) > 1:
        text += f" ({min(values):,.{digits}f}–{max(values):,.{digits}f})"
    return text


def evaluate_goals(runs):
    results = []
    for label, numerator, denominator, target, kind in GOALS:
        ratios = runs.ratios(numerator, denominator)
        meets = (lambda x: x >= target) if kind == "at_least" else (lambda x: x <= target)
        value = median(ratios)
        results.append({
            "goal": label,
            "target": ("≥ " if kind == "at_least" else "≤ ") + f"{target:g}",
            "ratios": ratios,
            "median": value,
            "rounds_meeting": sum(1 for r in ratios if meets(r)),
            "rounds": len(ratios),
            "result": ("PASS" if meets(value) else "MISS") if ratios else "not measured",
        })
    return results


def goal_table_rows(runs, modes, clients):
    """(label, [cell per client count]) rows of the main table."""
    best = runs.postgres_best
    rows = []
    for system in ["reference", "none", "sync", "async", "postgres"]:
        if system in modes or system in ("reference", "postgres"):
            rows.append((f"{SYSTEM_NAMES[system]}: calls/s",
                         [spread(runs.values(system, c, "ok_per_second"), 0) for c in clients]))
    best_label = (f"{best} clients, {median(runs.values('postgres', best, 'ok_per_second')):,.0f}"
                  f" tps" if best else "not measured")
    # (label, numerator system, denominator system, denominator's client count or None for
    # the column's own).
    for label, top, bottom, at in (
            ("sync / answer-at-once", "sync", "reference", None),
            ("sync / none", "sync", "none", None),
            ("none / answer-at-once", "none", "reference", None),
            ("sync / PostgreSQL, same client count", "sync", "postgres", None),
            (f"sync / PostgreSQL at its best ({best_label})", "sync", "postgres", "best")):
        rows.append((f"**{label}**", [
            spread(runs.ratios((top, c, "ok_per_second"), (bottom, at or c, "ok_per_second")), 2)
            for c in clients]))
    for system in ["reference", "none", "sync", "async", "postgres"]:
        if system in modes or system in ("reference", "postgres"):
            name = {"reference": "answer-at-once", "postgres": "PostgreSQL"}.get(system, system)
            rows.append((f"p99 ms, {name}",
                         [spread(runs.values(system, c, "p99_ms"), 2) for c in clients]))
    rows.append(("**sync p99 / none p99**",
                 [spread(runs.ratios(("sync", c, "p99_ms"), ("none", c, "p99_ms")), 2)
                  for c in clients]))
    for mode, write in (("sync", "fsync"), ("async", "write")):
        if mode not in modes:
            continue
        rows.append((f"{mode}: calls per {write}",
                     [spread(runs.values(mode, c, "calls_per_write"), 1) for c in clients]))
        rows.append((f"{mode}: {write}s per second",
                     [spread(runs.values(mode, c, "writes_per_second"), 0) for c in clients]))
        rows.append((f"{mode}: journal write, mean ms",
                     [spread(runs.values(mode, c, "mean_write_ms"), 3) for c in clients]))
    return [row for row in rows if any(cell != "—" for cell in row[1])]


def print_goal_table(runs, modes, clients):
    print("| | " + " | ".join(f"c={c}" for c in clients) + " |")
    print("|---|" + "---|" * len(clients))
    for label, cells in goal_table_rows(runs, modes, clients):
        print(f"| {label} | " + " | ".join(cells) + " |")


def print_postgres_sweep(runs):
    counts = sorted(c for (system, c) in runs.by_cell if system == "postgres")
    if not counts:
        return
    print("\nPostgreSQL at every client count tried (the best, by median tps, in bold):\n")
    print("| PostgreSQL clients | tps | p50 ms | p99 ms |")
    print("|---|---|---|---|")
    for c in counts:
        tps = spread(runs.values("postgres", c, "ok_per_second"), 0)
        if c == runs.postgres_best:
            tps = f"**{tps}**"
        print(f"| {c} | {tps} | {spread(runs.values('postgres', c, 'p50_ms'), 2)} | "
              f"{spread(runs.values('postgres', c, 'p99_ms'), 2)} |")


def print_goals(goals):
    print("\n| goal (issue 13) | target | measured: median of per-round ratios (min–max) "
          "| rounds meeting | result |")
    print("|---|---|---|---|---|")
    for goal in goals:
        rounds = f"{goal['rounds_meeting']}/{goal['rounds']}" if goal["rounds"] else "—"
        print(f"| {goal['goal']} | {goal['target']} | {spread(goal['ratios'], 2)} | {rounds} "
              f"| **{goal['result']}** |")


def problems(records):
    """Lines about runs whose figures should not be trusted as they stand."""
    lines = []
    for r in records:
        where = f"round {r['round'] + 1}, {r['system']}, c={r['clients']}"
        if r.get("exit_code", 0) != 0:
            lines.append(f"{where}: the load client exited with {r['exit_code']}")
        if r.get("verification") not in (None, "PASS", "SKIPPED"):
            lines.append(f"{where}: verification {r['verification']}")
        others = {code: n for code, n in (r.get("codes") or {}).items() if code != "OK" and n}
        if others:
            lines.append(f"{where}: answers other than OK: {others}")
        if r.get("failed"):
            lines.append(f"{where}: {r['failed']} PostgreSQL transactions failed")
        if r["system"] in ("sync", "async") and not r.get("journal"):
            lines.append(f"{where}: no journal figures (the metrics window did not open)")
    return lines


def print_report(results):
    """Prints part 1's tables from bench/durability_bench.py's results; returns the goals."""
    settings = results["settings"]
    runs = Runs(results["records"])
    clients, modes = settings["clients"], settings["modes"]
    print_goal_table(runs, modes, clients)
    print_postgres_sweep(runs)
    goals = evaluate_goals(runs)
    print_goals(goals)
    sources = sorted({r["journal"]["source"] for r in results["records"] if r.get("journal")})
    print(f"\ncalls/s: medians over {len(runs.rounds)} round(s), (min–max) over rounds. "
          "Ratios: median of per-round ratios (min–max). p99: the load client's (PostgreSQL: "
          "pgbench's per-transaction log), measured window only.")
    if sources:
        print("Calls per fsync/write and fsyncs/writes per second: ledgerd's /metrics, scraped at "
              "the start and near the end of the measured window; source: "
              + ", ".join(f"`{s}`" for s in sources)
              + (" (process-wide: one observation per journal write)"
                 if sources == ["ledger_journal_group_calls"] else
                 " (per-shard batches summed over shards: the old commit path, one write per "
                 "shard batch)" if sources == ["ledger_batch_size"] else "")
              + "; mean write time from `ledger_journal_write_seconds`.")
    pg = results.get("postgres_settings")
    if pg:
        print("PostgreSQL " + pg.get("server_version", "?") + ": "
              + ", ".join(f"{k}={v}" for k, v in pg.items() if k != "server_version")
              + "; pgbench -M prepared -n, one connection per client, TCP 127.0.0.1.")
    trouble = problems(results["records"])
    for line in trouble:
        print(f"warning: {line}")
    if not trouble:
        print("Every ledgerd run's verification passed; every call was answered OK.")
    return goals


def main(argv):
    if len(argv) != 1:
        sys.exit("usage: bench/durability_report.py RESULTS.json (from durability_bench.py --json)")
    with open(argv[0]) as file:
        results = json.load(file)
    print_report(results)


if __name__ == "__main__":
    main(sys.argv[1:])
