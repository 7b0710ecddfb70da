#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Checks docker/ without building or running an image (ctest `docker_files`, label `docker`).

    files_test.py SOURCE_DIR SLUICE_BINARY

- docker/compose.yaml parses, has the five services, and every file or directory it mounts,
  builds from or names exists; named volumes are declared; depends_on names services; a
  `service_healthy` dependency has a health check; build targets are stages of the Dockerfile.
- The services agree with each other: the gateway's rules file (docker/sluice/sluice.yaml)
  names the `redis` and `upstream` services and binds the ports compose publishes; Prometheus's
  config (docker/prometheus-compose.yml, prometheus.yml but for the target) scrapes the admin
  port of `sluice` and finds its rule file where it is mounted; Grafana's data source is the
  `prometheus` service and its dashboard provider reads the directory the dashboard is mounted in.
- docker/Dockerfile has a non-root USER, STOPSIGNAL SIGTERM, the HEALTHCHECK, the /etc/sluice
  volume, a FROM overridable by the BASE_IMAGE build argument; what it COPYs exists and is in
  the build context (.dockerignore); the build stage installs scripts/setup's build packages;
  the runtime stage installs exactly the packages of the libraries SLUICE_BINARY links (ldd +
  dpkg -S, as the image's comment says).
- The container's admin listener (0.0.0.0) asks for a token from an environment variable compose
  passes, leaving only /metrics open; the built gateway accepts the container rules file
  (--check-config) with that variable and refuses it without, and promtool accepts
  the compose Prometheus config with its rules.

The image build itself is docker/build-test (minutes: debootstrap and a compile), not a ctest.
Exits 0 when every check holds, 1 listing the failures, 77 (skipped) when a Debian package it
needs is missing (python3-yaml, prometheus: scripts/setup installs both).
"""

import os
import re
import shlex
import shutil
import subprocess
import sys

try:
    import yaml
except ImportError:
    print("skipped: Debian's python3-yaml is missing (scripts/setup installs it)")
    sys.exit(77)
PROMTOOL = shutil.which("promtool")
if PROMTOOL is None:
    print("skipped: promtool (Debian's prometheus) is missing (scripts/setup installs it)")
    sys.exit(77)

SOURCE = os.path.abspath(sys.argv[1])
SLUICE = sys.argv[2]
DOCKER = os.path.join(SOURCE, "docker")
failures = []
checks = 0


def check(cond, what):
    """Records one check; `what` says what was expected."""
    global checks
    checks += 1
    if not cond:
        failures.append(what)
    return cond


def load(rel):
    with open(os.path.join(SOURCE, rel), encoding="utf-8") as f:
        return yaml.safe_load(f)


def host_port(addr):
    host, _, port = addr.rpartition(":")
    return host, int(port)


# --- compose.yaml ------------------------------------------------------------------------------
compose = load("docker/compose.yaml")
services = compose.get("services", {})
named_volumes = compose.get("volumes") or {}
check(set(compose) <= {"name", "services", "volumes", "networks", "configs", "secrets"},
      f"compose.yaml: unexpected top-level keys {sorted(set(compose))}")
check(set(services) == {"sluice", "upstream", "redis", "prometheus", "grafana"},
      f"compose.yaml: services are {sorted(services)}")

dockerfile_text = open(os.path.join(DOCKER, "Dockerfile"), encoding="utf-8").read()
stages = re.findall(r"^FROM\s+\S+\s+AS\s+(\S+)\s*$", dockerfile_text, re.M | re.I)

mounts = {}  # service -> {container path: host path (absolute) or volume name}
used_volumes = set()
for name, svc in services.items():
    check("image" in svc, f"{name}: no image")
    build = svc.get("build")
    if build is not None:
        context = os.path.normpath(os.path.join(DOCKER, build.get("context", ".")))
        check(os.path.isdir(context), f"{name}: build context {context} is not a directory")
        dockerfile = os.path.join(context, build.get("dockerfile", "Dockerfile"))
        check(os.path.isfile(dockerfile), f"{name}: no Dockerfile {dockerfile}")
        check(build.get("target") in stages,
              f"{name}: build target {build.get('target')} is not a stage of {stages}")
    mounts[name] = {}
    for v in svc.get("volumes", []):
        check(isinstance(v, str), f"{name}: volume {v!r} is not the short syntax")
        parts = v.split(":")
        check(len(parts) in (2, 3), f"{name}: volume {v!r}: expected SOURCE:TARGET[:MODE]")
        src, dst = parts[0], parts[1]
        check(len(parts) == 2 or parts[2] in ("ro", "rw"), f"{name}: volume {v!r}: mode")
        check(dst.startswith("/"), f"{name}: volume {v!r}: the target must be absolute")
        if src.startswith((".", "/")):
            path = os.path.normpath(os.path.join(DOCKER, src))
            check(os.path.exists(path), f"{name}: mounts {src}, which does not exist ({path})")
            mounts[name][dst] = path
        else:
            check(src in named_volumes, f"{name}: volume {src} is not declared under volumes:")
            used_volumes.add(src)
            mounts[name][dst] = src
    for p in svc.get("ports", []):
        check(isinstance(p, str) and re.fullmatch(r"(127\.0\.0\.1:)?\d+:\d+", p),
              f"{name}: port {p!r}: expected [127.0.0.1:]HOST:CONTAINER in quotes")
    deps = svc.get("depends_on", [])
    for dep in deps:
        check(dep in services, f"{name}: depends on {dep}, not a service")
        if isinstance(deps, dict) and deps[dep].get("condition") == "service_healthy":
            has_check = "healthcheck" in services.get(dep, {}) or \
                services.get(dep, {}).get("build", {}).get("target") == "sluice"
            check(has_check, f"{name}: waits for {dep} to be healthy, which has no health check")
check(used_volumes == set(named_volumes), f"compose.yaml: unused volumes {set(named_volumes) - used_volumes}")


def published(svc):
    """Container port -> host binding of a service's published ports."""
    out = {}
    for p in services[svc].get("ports", []):
        *host, container = p.split(":")
        out[int(container)] = ":".join(host)
    return out


# The gateway: its rules file, mounted over the image's /etc/sluice.
rules_dir = mounts["sluice"].get("/etc/sluice")
check(rules_dir is not None, "sluice: nothing mounted at /etc/sluice")
rules_path = os.path.join(rules_dir or DOCKER, "sluice.yaml")
rules = {}
if check(os.path.isfile(rules_path), f"sluice: no sluice.yaml in the mounted {rules_dir}"):
    rules = load(os.path.relpath(rules_path, SOURCE))
    listen_host, listen_port = host_port(rules["listen"])
    admin = rules["admin"] if isinstance(rules["admin"], dict) else {"listen": rules["admin"]}
    admin_host, admin_port = host_port(admin["listen"])
    # On 0.0.0.0 (so that Prometheus in another container scrapes it), POST /admin/reload must
    # not be open: a token from the environment compose passes, /metrics alone left open.
    check(admin.get("token_env") and admin.get("metrics_open") is True,
          "docker/sluice/sluice.yaml: admin on 0.0.0.0 needs token_env and metrics_open: true")
    check(admin.get("token_env") in (services["sluice"].get("environment") or {}),
          f"sluice: compose passes no {admin.get('token_env')} (admin.token_env)")
    check(listen_host == "0.0.0.0" and admin_host == "0.0.0.0",
          "docker/sluice/sluice.yaml: listen and admin must bind 0.0.0.0 in a container")
    check(listen_port in published("sluice") and admin_port in published("sluice"),
          f"sluice: ports {listen_port} and {admin_port} (the rules file's) are not published")
    store_host, store_port = host_port(rules["store"]["address"])
    check(store_host == "redis" and store_port == 6379,
          f"docker/sluice/sluice.yaml: store.address {rules['store']['address']} is not redis:6379")
    for up in rules["upstreams"].values():
        m = re.fullmatch(r"http://([^:/]+):(\d+)", up["url"])
        check(m and m.group(1) == "upstream" and
              m.group(2) in " ".join(services["upstream"].get("command", []) or ["0.0.0.0:8081"]),
              f"docker/sluice/sluice.yaml: upstream {up['url']} is not the upstream service")
    image_upstream = re.search(r'FROM runtime AS demo-upstream.*?CMD \["--listen", "([^"]+)"\]',
                               dockerfile_text, re.S)
    check(image_upstream and image_upstream.group(1).endswith(":8081"),
          "Dockerfile: the demo-upstream target does not listen on :8081")

# Prometheus: prometheus-compose.yml is prometheus.yml but for the target.
prom = services["prometheus"]
config_flag = [c for c in prom.get("command", []) if c.startswith("--config.file=")]
check(len(config_flag) == 1, "prometheus: no --config.file")
config_dst = config_flag[0].split("=", 1)[1] if config_flag else ""
config_src = mounts["prometheus"].get(config_dst)
check(config_src == os.path.join(DOCKER, "prometheus-compose.yml"),
      f"prometheus: {config_dst} is not docker/prometheus-compose.yml")
compose_prom = load("docker/prometheus-compose.yml")
shipped_prom = load("docker/prometheus.yml")
targets = compose_prom["scrape_configs"][0]["static_configs"][0]["targets"]
admin_listen = rules.get("admin", ":9090")
admin_listen = admin_listen["listen"] if isinstance(admin_listen, dict) else admin_listen
check(targets == [f"sluice:{admin_listen.rpartition(':')[2]}"],
      f"prometheus-compose.yml: targets {targets}, expected the sluice service's admin port")
shipped_prom["scrape_configs"][0]["static_configs"][0]["targets"] = targets
check(compose_prom == shipped_prom, "prometheus-compose.yml differs from prometheus.yml beyond the target")
for rule_file in compose_prom.get("rule_files", []):
    dst = os.path.join(os.path.dirname(config_dst), rule_file)
    check(mounts["prometheus"].get(dst) == os.path.join(DOCKER, rule_file),
          f"prometheus: rule file {rule_file} is not mounted at {dst}")

# Grafana: the data source is the prometheus service; the provider reads the dashboard's dir.
graf = mounts["grafana"]
ds_dir = graf.get("/etc/grafana/provisioning/datasources")
db_dir = graf.get("/etc/grafana/provisioning/dashboards")
check(ds_dir and os.path.isdir(ds_dir), "grafana: no datasources provisioning directory mounted")
check(db_dir and os.path.isdir(db_dir), "grafana: no dashboards provisioning directory mounted")
if ds_dir and db_dir:
    sources = [s for f in sorted(os.listdir(ds_dir)) for s in load(os.path.join(ds_dir, f))["datasources"]]
    check([s["url"] for s in sources] == ["http://prometheus:9090"] and sources[0]["type"] == "prometheus",
          f"grafana: data sources {sources}, expected the prometheus service")
    providers = [p for f in sorted(os.listdir(db_dir)) for p in load(os.path.join(db_dir, f))["providers"]]
    dashboards = {dst: src for dst, src in graf.items() if src == os.path.join(DOCKER, "grafana-dashboard.json")}
    check(len(dashboards) == 1, "grafana: docker/grafana-dashboard.json is not mounted")
    for dst in dashboards:
        check([p["options"]["path"] for p in providers] == [os.path.dirname(dst)],
              f"grafana: the dashboard provider does not read {os.path.dirname(dst)}")
        home = services["grafana"].get("environment", {}).get("GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH")
        check(home in (None, dst), f"grafana: the home dashboard {home} is not {dst}")

# --- Dockerfile --------------------------------------------------------------------------------
lines = [l.strip() for l in re.sub(r"\\\n", " ", dockerfile_text).splitlines()
         if l.strip() and not l.lstrip().startswith("#")]


def instructions(keyword):
    return [l[len(keyword):].strip() for l in lines if l.upper().startswith(keyword + " ")]


users = instructions("USER")
check(users and users[-1].split(":")[0] not in ("0", "root"), f"Dockerfile: USER {users} is root or missing")
check(instructions("STOPSIGNAL") == ["SIGTERM"], "Dockerfile: no STOPSIGNAL SIGTERM")
health = instructions("HEALTHCHECK")
check(len(health) == 1 and health[0].endswith('CMD ["/usr/local/bin/sluice-healthcheck"]'),
      f"Dockerfile: HEALTHCHECK {health}")
check(os.access(os.path.join(DOCKER, "sluice-healthcheck"), os.X_OK), "docker/sluice-healthcheck is not executable")
check('["/etc/sluice"]' in instructions("VOLUME"), "Dockerfile: /etc/sluice is not a VOLUME")
check(any(e.split() == ["8080", "9090"] for e in instructions("EXPOSE")), "Dockerfile: EXPOSE 8080 9090")
check(instructions("ENTRYPOINT")[-1:] == ['["/usr/bin/sluice"]'], "Dockerfile: the entrypoint is not /usr/bin/sluice")
check(re.search(r"^ARG BASE_IMAGE=debian:bookworm-slim$", dockerfile_text, re.M) is not None,
      "Dockerfile: no ARG BASE_IMAGE=debian:bookworm-slim")
for f in instructions("FROM"):
    check(f.split()[0] in ("${BASE_IMAGE}", "runtime"), f"Dockerfile: FROM {f} is not ${{BASE_IMAGE}}")

# COPY sources exist and pass .dockerignore (an allow-list: `*`, then `!path` lines).
allowed = [l[1:].rstrip("/") for l in open(os.path.join(SOURCE, ".dockerignore")).read().splitlines()
           if l.startswith("!")]
for c in instructions("COPY"):
    if c.startswith("--from="):
        continue
    for src in shlex.split(c)[:-1]:
        src = src.rstrip("/")
        check(os.path.exists(os.path.join(SOURCE, src)), f"Dockerfile: COPY {src}: no such file")
        check(any(src == a or src.startswith(a + "/") for a in allowed),
              f"Dockerfile: COPY {src} is excluded by .dockerignore")


def stage_packages(stage):
    """The packages of the apt-get install in the stage named STAGE."""
    body = re.search(r"^FROM \S+ AS " + stage + r"$(.*?)(?=^FROM |\Z)", re.sub(r"\\\n", " ", dockerfile_text),
                     re.S | re.M).group(1)
    m = re.search(r"apt-get install -y --no-install-recommends(.*?)&&", body, re.S)
    return set(m.group(1).split()) if m else set()


setup = open(os.path.join(SOURCE, "scripts", "setup"), encoding="utf-8").read()
setup_list = re.search(r"^PACKAGES=\((.*?)^\)", setup, re.S | re.M).group(1)
setup_packages = set(w for l in setup_list.splitlines() for w in l.split("#")[0].split())
build_packages = stage_packages("build")
check(build_packages and build_packages <= setup_packages,
      f"Dockerfile build stage installs {sorted(build_packages - setup_packages)}, not in scripts/setup")
test_only = {"libgtest-dev", "libgmock-dev", "libbenchmark-dev"}
wanted = {p for p in setup_packages if p.endswith("-dev") and p not in test_only} | \
    {"g++", "cmake", "ninja-build", "pkg-config"}
check(wanted <= build_packages, f"Dockerfile build stage lacks {sorted(wanted - build_packages)} of scripts/setup")

# The runtime stage: the packages of the libraries the gateway links, no more, no fewer.
linked = set()
ldd = subprocess.run(["ldd", SLUICE], capture_output=True, text=True, check=True).stdout
for lib in re.findall(r"=> (/\S+)", ldd):
    for candidate in (lib, "/usr" + lib, os.path.realpath(lib)):
        r = subprocess.run(["dpkg", "-S", candidate], capture_output=True, text=True)
        if r.returncode == 0:
            linked.add(r.stdout.split(":")[0])
            break
    else:
        failures.append(f"ldd {SLUICE}: {lib} belongs to no package")
in_base = {"libc6", "libstdc++6", "libgcc-s1"}
sanitizers = {p for p in linked if re.match(r"lib(asan|ubsan|tsan|lsan)\d*$", p)}
runtime = stage_packages("runtime")
if sanitizers:
    # A sanitizer build (scripts/sanitize) links no tcmalloc (it would replace the sanitizer's
    # allocator), and its runtime brings libatomic: the image's build is the release one.
    runtime = runtime - {"libtcmalloc-minimal4"}
    linked = linked - {"libatomic1"}
check(runtime == linked - in_base - sanitizers,
      f"Dockerfile runtime stage installs {sorted(runtime)}, "
      f"the gateway links {sorted(linked - in_base - sanitizers)}")

# --- the container rules file and the Prometheus config, checked by their own tools ------------
env = {k: v for k, v in os.environ.items() if k != "SLUICE_ADMIN_TOKEN"}
r = subprocess.run([SLUICE, "--check-config", rules_path], capture_output=True, text=True,
                   env=dict(env, SLUICE_ADMIN_TOKEN="files-test-token"))
check(r.returncode == 0, f"sluice --check-config {rules_path}: {r.stdout}{r.stderr}")
# Without the token the gateway does not start: the admin listener is never open on 0.0.0.0.
r = subprocess.run([SLUICE, "--check-config", rules_path], capture_output=True, text=True, env=env)
check(r.returncode != 0 and "admin.token_env: the environment variable SLUICE_ADMIN_TOKEN is not set"
      in r.stdout + r.stderr,
      f"sluice --check-config {rules_path} without SLUICE_ADMIN_TOKEN: {r.returncode} {r.stdout}{r.stderr}")
r = subprocess.run([PROMTOOL, "check", "config", os.path.join(DOCKER, "prometheus-compose.yml")],
                   capture_output=True, text=True)
check(r.returncode == 0, f"promtool check config docker/prometheus-compose.yml: {r.stdout}{r.stderr}")

# --- the alerting rules: their unit tests pass, and each alert has a test and a runbook ----------
r = subprocess.run([PROMTOOL, "test", "rules", "sluice-alerts.test.yml"], cwd=DOCKER,
                   capture_output=True, text=True)
check(r.returncode == 0, f"promtool test rules docker/sluice-alerts.test.yml: {r.stdout}{r.stderr}")
alerts = [rule["alert"] for group in load("docker/sluice-alerts.yml")["groups"] for rule in group["rules"]]
tested = {t["alertname"] for case in load("docker/sluice-alerts.test.yml")["tests"]
          for t in case.get("alert_rule_test", [])}
with open(os.path.join(SOURCE, "docs", "operating.md"), encoding="utf-8") as f:
    operating = f.read()
for name in alerts:
    check(name in tested, f"sluice-alerts.yml: {name} has no test in sluice-alerts.test.yml")
    rule = next(r for g in load("docker/sluice-alerts.yml")["groups"] for r in g["rules"]
                if r["alert"] == name)
    check(rule.get("annotations", {}).get("runbook") == f"docs/operating.md#{name.lower()}",
          f"sluice-alerts.yml: {name}'s runbook is not docs/operating.md#{name.lower()}")
    check(f"\n#### {name}\n" in operating,
          f"docs/operating.md has no runbook heading '#### {name}'")

for f in failures:
    print("FAIL:", f)
print(f"docker files: {checks} checks, {len(failures)} failed")
sys.exit(1 if failures else 0)
