#!/usr/bin/env bash
# Checks docker-compose.yml (and the cluster and Sentinel overrides) with Debian's docker-compose; needs no
# Docker daemon. Run by scripts/test.sh.
#  1. Both files render (`docker-compose config`) with a .env written by scripts/dotenv.sh (and
#     with only the required variables of it).
#  2. They hold no secret of their own: every secret is required (${VAR:?...}) and has no
#     default, .env.example leaves every secret empty, and the files refuse to render with
#     .env.example as it is, with no .env, or with any one required variable left empty.
#  3. Secure defaults, read off the rendered configuration: dev login off; nothing published
#     but the load balancer (and the monitoring UIs on 127.0.0.1); /metrics and pprof on the
#     unpublished admin listeners, scraped there by Prometheus and refused by nginx; Redis with
#     a password and Kafka with SASL, the api and the reconciler holding the same credentials.
#     The Sentinel override: a replica and three Sentinels (quorum 2) behind the same password,
#     the api and the reconciler finding the primary through all three and acknowledging only
#     replicated changes (FLASHSALE_REDIS_ACK_REPLICAS=1), each data node min-replicas-to-write.
#  4. The k6 profile: the default K6_SCRIPT is a script of loadtest/, the image is the k6
#     version scripts/k6.sh runs the scripts with, compose passes k6 exactly the variables the
#     scripts read (and scripts/k6.sh none they don't), and .env's FLASHSALE_DEV_LOGIN and
#     FLASHSALE_LIMIT_LOGIN_IP reach the api.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v docker-compose >/dev/null; then
  echo "compose-check: installing Debian's docker-compose" >&2
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends docker-compose >/dev/null
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
status=0
fail() { echo "compose-check: $*" >&2; status=1; }
# compose ENV_FILE FILES... -- args: docker-compose with nothing from the caller's environment.
compose() { local env=$1; shift; env -i PATH="$PATH" HOME="${HOME:-/root}" docker-compose --env-file "$env" "$@"; }

./scripts/dotenv.sh "$tmp/env" >/dev/null
: >"$tmp/empty"
base=(-f docker-compose.yml)
cluster=(-f docker-compose.yml -f docker-compose.cluster.yml)
sentinel=(-f docker-compose.yml -f docker-compose.sentinel.yml)

# 1. Renders.
compose "$tmp/env" "${base[@]}" config >"$tmp/base.yml" || fail "docker-compose.yml does not render"
compose "$tmp/env" "${cluster[@]}" config >"$tmp/cluster.yml" || fail "docker-compose.yml + docker-compose.cluster.yml do not render"
compose "$tmp/env" "${sentinel[@]}" config >"$tmp/sentinel.yml" || fail "docker-compose.yml + docker-compose.sentinel.yml do not render"
# The compose files' own defaults: a .env with the required variables only.
required=$(grep -ohE '\$\{[A-Z0-9_]+:\?' docker-compose*.yml | sed -E 's/^\$\{(.*):\?$/\1/' | sort -u)
grep -E "^($(echo $required | tr ' ' '|'))=" "$tmp/env" >"$tmp/env-bare"
compose "$tmp/env-bare" "${base[@]}" config >"$tmp/bare.yml" || fail "docker-compose.yml does not render with only its required variables set"
# The same with a load test's settings in .env.
sed -e 's/^FLASHSALE_DEV_LOGIN=.*/FLASHSALE_DEV_LOGIN=true/' -e 's/^FLASHSALE_LIMIT_LOGIN_IP=.*/FLASHSALE_LIMIT_LOGIN_IP=off/' \
  "$tmp/env" >"$tmp/env-load"
compose "$tmp/env-load" "${base[@]}" config >"$tmp/load.yml" || fail "docker-compose.yml does not render with load-test settings"

# 2. No secret of its own.
secrets=$(grep -ohE '\$\{?[A-Z0-9_]*(PASSWORD|SECRET|TOKEN)[A-Z0-9_]*' docker-compose*.yml | tr -d '${' | sort -u)
[ -n "$secrets" ] || fail "found no secret referenced in the compose files"
for s in $secrets; do
  if grep -nE "\\\$\\{$s([:]?[-=+]|\\})|\\\$$s\\b" docker-compose*.yml; then
    fail "$s has a default or is not required (use \${$s:?message}) at the lines above"
  fi
  grep -qE "^$s=\$" .env.example || fail ".env.example must leave $s empty (a placeholder would be a working secret)"
done
for files in "${base[*]}" "${cluster[*]}" "${sentinel[*]}"; do
  # shellcheck disable=SC2086 # word splitting of $files is intended
  compose .env.example $files config -q 2>/dev/null && fail "$files render with .env.example as it is (empty secrets)"
  # shellcheck disable=SC2086
  compose "$tmp/empty" $files config -q 2>/dev/null && fail "$files render without a .env"
done
for v in $required; do
  sed "s/^$v=.*/$v=/" "$tmp/env" >"$tmp/env-without"
  grep -q "^$v=" "$tmp/env-without" || echo "$v=" >>"$tmp/env-without"
  compose "$tmp/env-without" "${cluster[@]}" config -q 2>/dev/null && fail "the compose files render with $v empty"
  compose "$tmp/env-without" "${sentinel[@]}" config -q 2>/dev/null && fail "the Sentinel override renders with $v empty"
done

# 3 and 4, read off the rendered files.
python3 - "$tmp" <<'EOF' || status=1
import glob, os, re, sys
import yaml

tmp = sys.argv[1]
bad = []
def check(ok, msg):
    if not ok:
        bad.append(msg)
def load(name):
    path = os.path.join(tmp, name)
    return yaml.safe_load(open(path)) if os.path.getsize(path) else {"services": {}}
ADMIN_PORT = "6060"

def env(svc):
    e = svc.get("environment") or {}
    if isinstance(e, list):
        e = dict(x.split("=", 1) if "=" in x else (x, "") for x in e)
    return {k: "" if v is None else str(v) for k, v in e.items()}

def published(svc):
    """(host ip, host port, container port) of each published port."""
    out = []
    for p in svc.get("ports") or []:
        if isinstance(p, dict):
            out.append((p.get("host_ip", ""), str(p.get("published", "")), str(p.get("target", ""))))
        else:
            parts = str(p).split("/")[0].split(":")
            parts = [""] * (3 - len(parts)) + parts
            out.append(tuple(parts))
    return out

def secure(name, cfg, cluster):
    s = cfg["services"]
    api, rec = env(s["api"]), env(s["reconciler"])
    where = f"{name}:"
    check(api.get("FLASHSALE_DEV_LOGIN") == "false", f"{where} the api runs with FLASHSALE_DEV_LOGIN={api.get('FLASHSALE_DEV_LOGIN')!r}, not false")
    for sname, svc in s.items():
        for host_ip, host, target in published(svc):
            if sname == "lb" and target == "8080":
                continue
            check(sname in ("prometheus", "grafana") and host_ip == "127.0.0.1",
                  f"{where} service {sname} publishes {host_ip or '*'}:{host}->{target}")
            check(target != ADMIN_PORT, f"{where} service {sname} publishes the admin listener {target}")
    for sname, e in (("api", api), ("reconciler", rec)):
        check(e.get("FLASHSALE_ADMIN_ADDR", "").endswith(":" + ADMIN_PORT),
              f"{where} {sname} serves no admin listener on :{ADMIN_PORT} (FLASHSALE_ADMIN_ADDR={e.get('FLASHSALE_ADMIN_ADDR')!r})")
        check(e.get("FLASHSALE_REDIS_PASSWORD"), f"{where} {sname} has no FLASHSALE_REDIS_PASSWORD")
        check(e.get("KAFKA_SASL_MECHANISM") in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"),
              f"{where} {sname} has KAFKA_SASL_MECHANISM={e.get('KAFKA_SASL_MECHANISM')!r}")
        check(e.get("KAFKA_USERNAME") and e.get("KAFKA_PASSWORD"), f"{where} {sname} has no KAFKA_USERNAME/KAFKA_PASSWORD")
    redis_nodes = [n for n in s if re.fullmatch(r"redis(-\d+)?", n) and (not cluster or n != "redis")]
    for n in redis_nodes:
        r = s[n]
        cmd = " ".join(r.get("command") or []) if isinstance(r.get("command"), list) else str(r.get("command"))
        check(env(r).get("REDISCLI_AUTH") == api.get("FLASHSALE_REDIS_PASSWORD"),
              f"{where} {n}'s password (REDISCLI_AUTH) is not the api's FLASHSALE_REDIS_PASSWORD")
        check(re.search(r"requirepass \$+REDISCLI_AUTH", cmd), f"{where} {n} does not require its password")
    k = env(s["kafka"])
    protocols = dict(x.split(":") for x in k.get("KAFKA_LISTENER_SECURITY_PROTOCOL_MAP", "").split(","))
    for listener in k.get("KAFKA_ADVERTISED_LISTENERS", "").split(","):
        lname = listener.split("://")[0]
        check(protocols.get(lname, lname).startswith("SASL_"), f"{where} Kafka advertises {listener} without SASL")
    jaas = k.get("KAFKA_LISTENER_NAME_CLIENT_PLAIN_SASL_JAAS_CONFIG", "")
    check(f'user_{api.get("KAFKA_USERNAME")}="{api.get("KAFKA_PASSWORD")}"' in jaas,
          f"{where} Kafka's PLAIN users do not include the api's KAFKA_USERNAME/KAFKA_PASSWORD")

def replicated(name, cfg):
    """The Sentinel override: replica, Sentinels, and the processes following them."""
    s = cfg["services"]
    where = f"{name}:"
    password = env(s["api"]).get("FLASHSALE_REDIS_PASSWORD")
    sentinels = sorted(n for n in s if re.fullmatch(r"redis-sentinel-\d+", n))
    check(len(sentinels) == 3, f"{where} {len(sentinels)} Sentinel services, want 3")
    for sname in ("api", "reconciler"):
        e = env(s[sname])
        named = sorted(a.split(":")[0] for a in e.get("FLASHSALE_REDIS_SENTINELS", "").split(",") if a)
        check(named == sentinels and all(a.endswith(":26379") for a in e.get("FLASHSALE_REDIS_SENTINELS", "").split(",")),
              f"{where} {sname}'s FLASHSALE_REDIS_SENTINELS={e.get('FLASHSALE_REDIS_SENTINELS')!r} is not every Sentinel service on :26379")
        check(e.get("FLASHSALE_REDIS_ADDRS", "") == "", f"{where} {sname} sets FLASHSALE_REDIS_ADDRS={e.get('FLASHSALE_REDIS_ADDRS')!r} beside the Sentinels")
        check(e.get("FLASHSALE_REDIS_MASTER_NAME") == "mymaster", f"{where} {sname} has FLASHSALE_REDIS_MASTER_NAME={e.get('FLASHSALE_REDIS_MASTER_NAME')!r}")
        check(e.get("FLASHSALE_REDIS_SENTINEL_PASSWORD") == password, f"{where} {sname}'s FLASHSALE_REDIS_SENTINEL_PASSWORD is not the Sentinels' password")
        check(e.get("FLASHSALE_REDIS_ACK_REPLICAS") == "1", f"{where} {sname} has FLASHSALE_REDIS_ACK_REPLICAS={e.get('FLASHSALE_REDIS_ACK_REPLICAS')!r}, want 1")
        deps = s[sname].get("depends_on") or {}
        check(all(n in deps for n in sentinels), f"{where} {sname} does not wait for every Sentinel")
    def command(n):
        c = s[n].get("command")
        return " ".join(c) if isinstance(c, list) else str(c)
    for n in ("redis", "redis-replica"):
        check(n in s, f"{where} no service {n}")
        if n not in s:
            continue
        cmd = command(n)
        check(env(s[n]).get("REDISCLI_AUTH") == password, f"{where} {n}'s password (REDISCLI_AUTH) is not the api's FLASHSALE_REDIS_PASSWORD")
        for want in (r"requirepass \$+REDISCLI_AUTH", r"masterauth \$+REDISCLI_AUTH", r"--appendonly yes",
                     r"--min-replicas-to-write [1-9]", r"--replica-announce-ip " + re.escape(n) + r"\b"):
            check(re.search(want, cmd), f"{where} {n} runs without {want!r}")
    check(re.search(r"--replicaof redis 6379", command("redis-replica") if "redis-replica" in s else ""),
          f"{where} redis-replica does not replicate redis")
    for n in sentinels:
        cmd = command(n)
        check(env(s[n]).get("REDISCLI_AUTH") == password, f"{where} {n}'s password (REDISCLI_AUTH) is not the api's FLASHSALE_REDIS_PASSWORD")
        for want in (r"--sentinel", r"sentinel monitor mymaster redis 6379 2\b", r"requirepass \$+REDISCLI_AUTH",
                     r"sentinel auth-pass mymaster \$+REDISCLI_AUTH", r"sentinel sentinel-pass \$+REDISCLI_AUTH"):
            check(re.search(want, cmd), f"{where} {n} runs without {want!r}")

sentinel = load("sentinel.yml")
base, cluster, load, bare = load("base.yml"), load("cluster.yml"), load("load.yml"), load("bare.yml")
if base["services"]:
    secure("docker-compose.yml with .env.example's settings", base, False)
if bare["services"]:
    secure("docker-compose.yml's own defaults", bare, False)
if cluster["services"]:
    secure("docker-compose.yml + cluster", cluster, True)
if sentinel["services"]:
    secure("docker-compose.yml + sentinel", sentinel, False)
    replicated("docker-compose.yml + sentinel", sentinel)

# Prometheus scrapes the admin listeners; nginx refuses /metrics and pprof.
prom = yaml.safe_load(open("deploy/prometheus.yml"))
for job in prom["scrape_configs"]:
    for sd in job.get("dns_sd_configs", []):
        check(str(sd.get("port")) == ADMIN_PORT, f"deploy/prometheus.yml: job {job['job_name']} scrapes port {sd.get('port')}, not the admin listener {ADMIN_PORT}")
nginx = open("deploy/nginx.conf").read()
for path in ("/metrics", "/debug/"):
    check(re.search(r"location \^~ " + re.escape(path) + r" \{[^}]*return 404", nginx),
          f"deploy/nginx.conf does not refuse {path} (location ^~ {path} {{ ... return 404 ... }})")

# The k6 profile.
if base["services"]:
    k6 = base["services"]["k6"]
    k6sh = open("scripts/k6.sh").read()
    version = re.search(r"^K6_VERSION=v?(\S+)", k6sh, re.M)
    check(version and k6["image"].endswith(":" + version.group(1)),
          f"the k6 image {k6['image']} is not the version scripts/k6.sh runs ({version and version.group(1)})")
    script = " ".join(k6.get("command") or [])
    m = re.search(r"/loadtest/(\S+)", script)
    check(m and os.path.isfile(os.path.join("loadtest", m.group(1))), f"k6 runs {script!r}: no such script in loadtest/")
    default = re.search(r"\$\{K6_SCRIPT:-([^}]+)\}", open("docker-compose.yml").read())
    check(default and os.path.isfile(os.path.join("loadtest", default.group(1))),
          f"K6_SCRIPT's default ({default and default.group(1)}) is not a script of loadtest/")
    read = set()
    for f in glob.glob("loadtest/*.js"):
        src = open(f).read()
        read |= set(re.findall(r"__ENV\.([A-Za-z0-9_]+)", src)) | set(re.findall(r"__ENV\[['\"]([A-Za-z0-9_]+)['\"]\]", src))
    check(read, "found no __ENV variable in loadtest/*.js")
    passed = {n for n in env(k6) if not n.startswith("K6_")}  # K6_* configure k6 itself
    for n in sorted(passed - read):
        check(False, f"compose passes k6 {n}, which no script in loadtest/ reads")
    for n in sorted(read - passed):
        check(False, f"the scripts in loadtest/ read {n}, which compose does not pass to k6")
    for n in sorted(set(re.findall(r"-e ([A-Za-z0-9_]+)=", k6sh)) - read):
        check(False, f"scripts/k6.sh passes {n}, which no script in loadtest/ reads")
if load["services"]:
    api = env(load["services"]["api"])
    check(api.get("FLASHSALE_LIMIT_LOGIN_IP") == "off", "FLASHSALE_LIMIT_LOGIN_IP=off in .env does not reach the api")
    check(api.get("FLASHSALE_DEV_LOGIN") == "true", "FLASHSALE_DEV_LOGIN=true in .env does not reach the api")

for b in bad:
    print(f"compose-check: {b}", file=sys.stderr)
sys.exit(1 if bad else 0)
EOF

[ $status -eq 0 ] && echo "compose-check: docker-compose.yml, docker-compose.cluster.yml and docker-compose.sentinel.yml are valid, hold no secret, default to secure settings, and the k6 profile matches loadtest/"
exit $status
