#!/usr/bin/env bash
# The package's life in a throwaway root: install, the relay run as its user, upgrade with an edited
# conffile, remove, purge. Run by check-deb.sh inside `unshare --mount --net`: every mount below
# is private to this process and goes with it, and the root's /usr, /etc and /var/lib/dpkg are
# overlays whose writes land in ROOT's upper directories, never on this machine. dpkg --root runs
# the maintainer scripts chrooted there; no systemd runs in it (no /run/systemd/system), so the
# scripts take the path of a chroot or an image build: enable the unit, start nothing.
#
#   Tests/Package/throwaway-root.sh PACKAGE.deb ROOT   (ROOT: a new directory)
set -euo pipefail

deb=$1
base=$2
repo=$(cd "$(dirname "$0")/../.." && pwd)
fail() { echo "throwaway-root: FAIL: $*" >&2; exit 1; }
say() { echo "throwaway-root: $*"; }

[ "$(readlink -f /proc/self/ns/mnt)" != "$(readlink -f /proc/1/ns/mnt)" ] ||
	fail "not in a private mount namespace: run me through check-deb.sh"
mkdir "$base" # fails if it exists: never reuse or point at a live tree
root=$base/root
mkdir -p "$root" "$base/upper" "$base/overlay-work"

overlay() { # overlay HOST_DIR: ROOT/HOST_DIR shows HOST_DIR, writes go to the upper directory
	local dir=$1 name=${1//\//_}
	mkdir -p "$root$dir" "$base/upper/$name" "$base/overlay-work/$name"
	mount -t overlay overlay -o "lowerdir=$dir,upperdir=$base/upper/$name,workdir=$base/overlay-work/$name" "$root$dir"
}
overlay /usr
overlay /etc
overlay /var/lib/dpkg
for top in bin sbin lib lib32 lib64 libx32; do
	if [ -L "/$top" ]; then
		ln -s "$(readlink "/$top")" "$root/$top"
	elif [ -d "/$top" ]; then
		overlay "/$top"
	fi
done
mkdir -p "$root/proc" "$root/dev" "$root/tmp" "$root/run" "$root/var/lib/systemd" "$root/var/log" "$root/var/cache"
chmod 1777 "$root/tmp"
touch "$root/dev/null"
mount --bind /dev/null "$root/dev/null"
# The Swift runtime reads the command line from /proc/self/cmdline: without /proc, no arguments.
mount -t proc proc "$root/proc"
[ ! -e "$root/opt" ] || fail "the root has /opt: the Swift toolchain would be reachable"

in_root() { chroot "$root" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LD_LIBRARY_PATH= "$@"; }
as_georelay() { chroot --userspec=georelay:georelay "$root" env -i PATH=/usr/bin:/bin LD_LIBRARY_PATH= "$@"; }
dpkg_root() {
	local log=$base/dpkg.log
	dpkg --root="$root" "$@" </dev/null >"$log" 2>&1 || fail "dpkg --root $*:"$'\n'"$(cat "$log")"
}
mode_of() { in_root stat -c '%U:%G %a' "$1"; }
version_of() { dpkg-query --admindir="$root/var/lib/dpkg" -W -f '${Status} ${Version}' georelay 2>/dev/null || true; }

# Install.
dpkg_root -i "$deb"
version=$(dpkg-deb --field "$deb" Version)
[ "$(version_of)" = "install ok installed $version" ] || fail "after install dpkg says '$(version_of)'"
passwd=$(in_root getent passwd georelay) || fail "postinst created no user georelay"
uid=$(cut -d: -f3 <<<"$passwd")
[ "$uid" -lt 1000 ] || fail "georelay has uid $uid, not a system uid"
in_root getent group georelay >/dev/null || fail "postinst created no group georelay"
[ "$(mode_of /var/lib/georelay)" = "georelay:georelay 700" ] || fail "/var/lib/georelay is $(mode_of /var/lib/georelay)"
[ "$(mode_of /etc/georelay/georelay.json5)" = "root:georelay 640" ] ||
	fail "the conffile is $(mode_of /etc/georelay/georelay.json5), not root:georelay 640"
link=$root/etc/systemd/system/multi-user.target.wants/georelay.service
# deb-systemd-helper of Debian 12 links through /lib, the same directory as /usr/lib on merged /usr.
case $(readlink "$link") in
	/lib/systemd/system/georelay.service | /usr/lib/systemd/system/georelay.service) ;;
	*) fail "postinst did not enable the unit: $link is '$(readlink "$link")'" ;;
esac
say "installed: user georelay (uid $uid), /var/lib/georelay georelay 0700, conffile root:georelay 0640, unit enabled"

# The relay as the unit runs it (user georelay, the conffile, the runtime directory systemd would
# make), with no Swift toolchain in the root.
install -d -m 0750 "$root/run/georelay"
in_root chown georelay:georelay /run/georelay
relay=
# Whatever fails below, neither the relay nor the fake server outlives the test.
server=
trap 'kill -KILL $relay $server 2>/dev/null || true' EXIT
start_relay() {
	rm -f "$root/run/georelay/georelay.sock"
	# chroot and env exec, so $! is the relay itself.
	chroot --userspec=georelay:georelay "$root" env -i PATH=/usr/bin:/bin LD_LIBRARY_PATH= \
		/usr/bin/georelay run --config /etc/georelay/georelay.json5 >>"$base/relay.log" 2>&1 &
	relay=$!
	for _ in $(seq 1 100); do # the socket within 10 s
		[ -S "$root/run/georelay/georelay.sock" ] && return 0
		kill -0 "$relay" 2>/dev/null || fail "the relay exited before listening:"$'\n'"$(cat "$base/relay.log")"
		sleep 0.1
	done
	fail "no socket in /run/georelay after 10 s:"$'\n'"$(cat "$base/relay.log")"
}
stop_relay() { # SIGTERM, as systemd stops it: within 10 s (the unit allows 15), exit status 0
	kill -TERM "$relay"
	for _ in $(seq 1 100); do
		kill -0 "$relay" 2>/dev/null || break
		sleep 0.1
	done
	if kill -0 "$relay" 2>/dev/null; then
		kill -KILL "$relay"
		fail "the relay did not stop within 10 s of SIGTERM"
	fi
	wait "$relay" || fail "the relay exited $? on SIGTERM:"$'\n'"$(cat "$base/relay.log")"
	relay=
}
# Positions FIRST..LAST of device gps-bow, 400 s and 1.1 km apart (past the default filter's 300 s
# and 75 m), written the way a collector does; each must be answered ok.
send_positions() {
	local first=$1 last=$2 k lines="" reply
	for k in $(seq "$first" "$last"); do
		lines="$lines$(printf '{"time":"%s","lat":%s,"lon":10.75}' \
			"$(date -u -d @$((1784953800 + k * 400)) +%Y-%m-%dT%H:%M:%SZ)" "$(awk -v k="$k" 'BEGIN { printf "%.2f", 59.91 + k / 100 }')")"$'\n'
	done
	reply=$(printf '%s\n%s' '{"hello":{"device":"gps-bow","ack":true}}' "$lines" |
		as_georelay timeout 10 socat -t 5 - UNIX-CONNECT:/run/georelay/georelay.sock) ||
		fail "socat to the relay's socket failed:"$'\n'"$(cat "$base/relay.log")"
	[ "$(grep -c '^ok ' <<<"$reply")" = $((last - first + 1)) ] ||
		fail "the relay answered '$reply' to positions $first-$last"
}
start_server() { # Traccar's OsmAnd port where the packaged conffile sends (127.0.0.1:5055)
	python3 "$repo/Tests/Package/fake-traccar.py" 5055 "$base/traccar.log" &
	server=$!
	for _ in $(seq 1 50); do # listening within 5 s
		python3 -c 'import socket; socket.create_connection(("127.0.0.1", 5055), 1)' 2>/dev/null && return 0
		sleep 0.1
	done
	fail "the fake Traccar did not listen on 127.0.0.1:5055 within 5 s"
}
stop_server() { kill "$server"; wait "$server" 2>/dev/null || true; server=; }
delivered() { [ -f "$base/traccar.log" ] && wc -l <"$base/traccar.log" || echo 0; }
await_delivered() { # N positions at the fake Traccar within 30 s
	for _ in $(seq 1 300); do
		[ "$(delivered)" -ge "$1" ] && return 0
		sleep 0.1
	done
	fail "the fake Traccar has $(delivered) positions after 30 s, not $1:"$'\n'"$(cat "$base/relay.log")"
}

# A position in with no network at all (the root's loopback is down): answered ok, spooled; status
# shows it; SIGTERM stops the relay.
start_relay
send_positions 0 0
as_georelay /usr/bin/georelay status --json --config /etc/georelay/georelay.json5 >"$base/status.json" ||
	fail "georelay status failed: $(cat "$base/status.json")"
grep -q '"rows" *: *1\b' "$base/status.json" || fail "status does not show the one spooled position: $(cat "$base/status.json")"
stop_relay
[ -s "$root/var/lib/georelay/georelay.db" ] || fail "no spool in /var/lib/georelay"
say "ran as georelay without the Swift toolchain: 'ok 1' on the socket, 1 row in the spool, clean stop on SIGTERM"

# A backlog for the upgrade to keep: the first position and two more delivered to a Traccar on
# loopback, then three more spooled while it is down.
ip link set lo up
start_server
start_relay
send_positions 1 2
await_delivered 3
stop_relay
stop_server
start_relay
send_positions 3 5
stop_relay
[ "$(delivered)" = 3 ] || fail "the fake Traccar has $(delivered) positions, not 3, before the upgrade"
say "3 positions delivered, 3 spooled while the server was down"

# Upgrade to a later version with the admin's edit in the conffile: dpkg keeps it.
echo '// edited by the admin' >>"$root/etc/georelay/georelay.json5"
dpkg-deb -R "$deb" "$base/next"
sed -i "s/^Version: .*/Version: $version+next/" "$base/next/DEBIAN/control"
dpkg-deb --build --root-owner-group -Znone "$base/next" "$base/next.deb" >/dev/null
dpkg_root -i "$base/next.deb"
[ "$(version_of)" = "install ok installed $version+next" ] || fail "after upgrade dpkg says '$(version_of)'"
grep -qx '// edited by the admin' "$root/etc/georelay/georelay.json5" || fail "the upgrade replaced the edited conffile"
[ "$(mode_of /etc/georelay/georelay.json5)" = "root:georelay 640" ] || fail "after upgrade the conffile is $(mode_of /etc/georelay/georelay.json5)"
[ "$(in_root getent passwd georelay | cut -d: -f3)" = "$uid" ] || fail "the upgrade changed georelay's uid"
[ -s "$root/var/lib/georelay/georelay.db" ] || fail "the upgrade lost the spool"
say "upgraded to $version+next: edited conffile kept, same uid, spool kept"

# The new version delivers the backlog the old one left, and nothing twice.
start_server
start_relay
await_delivered 6
stop_relay
stop_server
[ "$(delivered)" = 6 ] && [ "$(sort -u "$base/traccar.log" | wc -l)" = 6 ] ||
	fail "the fake Traccar got these, not 6 positions once each:"$'\n'"$(cat "$base/traccar.log")"
say "after the upgrade the 3 pending positions were delivered, none of the 6 twice"

# A downgrade across a schema change (the box going back after a bad upgrade) is refused by the
# older package's preinst, which asks the installed relay what its spool holds: the installed
# version stays, with its spool. A package whose relay reads the spool's schema may go in.
schema=$(in_root /usr/bin/georelay check --schema --config /etc/georelay/georelay.json5 | cut -d' ' -f1)
[ "$schema" -gt 0 ] || fail "check --schema says the spool's schema is '$schema'"
dpkg-deb -R "$deb" "$base/older"
sed -i "s/^Version: .*/Version: $version~older/" "$base/older/DEBIAN/control"
sed -i -e "s/^SCHEMA=.*/SCHEMA=$((schema - 1))/" -e "s/^VERSION=.*/VERSION=$version~older/" "$base/older/DEBIAN/preinst"
dpkg-deb --build --root-owner-group -Znone "$base/older" "$base/older.deb" >/dev/null
if dpkg --root="$root" -i "$base/older.deb" </dev/null >"$base/downgrade.log" 2>&1; then
	fail "dpkg installed $version~older, whose relay reads schema $((schema - 1)), over a spool of schema $schema"
fi
grep -q "not installing georelay $version~older over georelay $version+next" "$base/downgrade.log" &&
	grep -q "holds schema $schema" "$base/downgrade.log" && grep -q "mv /var/lib/georelay/georelay.db " "$base/downgrade.log" ||
	fail "the refused downgrade did not say why and what to do:"$'\n'"$(cat "$base/downgrade.log")"
[ "$(version_of)" = "install ok installed $version+next" ] || fail "after the refused downgrade dpkg says '$(version_of)'"
[ -x "$root/usr/bin/georelay" ] || fail "the refused downgrade left no /usr/bin/georelay"
in_root /usr/bin/georelay check --spool --config /etc/georelay/georelay.json5 >/dev/null ||
	fail "after the refused downgrade the spool does not pass check --spool"
dpkg_root -i "$deb"
[ "$(version_of)" = "install ok installed $version" ] || fail "after the downgrade to $version dpkg says '$(version_of)'"
say "downgrade to a relay reading schema $((schema - 1)) refused with what to do, $version+next kept; back to $version (schema $schema) allowed"

# Remove: the binary goes, the configuration and the spool stay.
dpkg_root -r georelay
[ ! -e "$root/usr/bin/georelay" ] || fail "remove left /usr/bin/georelay"
[ ! -e "$root/usr/lib/systemd/system/georelay.service" ] || fail "remove left the unit"
grep -qx '// edited by the admin' "$root/etc/georelay/georelay.json5" || fail "remove deleted the conffile"
[ -s "$root/var/lib/georelay/georelay.db" ] || fail "remove deleted the spool"
say "removed: binary and unit gone, conffile and spool kept"

# Purge: the configuration, the spool and the unit's links go; the user stays (see postrm).
dpkg_root -P georelay
[ -z "$(version_of | grep installed || true)" ] || fail "after purge dpkg says '$(version_of)'"
[ ! -e "$root/etc/georelay" ] || fail "purge left /etc/georelay: $(ls -la "$root/etc/georelay")"
[ ! -e "$root/var/lib/georelay" ] || fail "purge left /var/lib/georelay"
leftover=$(find "$root/etc/systemd" -name 'georelay*' 2>/dev/null)
[ -z "$leftover" ] || fail "purge left unit links: $leftover"
in_root getent passwd georelay >/dev/null || fail "purge removed the georelay user (it should stay)"
say "purged: /etc/georelay, /var/lib/georelay and the unit's links gone, user georelay kept"
