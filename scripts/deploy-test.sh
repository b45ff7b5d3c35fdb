#!/usr/bin/env bash
# `npm run test:deploy` (and the last step of .ci/run): boots the production shape — the
# Dockerfile and docker-compose.yml as shipped — on this machine's Docker engine and checks it
# through the published loopback ports (test/deploy/checks.ts).
#
# Nothing comes from Docker Hub: the base images are made here from Debian's packages and cached
# by name (a second run reuses them):
#   catraca-deploy/debian:bookworm            a bookworm root file system made by debootstrap
#   catraca-deploy/node:<v>-bookworm-slim     that, with this machine's Node and npm (the Dockerfile's NODE_IMAGE)
#   catraca-deploy/nats:debian                Debian's nats-server (compose's NATS_IMAGE)
#   catraca-deploy/postgres:debian            Debian's postgresql-15 (compose's POSTGRES_IMAGE)
# then the project's image is built from the unchanged Dockerfile (`--build-arg NODE_IMAGE=…`;
# its `npm ci` reaches npm's registry over the host's network), an `.env` is written as
# docs/operations.md tells an operator, and `docker-compose up` runs docker-compose.yml with one
# override file (test/deploy/compose.override.yml: the PSP, vendor and SMTP mocks, run from the
# project image on the compose network). Compose: Debian's docker-compose 1.29 (v1; Debian 12 has
# no `docker compose` v2 plugin).
#
# Starts dockerd when none answers and stops what it started. Under CI a missing tool is installed
# with apt (and its absence is a failure, never a skip). Environment:
#   DEPLOY_TEST_KEEP=1          leave the stack up (and its volumes) for a look; `down` it yourself
#   DEBIAN_MIRROR               for debootstrap and the images' apt (default http://deb.debian.org/debian)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
exec </dev/null

STARTED=$SECONDS
log() { printf '[deploy-test %3ds] %s\n' "$((SECONDS - STARTED))" "$*" >&2; }
die() {
  log "FAIL: $*"
  exit 1
}

MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
PROJECT=catraca-deploy-test
BASE_IMAGE=catraca-deploy/debian:bookworm
NODE_VERSION=$(node -p 'process.versions.node')
NODE_IMAGE=catraca-deploy/node:${NODE_VERSION}-bookworm-slim
NATS_IMAGE=catraca-deploy/nats:debian
POSTGRES_IMAGE=catraca-deploy/postgres:debian
CATRACA_IMAGE=catraca-deploy/catraca:test
case "$NODE_VERSION" in 20.*) ;; *) die "the image needs Node 20 (uWebSockets.js); this machine has $NODE_VERSION" ;; esac

SUDO=()
if [ "$(id -u)" != 0 ] && command -v sudo >/dev/null 2>&1; then SUDO=(sudo -n); fi

# --- tools ---------------------------------------------------------------------------------------
need=()
[ -x /usr/sbin/dockerd ] || command -v dockerd >/dev/null 2>&1 || need+=(docker.io)
command -v docker-compose >/dev/null 2>&1 || need+=(docker-compose)
[ -x /usr/sbin/debootstrap ] || command -v debootstrap >/dev/null 2>&1 || need+=(debootstrap)
command -v openssl >/dev/null 2>&1 || need+=(openssl)
if [ "${#need[@]}" -gt 0 ]; then
  log "apt-get install ${need[*]}"
  "${SUDO[@]}" apt-get update -qq || die "apt-get update failed; install ${need[*]}"
  DEBIAN_FRONTEND=noninteractive "${SUDO[@]}" apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null ||
    die "could not install ${need[*]} (the deploy test needs Debian's docker.io, docker-compose and debootstrap)"
fi
# Debian's client goes with Debian's engine (another client on PATH may want BuildKit's buildx).
DOCKER=docker
[ -x /usr/bin/docker ] && DOCKER=/usr/bin/docker
export DOCKER_BUILDKIT=0 COMPOSE_DOCKER_CLI_BUILD=0
log "$($DOCKER --version); $(docker-compose --version)"

WORK=$(mktemp -d "${TMPDIR:-/tmp}/catraca-deploy-test.XXXXXX")
chmod 755 "$WORK"
DOCKERD_PID=
COMPOSE=(docker-compose --project-directory "$ROOT" -p "$PROJECT" -f "$ROOT/docker-compose.yml" -f "$ROOT/test/deploy/compose.override.yml" --env-file "$WORK/.env")
UP=0

cleanup() {
  local rc=$?
  set +e
  if [ "$UP" = 1 ] && [ "${DEPLOY_TEST_KEEP:-}" != 1 ]; then
    if [ "$rc" != 0 ]; then
      log "logs of the services (last 40 lines each):"
      "${COMPOSE[@]}" logs --no-color --tail 40 >&2 2>/dev/null
    fi
    "${COMPOSE[@]}" down --remove-orphans >/dev/null 2>&1
  fi
  if [ "${DEPLOY_TEST_KEEP:-}" != 1 ]; then
    # the test's own volumes (kept by `down`, checked below), then its work dir
    for v in $($DOCKER volume ls -q --filter "label=com.docker.compose.project=$PROJECT" 2>/dev/null); do $DOCKER volume rm -f "$v" >/dev/null 2>&1; done
    rm -rf "$WORK" 2>/dev/null || "${SUDO[@]}" rm -rf "$WORK"
  else
    log "kept: the stack (project $PROJECT) and $WORK; stop it with: ${COMPOSE[*]} down -v"
  fi
  if [ -n "$DOCKERD_PID" ]; then
    log "stopping the dockerd this test started (pid $DOCKERD_PID)"
    kill "$DOCKERD_PID" 2>/dev/null
    for _ in $(seq 1 60); do kill -0 "$DOCKERD_PID" 2>/dev/null || break; sleep 0.5; done
  fi
  log "done in $((SECONDS - STARTED)) s ($([ "$rc" = 0 ] && echo passed || echo "FAILED, exit $rc"))"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- the engine ----------------------------------------------------------------------------------
if ! $DOCKER info >/dev/null 2>&1; then
  [ "$(id -u)" = 0 ] || [ "${#SUDO[@]}" -gt 0 ] || die "no Docker engine answers and starting dockerd needs root"
  log "starting dockerd (log: $WORK/dockerd.log)"
  "${SUDO[@]}" dockerd >"$WORK/dockerd.log" 2>&1 &
  DOCKERD_PID=$!
  for _ in $(seq 1 60); do $DOCKER info >/dev/null 2>&1 && break; sleep 0.5; done
  $DOCKER info >/dev/null 2>&1 || { tail -20 "$WORK/dockerd.log" >&2; die "dockerd did not start"; }
fi
log "engine: $($DOCKER info --format '{{.ServerVersion}} {{.Driver}} cgroup v{{.CgroupVersion}}')"

have_image() { $DOCKER image inspect "$1" >/dev/null 2>&1; }
build() { # build TAG CONTEXT [docker build args…]
  local tag=$1 ctx=$2
  shift 2
  $DOCKER build --network host --force-rm -q -t "$tag" "$@" "$ctx" >"$WORK/build-${tag//[\/:]/_}.log" 2>&1 || {
    tail -30 "$WORK/build-${tag//[\/:]/_}.log" >&2
    die "docker build of $tag failed"
  }
}

# --- base images from Debian's packages (cached by name) ------------------------------------------
if ! have_image "$BASE_IMAGE"; then
  log "debootstrap bookworm (minbase) from $MIRROR"
  rootfs="$WORK/rootfs"
  "${SUDO[@]}" debootstrap --variant=minbase bookworm "$rootfs" "$MIRROR" >"$WORK/debootstrap.log" 2>&1 || {
    tail -20 "$WORK/debootstrap.log" >&2
    die "debootstrap failed"
  }
  host=${MIRROR#*://}
  host=${host%%/*}
  printf 'deb %s bookworm main\ndeb %s bookworm-updates main\ndeb http://%s/debian-security bookworm-security main\n' \
    "$MIRROR" "$MIRROR" "${host/deb.debian.org/deb.debian.org}" | "${SUDO[@]}" tee "$rootfs/etc/apt/sources.list" >/dev/null
  "${SUDO[@]}" rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
  log "importing $BASE_IMAGE"
  "${SUDO[@]}" tar -C "$rootfs" -c . | $DOCKER import -c 'CMD ["/bin/bash"]' -c 'ENV LANG=C.UTF-8' - "$BASE_IMAGE" >/dev/null
  "${SUDO[@]}" rm -rf "$rootfs"
fi
if ! have_image "$NODE_IMAGE"; then
  log "building $NODE_IMAGE (this machine's $(command -v node) and npm)"
  ctx="$WORK/node-image"
  mkdir -p "$ctx"
  cp "$ROOT/test/deploy/images/node/Dockerfile" "$ctx/"
  cp "$(readlink -f "$(command -v node)")" "$ctx/node"
  npm_dir=$(dirname "$(dirname "$(readlink -f "$(command -v npm)")")")
  [ -f "$npm_dir/package.json" ] || die "npm's package not found (from $(command -v npm))"
  cp -r "$npm_dir" "$ctx/npm"
  # npm's own trust: a machine that reaches npm's registry through a TLS-inspecting proxy has its
  # CA in npm's `cafile`; the image's npm gets the same bundle (nothing else in the image uses it)
  : >"$ctx/npm-ca.pem"
  cafile=$(npm config get cafile 2>/dev/null || true)
  if [ -n "$cafile" ] && [ "$cafile" != null ] && [ -f "$cafile" ]; then
    cp "$cafile" "$ctx/npm-ca.pem"
    sed -i '/^cafile *=/d' "$ctx/npm/npmrc" 2>/dev/null || true
    echo 'cafile=/usr/local/etc/npm-ca.pem' >>"$ctx/npm/npmrc"
  fi
  build "$NODE_IMAGE" "$ctx" --build-arg "BASE_IMAGE=$BASE_IMAGE"
  rm -rf "$ctx"
fi
if ! have_image "$NATS_IMAGE"; then
  log "building $NATS_IMAGE (Debian's nats-server)"
  build "$NATS_IMAGE" "$ROOT/test/deploy/images/nats" --build-arg "BASE_IMAGE=$BASE_IMAGE"
fi
if ! have_image "$POSTGRES_IMAGE"; then
  log "building $POSTGRES_IMAGE (Debian's postgresql-15)"
  build "$POSTGRES_IMAGE" "$ROOT/test/deploy/images/postgres" --build-arg "BASE_IMAGE=$BASE_IMAGE"
fi

# --- the project's image, from the Dockerfile as shipped ------------------------------------------
log "docker build . (NODE_IMAGE=$NODE_IMAGE, target runtime)"
build "$CATRACA_IMAGE" "$ROOT" --build-arg "NODE_IMAGE=$NODE_IMAGE" --target runtime

# --- the mocks' programs, bundled from the repository and run from the project image --------------
mkdir -p "$WORK/bundles"
for entry in bench/mock-upstream/main.ts:mock-upstream test/deploy/containers/mail-sink.ts:mail-sink test/deploy/containers/probe.ts:probe test/deploy/containers/ptax.ts:ptax; do
  "$ROOT/node_modules/.bin/esbuild" "$ROOT/${entry%%:*}" --bundle --platform=node --target=node20 --format=esm \
    --external:pg-native --log-level=warning \
    --banner:js="import { createRequire as __cr } from 'node:module'; const require = __cr(import.meta.url);" \
    --outfile="$WORK/bundles/${entry##*:}.mjs" || die "bundling ${entry%%:*} failed"
done
chmod -R a+rX "$WORK/bundles"

# --- certificates: the PSP's CA and server certificate, our client certificate --------------------
# The portal presents cert.pem/key.pem (PIX_CERT_DIR) and trusts the PSP's CA (PIX_CA_FILE); the
# PSP mock demands a client certificate of the CA that issued ours.
pki="$WORK/pki" pix="$WORK/pix" psp="$WORK/psp"
mkdir -p "$pki" "$pix" "$psp"
ossl() { openssl "$@" >/dev/null 2>&1 || die "openssl $1 failed"; }
ossl req -x509 -newkey rsa:2048 -nodes -days 2 -subj '/CN=deploy-test PSP CA' -keyout "$pki/psp-ca.key" -out "$pki/psp-ca.pem"
ossl req -x509 -newkey rsa:2048 -nodes -days 2 -subj '/CN=deploy-test client CA' -keyout "$pki/client-ca.key" -out "$pki/client-ca.pem"
ossl req -newkey rsa:2048 -nodes -subj '/CN=psp' -keyout "$psp/server-key.pem" -out "$pki/psp.csr"
printf 'subjectAltName=DNS:psp,DNS:localhost,IP:127.0.0.1\n' >"$pki/psp.ext"
ossl x509 -req -in "$pki/psp.csr" -CA "$pki/psp-ca.pem" -CAkey "$pki/psp-ca.key" -CAcreateserial -days 2 -extfile "$pki/psp.ext" -out "$psp/server-cert.pem"
ossl req -newkey rsa:2048 -nodes -subj '/CN=catraca portal' -keyout "$pix/key.pem" -out "$pki/client.csr"
ossl x509 -req -in "$pki/client.csr" -CA "$pki/client-ca.pem" -CAkey "$pki/client-ca.key" -CAcreateserial -days 2 -out "$pix/cert.pem"
cp "$pki/psp-ca.pem" "$pix/ca.pem"
cp "$pki/client-ca.pem" "$psp/ca.pem"
PSP_CLIENT_ID="deploy-test-client"
PSP_CLIENT_SECRET="s$(openssl rand -hex 16)"
printf '{"port": 8443, "clientId": "%s", "clientSecret": "%s"}\n' "$PSP_CLIENT_ID" "$PSP_CLIENT_SECRET" >"$psp/psp.json"
# readable by the image's `node` user (uid 1000), as .env.example asks of PIX_CERT_DIR
"${SUDO[@]}" chown -R 1000:1000 "$pix" "$psp"
"${SUDO[@]}" chmod 600 "$pix/key.pem" "$psp/server-key.pem" "$psp/psp.json"

# --- .env, as docs/operations.md ("Configure") tells an operator: cp .env.example .env, fill it in --
hex() { openssl rand -hex 24; }
set_env() { # set_env NAME VALUE: replace the line of .env.example (or append)
  if grep -q "^$1=" "$WORK/.env"; then
    python3 - "$WORK/.env" "$1" "$2" <<'PY'
import sys
path, name, value = sys.argv[1:]
lines = open(path).read().split('\n')
open(path, 'w').write('\n'.join(f'{name}={value}' if l.startswith(name + '=') else l for l in lines))
PY
  else printf '%s=%s\n' "$1" "$2" >>"$WORK/.env"; fi
}
cp "$ROOT/.env.example" "$WORK/.env"
chmod 600 "$WORK/.env"
set_env COMPOSE_PROJECT_NAME "$PROJECT"
for v in POSTGRES_PASSWORD DB_GATEWAY_PASSWORD DB_WORKER_PASSWORD DB_METERING_PASSWORD DB_PORTAL_PASSWORD DB_ADMIN_PASSWORD DB_CONSOLE_PASSWORD; do
  set_env "$v" "$(hex)"
done
for v in NATS_ROUTE_PASSWORD NATS_GATEWAY_PASSWORD NATS_WORKER_PASSWORD NATS_METERING_PASSWORD NATS_PORTAL_PASSWORD NATS_CLI_PASSWORD NATS_CONSOLE_PASSWORD; do
  set_env "$v" "n$(hex)"
done
set_env PORTAL_PUBLIC_URL https://portal.deploy-test.invalid
set_env GATEWAY_PUBLIC_URL https://api.deploy-test.invalid/v1
set_env PIX_API_URL https://psp:8443/v2
set_env PIX_OAUTH_URL https://psp:8443/oauth/token
set_env PIX_CLIENT_ID "$PSP_CLIENT_ID"
set_env PIX_CLIENT_SECRET "$PSP_CLIENT_SECRET"
set_env PIX_KEY 12345678000195
set_env PIX_CERT_DIR "$pix"
set_env PIX_CA_FILE /etc/catraca/pix/ca.pem
# the PSP mock calls the portal on the compose network (in production: the TLS proxy's URL)
set_env PIX_WEBHOOK_BASE_URL http://portal:8081
set_env SMTP_URL smtp://mail:2525
set_env PTAX_URL http://ptax:9200/olinda/servico/PTAX/versao/v1/odata
set_env OPENAI_API_KEY "sk-vendor-$(openssl rand -hex 16)"
# what cannot exist here: the images' names (made above from Debian's packages), the mocks' programs
set_env CATRACA_IMAGE "$CATRACA_IMAGE"
set_env NATS_IMAGE "$NATS_IMAGE"
set_env POSTGRES_IMAGE "$POSTGRES_IMAGE"
set_env DEPLOY_TEST_BUNDLES "$WORK/bundles"
set_env DEPLOY_TEST_PSP_DIR "$psp"

"${COMPOSE[@]}" config -q || die "docker-compose config refused the files"

# --- up ------------------------------------------------------------------------------------------
# a previous run's leftovers (a killed run): the test starts from empty volumes
"${COMPOSE[@]}" down -v --remove-orphans >/dev/null 2>&1 || true
UP=1
# compose 1.29 gives up at once when a dependency is unhealthy at the moment it looks (a health
# check that timed out on a busy machine): the services without dependencies first, waited for
# here, then `up` of the whole file (idempotent), again while it gives up that way
health_report() {
  for id in $("${COMPOSE[@]}" ps -q "$@"); do
    $DOCKER inspect -f '{{.Name}} {{.State.Status}} {{if .State.Health}}{{.State.Health.Status}}{{else}}no-healthcheck{{end}} {{.State.ExitCode}}' "$id"
  done
}
not_ready() { awk '!($2 == "running" && $3 == "healthy") && !($1 ~ /_migrate_/ && $2 == "exited" && $4 == 0)'; }
wait_healthy() { # wait_healthy SECONDS [service…]
  local until=$((SECONDS + $1)) report bad
  shift
  while :; do
    report=$(health_report "$@")
    bad=$(echo "$report" | not_ready)
    [ -n "$report" ] && [ -z "$bad" ] && return 0
    if echo "$report" | awk '$2 == "exited" && $4 != 0 {f=1} END {exit !f}' || [ "$SECONDS" -gt "$until" ]; then
      echo "$report" >&2
      die "not every service became healthy: $(echo "$bad" | awk '{print $1 "=" $2 "/" $3}' | tr '\n' ' ')"
    fi
    sleep 2
  done
}
HEALTH_TIMEOUT=${DEPLOY_TEST_HEALTH_TIMEOUT:-420}
FIRST=(nats-1 nats-2 nats-3 postgres psp vendor mail)
"${COMPOSE[@]}" up -d --no-build "${FIRST[@]}" >"$WORK/up.log" 2>&1 || { cat "$WORK/up.log" >&2; die "docker-compose up failed"; }
wait_healthy "$HEALTH_TIMEOUT" "${FIRST[@]}"
log "NATS, PostgreSQL and the mocks healthy; docker-compose up -d"
for attempt in 1 2 3 4 5; do
  "${COMPOSE[@]}" up -d --no-build >"$WORK/up.log" 2>&1 && break
  [ "$attempt" = 5 ] && { cat "$WORK/up.log" >&2; die "docker-compose up failed"; }
  log "docker-compose up gave up ($(grep -m1 -i error "$WORK/up.log" || tail -1 "$WORK/up.log")); again once its dependencies are healthy"
  wait_healthy "$HEALTH_TIMEOUT" "${FIRST[@]}"
done

# every container healthy by its own health check (migrate: exited 0)
wait_healthy "$HEALTH_TIMEOUT"
report=$(health_report)
log "every service healthy: $(echo "$report" | awk '{print $1}' | tr -d / | tr '\n' ' ')"

# --- the checks, through the published loopback ports --------------------------------------------
DEPLOY_TEST_ENV_FILE="$WORK/.env" DEPLOY_TEST_COMPOSE="$(printf '%s\n' "${COMPOSE[@]}")" DEPLOY_TEST_PKI="$pki" DEPLOY_TEST_PIX="$pix" \
  node --import tsx "$ROOT/test/deploy/checks.ts" || die "checks failed"

# still every container healthy after the traffic
bad=$(health_report | not_ready)
[ -z "$bad" ] || die "unhealthy after the checks: $bad"

# --- down keeps the volumes ----------------------------------------------------------------------
if [ "${DEPLOY_TEST_KEEP:-}" != 1 ]; then
  log "docker-compose down"
  "${COMPOSE[@]}" down --remove-orphans >/dev/null 2>&1 || die "docker-compose down failed"
  UP=0
  vols=$($DOCKER volume ls -q --filter "label=com.docker.compose.project=$PROJECT" | sort | tr '\n' ' ')
  want="${PROJECT}_nats-1-data ${PROJECT}_nats-2-data ${PROJECT}_nats-3-data ${PROJECT}_pg-data "
  [ "$vols" = "$want" ] || die "after down the volumes are [$vols], expected [$want]"
  log "down left the volumes: $vols"
fi
