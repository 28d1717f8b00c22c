#!/usr/bin/env bash
# Start a MySQL-compatible server configured for CDC, with the tutorial's flags:
#   docker/install.sh -n NAME -d DIR -p PORT [-i SERVER_ID] [--local]
#   docker/install.sh -d DIR --stop
# Uses Docker when a Docker engine answers (and --local is not given), otherwise a
# local mariadbd (or mysqld) with its data in DIR. Either way the server has binlog
# ROW / row image FULL / row metadata FULL, GTIDs, a unique server id, and the
# tutorial's user fluvio / fluvio4cdc! with what producer and consumer need (BINLOG REPLAY: the
# consumer replays rows exactly as a native replica; MariaDB 10.5.2+).
set -euo pipefail

name=mysql-cdc; dir=; port=3306; server_id=; local_only=0; stop=0
usage() { echo "usage: $0 -n NAME -d DIR -p PORT [-i SERVER_ID] [--local] | $0 -d DIR --stop" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    -n) name=$2; shift 2;;
    -d) dir=$2; shift 2;;
    -p) port=$2; shift 2;;
    -i) server_id=$2; shift 2;;
    --local) local_only=1; shift;;
    --stop) stop=1; shift;;
    -h|--help) usage;;
    *) echo "unknown option $1" >&2; usage;;
  esac
done
[ -n "$dir" ] || usage
mkdir -p "$dir"; dir=$(cd "$dir" && pwd)
server_id=${server_id:-$((port % 100000 + 1))}   # distinct ports give distinct server ids

SETUP_SQL="
CREATE USER IF NOT EXISTS 'root'@'127.0.0.1';
GRANT ALL PRIVILEGES ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION;
CREATE USER IF NOT EXISTS 'fluvio'@'%' IDENTIFIED BY 'fluvio4cdc!';
CREATE USER IF NOT EXISTS 'fluvio'@'localhost' IDENTIFIED BY 'fluvio4cdc!';
GRANT SELECT, RELOAD, REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO 'fluvio'@'%', 'fluvio'@'localhost';
GRANT ALL PRIVILEGES ON \`flvDb%\`.* TO 'fluvio'@'%', 'fluvio'@'localhost';
GRANT ALL PRIVILEGES ON \`mysql_cdc\`.* TO 'fluvio'@'%', 'fluvio'@'localhost';
GRANT BINLOG REPLAY ON *.* TO 'fluvio'@'%', 'fluvio'@'localhost';
FLUSH PRIVILEGES;"

docker_ok() { [ "$local_only" = 0 ] && command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; }

if [ "$stop" = 1 ]; then
  if [ -f "$dir/docker.name" ]; then docker rm -f "$(cat "$dir/docker.name")" >/dev/null; rm -f "$dir/docker.name"; fi
  if [ -f "$dir/mysqld.pid" ]; then
    pid=$(cat "$dir/mysqld.pid"); kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    rm -f "$dir/mysqld.pid"
  fi
  echo "stopped server in $dir"; exit 0
fi

if docker_ok; then
  docker run -d --name "$name" -p "$port:3306" -v "$dir/data:/var/lib/mysql" \
    -e MARIADB_ROOT_PASSWORD=root mariadb:11 \
    --server-id="$server_id" --log-bin=binlog --binlog-format=ROW --binlog-row-image=FULL \
    --binlog-row-metadata=FULL >/dev/null
  echo "$name" > "$dir/docker.name"
  for _ in $(seq 1 600); do docker exec "$name" mariadb -uroot -proot -e 'SELECT 1' >/dev/null 2>&1 && break; sleep 0.1; done
  docker exec "$name" mariadb -uroot -proot -e "$SETUP_SQL"
  echo "started $name (docker, server id $server_id) on 127.0.0.1:$port"; exit 0
fi

server=$(command -v mariadbd || command -v mysqld || ls /usr/sbin/mariadbd /usr/sbin/mysqld 2>/dev/null | head -n1 || true)
if [ -z "$server" ]; then
  echo "error: neither Docker nor a local MariaDB/MySQL server was found; install one: sudo apt-get install mariadb-server (Debian/Ubuntu) or start Docker" >&2
  exit 3
fi
client=$(command -v mariadb || command -v mysql)
user_opt=(); [ "$(id -u)" = 0 ] && user_opt=(--user=root)   # mariadbd refuses to run as root otherwise

if [ -f "$dir/mysqld.pid" ] && kill -0 "$(cat "$dir/mysqld.pid")" 2>/dev/null; then
  echo "server already running in $dir"; exit 0
fi
if [ ! -d "$dir/data/mysql" ]; then
  installer=$(command -v mariadb-install-db || command -v mysql_install_db)
  "$installer" --no-defaults --datadir="$dir/data" "${user_opt[@]}" --auth-root-authentication-method=normal \
    --skip-test-db > "$dir/install.log" 2>&1 || { echo "error: initialising $dir/data failed, see $dir/install.log" >&2; exit 1; }
fi
"$server" --no-defaults --datadir="$dir/data" --port="$port" --bind-address=127.0.0.1 \
  --socket="$dir/mysqld.sock" --pid-file="$dir/mysqld.pid" --log-error="$dir/error.log" "${user_opt[@]}" \
  --server-id="$server_id" --log-bin="$dir/data/binlog" --binlog-format=ROW --binlog-row-image=FULL \
  --binlog-row-metadata=FULL --gtid-strict-mode=ON --character-set-server=utf8mb4 \
  --innodb-buffer-pool-size=64M --innodb-log-file-size=48M --max-allowed-packet=1G \
  --skip-name-resolve=0 ${CDC_MARIADB_ARGS:-} > /dev/null 2>&1 &
for _ in $(seq 1 600); do
  "$client" --no-defaults -uroot --socket="$dir/mysqld.sock" -e 'SELECT 1' >/dev/null 2>&1 && break
  if ! kill -0 $! 2>/dev/null; then echo "error: the server did not start, see $dir/error.log" >&2; tail -n 5 "$dir/error.log" >&2; exit 1; fi
  sleep 0.1
done
"$client" --no-defaults -uroot --socket="$dir/mysqld.sock" -e "$SETUP_SQL"
echo "started $name (local $(basename "$server"), server id $server_id) on 127.0.0.1:$port, data in $dir"
