#!/usr/bin/env bash
# The Fluvio MySQL CDC tutorial, end to end on the embedded topic:
# leader on 3080, follower on 3090, cdc-producer and cdc-consumer, the tutorial's SQL,
# then the follower's pet table and the events on the topic. Everything lives in ./demo.
set -euo pipefail
cd "$(dirname "$0")"
scripts/setup.sh
here=$(pwd); demo=$here/demo; bin=$here/.venv/bin
export CDC_LEADER_PASSWORD='fluvio4cdc!' CDC_FOLLOWER_PASSWORD='fluvio4cdc!'

cleanup() {
  [ -n "${producer:-}" ] && kill "$producer" 2>/dev/null || true
  [ -n "${consumer:-}" ] && kill "$consumer" 2>/dev/null || true
  wait 2>/dev/null || true
  docker/install.sh -d "$demo/leader" --stop >/dev/null 2>&1 || true
  docker/install.sh -d "$demo/follower" --stop >/dev/null 2>&1 || true
}
trap cleanup EXIT
cleanup; rm -rf "$demo"; mkdir -p "$demo"

docker/install.sh -n mysql-producer -d "$demo/leader" -p 3080 --local
docker/install.sh -n mysql-consumer -d "$demo/follower" -p 3090 --local

# The example profiles, pointed at ./demo instead of ~/mysql-cdc.
sed -e "s|~/mysql-cdc|$demo|" profiles/producer_profile.toml > "$demo/producer_profile.toml"
sed -e "s|~/mysql-cdc|$demo|" profiles/consumer_profile.toml > "$demo/consumer_profile.toml"

"$bin/cdc-producer" "$demo/producer_profile.toml" 2> "$demo/producer.log" & producer=$!
until grep -q "streaming from" "$demo/producer.log"; do
  kill -0 $producer 2>/dev/null || { cat "$demo/producer.log"; exit 1; }; sleep 0.1
done
"$bin/cdc-consumer" "$demo/consumer_profile.toml" 2> "$demo/consumer.log" & consumer=$!
until grep -q "applying topic" "$demo/consumer.log"; do
  kill -0 $consumer 2>/dev/null || { cat "$demo/consumer.log"; exit 1; }; sleep 0.1
done
cat "$demo/producer.log" "$demo/consumer.log"

echo; echo "== leader: the tutorial's statements"
sed 's/^/  /' tests/sql/tutorial.sql
mariadb -h127.0.0.1 -P3080 -ufluvio -p"$CDC_LEADER_PASSWORD" < tests/sql/tutorial.sql

leader_gtid=$(mariadb -h127.0.0.1 -P3080 -ufluvio -p"$CDC_LEADER_PASSWORD" -N -e 'SELECT @@gtid_binlog_pos')
for _ in $(seq 1 300); do   # until the follower's checkpoint holds the leader's last transaction
  applied=$(mariadb -h127.0.0.1 -P3090 -ufluvio -p"$CDC_FOLLOWER_PASSWORD" -N \
    -e "SELECT position FROM mysql_cdc.consumer_offsets WHERE topic='rust-mysql-cdc'" 2>/dev/null || true)
  [ "$applied" = "$leader_gtid" ] && break; sleep 0.1
done
[ "$applied" = "$leader_gtid" ] || { echo "the follower did not catch up; see $demo/*.log" >&2; exit 1; }

echo; echo "== follower: SELECT * FROM flvDb.pet"
mariadb -h127.0.0.1 -P3090 -ufluvio -p"$CDC_FOLLOWER_PASSWORD" -t -e 'SELECT * FROM flvDb.pet'
echo; echo "== topic: cdc-topic consume rust-mysql-cdc -B -d"
"$bin/cdc-topic" consume rust-mysql-cdc -B -d --path "$demo/stream"
