#!/usr/bin/python3
"""Checks the deployment files without a Docker engine (none runs on the build machines).

- docker-compose accepts docker-compose.yml, which has the four services, the load profile, the
  ports and the health check;
- promtool accepts deploy/prometheus/prometheus.yml as mounted in the compose layout;
- the Grafana provisioning files and the dashboard parse, and the dashboard reads the provisioned
  data source;
- the Dockerfile installs with scripts/install-deps.sh, and every shared library the three
  binaries load comes from a package its runtime stage installs.

Usage: check_deploy.py SOURCE_DIR LEDGERD LEDGERCTL LOADTEST
"""
import json
import os
import re
import subprocess
import sys

import yaml

source, binaries = sys.argv[1], sys.argv[2:5]
results = {"passed": 0, "failed": 0}


def check(name, condition, detail=""):
    results["passed" if condition else "failed"] += 1
    print(f"{'ok  ' if condition else 'FAIL'} {name}{'' if condition else ': ' + str(detail)}")


def run(command):
    return subprocess.run(command, cwd=source, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True)


# docker-compose.yml
validated = run(["docker-compose", "config", "-q"])
check("docker-compose config -q accepts docker-compose.yml", validated.returncode == 0,
      validated.stdout)
compose = yaml.safe_load(run(["docker-compose", "config"]).stdout)
services = compose.get("services", {})
check("four services", sorted(services) == ["grafana", "ledger", "loadtest", "prometheus"],
      sorted(services))
check("loadtest runs only under the 'load' profile",
      services.get("loadtest", {}).get("profiles") == ["load"])
check("loadtest waits for a healthy ledger",
      services.get("loadtest", {}).get("depends_on", {}).get("ledger", {}).get("condition")
      == "service_healthy")


def volumes(service):
    """(source, target) of each volume; docker-compose 1.29 prints the short "src:dst:mode" form."""
    pairs = []
    for volume in services.get(service, {}).get("volumes", []):
        if isinstance(volume, dict):
            pairs.append((volume.get("source", ""), volume.get("target", "")))
        else:
            parts = volume.split(":")
            pairs.append((parts[0], parts[1] if len(parts) > 1 else ""))
    return pairs


def published(service):
    return sorted(int(p["published"]) for p in services.get(service, {}).get("ports", []))


check("ledger publishes 50051 and 9464", published("ledger") == [9464, 50051], published("ledger"))
check("prometheus publishes 9090", published("prometheus") == [9090])
check("grafana publishes 3000", published("grafana") == [3000])
health = services.get("ledger", {}).get("healthcheck", {}).get("test", [])
check("ledger's health check runs ledgerctl health", "ledgerctl" in health and "health" in health,
      health)
grafana_env = services.get("grafana", {}).get("environment", {})
check("grafana allows anonymous read-only access",
      grafana_env.get("GF_AUTH_ANONYMOUS_ENABLED") == "true"
      and grafana_env.get("GF_AUTH_ANONYMOUS_ORG_ROLE") == "Viewer", grafana_env)
check("ledger keeps a named data volume",
      any(source == "ledger-data" for source, _ in volumes("ledger")), volumes("ledger"))

# Prometheus, as mounted: deploy/prometheus is /etc/prometheus.
promtool = run(["promtool", "check", "config", "deploy/prometheus/prometheus.yml"])
check("promtool check config accepts prometheus.yml and its rule files",
      promtool.returncode == 0 and "2 rule files found" in promtool.stdout, promtool.stdout)
with open(os.path.join(source, "deploy/prometheus/prometheus.yml")) as file:
    prometheus = yaml.safe_load(file)
scrape = prometheus["scrape_configs"][0]
check("prometheus scrapes ledger:9464 every 5s as job ledgerd",
      scrape["job_name"] == "ledgerd"
      and scrape["static_configs"][0]["targets"] == ["ledger:9464"]
      and prometheus["global"]["scrape_interval"] == "5s")
check("the prometheus folder is mounted where the config expects it",
      any(target == "/etc/prometheus" and source.endswith("deploy/prometheus")
          for source, target in volumes("prometheus")), volumes("prometheus"))

# Grafana.
with open(os.path.join(source, "deploy/grafana/provisioning/datasources/prometheus.yml")) as file:
    datasources = yaml.safe_load(file)["datasources"]
with open(os.path.join(source, "deploy/grafana/provisioning/dashboards/ledger.yml")) as file:
    providers = yaml.safe_load(file)["providers"]
with open(os.path.join(source, "deploy/grafana/ledger-dashboard.json")) as file:
    dashboard = json.load(file)
uids = {d["uid"] for d in datasources}
used = {t["datasource"]["uid"] for p in dashboard["panels"] for t in p["targets"]} | {
    p["datasource"]["uid"] for p in dashboard["panels"]}
check("the dashboard reads only the provisioned data source", used == uids, (used, uids))
check("the provisioned data source points at prometheus:9090",
      datasources[0]["url"] == "http://prometheus:9090")
dashboard_mount = [target for source, target in volumes("grafana")
                   if source.endswith("ledger-dashboard.json")]
check("the dashboard is mounted where the provider looks",
      bool(dashboard_mount)
      and os.path.dirname(dashboard_mount[0]) == providers[0]["options"]["path"], dashboard_mount)

# Dockerfile.
with open(os.path.join(source, "Dockerfile")) as file:
    dockerfile = file.read()
check("the build stage installs with scripts/install-deps.sh",
      "RUN bash scripts/install-deps.sh" in dockerfile)
runtime = dockerfile[dockerfile.index("AS runtime"):]
install = re.search(r"apt-get install[^\n]*((?:\n[^\n]*\\)*\n[^\n]*)", runtime)
runtime_packages = set(re.findall(r"\b(lib[\w.+-]+|zlib1g)\b", install.group(0))) if install else set()
libraries = set()
for binary in binaries:
    for line in subprocess.run(["ldd", binary], stdout=subprocess.PIPE, text=True).stdout.splitlines():
        match = re.search(r"=> (/\S+)", line)
        if match:
            libraries.add(match.group(1))
# One dpkg call for all of them (merged /usr: a library may be listed under /lib or /usr/lib).
owners = subprocess.run(["dpkg", "-S"] + sorted(libraries) + ["/usr" + l for l in libraries],
                        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True).stdout
needed = set()
owned = set()
for line in owners.splitlines():
    package, path = line.split(": ", 1)
    needed.add(package.split(":")[0])
    owned.add(path[4:] if path.startswith("/usr/") and path[4:] in libraries else path)
unowned = sorted(libraries - owned)
check("every library the binaries load comes from a Debian package", not unowned, unowned)
check(f"the runtime stage installs every package the binaries' {len(libraries)} libraries "
      "come from", needed <= runtime_packages and len(needed) > 5,
      f"missing {sorted(needed - runtime_packages)}")
for binary in ("ledgerd", "ledgerctl", "ledger-loadtest"):
    check(f"the runtime stage carries {binary}", f"/src/build/{'server' if binary == 'ledgerd' else 'client'}/{binary}" in runtime)
check("the runtime stage runs as a non-root user", re.search(r"^USER (?!root)\w+", runtime, re.M) is not None)
check("the image has a HEALTHCHECK with ledgerctl health",
      re.search(r"HEALTHCHECK[^\n]*\n[^\n]*ledgerctl[^\n]*health", runtime) is not None)
check("the image exposes 50051 and 9464", "EXPOSE 50051 9464" in runtime)
with open(os.path.join(source, ".dockerignore")) as file:
    ignored = file.read().split()
check(".dockerignore keeps build output and data out", "build/" in ignored and "data/" in ignored)

print(f"{results['passed']} passed, {results['failed']} failed")
sys.exit(0 if results["failed"] == 0 else 1)
