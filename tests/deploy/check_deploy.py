#!/usr/bin/python3
"""Checks the deployment files without a Docker engine (make test-image runs them on one).

- docker-compose accepts docker-compose.yml: its six services, the init and load profiles, only
  the proxy, Prometheus and Grafana published and on 127.0.0.1, ledgerd on an internal network,
  the cluster profile's three replicas (fixed addresses on an internal network, one ledger id),
  Grafana behind a login, the local images built from Debian's packages, the health check;
- promtool accepts deploy/prometheus/prometheus.yml as mounted in the compose layout;
- the Grafana provisioning files and the dashboard parse, and the dashboard reads the provisioned
  data source;
- the Dockerfile's build stage installs only what building needs, and every shared library the
  three binaries load comes from a package its runtime stage installs.

Usage: check_deploy.py SOURCE_DIR LEDGERD LEDGERCTL LOADTEST
"""
import json
import os
import re
import shutil
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
check("six services, and the cluster profile's four",
      sorted(services) == ["cluster-init", "grafana", "ledger", "ledger-1", "ledger-2", "ledger-3",
                           "ledger-init", "loadtest", "prometheus", "proxy"], sorted(services))
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
    """(host address, host port, container port) of each published port; docker-compose 1.29
    prints "ADDRESS:PUBLISHED:TARGET/tcp" when an address is given, else a mapping."""
    ports = []
    for port in services.get(service, {}).get("ports", []):
        if isinstance(port, dict):
            ports.append((port.get("host_ip", ""), int(port["published"]), int(port["target"])))
        else:
            address, host_port, target = port.split("/")[0].rsplit(":", 2)
            ports.append((address, int(host_port), int(target)))
    return sorted(ports)


def networks(service):
    return sorted(services.get(service, {}).get("networks", {}) or [])


# Exposure: only the proxy's gRPC port, Prometheus and Grafana, each on loopback by default.
check("ledger publishes no port (its gRPC and metrics stay on the backend network)",
      published("ledger") == [], published("ledger"))
check("the proxy publishes gRPC on 127.0.0.1:50051",
      published("proxy") == [("127.0.0.1", 50051, 50051)], published("proxy"))
check("prometheus publishes 127.0.0.1:9090",
      published("prometheus") == [("127.0.0.1", 9090, 9090)], published("prometheus"))
check("grafana publishes 127.0.0.1:3000",
      published("grafana") == [("127.0.0.1", 3000, 3000)], published("grafana"))
backend = compose.get("networks", {}).get("backend", {}) or {}
check("the backend network is internal (no route out)", backend.get("internal") is True, backend)
check("ledger is only on the backend network", networks("ledger") == ["backend"],
      networks("ledger"))
check("the load run reaches ledger on the backend network",
      networks("loadtest") == ["backend"]
      and "--target=ledger:50051" in services.get("loadtest", {}).get("entrypoint", []))
for service in ("proxy", "prometheus", "grafana"):
    check(f"{service} is on the backend network and on one it can be published from",
          networks(service) == ["backend", "frontend"], networks(service))
check("ledger's metrics listen only inside the container network (no published 9464)",
      "--metrics_listen=0.0.0.0:9464" in services.get("ledger", {}).get("command", [])
      and all(target != 9464 for _, _, target in published("ledger")))
check("ledger serves plaintext beyond loopback only because compose says so by name",
      "--plaintext_beyond_loopback" in services.get("ledger", {}).get("command", []))
health = services.get("ledger", {}).get("healthcheck", {}).get("test", [])
check("ledger's health check runs ledgerctl health", "ledgerctl" in health and "health" in health,
      health)
check("ledger keeps a named data volume",
      any(source == "ledger-data" for source, _ in volumes("ledger")), volumes("ledger"))

# A new ledger is an explicit act: ledger-init, under its own profile, on the same volume.
init = services.get("ledger-init", {})
check("ledger-init runs only when asked (profile 'init')", init.get("profiles") == ["init"])
check("ledger-init runs `ledgerd init --data_dir=/data/ledger` on ledger's volume",
      init.get("command") == ["init", "--data_dir=/data/ledger"]
      and init.get("image") == services.get("ledger", {}).get("image")
      and volumes("ledger-init") == volumes("ledger")
      and "--data_dir=/data/ledger" in services.get("ledger", {}).get("command", []),
      (init, volumes("ledger")))

# Profile "cluster": three replicas, each with its own volume and fixed address on an internal
# network of their own, the same --peers and --peer_clients, and an init that gives the three one
# ledger id.
replicas = ["ledger-1", "ledger-2", "ledger-3"]
for service in ["cluster-init"] + replicas:
    check(f"{service} runs only under the 'cluster' profile",
          services.get(service, {}).get("profiles") == ["cluster"])
cluster = compose.get("networks", {}).get("cluster", {}) or {}
check("the cluster network is internal (no route out)", cluster.get("internal") is True, cluster)
addresses = []
for number, service in enumerate(replicas, 1):
    command = services.get(service, {}).get("command", [])
    address = ((services.get(service, {}).get("networks") or {}).get("cluster") or {}).get(
        "ipv4_address", "")
    addresses.append(address)
    check(f"{service} is node {number}, only on the cluster network, publishes nothing",
          f"--node_id={number}" in command and networks(service) == ["cluster"]
          and published(service) == [], (command, networks(service)))
    check(f"{service} keeps the volume ledger-{number}-data",
          volumes(service) == [(f"ledger-{number}-data", "/data")], volumes(service))
peers = ",".join(f"{n}={a}:7001" for n, a in enumerate(addresses, 1))
clients = ",".join(f"{n}={a}:50051" for n, a in enumerate(addresses, 1))
for service in replicas:
    command = services.get(service, {}).get("command", [])
    check(f"{service}'s --peers and --peer_clients name the three fixed addresses",
          f"--peers={peers}" in command and f"--peer_clients={clients}" in command, command)
init_command = " ".join(services.get("cluster-init", {}).get("command", []))
check("cluster-init makes three replicas of one ledger id",
      all(f"--data_dir=/data{n}/ledger" in init_command for n in (1, 2, 3))
      and len(re.findall(r"--ledger_id=\$\$?id\b", init_command)) == 2, init_command)

# The proxy: HAProxy from Debian's package, its config mounted, ledgerd behind it.
proxy = services.get("proxy", {})
check("the proxy sends calls to ledger:50051 (LEDGER_BACKEND)",
      (proxy.get("environment") or {}).get("LEDGER_BACKEND") == "ledger:50051",
      proxy.get("environment"))
check("the proxy mounts deploy/haproxy/haproxy.cfg",
      any(source.endswith("deploy/haproxy/haproxy.cfg") and target == "/etc/haproxy/haproxy.cfg"
          for source, target in volumes("proxy")), volumes("proxy"))
check("the proxy starts once ledger is healthy",
      proxy.get("depends_on", {}).get("ledger", {}).get("condition") == "service_healthy")
haproxy_cfg = os.path.join(source, "deploy/haproxy/haproxy.cfg")
if not os.path.exists(haproxy_cfg) or not shutil.which("haproxy"):
    print("skip haproxy -c: deploy/haproxy/haproxy.cfg or haproxy is not here")
else:
    haproxy = subprocess.run(["haproxy", "-c", "-f", haproxy_cfg], stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True,
                             env=dict(os.environ, LEDGER_BACKEND="ledger:50051"))
    check("haproxy -c accepts deploy/haproxy/haproxy.cfg", haproxy.returncode == 0,
          haproxy.stdout)

# Local images: built from debian:bookworm-slim and Debian's packages, nothing pulled.
for service, package in (("prometheus", "prometheus"), ("proxy", "haproxy")):
    build = services.get(service, {}).get("build", {})
    path = os.path.join(build.get("context", ""), build.get("dockerfile", ""))
    text = open(path).read() if os.path.isfile(path) else ""
    check(f"{service}'s image is built from Debian's {package} package on debian:bookworm-slim",
          "FROM debian:bookworm-slim" in text and re.search(rf"apt-get install[^\n]*\b{package}\b",
                                                            text) is not None, path)

# Grafana: a login, with the admin password from a secret file; no anonymous access, no sign-up.
grafana_env = services.get("grafana", {}).get("environment", {})
check("grafana has no anonymous access and no sign-up",
      grafana_env.get("GF_AUTH_ANONYMOUS_ENABLED") == "false"
      and grafana_env.get("GF_USERS_ALLOW_SIGN_UP") == "false", grafana_env)
check("grafana's admin password comes from a compose secret, not the compose file",
      grafana_env.get("GF_SECURITY_ADMIN_PASSWORD__FILE") == "/run/secrets/grafana_admin_password"
      and "GF_SECURITY_ADMIN_PASSWORD" not in grafana_env
      and "grafana_admin_password" in compose.get("secrets", {}), grafana_env)

# Every variable the Docker section of docs/deployment.md names is one docker-compose.yml reads.
with open(os.path.join(source, "docs/deployment.md")) as file:
    deployment = file.read()
docker_section = deployment[deployment.index("## Running it with Docker"):]
docker_section = docker_section[:docker_section.index("\n## ", 1)]
named = set(re.findall(r"\b(?:LEDGER|GRAFANA|PROMETHEUS)_[A-Z_]+\b", docker_section))
with open(os.path.join(source, "docker-compose.yml")) as file:
    compose_text = file.read()
unknown = sorted(n for n in named if "${" + n + ":" not in compose_text and n + ":" not in compose_text)
check(f"the {len(named)} variables docs/deployment.md's Docker section names are all read by compose",
      len(named) >= 10 and not unknown, unknown)

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
build_stage = "\n".join(line for line in dockerfile[:dockerfile.index("AS runtime")].splitlines()
                        if not line.lstrip().startswith("#"))
check("the build stage installs only what building needs (install-deps.sh --build-only)",
      "RUN bash scripts/install-deps.sh --build-only" in build_stage
      and not re.search(r"\b(npm|nodejs|postgresql|tests/node)\b", build_stage), build_stage)
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
check(".dockerignore keeps build output, data and secrets out",
      "build/" in ignored and "data/" in ignored and "secrets/" in ignored)

print(f"{results['passed']} passed, {results['failed']} failed")
sys.exit(0 if results["failed"] == 0 else 1)
