#!/usr/bin/env bash
# A packaged relay for another architecture, run under qemu user-mode as far as this machine can:
# the packaged binary on the packaged conffile's destination (Traccar's OsmAnd port on
# 127.0.0.1:5055), with the spool and socket moved into WORK. One position goes in through the
# socket and must be answered `ok 1`, then reach a fake Traccar; SIGTERM must stop the relay
# cleanly. Run by check-deb.sh inside `unshare --net`, so the loopback and its port are this
# test's own.
#
#   Tests/Package/emulated-relay.sh EXTRACTED_PACKAGE WORK RUNNER...   (WORK: a new directory)
set -euo pipefail

x=$1
work=$2
shift 2
runner=("$@")
repo=$(cd "$(dirname "$0")/../.." && pwd)
fail() { echo "emulated-relay: FAIL: $*" >&2; exit 1; }

[ "$(readlink -f /proc/self/ns/net)" != "$(readlink -f /proc/1/ns/net)" ] ||
	fail "not in a network namespace of its own: run me through check-deb.sh"
mkdir "$work" # fails if it exists
ip link set lo up

relay=
server=
trap 'kill -KILL $relay $server 2>/dev/null || true' EXIT

# The packaged conffile with only the paths moved: what a user's relay reads, destination included.
conffile=$x/etc/georelay/georelay.json5
grep -q '"/var/lib/georelay/georelay.db"' "$conffile" && grep -q '"/run/georelay/georelay.sock"' "$conffile" ||
	fail "the packaged conffile's spool or socket is not where this test moves it from"
sed -e "s|/var/lib/georelay/georelay.db|$work/georelay.db|" -e "s|/run/georelay/georelay.sock|$work/georelay.sock|" \
	"$conffile" >"$work/georelay.json5"

python3 "$repo/Tests/Package/fake-traccar.py" 5055 "$work/traccar.log" &
server=$!
for _ in $(seq 1 50); do # listening within 5 s
	python3 -c 'import socket; socket.create_connection(("127.0.0.1", 5055), 1)' 2>/dev/null && break
	sleep 0.1
done
python3 -c 'import socket; socket.create_connection(("127.0.0.1", 5055), 1)' 2>/dev/null ||
	fail "the fake Traccar did not listen on 127.0.0.1:5055 within 5 s"

env -i LD_LIBRARY_PATH= "${runner[@]}" "$x/usr/bin/georelay" run --config "$work/georelay.json5" >"$work/relay.log" 2>&1 &
relay=$!
for _ in $(seq 1 300); do # the socket within 30 s (emulated start-up is slower)
	[ -S "$work/georelay.sock" ] && break
	kill -0 "$relay" 2>/dev/null || fail "the relay exited before listening:"$'\n'"$(cat "$work/relay.log")"
	sleep 0.1
done
[ -S "$work/georelay.sock" ] || fail "no socket after 30 s:"$'\n'"$(cat "$work/relay.log")"

reply=$(printf '%s\n%s\n' '{"hello":{"device":"gps-bow","ack":true}}' '{"time":"2026-07-25T04:30:00Z","lat":59.91,"lon":10.75}' |
	timeout 20 socat -t 10 - "UNIX-CONNECT:$work/georelay.sock") || fail "socat to the relay's socket failed:"$'\n'"$(cat "$work/relay.log")"
[ "$(grep '^ok' <<<"$reply")" = "ok 1" ] || fail "the relay answered '$reply', not 'ok 1'"

for _ in $(seq 1 300); do # delivered within 30 s
	[ -s "$work/traccar.log" ] && break
	sleep 0.1
done
[ "$(cat "$work/traccar.log" 2>/dev/null)" = "gps-bow 1784953800" ] ||
	fail "the fake Traccar has '$(cat "$work/traccar.log" 2>/dev/null)', not gps-bow's position:"$'\n'"$(cat "$work/relay.log")"

kill -TERM "$relay"
for _ in $(seq 1 100); do # stopped within 10 s
	kill -0 "$relay" 2>/dev/null || break
	sleep 0.1
done
kill -0 "$relay" 2>/dev/null && fail "the relay did not stop within 10 s of SIGTERM"
wait "$relay" || fail "the relay exited $? on SIGTERM:"$'\n'"$(cat "$work/relay.log")"
relay=
echo "emulated-relay: ${runner[*]}: 'ok 1', delivered to the fake Traccar, clean stop on SIGTERM"
