#!/usr/bin/env bash
# Real MariaDB and Apache ZooKeeper on 127.0.0.1 for leafid's tests and examples.
#
#   scripts/services.sh start [mysql|zookeeper|ensemble|all]   (default: all)
#   scripts/services.sh stop  [mysql|zookeeper|ensemble|all] [--purge]
#   scripts/services.sh restart [which]
#   scripts/services.sh stop-node N | start-node N             (ensemble member 1..3)
#   scripts/services.sh status | env | clean
#
# Installs Debian's mariadb-server, zookeeper and faketime first when missing (as root,
# `apt-get update` once). Data lives in $LEAFID_SERVICES_DIR (default: <repo>/.services),
# which survives stop/start so fault tests can restart a server with its data; `clean` or
# `stop all --purge` removes it. A second `start` finds running servers and leaves them.
#
# `start` and `env` print, and write to $LEAFID_SERVICES_DIR/env, the variables the tests
# read, so `eval "$(scripts/services.sh env)"` sets them in a shell:
#   LEAFID_MYSQL_URL    mysql://root:leafid@127.0.0.1:$LEAFID_MYSQL_PORT/leafid
#   LEAFID_ZK           127.0.0.1:$LEAFID_ZK_PORT (standalone ZooKeeper)
#   LEAFID_ZK_ENSEMBLE  three ZooKeeper peers on loopback (one may stop, quorum stays)
# Ports: LEAFID_MYSQL_PORT (3307), LEAFID_ZK_PORT (2182), LEAFID_ZK_ENSEMBLE_PORTS
# ("2191 2192 2193"; quorum/election ports are the client port + 700 / + 1700).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
svc=${LEAFID_SERVICES_DIR:-$root/.services}
mysql_port=${LEAFID_MYSQL_PORT:-3307}
zk_port=${LEAFID_ZK_PORT:-2182}
read -r -a ens_ports <<<"${LEAFID_ZK_ENSEMBLE_PORTS:-2191 2192 2193}"
password=leafid

log() { echo "services: $*" >&2; }
die() {
    log "$*"
    exit 1
}

ensure_packages() {
    local missing=()
    command -v mariadbd >/dev/null || missing+=(mariadb-server)
    [ -f /usr/share/java/zookeeper.jar ] || missing+=(zookeeper)
    command -v faketime >/dev/null || missing+=(faketime)
    command -v java >/dev/null || missing+=(default-jre-headless)
    [ ${#missing[@]} -eq 0 ] && return
    log "installing ${missing[*]} from Debian"
    local sudo=""
    [ "$(id -u)" -eq 0 ] || sudo=sudo
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
}

alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

# Waits up to $2 seconds for "$1" (a command) to succeed; dumps $3 (a log) on failure.
wait_for() {
    local check=$1 secs=$2 logfile=$3 i
    for ((i = 0; i < secs * 10; i++)); do
        if eval "$check" >/dev/null 2>&1; then return 0; fi
        sleep 0.1
    done
    log "timed out after ${secs}s waiting for: $check"
    [ -f "$logfile" ] && tail -n 30 "$logfile" >&2
    return 1
}

stop_pid() {
    local pidfile=$1 i
    alive "$pidfile" || {
        rm -f "$pidfile"
        return 0
    }
    local pid
    pid=$(cat "$pidfile")
    kill "$pid" 2>/dev/null || true
    for ((i = 0; i < 150; i++)); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    kill -9 "$pid" 2>/dev/null || true
    while kill -0 "$pid" 2>/dev/null; do sleep 0.05; done
    rm -f "$pidfile"
}

# ---- MariaDB ----
mysql_dir=$svc/mysql
mysql_ok() { mariadb -h127.0.0.1 -P"$mysql_port" -uroot -p"$password" leafid -e 'select 1'; }

start_mysql() {
    if alive "$mysql_dir/pid" && mysql_ok >/dev/null 2>&1; then return; fi
    mkdir -p "$mysql_dir"
    if [ ! -d "$mysql_dir/data/mysql" ]; then
        mariadb-install-db --no-defaults --datadir="$mysql_dir/data" \
            --auth-root-authentication-method=normal >"$mysql_dir/install.log" 2>&1 ||
            die "mariadb-install-db failed; see $mysql_dir/install.log"
    fi
    setsid mariadbd --no-defaults --datadir="$mysql_dir/data" --port="$mysql_port" \
        --bind-address=127.0.0.1 --socket="$mysql_dir/sock" --pid-file="$mysql_dir/pid" \
        --user=root --skip-name-resolve --innodb-buffer-pool-size=64M \
        --max-connections=500 --log-error="$mysql_dir/error.log" </dev/null >/dev/null 2>&1 &
    echo $! >"$mysql_dir/pid"
    wait_for "mariadb-admin --socket=$mysql_dir/sock -uroot -p$password ping || mariadb-admin --socket=$mysql_dir/sock -uroot ping" 60 "$mysql_dir/error.log"
    if [ ! -f "$mysql_dir/initialized" ]; then
        mariadb --socket="$mysql_dir/sock" -uroot <<SQL
ALTER USER 'root'@'localhost' IDENTIFIED BY '$password';
CREATE USER IF NOT EXISTS 'root'@'127.0.0.1';
ALTER USER 'root'@'127.0.0.1' IDENTIFIED BY '$password';
GRANT ALL ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION;
CREATE DATABASE IF NOT EXISTS leafid;
SQL
        touch "$mysql_dir/initialized"
    fi
    wait_for mysql_ok 30 "$mysql_dir/error.log"
    log "MariaDB on 127.0.0.1:$mysql_port"
}

stop_mysql() { stop_pid "$mysql_dir/pid"; }

# ---- ZooKeeper ----
# Sends a four-letter word to a ZooKeeper port and prints the answer.
zk_ask() {
    local port=$1 word=$2
    exec 3<>"/dev/tcp/127.0.0.1/$port" || return 1
    printf '%s' "$word" >&3
    timeout 2 cat <&3
    exec 3<&-
}

zk_config() {
    local dir=$1 port=$2
    mkdir -p "$dir/data"
    cat >"$dir/zoo.cfg" <<CFG
tickTime=500
initLimit=20
syncLimit=10
dataDir=$dir/data
clientPort=$port
clientPortAddress=127.0.0.1
admin.enableServer=false
4lw.commands.whitelist=ruok,srvr,stat,mntr
minSessionTimeout=1000
maxSessionTimeout=60000
CFG
    cp /etc/zookeeper/conf/log4j.properties "$dir/" 2>/dev/null || true
}

zk_launch() {
    local dir=$1
    setsid java -Xmx192m -Dzookeeper.log.dir="$dir" -Dzookeeper.root.logger=INFO,CONSOLE \
        -cp "/usr/share/java/*:$dir" org.apache.zookeeper.server.quorum.QuorumPeerMain \
        "$dir/zoo.cfg" </dev/null >"$dir/zk.log" 2>&1 &
    echo $! >"$dir/pid"
}

start_zookeeper() {
    local dir=$svc/zk
    if alive "$dir/pid" && zk_ask "$zk_port" ruok 2>/dev/null | grep -q imok; then return; fi
    zk_config "$dir" "$zk_port"
    zk_launch "$dir"
    wait_for "zk_ask $zk_port srvr | grep -q 'Mode: standalone'" 60 "$dir/zk.log"
    log "ZooKeeper on 127.0.0.1:$zk_port"
}

stop_zookeeper() { stop_pid "$svc/zk/pid"; }

ens_dir() { echo "$svc/zk-ensemble-$1"; }

start_node() {
    local n=$1 port=${ens_ports[$(($1 - 1))]} dir i
    dir=$(ens_dir "$n")
    if alive "$dir/pid"; then return; fi
    zk_config "$dir" "$port"
    for i in 1 2 3; do
        local p=${ens_ports[$((i - 1))]}
        echo "server.$i=127.0.0.1:$((p + 700)):$((p + 1700))" >>"$dir/zoo.cfg"
    done
    echo "$n" >"$dir/data/myid"
    zk_launch "$dir"
}

node_serving() { zk_ask "${ens_ports[$(($1 - 1))]}" srvr 2>/dev/null | grep -qE 'Mode: (leader|follower)'; }

start_ensemble() {
    local n
    for n in 1 2 3; do start_node "$n"; done
    for n in 1 2 3; do wait_for "node_serving $n" 90 "$(ens_dir "$n")/zk.log"; done
    log "ZooKeeper ensemble on $(ensemble_hosts)"
}

stop_ensemble() {
    local n
    for n in 1 2 3; do stop_pid "$(ens_dir "$n")/pid"; done
}

ensemble_hosts() {
    local p out=""
    for p in "${ens_ports[@]}"; do out+="${out:+,}127.0.0.1:$p"; done
    echo "$out"
}

write_env() {
    mkdir -p "$svc"
    cat >"$svc/env" <<ENV
export LEAFID_SERVICES_DIR=$svc
export LEAFID_MYSQL_PORT=$mysql_port
export LEAFID_MYSQL_URL=mysql://root:$password@127.0.0.1:$mysql_port/leafid
export LEAFID_ZK_PORT=$zk_port
export LEAFID_ZK=127.0.0.1:$zk_port
export LEAFID_ZK_ENSEMBLE=$(ensemble_hosts)
ENV
    cat "$svc/env"
}

status() {
    local n
    if alive "$mysql_dir/pid" && mysql_ok >/dev/null 2>&1; then echo "mysql: up (127.0.0.1:$mysql_port)"; else echo "mysql: down"; fi
    if zk_ask "$zk_port" ruok 2>/dev/null | grep -q imok; then echo "zookeeper: up (127.0.0.1:$zk_port)"; else echo "zookeeper: down"; fi
    for n in 1 2 3; do
        if node_serving "$n"; then echo "ensemble node $n: up"; else echo "ensemble node $n: down"; fi
    done
}

cmd=${1:-start}
which=${2:-all}
case "$cmd" in
start)
    ensure_packages
    case "$which" in
    mysql) start_mysql ;;
    zookeeper) start_zookeeper ;;
    ensemble) start_ensemble ;;
    all)
        start_mysql
        start_zookeeper
        start_ensemble
        ;;
    *) die "unknown service '$which' (mysql|zookeeper|ensemble|all)" ;;
    esac
    write_env
    ;;
stop)
    case "$which" in
    mysql) stop_mysql ;;
    zookeeper) stop_zookeeper ;;
    ensemble) stop_ensemble ;;
    all)
        stop_mysql
        stop_zookeeper
        stop_ensemble
        ;;
    *) die "unknown service '$which' (mysql|zookeeper|ensemble|all)" ;;
    esac
    if [ "${3:-}" = "--purge" ]; then rm -rf "$svc"; fi
    ;;
restart)
    "$0" stop "$which"
    "$0" start "$which"
    ;;
stop-node) stop_pid "$(ens_dir "${2:?node number 1..3}")/pid" ;;
start-node)
    start_node "${2:?node number 1..3}"
    wait_for "node_serving $2" 90 "$(ens_dir "$2")/zk.log"
    ;;
status) status ;;
env) write_env ;;
clean)
    "$0" stop all
    rm -rf "$svc"
    ;;
*) die "usage: services.sh start|stop|restart|stop-node N|start-node N|status|env|clean [which]" ;;
esac
