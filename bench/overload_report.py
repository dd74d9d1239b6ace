#!/usr/bin/env python3
"""The report of bench/overload_bench.py: issue 14's tables and goals from the runs it recorded.

bench/overload_bench.py measures; this module only computes and prints, so that a run's JSON
(--json) can be printed again without measuring anything:

  python3 bench/overload_report.py results.json
  python3 bench/overload_report.py round1.json round2.json   # separate runs as rounds of one

(Separate runs are how two builds are compared interleaved: before, after, before, after.)

A mode record is one ledgerd (one --durability mode, one round) and the phases it served:
  {"round": 0, "mode": "sync", "capacity": OK/s of the closed loop,
   "rss_mb": {"start", "overload_start", "peak_overload", "peak", "end"},
   "phases": [{"label": "capacity" | "1.5×" ..., "multiplier": None | 1.5, "rate": calls/s,
               "ok_per_second", "ok_p99_ms", "re_count", "re_p99_ms", "refused": {reason: n},
               "client_cpu_window_s", "window_s", "verification", ...}]}
A figure missing from a run (a series that ledgerd or ledger-loadtest does not have yet) is None
and printed as "-". With several rounds every cell is the median, with min–max when they differ.
"""
import json
import math
import statistics
import sys

# The overload multiples whose goodput issue 14 sets a goal for.
GOODPUT_MULTIPLIERS = (1.5, 2.0)
GOODPUT_MIN = 0.90
OK_P99_MAX_MS = 50.0
RE_P99_MAX_MS = 10.0
RSS_GROWTH_MAX_MB = 64.0


def is_number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool) and \
        not math.isnan(value)


def median(values):
    values = [v for v in values if is_number(v)]
    return statistics.median(values) if values else None


def cell(values, spec, unit=""):
    """Median of the numbers among `values`, with min–max when there are several different."""
    numbers = [v for v in values if is_number(v)]
    if not numbers:
        return "-"
    text = format(statistics.median(numbers), spec)
    if len(numbers) > 1 and min(numbers) != max(numbers):
        text += f" ({format(min(numbers), spec)}–{format(max(numbers), spec)})"
    return text + unit


def goodput(phase, capacity):
    ok = phase.get("ok_per_second")
    return ok / capacity if is_number(ok) and is_number(capacity) and capacity else None


def client_cpu(phase):
    """Client CPU seconds in the measured window (from /proc), else the load test's own."""
    value = phase.get("client_cpu_window_s")
    return value if is_number(value) else phase.get("client_cpu_report_s")


def percent_of_core(seconds, phase):
    window = phase.get("window_s") or phase.get("measured_seconds")
    return 100 * seconds / window if is_number(seconds) and window else None


def rss_growth(record):
    rss = record.get("rss_mb") or {}
    peak, start, first = rss.get("peak_overload"), rss.get("overload_start"), rss.get("start")
    return ((peak - start) if is_number(peak) and is_number(start) else None,
            (peak - first) if is_number(peak) and is_number(first) else None)


def refused_text(phases):
    """Server-side refusals by reason, medians over rounds; "-" when ledgerd has no series."""
    reasons = sorted({r for p in phases for r in (p.get("refused") or {})})
    if not reasons:
        return "-"
    return ", ".join(f"{r} {cell([(p.get('refused') or {}).get(r) for p in phases], ',.0f')}"
                     for r in reasons)


def ms_pair(phases, p50, p99):
    p50s, p99s = [p.get(p50) for p in phases], [p.get(p99) for p in phases]
    return f"{cell(p50s, '.1f')} / {cell(p99s, '.1f')}"


def phase_rows(records):
    """[(label, [phase of each round])] in the order the phases ran."""
    rows = {}
    for record in records:
        for phase in record.get("phases", []):
            rows.setdefault(phase["label"], []).append((record, phase))
    return rows


def print_mode_table(mode, records):
    ok_records = [r for r in records if "error" not in r]
    for r in records:
        if "error" in r:
            print(f"\nround {r['round'] + 1}, {mode}: FAILED: {r['error']}")
    if not ok_records:
        return
    print(f"\n### `--durability={mode}`: capacity "
          f"{cell([r.get('capacity') for r in ok_records], ',.0f')} OK calls/s "
          f"({len(ok_records)} round(s))\n")
    print("| phase | offered/s | sent/s | OK/s | goodput | OK p50 / p99 ms | RESOURCE_EXHAUSTED | "
          "RE p50 / p99 ms | DEADLINE_EXCEEDED | refused (server) | admitted | mailbox rejected |"
          " max in flight | ledgerd CPU % | client CPU (% of a core) | "
          "late / not sent / throttled | verification |")
    print("|" + "---|" * 17)
    for label, pairs in phase_rows(ok_records).items():
        phases = [p for _, p in pairs]
        offered = [p.get("offered_per_second") if p.get("offered_per_second") is not None
                   else p.get("rate") for p in phases]
        cpu = [client_cpu(p) for p in phases]
        cpu_pct = [percent_of_core(client_cpu(p), p) for p in phases]
        server_pct = [percent_of_core(p.get("server_cpu_s"), p) for p in phases]
        verification = sorted({str(p.get("verification")) for p in phases})
        print(f"| {label} | {cell(offered, ',.0f') if label != 'capacity' else 'closed loop'} | "
              f"{cell([p.get('sent_per_second') for p in phases], ',.0f')} | "
              f"{cell([p.get('ok_per_second') for p in phases], ',.0f')} | "
              f"{cell([goodput(p, r.get('capacity')) for r, p in pairs], '.2f')} | "
              f"{ms_pair(phases, 'ok_p50_ms', 'ok_p99_ms')} | "
              f"{cell([p.get('re_count') for p in phases], ',.0f')} | "
              f"{ms_pair(phases, 're_p50_ms', 're_p99_ms')} | "
              f"{cell([p.get('de_count') for p in phases], ',.0f')} | "
              f"{refused_text(phases)} | "
              f"{cell([p.get('admitted') for p in phases], ',.0f')} | "
              f"{cell([p.get('mailbox_rejected') for p in phases], ',.0f')} | "
              f"{cell([p.get('in_flight_max') for p in phases], ',.0f')} | "
              f"{cell(server_pct, '.0f')} | "
              f"{cell(cpu, '.1f', ' s')}, {cell(cpu_pct, '.0f', '%')} | "
              f"{cell([p.get('not_sent_late') for p in phases], ',.0f')} / "
              f"{cell([p.get('not_sent') for p in phases], ',.0f')} / "
              f"{cell([p.get('not_sent_throttled') for p in phases], ',.0f')} | "
              f"{'/'.join(verification)} |")
    attempts = {label: [p for _, p in pairs] for label, pairs in phase_rows(ok_records).items()}
    if any(p.get("re_attempt_count") for phases in attempts.values() for p in phases):
        print("\nRESOURCE_EXHAUSTED per attempt (each refusal timed on its own; a call retried "
              "after pushback spans several), count and p50 / p99 ms: " +
              "; ".join(f"{label} {cell([p.get('re_attempt_count') for p in phases], ',.0f')}, "
                        f"{ms_pair(phases, 're_attempt_p50_ms', 're_attempt_p99_ms')}"
                        for label, phases in attempts.items()))
    if any(p.get("ok_attempt_p99_ms") is not None for phases in attempts.values() for p in phases):
        print("\nOK per attempt (the attempt that succeeded, timed on its own: the server's time "
              "for work it admitted, without a refusal and pushback wait before it), p50 / p99 "
              "ms: " +
              "; ".join(f"{label} {ms_pair(phases, 'ok_attempt_p50_ms', 'ok_attempt_p99_ms')}"
                        for label, phases in attempts.items()))
    growth = [rss_growth(r)[0] for r in ok_records]
    growth_from_start = [rss_growth(r)[1] for r in ok_records]
    rss = [r.get("rss_mb") or {} for r in ok_records]
    print(f"\nledgerd RSS: {cell([x.get('start') for x in rss], '.0f')} MB at start, "
          f"{cell([x.get('overload_start') for x in rss], '.0f')} MB when the overload phases "
          f"began, peak {cell([x.get('peak_overload') for x in rss], '.0f')} MB during them, "
          f"{cell([x.get('end') for x in rss], '.0f')} MB at the end: growth over the overload "
          f"phases {cell(growth, '+.0f')} MB, {cell(growth_from_start, '+.0f')} MB from process "
          f"start")
    throttled = {label: [p.get("server_throttled_s") for _, p in pairs]
                 for label, pairs in phase_rows(ok_records).items()}
    if any(is_number(v) for values in throttled.values() for v in values):
        print("ledgerd throttled by its CPU quota, seconds per measured window: " +
              "; ".join(f"{label} {cell(values, '.1f')}" for label, values in throttled.items()))
    retries = [p.get("retries") for _, pairs in phase_rows(ok_records).items()
               for _, p in pairs if p.get("retries")]
    if retries:
        print("load-client retries (sent / denied by budget / OK after retry), per phase: " +
              "; ".join(f"{label}: " + " / ".join(
                  cell([(p.get("retries") or {}).get(k) for _, p in pairs], ',.0f')
                  for k in ("sent", "denied_by_budget", "ok_after_retry"))
                  for label, pairs in phase_rows(ok_records).items()))


def goals_for_mode(records):
    """[(goal, measured text, verdict)] for one mode, judged on medians over rounds."""
    records = [r for r in records if "error" not in r]
    if not records:
        return []
    rows = phase_rows(records)
    overload = {label: pairs for label, pairs in rows.items() if label != "capacity"}
    goals = []

    def verdict(ok):
        return "n/a" if ok is None else ("PASS" if ok else "MISS")

    for label, pairs in overload.items():
        multiplier = pairs[0][1].get("multiplier")
        if multiplier not in GOODPUT_MULTIPLIERS:
            continue
        values = [goodput(p, r.get("capacity")) for r, p in pairs]
        m = median(values)
        goals.append((f"goodput ≥ {GOODPUT_MIN:.2f}× capacity at {label}", cell(values, ".2f"),
                      verdict(None if m is None else m >= GOODPUT_MIN)))
    for label, pairs in overload.items():
        values = [p.get("ok_p99_ms") for _, p in pairs]
        m = median(values)
        goals.append((f"OK p99 ≤ {OK_P99_MAX_MS:g} ms at {label}", cell(values, ".1f", " ms"),
                      verdict(None if m is None else m <= OK_P99_MAX_MS)))
    for label, pairs in overload.items():
        # A refusal's own latency: per attempt when the load client retries after pushback.
        values = [p.get("re_attempt_p99_ms") if p.get("re_attempt_count") else p.get("re_p99_ms")
                  for _, p in pairs]
        m = median(values)
        measured = cell(values, ".1f", " ms") if m is not None else "nothing refused"
        goals.append((f"RESOURCE_EXHAUSTED p99 ≤ {RE_P99_MAX_MS:g} ms at {label}", measured,
                      verdict(None if m is None else m <= RE_P99_MAX_MS)))
    values = [rss_growth(r)[0] for r in records]
    m = median(values)
    goals.append((f"ledgerd RSS growth ≤ {RSS_GROWTH_MAX_MB:g} MB over the overload phases",
                  cell(values, "+.0f", " MB"),
                  verdict(None if m is None else m <= RSS_GROWTH_MAX_MB)))
    verdicts = [p.get("verification") for r in records for p in r.get("phases", [])]
    goals.append(("verification PASS in every phase (nothing shed was applied)",
                  f"{sum(v == 'PASS' for v in verdicts)} of {len(verdicts)} PASS",
                  verdict(bool(verdicts) and all(v == "PASS" for v in verdicts))))
    return goals


def print_sweep(sweep):
    if not sweep:
        return
    ok = [s for s in sweep if "error" not in s]
    for s in sweep:
        if "error" in s:
            print(f"\nsweep --max_in_flight={s['max_in_flight']}: FAILED: {s['error']}")
    if not ok:
        return
    first = ok[0]
    print(f"\n### `--max_in_flight` sweep: `--durability={first['mode']}`, "
          f"{first['multiplier']:g}× capacity, a fresh ledgerd per value\n")
    print("| --max_in_flight | offered/s | OK/s | goodput | OK p50 / p99 ms | RESOURCE_EXHAUSTED |"
          " RE p50 / p99 ms | DEADLINE_EXCEEDED | refused (server) | max in flight | "
          "client CPU % | RSS peak MB | verification |")
    print("|" + "---|" * 13)
    by_limit = {}
    for s in ok:
        by_limit.setdefault(s["max_in_flight"], []).append(s)
    for limit in sorted(by_limit):
        runs = by_limit[limit]
        phases = [s["phase"] for s in runs]
        print(f"| {limit} | {cell([s['rate'] for s in runs], ',.0f')} | "
              f"{cell([p.get('ok_per_second') for p in phases], ',.0f')} | "
              f"{cell([goodput(s['phase'], s['capacity']) for s in runs], '.2f')} | "
              f"{ms_pair(phases, 'ok_p50_ms', 'ok_p99_ms')} | "
              f"{cell([p.get('re_count') for p in phases], ',.0f')} | "
              f"{ms_pair(phases, 're_p50_ms', 're_p99_ms')} | "
              f"{cell([p.get('de_count') for p in phases], ',.0f')} | "
              f"{refused_text(phases)} | "
              f"{cell([p.get('in_flight_max') for p in phases], ',.0f')} | "
              f"{cell([percent_of_core(client_cpu(p), p) for p in phases], '.0f')} | "
              f"{cell([(s.get('rss_mb') or {}).get('peak') for s in runs], '.0f')} | "
              f"{'/'.join(sorted({str(p.get('verification')) for p in phases}))} |")


def print_reference(records):
    """The control: the open-loop rates against the answer-at-once reference server."""
    if not records:
        return
    print(f"\n### Control: the same open-loop rates against the answer-at-once reference server "
          f"(multiples of `--durability={records[0].get('first_mode', 'sync')}` capacity "
          f"{cell([r.get('capacity') for r in records], ',.0f')}/s)\n")
    print("| phase | offered/s | sent/s | OK/s | OK/s ÷ ledgerd capacity | OK p50 / p99 ms | "
          "DEADLINE_EXCEEDED | server CPU % | client CPU (% of a core) | late / not sent |")
    print("|" + "---|" * 10)
    for label, pairs in phase_rows(records).items():
        phases = [p for _, p in pairs]
        cpu = [client_cpu(p) for p in phases]
        offered = [p.get("offered_per_second") or p.get("rate") for p in phases]
        print(f"| {label} | {cell(offered, ',.0f')} | "
              f"{cell([p.get('sent_per_second') for p in phases], ',.0f')} | "
              f"{cell([p.get('ok_per_second') for p in phases], ',.0f')} | "
              f"{cell([goodput(p, r.get('capacity')) for r, p in pairs], '.2f')} | "
              f"{ms_pair(phases, 'ok_p50_ms', 'ok_p99_ms')} | "
              f"{cell([p.get('de_count') for p in phases], ',.0f')} | "
              f"{cell([percent_of_core(p.get('server_cpu_s'), p) for p in phases], '.0f')} | "
              f"{cell(cpu, '.1f', ' s')}, "
              f"{cell([percent_of_core(c, p) for c, p in zip(cpu, phases)], '.0f', '%')} | "
              f"{cell([p.get('not_sent_late') for p in phases], ',.0f')} / "
              f"{cell([p.get('not_sent') for p in phases], ',.0f')} |")


def print_report(results):
    """Prints every table and the goals; returns {mode: [(goal, measured, verdict)]}."""
    modes = {}
    for record in results.get("modes", []):
        modes.setdefault(record["mode"], []).append(record)
    goals = {}
    for mode, records in modes.items():
        print_mode_table(mode, records)
        goals[mode] = goals_for_mode(records)
        if goals[mode]:
            print(f"\nGoals, `--durability={mode}` (medians over rounds):\n")
            print("| goal | measured | verdict |")
            print("|---|---|---|")
            for goal, measured, verdict in goals[mode]:
                print(f"| {goal} | {measured} | **{verdict}** |")
    print_reference(results.get("reference"))
    print_sweep(results.get("sweep"))
    print("\nColumns: offered/s is the open loop's schedule (ledger-loadtest offered_per_second, "
          "else --rate); sent/s what it sent (sent_per_second, else measured calls minus not "
          "sent); goodput = OK/s ÷ the closed-loop capacity of the same ledgerd; refused, "
          "admitted, mailbox rejected and max in flight come from ledgerd's /metrics over the "
          "measured window (\"-\": ledgerd has no such series); CPU is from /proc over that "
          "window (100% = one core); late = calls the open loop could not send on time "
          "(not_sent_late), not sent = calls over its --max_in_flight, throttled = calls its "
          "adaptive throttle kept (not_sent_throttled).")
    return goals


def merge(runs):
    """Several runs' results as one, their rounds numbered one after another."""
    merged = {"modes": [], "reference": [], "sweep": []}
    offset = 0
    for results in runs:
        rounds = 0
        for key in ("modes", "reference", "sweep"):
            for record in results.get(key) or []:
                merged[key].append(dict(record, round=record["round"] + offset))
                rounds = max(rounds, record["round"] + 1)
        offset += rounds
    return merged


def main(argv):
    if not argv:
        sys.exit("usage: overload_report.py RESULTS.json... (written by overload_bench.py --json;"
                 " several are merged as rounds of one)")
    runs = []
    for path in argv:
        with open(path) as file:
            runs.append(json.load(file))
    for results in runs:
        machine = results.get("machine", {})
        print(f"command: `{results.get('command')}`; started {machine.get('started_utc')} UTC; "
              f"load average at start {machine.get('load_average_at_start')}, at end "
              f"{machine.get('load_average_at_end')}; binaries {machine.get('build')} (source "
              f"{machine.get('build_source')})")
    print_report(merge(runs) if len(runs) > 1 else runs[0])


if __name__ == "__main__":
    main(sys.argv[1:])
