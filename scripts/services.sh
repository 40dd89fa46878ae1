#!/usr/bin/env bash
# Real MariaDB, PostgreSQL and Apache ZooKeeper on 127.0.0.1 for leafid's tests, benches
# and examples.
# No Docker: Debian's own packages, run as plain processes from a throwaway data directory.
#
# Usage
#   scripts/services.sh start   [mysql|postgres|zookeeper|ensemble|all]   (default: all)
#   scripts/services.sh stop    [mysql|postgres|zookeeper|ensemble|all] [--kill] [--purge]
#   scripts/services.sh restart [mysql|postgres|zookeeper|ensemble|all] [--kill]
#   scripts/services.sh stop-node N [--kill]    stop ZooKeeper ensemble member N (1..3)
#   scripts/services.sh start-node N            start it again and wait until it serves
#   scripts/services.sh status                  one line per server; exit 1 if any is down
#   scripts/services.sh env                     print the export lines (see below)
#   scripts/services.sh clean                   stop everything and delete the data dir
#
#   eval "$(scripts/services.sh start)"         start all and set the variables in this shell
#   source .services/env                        the same variables, later
#
# `all` is MariaDB + PostgreSQL + a standalone ZooKeeper + a 3-node ZooKeeper ensemble.
# `start` installs Debian's mariadb-server, postgresql, zookeeper and faketime first when a
# binary is missing (one `apt-get update`, then a non-interactive install; needs root or
# sudo). PostgreSQL refuses to run as root: started by root, its cluster belongs to the
# `postgres` user of Debian's package; started by anyone else, to that user. A second `start`
# finds running servers (pid file + a real query) and leaves them alone. `stop` waits until
# the process has exited (SIGTERM, then SIGKILL after 15 s; `--kill` sends SIGKILL at once to
# simulate a crash). Data survives stop/start, so fault tests can restart a server and find
# their rows again; `--purge` deletes the stopped servers' data, `clean` deletes everything.
# Logs: .services/mysql/error.log, .services/pg/pg.log, .services/zk*/zk.log (printed on a
# start-up time-out).
#
# Variables read (environment first, then the values saved in $LEAFID_SERVICES_DIR/env by
# an earlier start, then the defaults):
#   LEAFID_SERVICES_DIR       data, logs, pid files      (default: <repo>/.services)
#   LEAFID_MYSQL_PORT         MariaDB TCP port           (3307)
#   LEAFID_PG_PORT            PostgreSQL TCP port        (5433)
#   LEAFID_ZK_PORT            standalone ZooKeeper       (2182)
#   LEAFID_ZK_ENSEMBLE_PORTS  ensemble client ports      ("2191 2192 2193"); each peer also
#                             listens on client+700 (quorum) and client+1700 (election)
#   LEAFID_SERVICES_TIMEOUT   seconds to wait for a server to answer (90)
#
# Variables printed by `start` and `env` and written to $LEAFID_SERVICES_DIR/env:
#   LEAFID_MYSQL_URL    mysql://root:leafid@127.0.0.1:3307/leafid (database `leafid`, utf8mb4)
#   LEAFID_PG_URL       postgres://leafid:leafid@127.0.0.1:5433/leafid (database `leafid`,
#                       UTF8, owned by `leafid`, a superuser so tests can make databases)
#   LEAFID_PGBOUNCER_URL the same through PgBouncer (pool_mode = transaction) on port + 1000
#   LEAFID_ZK           127.0.0.1:2182
#   LEAFID_ZK_ENSEMBLE  127.0.0.1:2191,127.0.0.1:2192,127.0.0.1:2193
#   LEAFID_SERVICES_DIR, LEAFID_MYSQL_PORT, LEAFID_PG_PORT, LEAFID_ZK_PORT,
#   LEAFID_ZK_ENSEMBLE_PORTS, so a
#   test that sources the file and calls `services.sh stop mysql` acts on the same servers.
#
# Everything binds to 127.0.0.1 only. ZooKeeper runs with tickTime=500 and
# minSessionTimeout=1000 so tests can let a session expire quickly, and answers the
# four-letter words ruok, srvr, stat, mntr and conf (`echo srvr | nc 127.0.0.1 2182`).
# Only the lines on stdout are export lines; progress and errors go to stderr.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
svc=${LEAFID_SERVICES_DIR:-$root/.services}
case $svc in /*) ;; *) svc=$PWD/$svc ;; esac
svc=${svc%/}
password=leafid
timeout_secs=${LEAFID_SERVICES_TIMEOUT:-90}

log() { echo "services: $*" >&2; }
die() {
    log "$*"
    exit 1
}

# Reads one variable from the env file an earlier start wrote, so a later call that only
# knows LEAFID_SERVICES_DIR (e.g. `restart mysql` in a fault test) keeps the same ports.
saved() {
    [ -f "$svc/env" ] || return 0
    sed -n "s/^export $1=//p" "$svc/env" | tr -d "'\"" | tail -n 1
}
mysql_port=${LEAFID_MYSQL_PORT:-$(saved LEAFID_MYSQL_PORT)}
mysql_port=${mysql_port:-3307}
pg_port=${LEAFID_PG_PORT:-$(saved LEAFID_PG_PORT)}
pg_port=${pg_port:-5433}
# PgBouncer in transaction mode in front of it, 1000 ports up (6433 by default).
bouncer_port=$((pg_port + 1000))
zk_port=${LEAFID_ZK_PORT:-$(saved LEAFID_ZK_PORT)}
zk_port=${zk_port:-2182}
ens_spec=${LEAFID_ZK_ENSEMBLE_PORTS:-$(saved LEAFID_ZK_ENSEMBLE_PORTS)}
read -r -a ens_ports <<<"${ens_spec:-2191 2192 2193}"

# ---- checks before any I/O ----
valid_port() { [[ $1 =~ ^[0-9]+$ ]] && [ "$1" -ge 1024 ] && [ "$1" -le 63835 ]; }
check_config() {
    local p all=()
    [ "${#ens_ports[@]}" -eq 3 ] || die "LEAFID_ZK_ENSEMBLE_PORTS needs exactly 3 ports, got '${ens_ports[*]}'"
    for p in "$mysql_port" "$pg_port" "$bouncer_port" "$zk_port" "${ens_ports[@]}"; do
        valid_port "$p" || die "bad port '$p': use a number from 1024 to 63835"
        all+=("$p")
    done
    for p in "${ens_ports[@]}"; do all+=($((p + 700)) $((p + 1700))); done
    [ "$(printf '%s\n' "${all[@]}" | sort -u | wc -l)" -eq "${#all[@]}" ] ||
        die "ports overlap: mysql $mysql_port, postgres $pg_port, zookeeper $zk_port, ensemble ${ens_ports[*]} (+700, +1700)"
    [[ $timeout_secs =~ ^[0-9]+$ ]] || die "LEAFID_SERVICES_TIMEOUT must be whole seconds, got '$timeout_secs'"
    [ -n "$svc" ] || die "LEAFID_SERVICES_DIR must not be /"
}

ensure_packages() {
    local missing=() sudo=""
    command -v mariadbd >/dev/null && command -v mariadb-install-db >/dev/null &&
        command -v mariadb >/dev/null || missing+=(mariadb-server)
    pg_bin >/dev/null || missing+=(postgresql)
    [ -x /usr/sbin/pgbouncer ] || missing+=(pgbouncer)
    [ -f /usr/share/java/zookeeper.jar ] && command -v java >/dev/null || missing+=(zookeeper)
    command -v faketime >/dev/null || missing+=(faketime)
    [ ${#missing[@]} -eq 0 ] && return
    if [ "$(id -u)" -ne 0 ]; then
        command -v sudo >/dev/null || die "need ${missing[*]}: run as root (or install them)"
        sudo="sudo -n"
    fi
    log "installing ${missing[*]} from Debian (apt-get update + install, about a minute)"
    # Keep the packages' own system services (MariaDB on 3306, PostgreSQL on 5432,
    # ZooKeeper on 2181) from starting on a machine with an init system; tests use the
    # servers started below.
    local policy=""
    if [ -z "$sudo" ] && [ ! -e /usr/sbin/policy-rc.d ]; then
        policy=/usr/sbin/policy-rc.d
        printf '#!/bin/sh\nexit 101\n' >"$policy"
        chmod +x "$policy"
    fi
    local ok=1
    $sudo apt-get update -qq </dev/null || ok=0
    [ "$ok" = 0 ] || $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
        --no-install-recommends "${missing[@]}" </dev/null >/dev/null || ok=0
    [ -z "$policy" ] || rm -f "$policy"
    [ "$ok" = 1 ] || die "apt-get could not install ${missing[*]}"
}

# ---- processes ----
# Prints the pid of the live process whose command line has the exact argument $2,
# preferring the pid file $1; checking the argument guards against a reused pid, and the
# scan finds a server whose pid file was lost.
find_pid() {
    local pidfile=$1 marker=$2 pid f
    if [ -s "$pidfile" ]; then
        pid=$(cat "$pidfile")
        if [[ $pid =~ ^[0-9]+$ ]] && tr '\0' '\n' 2>/dev/null <"/proc/$pid/cmdline" |
            grep -qxF -f <(printf '%s\n' "$marker"); then
            echo "$pid"
            return 0
        fi
    fi
    # Patterns come from a file so no grep's own command line can match.
    while read -r f; do
        pid=${f#/proc/}
        pid=${pid%/cmdline}
        [ "$pid" = "$$" ] && continue
        echo "$pid" >"$pidfile" 2>/dev/null || true
        echo "$pid"
        return 0
    done < <(grep -lzxF -f <(printf '%s\n' "$marker") /proc/[0-9]*/cmdline 2>/dev/null)
    return 1
}

# True once pid $1 has exited. A zombie counts as exited: in a container whose pid 1 does
# not reap orphans it would otherwise look alive forever.
gone() {
    ! kill -0 "$1" 2>/dev/null || [ "$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1)" = Z ]
}

# Stops the process found by find_pid and waits until it is gone.
stop_proc() {
    local pidfile=$1 marker=$2 what=$3 signal=${4:-TERM} pid i
    while pid=$(find_pid "$pidfile" "$marker"); do
        kill -s "$signal" "$pid" 2>/dev/null || true
        for ((i = 0; i < 150; i++)); do
            gone "$pid" && break
            sleep 0.1
        done
        if ! gone "$pid"; then
            log "$what (pid $pid) ignored SIGTERM for 15 s; killing it"
            kill -s KILL "$pid" 2>/dev/null || true
            until gone "$pid"; do sleep 0.05; done
        fi
        log "$what stopped"
    done
    rm -f "$pidfile"
}

# Runs "$@" until it succeeds, for up to timeout_secs; on time-out names $2 and prints the
# tail of log $1.
wait_until() {
    local logfile=$1 what=$2 deadline=$((SECONDS + timeout_secs))
    shift 2
    until "$@" >/dev/null 2>&1; do
        if [ "$SECONDS" -ge "$deadline" ]; then
            log "$what did not answer within ${timeout_secs}s; last lines of $logfile:"
            tail -n 40 "$logfile" >&2 2>/dev/null || true
            return 1
        fi
        sleep 0.1
    done
}

# Fails when something already listens on 127.0.0.1:$1 (another copy of these services,
# or an unrelated server), naming the port and the variable that moves it.
port_free() {
    if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then
        die "port $1 is taken by another process; stop it or choose other ports ($2)"
    fi
}

# Starts "$@" detached (own session, no stdin, no inherited lock fd), appending to $2.
launch() {
    local pidfile=$1 logfile=$2
    shift 2
    echo "=== $(date -u +%FT%TZ) services.sh starting: $*" >>"$logfile"
    setsid "$@" </dev/null >>"$logfile" 2>&1 9>&- &
    echo $! >"$pidfile"
    disown
}

# ---- MariaDB ----
mysql_dir=$svc/mysql
mysql_marker=--datadir=$mysql_dir/data
mysql_tcp() { mariadb --no-defaults -h127.0.0.1 -P"$mysql_port" -uroot -p"$password" --connect-timeout=2 "$@"; }
mysql_ok() { mysql_tcp leafid -e 'select 1'; }
mysql_sock_up() { mariadb-admin --no-defaults --socket="$mysql_dir/sock" -uroot --connect-timeout=2 ping; }

start_mysql() {
    local pid
    if pid=$(find_pid "$mysql_dir/pid" "$mysql_marker"); then
        grep -qxF -- "--port=$mysql_port" <(tr '\0' '\n' <"/proc/$pid/cmdline") ||
            die "MariaDB from $mysql_dir already runs on another port; stop it first"
        wait_until "$mysql_dir/error.log" "MariaDB (pid $pid)" mysql_ok || exit 1
        log "MariaDB on 127.0.0.1:$mysql_port (pid $pid, already running)"
        return
    fi
    port_free "$mysql_port" LEAFID_MYSQL_PORT
    mkdir -p "$mysql_dir"
    # The marker is written only after a complete install, so a half-made datadir is redone.
    if [ ! -f "$mysql_dir/installed" ]; then
        rm -rf "$mysql_dir/data" "$mysql_dir/initialized"
        mariadb-install-db --no-defaults --datadir="$mysql_dir/data" \
            --auth-root-authentication-method=normal --skip-test-db \
            >"$mysql_dir/install.log" 2>&1 || {
            tail -n 20 "$mysql_dir/install.log" >&2
            die "mariadb-install-db failed; see $mysql_dir/install.log"
        }
        touch "$mysql_dir/installed"
    fi
    # innodb_flush_log_at_trx_commit=2 still writes each commit to the OS, so a killed
    # server loses nothing; only a machine crash could. Native AIO is off because
    # io_uring is often forbidden inside containers (CI), and tests gain nothing from it.
    launch "$mysql_dir/pid" "$mysql_dir/error.log" \
        mariadbd --no-defaults "$mysql_marker" --port="$mysql_port" \
        --bind-address=127.0.0.1 --socket="$mysql_dir/sock" --pid-file="$mysql_dir/pid" \
        --user=root --skip-name-resolve --character-set-server=utf8mb4 \
        --collation-server=utf8mb4_general_ci --innodb-buffer-pool-size=64M \
        --innodb-flush-log-at-trx-commit=2 --innodb-use-native-aio=0 \
        --max-connections=500 --log-error="$mysql_dir/error.log"
    if [ ! -f "$mysql_dir/initialized" ]; then
        wait_until "$mysql_dir/error.log" "MariaDB socket" mysql_sock_up || {
            stop_mysql KILL
            exit 1
        }
        mariadb --no-defaults --socket="$mysql_dir/sock" -uroot <<SQL || die "setting up root and database leafid failed"
CREATE USER IF NOT EXISTS 'root'@'127.0.0.1';
ALTER USER 'root'@'127.0.0.1' IDENTIFIED BY '$password';
GRANT ALL ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION;
CREATE DATABASE IF NOT EXISTS leafid CHARACTER SET utf8mb4;
SQL
        touch "$mysql_dir/initialized"
    fi
    wait_until "$mysql_dir/error.log" "MariaDB on 127.0.0.1:$mysql_port" mysql_ok || {
        stop_mysql KILL
        exit 1
    }
    log "MariaDB on 127.0.0.1:$mysql_port (pid $(cat "$mysql_dir/pid"))"
}

stop_mysql() { stop_proc "$mysql_dir/pid" "$mysql_marker" MariaDB "${1:-TERM}"; }

# ---- PostgreSQL ----
# The newest installed server's binaries (Debian keeps them out of PATH, per version).
pg_bin() {
    local d
    d=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
    [ -n "$d" ] && [ -x "$d/initdb" ] && [ -x "$d/postgres" ] && [ -x "$d/psql" ] && echo "$d"
}

pg_dir=$svc/pg
pg_marker=$pg_dir/data
# PostgreSQL refuses to run as root: as root, the cluster is the `postgres` user's
# (setpriv execs, so the pid `launch` records is the server's own).
pg_user=()
[ "$(id -u)" -ne 0 ] || pg_user=(setpriv --reuid=postgres --regid=postgres --init-groups --)
pg_psql() { PGCONNECT_TIMEOUT=2 "$(pg_bin)/psql" -X -q -v ON_ERROR_STOP=1 "$@"; }
pg_ok() { PGPASSWORD=$password pg_psql -h 127.0.0.1 -p "$pg_port" -U leafid -d leafid -Atc 'select 1'; }
pg_sock_up() { "$(pg_bin)/pg_isready" -q -h "$pg_dir" -p "$pg_port"; }

# After a SIGKILL the server's children outlive it for a moment, still attached to its
# shared memory, and a new server refuses to start until they are gone. The segment's id
# is on line 7 of postmaster.pid; /proc/sysvipc/shm counts its attachments.
pg_orphans_gone() {
    local shmid
    shmid=$(sed -n 7p "$pg_marker/postmaster.pid" 2>/dev/null | awk '{print $2}')
    [ -n "$shmid" ] || return 0
    ! awk -v id="$shmid" '$2 == id && $7 > 0 { found = 1 } END { exit !found }' /proc/sysvipc/shm
}

start_pg() {
    local pid bin
    bin=$(pg_bin) || die "PostgreSQL's server is missing from /usr/lib/postgresql/*/bin"
    if pid=$(find_pid "$pg_dir/pid" "$pg_marker"); then
        grep -qxF -- "$pg_port" <(tr '\0' '\n' <"/proc/$pid/cmdline") ||
            die "PostgreSQL from $pg_dir already runs on another port; stop it first"
        wait_until "$pg_dir/pg.log" "PostgreSQL (pid $pid)" pg_ok || exit 1
        log "PostgreSQL on 127.0.0.1:$pg_port (pid $pid, already running)"
        return
    fi
    port_free "$pg_port" LEAFID_PG_PORT
    mkdir -p "$pg_dir"
    [ ${#pg_user[@]} -eq 0 ] || chown postgres:postgres "$pg_dir"
    # The marker is written only after a complete initdb, so a half-made cluster is redone.
    # The superuser `postgres` is trusted on the socket (in $pg_dir) only; TCP takes
    # passwords (scram-sha-256).
    if [ ! -f "$pg_dir/installed" ]; then
        rm -rf "$pg_marker" "$pg_dir/initialized"
        (cd "$pg_dir" && "${pg_user[@]}" "$bin/initdb" -D "$pg_marker" -U postgres -E UTF8 \
            --no-locale --auth-local=trust --auth-host=scram-sha-256) \
            >"$pg_dir/install.log" 2>&1 || {
            tail -n 20 "$pg_dir/install.log" >&2
            die "initdb failed; see $pg_dir/install.log"
        }
        touch "$pg_dir/installed"
    fi
    wait_until "$pg_dir/pg.log" "PostgreSQL's old processes to exit" pg_orphans_gone || exit 1
    # fsync=off: a killed server's writes are already in the OS (as MariaDB's
    # innodb_flush_log_at_trx_commit=2); commits stay synchronous, so a kill loses no
    # committed row; only a machine crash could.
    launch "$pg_dir/pid" "$pg_dir/pg.log" \
        "${pg_user[@]}" "$bin/postgres" -D "$pg_marker" -p "$pg_port" -h 127.0.0.1 \
        -k "$pg_dir" -c fsync=off -c max_connections=500 -c shared_buffers=64MB
    if [ ! -f "$pg_dir/initialized" ]; then
        wait_until "$pg_dir/pg.log" "PostgreSQL socket" pg_sock_up || {
            stop_pg KILL
            exit 1
        }
        pg_psql -h "$pg_dir" -p "$pg_port" -U postgres -d postgres >/dev/null <<SQL ||
DO \$\$ BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'leafid') THEN
        CREATE ROLE leafid LOGIN SUPERUSER;
    END IF;
END \$\$;
ALTER ROLE leafid PASSWORD '$password';
SELECT 'CREATE DATABASE leafid OWNER leafid ENCODING ''UTF8'''
    WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = 'leafid') \gexec
SQL
            die "setting up role and database leafid failed"
        touch "$pg_dir/initialized"
    fi
    wait_until "$pg_dir/pg.log" "PostgreSQL on 127.0.0.1:$pg_port" pg_ok || {
        stop_pg KILL
        exit 1
    }
    log "PostgreSQL on 127.0.0.1:$pg_port (pid $(cat "$pg_dir/pid"))"
    start_bouncer
}

# PgBouncer with pool_mode = transaction, the pooler that breaks prepared statements and
# session state (core/tests/segment/postgres_connections.rs runs through it). It refuses
# to run as root: it runs as PostgreSQL's user.
bouncer_dir=$pg_dir/bouncer
bouncer_ok() { PGPASSWORD=$password pg_psql -h 127.0.0.1 -p "$bouncer_port" -U leafid -d leafid -Atc 'select 1'; }
start_bouncer() {
    local pid
    if pid=$(find_pid "$bouncer_dir/pid" "$bouncer_dir/pgbouncer.ini"); then
        wait_until "$bouncer_dir/bouncer.log" "PgBouncer (pid $pid)" bouncer_ok || exit 1
        log "PgBouncer on 127.0.0.1:$bouncer_port (pid $pid, already running)"
        return
    fi
    port_free "$bouncer_port" "LEAFID_PG_PORT: PgBouncer takes it + 1000"
    mkdir -p "$bouncer_dir"
    cat >"$bouncer_dir/pgbouncer.ini" <<INI
[databases]
leafid = host=127.0.0.1 port=$pg_port dbname=leafid

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $bouncer_port
unix_socket_dir =
auth_type = scram-sha-256
auth_file = $bouncer_dir/userlist.txt
pool_mode = transaction
default_pool_size = 3
max_client_conn = 200
INI
    printf '"leafid" "%s"\n' "$password" >"$bouncer_dir/userlist.txt"
    [ ${#pg_user[@]} -eq 0 ] || chown -R postgres:postgres "$bouncer_dir"
    launch "$bouncer_dir/pid" "$bouncer_dir/bouncer.log" \
        "${pg_user[@]}" /usr/sbin/pgbouncer "$bouncer_dir/pgbouncer.ini"
    wait_until "$bouncer_dir/bouncer.log" "PgBouncer on 127.0.0.1:$bouncer_port" bouncer_ok || exit 1
    log "PgBouncer on 127.0.0.1:$bouncer_port (pid $(cat "$bouncer_dir/pid"))"
}

# SIGINT, PostgreSQL's fast shutdown: SIGTERM (smart) would wait for every client to
# disconnect, and a test's pool may hold its connections for as long as it runs.
stop_pg() {
    local signal=${1:-TERM}
    [ "$signal" != TERM ] || signal=INT
    stop_proc "$bouncer_dir/pid" "$bouncer_dir/pgbouncer.ini" PgBouncer "${1:-TERM}"
    stop_proc "$pg_dir/pid" "$pg_marker" PostgreSQL "$signal"
    [ "$signal" != KILL ] || wait_until "$pg_dir/pg.log" "PostgreSQL's old processes to exit" pg_orphans_gone
}

# ---- ZooKeeper ----
# Sends a four-letter word to 127.0.0.1:$1 and prints the answer.
zk_ask() {
    (
        exec 3<>"/dev/tcp/127.0.0.1/$1" || exit 1
        printf '%s' "$2" >&3
        timeout 2 cat <&3
    ) 2>/dev/null
}

zk_standalone_ok() { zk_ask "$zk_port" srvr | grep -q 'Mode: standalone'; }
ens_port() { echo "${ens_ports[$(($1 - 1))]}"; }
ens_dir() { echo "$svc/zk-ensemble-$1"; }
node_ok() { zk_ask "$(ens_port "$1")" srvr | grep -qE 'Mode: (leader|follower)'; }

# Writes zoo.cfg and log4j.properties into $1 (rewritten at every start, data kept).
zk_config() {
    local dir=$1 port=$2
    mkdir -p "$dir/data"
    # forceSync=no: a killed server's writes are already in the OS; tests never lose power.
    cat >"$dir/zoo.cfg" <<CFG
tickTime=500
initLimit=20
syncLimit=10
dataDir=$dir/data
clientPort=$port
clientPortAddress=127.0.0.1
admin.enableServer=false
4lw.commands.whitelist=ruok,srvr,stat,mntr,conf
minSessionTimeout=1000
maxSessionTimeout=60000
maxClientCnxns=0
forceSync=no
preAllocSize=4096
autopurge.snapRetainCount=3
autopurge.purgeInterval=1
CFG
    cat >"$dir/log4j.properties" <<'LOG'
log4j.rootLogger=INFO, CONSOLE
log4j.appender.CONSOLE=org.apache.log4j.ConsoleAppender
log4j.appender.CONSOLE.layout=org.apache.log4j.PatternLayout
log4j.appender.CONSOLE.layout.ConversionPattern=%d{ISO8601} %-5p [%t] %c{1} - %m%n
LOG
}

# Debian's zookeeper.jar names its dependencies in its manifest; log4j and its slf4j binding
# are added by name (a /usr/share/java/* wildcard would pick slf4j-nop and log nothing).
zk_launch() {
    local dir=$1
    launch "$dir/pid" "$dir/zk.log" \
        java -Xmx128m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Djava.net.preferIPv4Stack=true \
        -Dlog4j.configuration="file:$dir/log4j.properties" \
        -cp "/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-log4j12.jar:/usr/share/java/log4j-1.2.jar" \
        org.apache.zookeeper.server.quorum.QuorumPeerMain "$dir/zoo.cfg"
}

# Launches the standalone ZooKeeper unless it runs; wait_zookeeper waits for it.
launch_zookeeper() {
    local dir=$svc/zk
    find_pid "$dir/pid" "$dir/zoo.cfg" >/dev/null && return 0
    port_free "$zk_port" LEAFID_ZK_PORT
    zk_config "$dir" "$zk_port"
    zk_launch "$dir"
}

wait_zookeeper() {
    wait_until "$svc/zk/zk.log" "ZooKeeper on 127.0.0.1:$zk_port" zk_standalone_ok || {
        stop_zookeeper KILL
        exit 1
    }
    log "ZooKeeper on 127.0.0.1:$zk_port (pid $(cat "$svc/zk/pid"))"
}

stop_zookeeper() { stop_proc "$svc/zk/pid" "$svc/zk/zoo.cfg" ZooKeeper "${1:-TERM}"; }

# Launches ensemble member $1 unless it runs; does not wait (a lone peer has no quorum).
launch_node() {
    local n=$1 dir port i p
    dir=$(ens_dir "$n")
    port=$(ens_port "$n")
    find_pid "$dir/pid" "$dir/zoo.cfg" >/dev/null && return 0
    port_free "$port" LEAFID_ZK_ENSEMBLE_PORTS
    port_free $((port + 700)) "LEAFID_ZK_ENSEMBLE_PORTS (+700)"
    port_free $((port + 1700)) "LEAFID_ZK_ENSEMBLE_PORTS (+1700)"
    zk_config "$dir" "$port"
    for i in 1 2 3; do
        p=$(ens_port "$i")
        echo "server.$i=127.0.0.1:$((p + 700)):$((p + 1700))" >>"$dir/zoo.cfg"
    done
    echo "$n" >"$dir/data/myid"
    zk_launch "$dir"
}

wait_node() { wait_until "$(ens_dir "$1")/zk.log" "ZooKeeper ensemble member $1 (127.0.0.1:$(ens_port "$1"))" node_ok "$1"; }

wait_ensemble() {
    local n
    for n in 1 2 3; do wait_node "$n" || {
        stop_ensemble KILL
        exit 1
    }; done
    log "ZooKeeper ensemble on $(ensemble_hosts)"
}

stop_node() {
    local dir
    dir=$(ens_dir "$1")
    stop_proc "$dir/pid" "$dir/zoo.cfg" "ZooKeeper ensemble member $1" "${2:-TERM}"
}

stop_ensemble() {
    local n
    for n in 1 2 3; do stop_node "$n" "${1:-TERM}"; done
}

ensemble_hosts() {
    local p out=""
    for p in "${ens_ports[@]}"; do out+="${out:+,}127.0.0.1:$p"; done
    echo "$out"
}

write_env() {
    mkdir -p "$svc"
    cat >"$svc/env.tmp" <<ENV
export LEAFID_SERVICES_DIR=$(printf '%q' "$svc")
export LEAFID_MYSQL_PORT=$mysql_port
export LEAFID_MYSQL_URL=mysql://root:$password@127.0.0.1:$mysql_port/leafid
export LEAFID_PG_PORT=$pg_port
export LEAFID_PG_URL=postgres://leafid:$password@127.0.0.1:$pg_port/leafid
export LEAFID_PGBOUNCER_URL=postgres://leafid:$password@127.0.0.1:$bouncer_port/leafid
export LEAFID_ZK_PORT=$zk_port
export LEAFID_ZK=127.0.0.1:$zk_port
export LEAFID_ZK_ENSEMBLE_PORTS='${ens_ports[*]}'
export LEAFID_ZK_ENSEMBLE=$(ensemble_hosts)
ENV
    mv "$svc/env.tmp" "$svc/env"
    cat "$svc/env"
}

status() {
    local n down=0
    if mysql_ok >/dev/null 2>&1; then echo "mysql: up (127.0.0.1:$mysql_port)"; else echo "mysql: down"; down=1; fi
    if pg_ok >/dev/null 2>&1; then echo "postgres: up (127.0.0.1:$pg_port)"; else echo "postgres: down"; down=1; fi
    if bouncer_ok >/dev/null 2>&1; then echo "pgbouncer: up (127.0.0.1:$bouncer_port)"; else echo "pgbouncer: down"; down=1; fi
    if zk_standalone_ok; then echo "zookeeper: up (127.0.0.1:$zk_port)"; else echo "zookeeper: down"; down=1; fi
    for n in 1 2 3; do
        if node_ok "$n"; then
            echo "ensemble node $n: up (127.0.0.1:$(ens_port "$n"), $(zk_ask "$(ens_port "$n")" srvr | sed -n 's/^Mode: //p'))"
        else
            echo "ensemble node $n: down"
            down=1
        fi
    done
    return "$down"
}

# Deletes "$@" (the services dir or parts of it) only if `start` made the services dir
# (marker file, or the env file of an older services.sh), so a mistyped
# LEAFID_SERVICES_DIR deletes nothing.
purge() {
    [ -e "$svc" ] || return 0
    [ -f "$svc/.leafid-services" ] || grep -qs '^export LEAFID_SERVICES_DIR=' "$svc/env" ||
        die "$svc was not made by services.sh start; not deleting it"
    rm -rf "$@"
}

# Serialises concurrent calls (two test runners starting services at once).
lock() {
    mkdir -p "$svc"
    exec 9>"$svc/.lock"
    flock 9
}

cmd=${1:-start}
[ $# -gt 0 ] && shift
which=all signal=TERM purge_data=0 node=""
for arg in "$@"; do
    case $arg in
    mysql | postgres | zookeeper | ensemble | all) which=$arg ;;
    --kill) signal=KILL ;;
    --purge) purge_data=1 ;;
    [0-9]*) node=$arg ;;
    *) die "unknown argument '$arg' (see the usage at the top of $0)" ;;
    esac
done
check_config

start_which() {
    ensure_packages
    local n
    # The JVMs boot while MariaDB installs and starts; then each server is waited for.
    case $1 in zookeeper | all) launch_zookeeper ;; esac
    case $1 in ensemble | all) for n in 1 2 3; do launch_node "$n"; done ;; esac
    case $1 in mysql | all) start_mysql ;; esac
    case $1 in postgres | all) start_pg ;; esac
    case $1 in zookeeper | all) wait_zookeeper ;; esac
    case $1 in ensemble | all) wait_ensemble ;; esac
    write_env
}

stop_which() {
    case $1 in
    mysql) stop_mysql "$signal" ;;
    postgres) stop_pg "$signal" ;;
    zookeeper) stop_zookeeper "$signal" ;;
    ensemble) stop_ensemble "$signal" ;;
    all)
        stop_mysql "$signal"
        stop_pg "$signal"
        stop_zookeeper "$signal"
        stop_ensemble "$signal"
        ;;
    esac
}

case $cmd in
start)
    lock
    touch "$svc/.leafid-services"
    start_which "$which"
    ;;
stop)
    # A missing dir is not locked (that would create it); the process scan still runs.
    [ -d "$svc" ] && lock
    stop_which "$which"
    if [ "$purge_data" = 1 ]; then
        case $which in
        mysql) purge "$mysql_dir" ;;
        postgres) purge "$pg_dir" ;;
        zookeeper) purge "$svc/zk" ;;
        ensemble) purge "$svc"/zk-ensemble-[123] ;;
        all) purge "$svc" ;;
        esac
    fi
    ;;
restart)
    lock
    stop_which "$which"
    start_which "$which"
    ;;
stop-node | start-node)
    [[ $node =~ ^[1-3]$ ]] || die "$cmd needs the ensemble member number: 1, 2 or 3"
    lock
    if [ "$cmd" = stop-node ]; then
        stop_node "$node" "$signal"
    else
        ensure_packages
        launch_node "$node"
        wait_node "$node" || {
            stop_node "$node" KILL
            exit 1
        }
        log "ZooKeeper ensemble member $node on 127.0.0.1:$(ens_port "$node")"
    fi
    ;;
status) status ;;
env) write_env ;;
clean)
    [ -d "$svc" ] || exit 0
    lock
    stop_which all
    purge "$svc"
    ;;
-h | --help | help) sed -n '2,/^set -euo/p' "$0" | sed '$d' ;;
*) die "unknown command '$cmd' (start|stop|restart|stop-node N|start-node N|status|env|clean)" ;;
esac
