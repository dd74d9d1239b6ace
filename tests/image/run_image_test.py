#!/usr/bin/python3
"""make test-image: the image and docker-compose.yml, built and run on a real Docker engine.

1. An engine: the one running, else dockerd started here (and stopped at the end). Only where no
   engine can start does the test skip, saying why, with exit 0.
2. The base image debian:bookworm-slim, made locally with debootstrap where it cannot be pulled
   (make_base_image.sh), and the images: ledgerd, Prometheus and HAProxy from Debian's packages.
3. The image alone: ledgerd refuses a volume without a ledger; `init` creates one and refuses to
   do it twice; the container becomes healthy, runs as uid 10001, takes a deposit (inside, and
   from the host through the port published on 127.0.0.1); `docker stop` under load drains and
   exits 0 with "stopped cleanly"; after a restart the balance is still there and a repeated
   request_id is not applied again.
4. compose: ledger-init, then ledger + Prometheus (+ the proxy when deploy/haproxy/haproxy.cfg
   exists): ledgerd publishes no port and cannot reach outside its network, Prometheus publishes
   on 127.0.0.1 and scrapes ledgerd (up{job="ledgerd"} == 1 and a ledger_ series in its API),
   and a deposit through the proxy's published port reaches ledgerd.
5. compose's cluster profile: cluster-init, three replicas, `ledgerctl cluster status` names one
   leader; the leader SIGKILLed (docker kill), a deposit goes to the new leader, a request_id
   acknowledged before is not applied again, the killed member is shown down; started again, it
   catches up, and the balance is exact.

Everything it creates (containers, volumes, networks, the compose project) is removed at the end;
the images stay, as the layer cache of the next run.

Usage: run_image_test.py SOURCE_DIR
"""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

SOURCE = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else ".")
TAG = f"{os.getpid()}"
IMAGE = "ledgerd:local"
LEDGER_UID = "10001"
results = {"passed": 0, "failed": 0}
timings = []
cleanups = []  # Run in reverse at the end, whatever happened.


def log(message):
    print(message, flush=True)


def check(name, condition, detail=""):
    results["passed" if condition else "failed"] += 1
    log(f"{'ok  ' if condition else 'FAIL'} {name}{'' if condition else ': ' + str(detail)[-2000:]}")
    return condition


def run(command, timeout=120, check_rc=False, **kwargs):
    """Runs a command, output captured; a timeout is a failed run (rc 124), never a hang."""
    try:
        result = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, timeout=timeout, cwd=SOURCE, **kwargs)
    except subprocess.TimeoutExpired as expired:
        out = expired.stdout.decode() if isinstance(expired.stdout, bytes) else (expired.stdout or "")
        result = subprocess.CompletedProcess(command, 124, out + f"\n(timed out after {timeout}s)")
    if check_rc and result.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} exited {result.returncode}:\n{result.stdout[-3000:]}")
    return result


def timed(name, function):
    started = time.monotonic()
    try:
        return function()
    finally:
        timings.append((name, time.monotonic() - started))


def skip(reason):
    log(f"SKIP make test-image: {reason}")
    log("image: 0 passed, 0 failed, 1 skipped")
    sys.exit(0)


# 1. The engine.
def start_engine():
    """Returns the dockerd we started (to stop at the end), or None if one was running."""
    if run(["docker", "info"], timeout=30).returncode == 0:
        log("engine: the running Docker engine")
        return None
    if shutil.which("dockerd") is None:
        skip("no Docker engine is running and dockerd is not installed "
             "(scripts/install-deps.sh --image installs Debian's docker.io)")
    log_path = os.path.join(tempfile.gettempdir(), f"ledgerd-image-test-dockerd-{TAG}.log")
    log_file = open(log_path, "w")
    dockerd = subprocess.Popen(["dockerd"], stdout=log_file, stderr=subprocess.STDOUT,
                               start_new_session=True)
    for _ in range(60):
        if dockerd.poll() is not None:
            break
        if run(["docker", "info"], timeout=10).returncode == 0:
            log(f"engine: started dockerd (pid {dockerd.pid}, log {log_path})")
            return dockerd
        time.sleep(1)
    stop_engine(dockerd)
    with open(log_path) as file:
        tail = "".join(file.readlines()[-15:])
    skip(f"no Docker engine could start here: dockerd {'exited ' + str(dockerd.returncode) if dockerd.returncode is not None else 'did not answer in 60 s'}; its log ends:\n{tail}")


def stop_engine(dockerd):
    if dockerd is None or dockerd.poll() is not None:
        return
    dockerd.send_signal(signal.SIGTERM)  # dockerd stops its containerd and containers itself.
    try:
        dockerd.wait(timeout=60)
    except subprocess.TimeoutExpired:
        dockerd.kill()
        dockerd.wait()


# 2. The images.
def build_network():
    """The build's network: the default bridge if a container reaches the apt mirror, else the
    host's (some hosts reach the mirror only through routes or a proxy a bridge does not get)."""
    probe = run(["docker", "run", "--rm", "debian:bookworm-slim", "bash", "-c",
                 "host=$(awk '/^deb /{split($2,u,\"/\"); print u[3]; exit}' /etc/apt/sources.list);"
                 " exec 3<>/dev/tcp/$host/80"], timeout=30)
    if probe.returncode == 0:
        log("build network: the default bridge reaches the apt mirror")
        return "default"
    log("build network: the bridge cannot reach the apt mirror; building with --network=host")
    return "host"


def build_images():
    timed("base image (debootstrap + import, if missing)", lambda: run(
        ["bash", "tests/image/make_base_image.sh"], timeout=900, check_rc=True))
    network = build_network()
    for name, tag, dockerfile, context in (
            ("ledgerd image", IMAGE, "Dockerfile", "."),
            ("prometheus image", "ledgerd-prometheus:local", "deploy/images/prometheus.Dockerfile",
             "deploy/images"),
            ("haproxy image", "ledgerd-haproxy:local", "deploy/images/haproxy.Dockerfile",
             "deploy/images")):
        built = timed(name, lambda: run(["docker", "build", f"--network={network}", "-t", tag,
                                         "-f", dockerfile, context], timeout=1800))
        if not check(f"docker build {tag}", built.returncode == 0, built.stdout):
            raise RuntimeError(f"cannot go on without {tag}")


# 3. The image alone.
def wait_healthy(container, seconds=90):
    status = ""
    for _ in range(seconds):
        status = run(["docker", "inspect", "-f", "{{.State.Health.Status}} {{.State.Status}}",
                      container], timeout=10).stdout.strip()
        if status.startswith("healthy") or status.endswith("exited"):
            break
        time.sleep(1)
    return status


def ledgerctl(container, *args):
    return run(["docker", "exec", container, "ledgerctl", "--target=127.0.0.1:50051", *args],
               timeout=30)


def host_ledgerctl(port, *args):
    """ledgerctl from the image, on the host's network: through a port published on 127.0.0.1."""
    return run(["docker", "run", "--rm", "--network=host", "--entrypoint=ledgerctl", IMAGE,
                f"--target=127.0.0.1:{port}", *args], timeout=60)


def create_ledger(volume):
    mount = f"{volume}:/data"
    refused = run(["docker", "run", "--rm", "-v", mount, IMAGE], timeout=60)
    check("ledgerd refuses a volume without a ledger and says to run ledgerd init",
          refused.returncode not in (0, 124) and "ledgerd init" in refused.stdout,
          f"exit {refused.returncode}: {refused.stdout}")
    init = run(["docker", "run", "--rm", "-v", mount, IMAGE, "init", "--data_dir=/data/ledger"],
               timeout=60)
    check("ledgerd init creates the ledger in the volume (exit 0)", init.returncode == 0,
          f"exit {init.returncode}: {init.stdout}")
    again = run(["docker", "run", "--rm", "-v", mount, IMAGE, "init", "--data_dir=/data/ledger"],
                timeout=60)
    check("ledgerd init refuses a volume that already holds a ledger",
          again.returncode not in (0, 124), f"exit {again.returncode}: {again.stdout}")


def test_image():
    volume = f"ledger-image-test-{TAG}"
    container = f"ledger-image-test-{TAG}"
    run(["docker", "volume", "create", volume], check_rc=True)
    cleanups.append(lambda: run(["docker", "volume", "rm", "-f", volume]))
    create_ledger(volume)

    started = run(["docker", "run", "-d", "--name", container, "-v", f"{volume}:/data",
                   "-p", "127.0.0.1::50051", IMAGE, "--listen=0.0.0.0:50051",
                   "--plaintext_beyond_loopback", "--metrics_listen=0.0.0.0:9464",
                   "--data_dir=/data/ledger", "--shards=2",
                   "--shutdown_grace=10s"], check_rc=True)
    cleanups.append(lambda: run(["docker", "rm", "-f", "-v", container]))
    health = timed("start to healthy", lambda: wait_healthy(container))
    if not check("the container becomes healthy (HEALTHCHECK: ledgerctl health)",
                 health.startswith("healthy"),
                 f"{health}\n{run(['docker', 'logs', container]).stdout}"):
        raise RuntimeError("the container never became healthy")
    uid = run(["docker", "exec", container, "awk", "/^Uid:/{print $2}", "/proc/1/status"]).stdout
    check("ledgerd runs as uid 10001", uid.strip() == LEDGER_UID, uid)
    published = run(["docker", "port", container, "50051/tcp"]).stdout.split()
    check("the gRPC port is published on 127.0.0.1 only",
          len(published) == 1 and published[0].startswith("127.0.0.1:"), published)
    port = published[0].rsplit(":", 1)[1] if published else "0"

    deposit = ledgerctl(container, "deposit", "acct-image", "1234", "--request_id=image-1")
    check("a deposit inside the container", deposit.stdout.strip() == "acct-image: 1234",
          deposit.stdout)
    outside = host_ledgerctl(port, "deposit", "acct-image", "766", "--request_id=image-2")
    check("a deposit from the host through the published port",
          outside.stdout.strip() == "acct-image: 2000", outside.stdout)

    # SIGTERM while a load run is in flight: the drain answers everything and exits 0.
    run(["docker", "exec", "-d", container, "ledger-loadtest", "--target=127.0.0.1:50051",
         "--duration=60s", "--concurrency=16", "--accounts=200"], check_rc=True)
    time.sleep(3)
    metrics = run(["docker", "exec", container, "bash", "-c",
                   "exec 3<>/dev/tcp/127.0.0.1/9464 && printf 'GET /metrics HTTP/1.0\\r\\n\\r\\n' >&3"
                   " && cat <&3"]).stdout
    answered = sum(float(line.rsplit(" ", 1)[1]) for line in metrics.splitlines()
                   if line.startswith("ledger_requests_total{") and 'code="OK"' in line)
    check("the load run is in flight when docker stop comes (> 100 calls answered OK)",
          answered > 100, answered)
    stop_started = time.monotonic()
    run(["docker", "stop", "--time=20", container], timeout=60)
    stop_seconds = time.monotonic() - stop_started
    timings.append(("docker stop under load", stop_seconds))
    state = run(["docker", "inspect", "-f", "{{.State.ExitCode}} {{.State.OOMKilled}}",
                 container]).stdout.split()
    logs = run(["docker", "logs", container]).stdout
    check("docker stop (SIGTERM) under load: exit 0 within the grace", state == ["0", "false"]
          and stop_seconds < 20, f"state {state}, {stop_seconds:.1f}s\n{logs}")
    check("the log says 'stopped cleanly'", "stopped cleanly" in logs, logs)

    run(["docker", "start", container], check_rc=True)
    health = timed("restart to healthy", lambda: wait_healthy(container))
    check("healthy again after a restart on the same volume", health.startswith("healthy"), health)
    balance = ledgerctl(container, "balance", "acct-image")
    check("the balance survived the restart (the volume)",
          balance.stdout.strip() == "acct-image: 2000", balance.stdout)
    # The retry is answered with the first call's reply (the balance after it), not applied.
    repeat = ledgerctl(container, "deposit", "acct-image", "1234", "--request_id=image-1")
    after = ledgerctl(container, "balance", "acct-image")
    check("a request_id from before the restart gets its first reply and is not applied again",
          repeat.stdout.startswith("acct-image: 1234 (replayed: the recorded result of an earlier "
                                   "deposit with request_id image-1;")
          and after.stdout.strip() == "acct-image: 2000",
          repeat.stdout + after.stdout)


# 4. compose.
def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def compose_command():
    if run(["docker", "compose", "version"], timeout=30).returncode == 0:
        return ["docker", "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    raise RuntimeError("neither `docker compose` nor docker-compose is installed")


def prometheus_query(port, query):
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": query})
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return json.load(response)["data"]["result"]
    except (OSError, ValueError, KeyError):
        return []


def wait_query(port, query, seconds=60):
    for _ in range(seconds):
        result = prometheus_query(port, query)
        if result:
            return result
        time.sleep(1)
    return []


def test_compose():
    compose = compose_command() + ["--project-name", f"ledgerimagetest{TAG}"]
    secret_dir = tempfile.mkdtemp(prefix="ledger-image-test-")
    cleanups.append(lambda: shutil.rmtree(secret_dir, ignore_errors=True))
    secret = os.path.join(secret_dir, "grafana_admin_password")
    with open(secret, "w") as file:
        file.write("not-used-by-this-test\n")
    grpc_port, prometheus_port = free_port(), free_port()
    env = dict(os.environ, LEDGER_GRPC_PORT=str(grpc_port), PROMETHEUS_PORT=str(prometheus_port),
               GRAFANA_PORT=str(free_port()), LEDGER_PUBLISH_ADDRESS="127.0.0.1",
               GRAFANA_ADMIN_PASSWORD_FILE=secret,
               # docker-compose 1.29 makes every network of the file, the cluster profile's too:
               # a subnet of its own, so that it does not overlap test_cluster_compose's.
               LEDGER_CLUSTER_NET="10.231.76")
    services = ["ledger", "prometheus", "proxy"]
    cleanups.append(lambda: run(compose + ["--profile", "init", "--profile", "load", "down", "-v",
                                           "--remove-orphans"], env=env, timeout=120))

    # compose builds from the same Dockerfiles: the images above are its layer cache, so this
    # checks its build contexts without reaching the network.
    built = timed("compose build (cached)", lambda: run(compose + ["build"] + services, env=env,
                                                        timeout=900))
    check("compose builds ledger, prometheus and proxy", built.returncode == 0, built.stdout)
    init = run(compose + ["run", "--rm", "ledger-init"], env=env, timeout=120)
    check("compose run --rm ledger-init creates the ledger (exit 0)", init.returncode == 0,
          init.stdout)
    up = timed("compose up", lambda: run(compose + ["up", "-d", "--no-build"] + services, env=env,
                                         timeout=300))
    if not check("compose up -d " + " ".join(services), up.returncode == 0, up.stdout):
        log(run(compose + ["logs", "--no-color"], env=env).stdout[-4000:])
        raise RuntimeError("compose up failed")
    ledger = run(compose + ["ps", "-q", "ledger"], env=env).stdout.strip()
    prometheus = run(compose + ["ps", "-q", "prometheus"], env=env).stdout.strip()
    health = wait_healthy(ledger)
    check("compose's ledger becomes healthy", health.startswith("healthy"),
          f"{health}\n{run(['docker', 'logs', ledger]).stdout}")
    check("ledger publishes no port (gRPC and metrics stay on the backend network)",
          run(["docker", "port", ledger]).stdout.strip() == "",
          run(["docker", "port", ledger]).stdout)
    outbound = run(["docker", "exec", ledger, "bash", "-c",
                    "exec 3<>/dev/tcp/deb.debian.org/80"], timeout=30)
    check("ledger has no route out of the internal network", outbound.returncode != 0,
          outbound.stdout)
    published = run(["docker", "port", prometheus, "9090/tcp"]).stdout.split()
    check("prometheus is published on 127.0.0.1 only",
          published == [f"127.0.0.1:{prometheus_port}"], published)

    deposit = host_ledgerctl(grpc_port, "deposit", "acct-compose", "500", "--request_id=compose-1")
    check("a deposit through the proxy's published port", deposit.stdout.strip() ==
          "acct-compose: 500", deposit.stdout)

    up_series = timed("first scrape seen", lambda: wait_query(prometheus_port,
                                                             'up{job="ledgerd"} == 1'))
    check("prometheus scrapes ledgerd: up{job=\"ledgerd\"} == 1", len(up_series) == 1,
          prometheus_query(prometheus_port, "up"))
    ok = wait_query(prometheus_port,
                    'sum(ledger_requests_total{method="Deposit",code="OK"}) >= 1', seconds=30)
    check("prometheus has ledgerd's series: ledger_requests_total{method=\"Deposit\",code=\"OK\"}"
          " >= 1", len(ok) == 1, prometheus_query(prometheus_port, "ledger_requests_total"))


# 5. compose's cluster profile.
def cluster_status(container):
    """`ledgerctl cluster status --json` inside `container`: (exit code, {node_id: line})."""
    result = run(["docker", "exec", container, "ledgerctl", "--target=127.0.0.1:50051",
                  "--deadline=3s", "--json", "cluster", "status"], timeout=30)
    members = {}
    for line in result.stdout.splitlines():
        try:
            member = json.loads(line)
        except ValueError:
            continue
        if "node_id" in member:
            members[int(member["node_id"])] = member
    return result.returncode, members


def wait_cluster(container, condition, seconds=60):
    status = (None, {})
    for _ in range(seconds):
        status = cluster_status(container)
        if condition(*status):
            break
        time.sleep(1)
    return status


def test_cluster_compose():
    """Profile "cluster": three replicas of one ledger; the leader SIGKILLed, a new one serves
    without losing what was acknowledged; the killed one started again catches up."""
    net = "10.231.77"
    compose = compose_command() + ["--project-name", f"ledgerclustertest{TAG}",
                                   "--profile", "cluster"]
    # Compose checks every service's secret files, Grafana's too, whichever services it starts.
    secret_dir = tempfile.mkdtemp(prefix="ledger-image-test-")
    cleanups.append(lambda: shutil.rmtree(secret_dir, ignore_errors=True))
    secret = os.path.join(secret_dir, "grafana_admin_password")
    with open(secret, "w") as file:
        file.write("not-used-by-this-test\n")
    env = dict(os.environ, LEDGER_CLUSTER_NET=net, GRAFANA_ADMIN_PASSWORD_FILE=secret)
    replicas = ["ledger-1", "ledger-2", "ledger-3"]
    targets = ",".join(f"{net}.{11 + i}:50051" for i in range(3))
    cleanups.append(lambda: run(compose + ["down", "-v", "--remove-orphans"], env=env,
                                timeout=120))
    # A network an earlier run could not remove would hold the subnet.
    stale = run(["docker", "network", "ls", "-q", "--filter", "name=ledgerclustertest"]).stdout
    for network in stale.split():
        run(["docker", "network", "rm", network])
    init = run(compose + ["run", "--rm", "cluster-init"], env=env, timeout=120)
    check("cluster-init makes three replicas of one new ledger (exit 0)",
          init.returncode == 0 and init.stdout.count("created a new, empty ledger") == 3,
          init.stdout)
    up = timed("cluster up", lambda: run(compose + ["up", "-d", "--no-build"] + replicas,
                                         env=env, timeout=300))
    if not check("compose --profile cluster up -d " + " ".join(replicas), up.returncode == 0,
                 up.stdout):
        raise RuntimeError("cluster up failed")
    containers = [run(compose + ["ps", "-q", name], env=env).stdout.strip() for name in replicas]
    for name, container in zip(replicas, containers):
        health = wait_healthy(container)
        check(f"{name} becomes healthy", health.startswith("healthy"),
              f"{health}\n{run(['docker', 'logs', container]).stdout[-3000:]}")
    code, members = timed("a leader serves", lambda: wait_cluster(
        containers[0], lambda code, members: code == 0 and len(members) == 3))
    check("cluster status: three members, one leader, exit 0",
          code == 0 and sorted(members) == [1, 2, 3]
          and [m["role"] for m in members.values()].count("leader") == 1, members)

    def deposit(container, amount, request_id):
        return run(["docker", "exec", container, "ledgerctl", f"--target={targets}",
                    "--deadline=10s", "deposit", "acct-cluster", str(amount),
                    f"--request_id={request_id}"], timeout=60)

    first = deposit(containers[0], 100, "cluster-1")
    check("a deposit through any member reaches the leader", first.stdout.strip().endswith(
        "acct-cluster: 100"), first.stdout)
    leader = next((n for n, m in members.items() if m["role"] == "leader"), 1)
    killed = containers[leader - 1]
    survivor = containers[leader % 3]
    run(["docker", "kill", killed], timeout=60)
    second = None
    for _ in range(30):
        second = deposit(survivor, 50, "cluster-2")
        if second.returncode == 0:
            break
        time.sleep(1)
    check("with the leader SIGKILLed, a new leader takes the next deposit",
          second.stdout.strip().endswith("acct-cluster: 150"), second.stdout)
    replay = deposit(survivor, 100, "cluster-1")
    check("a request_id acknowledged by the killed leader is not applied again",
          "acct-cluster: 100 (replayed" in replay.stdout, replay.stdout)
    code, members = cluster_status(survivor)
    check("cluster status names the killed member down and exits 5",
          code == 5 and members.get(leader, {}).get("role") == "down", (code, members))

    run(["docker", "start", killed], timeout=60)
    health = wait_healthy(killed)
    check("the killed member starts again", health.startswith("healthy"), health)
    code, members = timed("the restarted member catches up", lambda: wait_cluster(
        survivor, lambda code, members: code == 0 and all(
            int(m.get("applied_position", 0)) >= int(m.get("replicated_position", 1))
            for m in members.values())))
    check("cluster status: every member answers again, each applied what the leader holds",
          code == 0 and len(members) == 3, members)
    balance = run(["docker", "exec", survivor, "ledgerctl", f"--target={targets}",
                   "balance", "acct-cluster"], timeout=60)
    check("the balance is 150 after the failover", balance.stdout.strip().endswith(
        "acct-cluster: 150"), balance.stdout)


def main():
    started = time.monotonic()
    dockerd = start_engine()
    try:
        build_images()
        timed("image checks", test_image)
        timed("compose checks", test_compose)
        timed("cluster checks", test_cluster_compose)
    except RuntimeError as error:
        check("the run went on to the end", False, error)
    finally:
        for cleanup in reversed(cleanups):
            try:
                cleanup()
            except Exception as error:  # Cleaning up must not hide the result.
                log(f"cleanup: {error}")
        stop_engine(dockerd)
    timings.append(("whole test-image", time.monotonic() - started))
    for name, seconds in timings:
        log(f"time: {name}: {seconds:.1f} s")
    log(f"image: {results['passed']} passed, {results['failed']} failed")
    return 0 if results["failed"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
