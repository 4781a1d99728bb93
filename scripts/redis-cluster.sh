#!/usr/bin/env bash
# A throw-away Redis Cluster of local redis-server processes, for tests and
# trials (no persistence, 127.0.0.1 only).
#
#   scripts/redis-cluster.sh start --dir DIR --port BASE [--primaries N] \
#       [--replicas R] [--node-timeout MS] [--tls CERTS]
#   scripts/redis-cluster.sh stop --dir DIR
#
# start runs N*(1+R) nodes (N defaults to 3, at least 3; R, the replicas per
# primary, to 0) on ports BASE..BASE+N*(1+R)-1, their cluster bus on port +
# 10000, each with its config (redis.conf), pidfile and log in DIR/<port>/; joins them with
# `redis-cli --cluster create` (the first N ports become the primaries); waits
# (at most about 20 s) until every node says cluster_state:ok, covers all
# 16384 slots and knows every other node in its role, every replica's link to
# its primary is up, and a write to each primary reaches all its replicas
# (WAIT; the probe key, redis-cluster.sh:probe:<n>, is deleted again); then
# prints one seed URL per node on stdout, redis://127.0.0.1:<port>.
# Diagnostics go to stderr. It refuses to start when one of the ports (or bus
# ports) already answers.
#
# --tls CERTS: the nodes speak TLS only (clients, the cluster bus and
# replication), with CERTS/server.pem and server.key (for 127.0.0.1, also
# presented to other nodes, so usable as a client certificate), checked
# against CERTS/ca.pem, and check clients' certificates (Redis's default);
# the script's own redis-cli calls present CERTS/client.pem and client.key.
# The seed URLs are then rediss://.
#
# --cluster-node-timeout (--node-timeout, 2000 ms by default rather than
# Redis's 15000) is how long a node may be unreachable before it is marked
# failed, so it bounds how soon a replica takes over after kill -9 of its
# primary. cluster-replica-validity-factor stays at Redis's default (10): a
# replica's data age counts from when its link to the primary went down, so a
# replica that has synced is eligible at once when its primary dies, while 0
# would also let a replica that never synced win an election and serve an
# empty data set.
#
# repl-diskless-sync-delay is 0 (Redis waits 5 s by default for more replicas
# to share a transfer), so a replica's first sync does not add 5 s to start.
#
# stop SIGKILLs every redis-server whose pidfile is under DIR, waits for them
# to be gone, and removes DIR (only a DIR this script made: it holds a marker
# file).
set -euo pipefail

marker=.switchboard-redis-cluster

usage() {
    sed -n '5,7p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
}

die() {
    echo "redis-cluster.sh: $*" >&2
    exit 1
}

# Whether something accepts TCP connections on 127.0.0.1:$1 (bash's /dev/tcp).
port_answers() {
    { exec 3<>"/dev/tcp/127.0.0.1/$1"; } 2>/dev/null || return 1
    exec 3<&- 3>&-
    return 0
}

# The value of NAME in $2, the text of CLUSTER INFO or INFO (name:value lines).
field() {
    local line
    while IFS= read -r line; do
        line="${line%$'\r'}"
        if [[ "$line" == "$1:"* ]]; then
            echo "${line#"$1:"}"
            return 0
        fi
    done <<<"$2"
}

# A key in a slot primary $1 serves, for replicated's probe.
own_key() {
    local port="$1" ranges range i key slot
    mapfile -t ranges < <(cli -p "$port" cluster nodes 2>/dev/null \
        | awk '/myself/ { for (i = 9; i <= NF; i++) print $i }' | tr -d '\r')
    for ((i = 0; i < 1000; i++)); do
        key="redis-cluster.sh:probe:$i"
        slot="$(cli -p "$port" cluster keyslot "$key" 2>/dev/null)" || return 1
        is_uint "$slot" || return 1
        for range in "${ranges[@]}"; do
            # Single slots and lo-hi ranges; skip [slot->-node] migrations.
            [[ "$range" != "["* ]] || continue
            if ((slot >= ${range%-*} && slot <= ${range#*-})); then
                echo "$key"
                return 0
            fi
        done
    done
    return 1
}

# Whether a write to primary $1 (key $2, expiring, deleted again) is
# acknowledged by its $3 replicas within 0.2 s (WAIT).
replicated() {
    local reply
    reply="$(printf 'SET %s 1 PX 5000\nWAIT %s 200\nDEL %s\n' "$2" "$3" "$2" \
        | cli -p "$1" 2>/dev/null)" || return 1
    [[ "$(sed -n 2p <<<"$reply")" == "$3" ]]
}

is_uint() {
    [[ "$1" =~ ^[0-9]+$ ]]
}

# redis-cli, over TLS when --tls gave certificates (cli_tls).
cli_tls=()
cli() {
    redis-cli "${cli_tls[@]}" "$@"
}

# Whether pid $1 is a running redis-server: a recycled pid belongs to
# something else, and a zombie (killed, not yet reaped by whoever inherited
# the daemon) holds no port any more.
redis_alive() {
    [[ "$(cat "/proc/$1/comm" 2>/dev/null)" == redis-server ]] \
        && ! grep -q '^State:[[:space:]]*Z' "/proc/$1/status" 2>/dev/null
}

# The redis-server pids recorded under $1 that are still running.
live_pids() {
    local pidfile pid
    shopt -s nullglob
    for pidfile in "$1"/*/redis.pid; do
        pid="$(<"$pidfile")"
        if is_uint "$pid" && redis_alive "$pid"; then
            echo "$pid"
        fi
    done
    shopt -u nullglob
}

# The tail of every node's log, for a failure's message.
logs_tail() {
    local log
    shopt -s nullglob
    for log in "$1"/*/redis.log "$1"/create.log; do
        echo "---- $log (last 15 lines)" >&2
        tail -n 15 "$log" >&2
    done
    shopt -u nullglob
}

kill_and_wait() {
    local dir="$1" pids pid
    mapfile -t pids < <(live_pids "$dir")
    ((${#pids[@]})) || return 0
    kill -9 "${pids[@]}" 2>/dev/null || true
    for _ in $(seq 1 100); do
        local alive=0
        for pid in "${pids[@]}"; do
            if redis_alive "$pid"; then
                alive=1
            fi
        done
        ((alive)) || return 0
        sleep 0.1
    done
    die "redis-server processes ${pids[*]} are still alive 10 s after SIGKILL"
}

# Refuses a DIR it did not make or whose nodes still run; removes a stale
# one it made.
clear_dir() {
    local dir="$1"
    [[ -e "$dir" ]] || return 0
    [[ -d "$dir" ]] || die "$dir exists and is not a directory"
    if [[ -z "$(ls -A "$dir")" ]]; then
        rmdir "$dir"
        return 0
    fi
    [[ -f "$dir/$marker" ]] \
        || die "$dir is not empty and was not made by redis-cluster.sh (no $marker): not touching it"
    if [[ -n "$(live_pids "$dir")" ]]; then
        die "redis-server nodes of $dir still run (pids $(live_pids "$dir" | tr '\n' ' ')): stop them first"
    fi
    rm -rf "$dir"
}

cmd_start() {
    local dir="" base="" primaries=3 replicas=0 node_timeout=2000 certs=""
    while (($#)); do
        case "$1" in
            --tls) certs="${2:-}"; shift 2 || usage ;;
            --dir) dir="${2:-}"; shift 2 || usage ;;
            --port) base="${2:-}"; shift 2 || usage ;;
            --primaries) primaries="${2:-}"; shift 2 || usage ;;
            --replicas) replicas="${2:-}"; shift 2 || usage ;;
            --node-timeout) node_timeout="${2:-}"; shift 2 || usage ;;
            *) usage ;;
        esac
    done
    [[ -n "$dir" && -n "$base" ]] || usage
    local number
    for number in "$base" "$primaries" "$replicas" "$node_timeout"; do
        is_uint "$number" || die "--port, --primaries, --replicas and --node-timeout take whole numbers"
    done
    ((primaries >= 3)) || die "redis-cli --cluster create needs at least 3 primaries"
    ((node_timeout > 0)) || die "--node-timeout must be positive"
    command -v redis-server >/dev/null 2>&1 || die "redis-server is not installed"
    command -v redis-cli >/dev/null 2>&1 || die "redis-cli is not installed"
    local scheme=redis
    if [[ -n "$certs" ]]; then
        certs="$(cd "$certs" && pwd)" || die "--tls $certs is not a directory"
        local pem
        for pem in ca.pem server.pem server.key client.pem client.key; do
            [[ -r "$certs/$pem" ]] || die "--tls: $certs/$pem is missing"
        done
        cli_tls=(--tls --cacert "$certs/ca.pem" --cert "$certs/client.pem" --key "$certs/client.key")
        scheme=rediss
    fi

    local total=$((primaries * (1 + replicas)))
    local last=$((base + total - 1))
    ((base >= 1 && last + 10000 <= 65535)) \
        || die "ports $base..$last and their bus ports (+10000) must lie in 1..65535"

    local port ports=()
    for ((port = base; port <= last; port++)); do
        ports+=("$port")
        if port_answers "$port"; then
            die "127.0.0.1:$port already answers: refusing to start a cluster there"
        fi
        if port_answers $((port + 10000)); then
            die "127.0.0.1:$((port + 10000)) (the cluster bus of $port) already answers: refusing to start"
        fi
    done

    clear_dir "$dir"
    mkdir -p "$dir"
    dir="$(cd "$dir" && pwd)"
    : >"$dir/$marker"

    local started=$SECONDS
    echo "starting ${#ports[@]} redis-server nodes on 127.0.0.1:$base-$last in $dir" >&2
    for port in "${ports[@]}"; do
        mkdir -p "$dir/$port"
        # The node's settings in a file of its own, so that starting it
        # again (`redis-server DIR/<port>/redis.conf`, as the failover test
        # does) gives it the same ones.
        if [[ -n "$certs" ]]; then
            cat >"$dir/$port/redis.conf" <<CONF
port 0
tls-port $port
tls-cluster yes
tls-replication yes
tls-cert-file $certs/server.pem
tls-key-file $certs/server.key
tls-ca-cert-file $certs/ca.pem
CONF
        else
            echo "port $port" >"$dir/$port/redis.conf"
        fi
        cat >>"$dir/$port/redis.conf" <<CONF
bind 127.0.0.1
cluster-enabled yes
cluster-config-file $dir/$port/nodes.conf
cluster-node-timeout $node_timeout
dir $dir/$port
save ""
appendonly no
repl-diskless-sync-delay 0
daemonize yes
pidfile $dir/$port/redis.pid
logfile $dir/$port/redis.log
CONF
        redis-server "$dir/$port/redis.conf" >/dev/null \
            || { logs_tail "$dir"; die "redis-server on port $port did not start"; }
    done

    local pending
    for _ in $(seq 1 100); do
        pending=()
        for port in "${ports[@]}"; do
            [[ "$(cli -p "$port" ping 2>/dev/null)" == PONG ]] || pending+=("$port")
        done
        ((${#pending[@]})) || break
        sleep 0.1
    done
    if ((${#pending[@]})); then
        logs_tail "$dir"
        die "nodes ${pending[*]} did not answer PING within 10 s"
    fi

    local addresses=()
    for port in "${ports[@]}"; do
        addresses+=("127.0.0.1:$port")
    done
    # redis-cli waits for the nodes to agree with no deadline of its own.
    if ! timeout 30 redis-cli "${cli_tls[@]}" --cluster create "${addresses[@]}" \
        --cluster-replicas "$replicas" --cluster-yes >"$dir/create.log" 2>&1; then
        logs_tail "$dir"
        die "redis-cli --cluster create failed (its output: $dir/create.log)"
    fi

    # Bounded wait for every node's view: state ok, every slot served, every
    # node known and every replica known as one, each replica's link to its
    # primary up, and a write to each primary acknowledged by all its
    # replicas. (A replica's link is up once it has loaded the primary's RDB,
    # but the primary streams writes to it only after the replica's next
    # REPLCONF ACK, up to a second later: a write acknowledged before that is
    # lost if the primary dies.)
    local info replication deadline=$((SECONDS + 20))
    local -A streaming=() probe_key=()
    while :; do
        pending=()
        for port in "${ports[@]}"; do
            info="$(cli -p "$port" cluster info 2>/dev/null)" || true
            if [[ "$(field cluster_state "$info")" != ok \
                || "$(field cluster_slots_ok "$info")" != 16384 \
                || "$(field cluster_known_nodes "$info")" != "$total" ]]; then
                pending+=("$port")
                continue
            fi
            # Its view of the roles, which gossip spreads: every replica as
            # one (a primary votes only for a replica it knows as one).
            if [[ "$(cli -p "$port" cluster nodes 2>/dev/null | grep -c ' [a-z,]*slave')" \
                != $((primaries * replicas)) ]]; then
                pending+=("$port")
                continue
            fi
            replication="$(cli -p "$port" info replication 2>/dev/null)" || true
            case "$(field role "$replication")" in
                slave)
                    [[ "$(field master_link_status "$replication")" == up ]] || pending+=("$port")
                    ;;
                master)
                    if ((replicas == 0)) || [[ -n "${streaming[$port]:-}" ]]; then
                        continue
                    fi
                    if [[ -z "${probe_key[$port]:-}" ]]; then
                        probe_key[$port]="$(own_key "$port")" || { pending+=("$port"); continue; }
                    fi
                    if replicated "$port" "${probe_key[$port]}" "$replicas"; then
                        streaming[$port]=1
                    else
                        pending+=("$port")
                    fi
                    ;;
                *) pending+=("$port") ;;
            esac
        done
        ((${#pending[@]} && SECONDS < deadline)) || break
        sleep 0.1
    done
    if ((${#pending[@]})); then
        for port in "${pending[@]}"; do
            echo "---- 127.0.0.1:$port cluster info" >&2
            cli -p "$port" cluster info 2>&1 | tr -d '\r' | head -n 8 >&2 || true
        done
        logs_tail "$dir"
        die "nodes ${pending[*]} were not ready within 20 s (cluster_state:ok," \
            "16384 slots, $total nodes known in their roles, writes reaching every replica)"
    fi

    local summary="primaries on ${ports[*]:0:primaries}"
    ((replicas == 0)) || summary+=", replicas on ${ports[*]:primaries}"
    echo "cluster ready $((SECONDS - started)) s after start: $summary" >&2
    for port in "${ports[@]}"; do
        echo "$scheme://127.0.0.1:$port"
    done
}

cmd_stop() {
    local dir=""
    while (($#)); do
        case "$1" in
            --dir) dir="${2:-}"; shift 2 || usage ;;
            *) usage ;;
        esac
    done
    [[ -n "$dir" ]] || usage
    if [[ ! -e "$dir" ]]; then
        echo "redis-cluster.sh: $dir does not exist: nothing to stop" >&2
        return 0
    fi
    [[ -f "$dir/$marker" ]] \
        || die "$dir was not made by redis-cluster.sh (no $marker): not touching it"
    local count
    count="$(live_pids "$dir" | wc -l)"
    kill_and_wait "$dir"
    rm -rf "$dir"
    echo "stopped $count redis-server nodes and removed $dir" >&2
}

case "${1:-}" in
    start) shift; cmd_start "$@" ;;
    stop) shift; cmd_stop "$@" ;;
    *) usage ;;
esac
