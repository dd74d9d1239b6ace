#!/usr/bin/env python3
"""Checks that README.md and docs/*.md stay a front page and a reference that tell the truth.

  check_docs.py SOURCE_DIR LEDGERD

- README.md has at most 250 lines: reference belongs in docs/, one file per reader's task.
- No document points outside the repository (a workspace path, an absolute path of a machine).
- Every relative link names a file of the repository, and every #anchor a heading of its file.
- README.md's start-up transcript is what ledgerd prints: `ledgerd init` and the start-up lines,
  run for real in a scratch directory. Only what differs on every run or every machine is
  masked: the ledger id, the recovery time, the open-file limit, the ports.
- docs/deployment.md's TLS recipe works as written (its certificate commands, run by bash), and
  ledgerd started as it shows prints the ready line it shows.
- docs/operations.md's flag table lists exactly the flags of `ledgerd --help`, with their defaults.

Prints one line per check and exits 1 if any failed.
"""
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

README_LINES_MAX = 250
START_UP_MARKER = "<!-- start-up transcript: tests/docs/check_docs.py"

failures = []


def check(name, ok, detail=""):
    print(("ok    " if ok else "FAIL  ") + name)
    if not ok:
        failures.append(name)
        if detail:
            print("      " + str(detail).replace("\n", "\n      "))


def read(path):
    with open(path, encoding="utf-8") as file:
        return file.read()


def documents(source):
    names = ["README.md"] + sorted(
        os.path.join("docs", name) for name in os.listdir(os.path.join(source, "docs"))
        if name.endswith(".md"))
    return {name: read(os.path.join(source, name)) for name in names}


def slug(heading):
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"`", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(text):
    found = set()
    in_code = False
    for line in text.split("\n"):
        if line.startswith("```"):
            in_code = not in_code
        elif not in_code and re.match(r"#{1,6} ", line):
            base = slug(line.lstrip("#"))
            name, n = base, 1
            while name in found:
                name, n = f"{base}-{n}", n + 1
            found.add(name)
    return found


def check_links(source, docs):
    broken = []
    for name, text in docs.items():
        prose = re.sub(r"```.*?```", "", text, flags=re.S)
        for target in re.findall(r"\]\(([^)\s]+)\)", prose):
            if re.match(r"[a-z]+:", target):
                continue  # https:, mailto:
            path, _, anchor = target.partition("#")
            resolved = os.path.normpath(os.path.join(os.path.dirname(name), path)) if path else name
            full = os.path.join(source, resolved)
            if not os.path.exists(full):
                broken.append(f"{name}: {target} (no file {resolved})")
            elif anchor and resolved.endswith(".md") and anchor not in anchors(read(full)):
                broken.append(f"{name}: {target} (no heading #{anchor} in {resolved})")
    check(f"every relative link of the {len(docs)} documents names a file and a heading",
          not broken, "\n".join(broken))


def check_no_outside_paths(docs):
    outside = []
    for name, text in docs.items():
        for number, line in enumerate(text.split("\n"), 1):
            if re.search(r"\.\./shared|(?<![\w.])/(work|home|root|Users)/|/work\b", line):
                outside.append(f"{name}:{number}: {line.strip()[:100]}")
    check("no document points outside the repository", not outside, "\n".join(outside))


def transcript_after(text, marker):
    """The commands and outputs of the ```console block after `marker`: [(command, [lines])]."""
    start = text.index(marker)
    block = text[text.index("```console\n", start) + len("```console\n"):]
    block = block[:block.index("```")]
    steps = []
    for line in block.rstrip("\n").split("\n"):
        if line.startswith("$ "):
            steps.append((line[2:], []))
        else:
            steps[-1][1].append(line)
    return steps


def mask(line):
    """What differs on every run or machine, replaced by a placeholder."""
    line = re.sub(r"\b[0-9a-f]{32}\b", "<ledger id>", line)
    line = re.sub(r" in [0-9.]+(ns|us|ms|s)$", " in <time>", line)
    line = re.sub(r"open-file limit .*", "open-file limit <limits>", line)
    line = re.sub(r"listening on [^ ]+, metrics on http://[^ ]+/metrics",
                  "listening on <address>, metrics on <address>", line)
    return line


def run_start_up(ledgerd, cwd, flags=()):
    """Starts ledgerd as the README does, on free ports; returns its lines up to the ready line."""
    process = subprocess.Popen(
        [ledgerd, "--listen=127.0.0.1:0", "--metrics_listen=127.0.0.1:0", "--shards=2", *flags],
        cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            line = process.stdout.readline()
            if not line:
                break
            lines.append(line.rstrip("\n"))
            if " listening on " in line:
                break
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    return lines


def check_start_up(source, ledgerd):
    steps = transcript_after(read(os.path.join(source, "README.md")), START_UP_MARKER)
    commands = [command for command, _ in steps]
    check("README.md's start-up transcript is `ledgerd init` then `ledgerd`",
          commands == ["build/release/server/ledgerd init --data_dir=./data",
                       "build/release/server/ledgerd"], commands)
    if len(steps) != 2:
        return
    with tempfile.TemporaryDirectory() as scratch:
        init = subprocess.run([ledgerd] + steps[0][0].split()[1:], cwd=scratch,
                              capture_output=True, text=True, timeout=60)
        init_lines = (init.stdout + init.stderr).rstrip("\n").split("\n")
        check("`ledgerd init` prints what README.md shows",
              init.returncode == 0 and [mask(l) for l in init_lines] == [mask(l) for l in steps[0][1]],
              f"README: {steps[0][1]}\nledgerd: {init_lines}")
        served = run_start_up(ledgerd, scratch)
        expected = [mask(l) for l in steps[1][1]]
        check("ledgerd's start-up lines are what README.md shows, but for the ledger id, the time, "
              "the open-file limits and the ports",
              [mask(l) for l in served] == expected,
              "README:\n" + "\n".join(expected) + "\nledgerd:\n" + "\n".join(mask(l) for l in served))


def block_after(text, heading, language):
    """The body of the first ```language block after the line `heading`."""
    start = text.index("```" + language + "\n", text.index("\n" + heading + "\n"))
    body = text[start + len("```" + language + "\n"):]
    return body[:body.index("```")]


def check_tls_start_up(source, ledgerd):
    deployment = read(os.path.join(source, "docs/deployment.md"))
    heading = "## TLS and who may call what"
    recipe = block_after(deployment, heading, "sh")
    transcript = block_after(deployment, heading, "console").replace("\\\n", " ").rstrip("\n")
    command, ready = transcript.split("\n")[0], transcript.split("\n")[-1]
    with tempfile.TemporaryDirectory() as scratch:
        made = subprocess.run(["bash", "-euc", recipe], cwd=scratch, capture_output=True,
                              text=True, timeout=120)
        check("docs/deployment.md's certificate commands run", made.returncode == 0,
              made.stderr[-2000:])
        if made.returncode != 0:
            return
        os.makedirs(os.path.join(scratch, "deploy/authz"))
        shutil.copy(os.path.join(source, "deploy/authz/policy.example.json"),
                    os.path.join(scratch, "deploy/authz"))
        subprocess.run([ledgerd, "init", "--data_dir=./data"], cwd=scratch, capture_output=True,
                       timeout=60, check=True)
        # The document's flags but its addresses, which the test replaces by free ports.
        flags = [flag for flag in command.split()[2:] if not flag.startswith(("--listen=",
                                                                          "--metrics_listen="))]
        served = run_start_up(ledgerd, scratch, flags)
        check("ledgerd started as docs/deployment.md shows (mutual TLS, a policy) prints its line",
              served and mask(served[-1]) == mask(ready),
              f"docs/deployment.md: {mask(ready)}\nledgerd: {[mask(l) for l in served]}")


def check_flags(source, ledgerd):
    help_text = subprocess.run([ledgerd, "--help"], capture_output=True, text=True, timeout=60)
    help_text = help_text.stdout + help_text.stderr
    flags = dict(re.findall(r"^  --([a-z_]+)(?:=\S+)?  \(default: (.*)\)$", help_text, flags=re.M))
    table = dict(re.findall(r"^\| `--([a-z_]+)` \| ([^|]+) \|",
                            read(os.path.join(source, "docs/operations.md")), flags=re.M))
    missing = sorted(set(flags) - set(table))
    unknown = sorted(set(table) - set(flags))
    wrong = []
    for name, default in flags.items():
        documented = table.get(name, "").strip().strip("`")
        shown = default.strip().strip('"')
        if name in table and documented != shown and not (shown == "" and documented == "empty") \
                and not (name == "shards" and "hardware threads" in documented):
            wrong.append(f"--{name}: --help says {shown!r}, docs/operations.md {documented!r}")
    check(f"the {len(flags)} flags of `ledgerd --help` are in docs/operations.md with their defaults",
          len(flags) >= 25 and not missing and not unknown and not wrong,
          "\n".join([f"missing: --{name}" for name in missing] +
                    [f"not a flag of ledgerd: --{name}" for name in unknown] + wrong))


def main():
    source, ledgerd = sys.argv[1], os.path.abspath(sys.argv[2])
    docs = documents(source)
    readme_lines = docs["README.md"].count("\n")
    check(f"README.md has {readme_lines} lines, at most {README_LINES_MAX}",
          readme_lines <= README_LINES_MAX)
    check_no_outside_paths(docs)
    check_links(source, docs)
    check_start_up(source, ledgerd)
    check_tls_start_up(source, ledgerd)
    check_flags(source, ledgerd)
    if failures:
        print(f"{len(failures)} check(s) failed")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
