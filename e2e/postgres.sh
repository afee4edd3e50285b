# PostgreSQL as a HelloStateful, for the database suite (e2e/database.sh) and the consistency
# bench (bench/consistency.sh): sourced, not run; needs e2e/hs.sh's app_yaml.
#
#   pg_image                    Debian's PostgreSQL 15 made into image PG_IMAGE by e2e/mkimage,
#                               loaded into the cluster's nodes
#   pg_app NS APP MODE          the app (backup.consistency.mode MODE), its password in Secret
#                               pg-password, as a non-root user on node-directory volumes
#   pg_sql NS APP QUERY         QUERY's one value, through the app's own socket
#   pg_load NS APP NAME ARGS    pod NAME running pgbench ARGS... against APP's Service again
#                               whenever it ends (a backup in stop mode stops the server), until
#                               /log/stop exists; its log directory /log is an emptyDir

PG_IMAGE=hellostateful-postgres:15
PG_BIN=/usr/lib/postgresql/15/bin
# The app's root filesystem is read-only: its socket and lock files go on its volume, where a
# clean shutdown removes them.
PG_SOCKETS=/var/lib/pg/run
PG_E2E_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

pg_image() {
  [[ -x $PG_BIN/postgres ]] || { echo "no $PG_BIN/postgres: e2e/deps installs postgresql-15"; return 1; }
  local stage tar
  stage=$(mktemp -d) tar=$(mktemp --suffix .tar)
  cp -a /usr/lib/postgresql/15 "$stage/"
  # Its JIT compiler (LLVM) alone is larger than the rest; the server runs without it.
  rm -rf "$stage/15/lib/bitcode" "$stage"/15/lib/llvmjit*
  "$PG_E2E_DIR/mkimage" --name "$PG_IMAGE" --out "$tar" --busybox --with-libs \
    --tree "$stage/15:/usr/lib/postgresql/15" --tree /usr/share/postgresql/15:/usr/share/postgresql/15 \
    --file /usr/share/zoneinfo/Etc/UTC:/usr/share/zoneinfo/UTC --env TZ=UTC --user 65532 >/dev/null
  "$PG_E2E_DIR/cluster" load "$tar" >/dev/null
  rm -rf "$stage" "$tar"
}

pg_app() {
  local ns=$1 app=$2 mode=$3
  kubectl -n "$ns" create secret generic pg-password \
    --from-literal=password="$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')" >/dev/null
  # The server gets a fast shutdown (SIGINT) when the pod is stopped: the smart one that
  # SIGTERM asks for would wait for the clients to leave.
  local script="set -e
B=$PG_BIN D=/var/lib/pg/data
mkdir -p $PG_SOCKETS
if [ ! -s \$D/PG_VERSION ]; then
  printf '%s\\n' \"\$POSTGRES_PASSWORD\" > $PG_SOCKETS/pw
  \$B/initdb -D \$D -U postgres --pwfile=$PG_SOCKETS/pw --auth-local=trust --auth-host=scram-sha-256 --no-locale -E UTF8
  rm $PG_SOCKETS/pw
  echo 'host all all 0.0.0.0/0 scram-sha-256' >> \$D/pg_hba.conf
fi
\$B/postgres -D \$D -k $PG_SOCKETS -c listen_addresses='*' &
trap \"kill -INT \$!\" TERM
wait \$! || wait \$!"
  local spec
  spec=$(jq -cn --arg image "$PG_IMAGE" --arg script "$script" --arg bin "$PG_BIN" \
    --arg sockets "$PG_SOCKETS" --arg mode "$mode" '{
    replicas: 1, image: $image, mountPath: "/var/lib/pg",
    command: ["/bin/sh", "-c", $script],
    securityContext: {runAsUser: 65532, runAsGroup: 65532, fsGroup: 65532, runAsNonRoot: true},
    env: [{name: "POSTGRES_PASSWORD", valueFrom: {secretKeyRef: {name: "pg-password", key: "password"}}}],
    ports: [{name: "postgres", containerPort: 5432}],
    readinessProbe: {exec: {command: [($bin + "/pg_isready"), "-h", $sockets, "-U", "postgres"]}, periodSeconds: 2},
    backup: {consistency: ({mode: $mode} + (if $mode == "stop" then {maxStopSeconds: 300} else {} end))}}')
  app_yaml "$app" "$spec" | kubectl -n "$ns" apply -f - >/dev/null
}

pg_sql() { kubectl -n "$1" exec "$2-0" -c app -- "$PG_BIN/psql" -h "$PG_SOCKETS" -U postgres -Atc "$3"; }

# Each attempt is bounded: after a stop the server comes back in a new pod at a new address,
# and a connection begun to the old one as it went away would wait out TCP's own timeout.
pg_load() {
  local ns=$1 app=$2 name=$3; shift 3
  kubectl -n "$ns" apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Pod
metadata: {name: $name}
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 1
  containers:
  - name: pgbench
    image: $PG_IMAGE
    env:
    - {name: PGPASSWORD, valueFrom: {secretKeyRef: {name: pg-password, key: password}}}
    - {name: PGCONNECT_TIMEOUT, value: "3"}
    command: ["/bin/sh", "-c", "cd /log && until [ -e stop ]; do timeout -s KILL 20 $PG_BIN/pgbench -h $app -U postgres $* postgres >/dev/null 2>&1 || sleep 1; done; sleep 3600"]
    volumeMounts: [{name: log, mountPath: /log}]
    securityContext: {allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}, runAsNonRoot: true, seccompProfile: {type: RuntimeDefault}}
  volumes: [{name: log, emptyDir: {}}]
EOF
}
