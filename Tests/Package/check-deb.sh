#!/usr/bin/env bash
# Checks a built georelay .deb without touching this machine's dpkg database:
#   1. its control data: version, architecture, conffiles, and Depends against what the binary links;
#   2. its contents: every file, its mode and owner, nothing outside Debian's paths;
#   3. the packaged binary, extracted: runs with an empty environment and LD_LIBRARY_PATH, ldd shows
#      no Swift library, no RPATH; it validates the packaged conffile;
#   4. lintian: no error or warning (overrides, each with its reason, are in packaging/debian/);
#   5. the maintainer scripts, for real, in a throwaway root (Tests/Package/throwaway-root.sh):
#      install, run the relay as its user, deliver a backlog across an upgrade (none lost, none
#      twice), refuse a downgrade across a schema change, remove, purge.
#
#   Tests/Package/check-deb.sh georelay_<version>_<arch>.deb
#
# A package for another architecture (DEB_ARCH=arm64) is checked the same way as far as this
# machine can: its binary runs under qemu user-mode against TARGET_ROOT (the arm64 root
# packaging/arm64/build.sh keeps in $GEORELAY_ROOTS/arm64-root), the libraries' owners come from
# TARGET_ADMINDIR (a dpkg database with the target's libraries installed: the toolchain root's),
# and instead of the maintainer scripts (dpkg here cannot install a foreign package without its
# dependencies) a relay under qemu takes a position and forwards it (Tests/Package/emulated-relay.sh).
set -euo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
[ $# -eq 1 ] || { echo "usage: Tests/Package/check-deb.sh PACKAGE.deb" >&2; exit 64; }
deb=$(realpath "$1")
[ -f "$deb" ] || { echo "check-deb: $1: no such file" >&2; exit 1; }

checks=0
failed=0
ok() { checks=$((checks + 1)); echo "check-deb: ok: $*"; }
fail() { echo "check-deb: FAIL: $*" >&2; echo "$checks passed, 1 failed"; exit 1; }

work=$(mktemp -d "${TMPDIR:-/tmp}/georelay-check-deb.XXXXXX")
trap 'rm -rf "$work"' EXIT

version=$(tr -d '[:space:]' <"$repo/VERSION")
native=$(dpkg --print-architecture)
arch=${DEB_ARCH:-$native}
# How this machine runs the package's binary and its loader; ldd for it; who owns a library.
runner=()
admindir=()
if [ "$arch" != "$native" ]; then
	case $arch in
		arm64) qemu=qemu-aarch64-static loader=/lib/ld-linux-aarch64.so.1 machine="AArch64" ;;
		*) fail "DEB_ARCH=$arch: only arm64 is checked on a foreign machine" ;;
	esac
	roots=${GEORELAY_ROOTS:-/var/cache/georelay/arm64-build}
	target_root=${TARGET_ROOT:-$roots/$arch-root}
	target_admindir=${TARGET_ADMINDIR:-$roots/trixie-amd64-root/var/lib/dpkg}
	[ -x "$target_root$loader" ] || fail "TARGET_ROOT=$target_root has no $loader (packaging/arm64/build.sh makes it)"
	[ -f "$target_admindir/status" ] || fail "TARGET_ADMINDIR=$target_admindir is no dpkg database"
	runner=("$(command -v "$qemu")" -L "$target_root")
	[ -n "${runner[0]}" ] || fail "$qemu not found (apt-get install qemu-user-static)"
	admindir=(--admindir="$target_admindir")
	list_libraries() { env -i LD_LIBRARY_PATH= "${runner[@]}" "$target_root$loader" --list "$1"; }
else
	machine="Advanced Micro Devices X86-64"
	[ "$arch" = amd64 ] || machine=$(readelf -h /proc/self/exe | sed -n 's/^ *Machine: *//p')
	list_libraries() { env -i LD_LIBRARY_PATH= ldd "$1"; }
fi
run_bin() { env -i LD_LIBRARY_PATH= "${runner[@]}" "$bin" "$@"; }

# 1. Control data.
field() { dpkg-deb --field "$deb" "$1"; }
[ "$(field Package)" = georelay ] || fail "Package is '$(field Package)', not georelay"
[ "$(field Version)" = "$version" ] || fail "Version is '$(field Version)', VERSION says $version"
[ "$(field Architecture)" = "$arch" ] || fail "Architecture is '$(field Architecture)', not $arch (DEB_ARCH names another)"
ok "control: georelay $version $arch"

dpkg-deb --ctrl-tarfile "$deb" | tar -xO ./conffiles >"$work/conffiles"
[ "$(cat "$work/conffiles")" = /etc/georelay/georelay.json5 ] ||
	fail "conffiles is '$(tr '\n' ' ' <"$work/conffiles")', expected only /etc/georelay/georelay.json5"
ok "conffiles: /etc/georelay/georelay.json5"

dpkg-deb -x "$deb" "$work/x"
bin=$work/x/usr/bin/georelay

# Depends must name exactly the packages that own the libraries the binary itself links (DT_NEEDED,
# resolved the way the loader does), plus adduser for the postinst.
depends=$(field Depends | tr ',' '\n' | sed -e 's/^ *//' -e 's/ .*//' | sort -u)
owner_of() {
	local path=$1 real candidate
	real=$(realpath "$path")
	# On merged-/usr systems the loader's path and the package's may differ by the /usr prefix.
	for candidate in "$path" "$real" "/usr$path" "/usr$real" "${path#/usr}" "${real#/usr}"; do
		# Merged-/usr trixie lists libc6's diversion of the loader ahead of the owner.
		dpkg "${admindir[@]}" -S "$candidate" 2>/dev/null | grep -v '^diversion ' | sed -n '1s/:.*//p' | grep . && return 0
	done
	return 1
}
[ "$(readelf -h "$bin" | sed -n 's/^ *Machine: *//p')" = "$machine" ] ||
	fail "the binary is for $(readelf -h "$bin" | sed -n 's/^ *Machine: *//p'), not $arch ($machine)"
needed=$(readelf -d "$bin" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
[ -n "$needed" ] || fail "readelf finds no NEEDED library in $bin"
list_libraries "$bin" >"$work/ldd"
expected="adduser"
for soname in $needed; do
	path=$(awk -v s="$soname" '$1 == s && $2 == "=>" { print $3 } $1 ~ "/"s"$" { print $1 }' "$work/ldd" | head -1)
	[ -n "$path" ] || fail "ldd does not resolve $soname:"$'\n'"$(cat "$work/ldd")"
	package=$(owner_of "$path") || fail "no installed package owns $path ($soname)"
	expected="$expected"$'\n'"$package"
done
expected=$(echo "$expected" | sort -u)
[ "$depends" = "$expected" ] ||
	fail "Depends names [$(echo $depends)] but the binary links libraries of [$(echo $expected)] (plus adduser)"
# libcurl4t64 from Debian 13 on (the 64-bit time_t transition).
for package in 'libcurl4(t64)?' libsqlite3-0 libzstd1 zlib1g; do
	grep -qxE "$package" <<<"$depends" || fail "Depends lacks $package"
done
ok "Depends: $(field Depends)"

# 2. Contents: every regular file with its mode and owner, and nothing else.
dpkg-deb --contents "$deb" | awk '$1 !~ /^d/ { print $1, $2, $6 }' | sort >"$work/contents"
sort >"$work/expected" <<'EOF'
-rw-r----- root/root ./etc/georelay/georelay.json5
-rwxr-xr-x root/root ./usr/bin/georelay
-rw-r--r-- root/root ./usr/lib/systemd/system/georelay.service
-rw-r--r-- root/root ./usr/share/doc/georelay/README.md
-rw-r--r-- root/root ./usr/share/doc/georelay/changelog.gz
-rw-r--r-- root/root ./usr/share/doc/georelay/copyright
-rw-r--r-- root/root ./usr/share/doc/georelay/docs/architecture.md
-rw-r--r-- root/root ./usr/share/doc/georelay/docs/delivery.md
-rw-r--r-- root/root ./usr/share/doc/georelay/docs/operating.md
-rw-r--r-- root/root ./usr/share/doc/georelay/docs/socket-protocol.md
-rw-r--r-- root/root ./usr/share/doc/georelay/docs/spool.md
-rw-r--r-- root/root ./usr/share/doc/georelay/docs/testing.md
-rw-r--r-- root/root ./usr/share/doc/georelay/docs/uplinks.md
-rw-r--r-- root/root ./usr/share/doc/georelay/georelay.json5
-rw-r--r-- root/root ./usr/share/lintian/overrides/georelay
-rw-r--r-- root/root ./usr/share/man/man1/georelay.1.gz
EOF
diff -u "$work/expected" "$work/contents" >"$work/contents.diff" ||
	fail "contents differ from the expected (- expected, + in the package):"$'\n'"$(cat "$work/contents.diff")"
if dpkg-deb --contents "$deb" | awk '{ print $6 }' | grep -E '^\./(usr/local|run|var/run|opt|tmp|home)/'; then
	fail "the package ships files outside Debian's paths (above)"
fi
if dpkg-deb --contents "$deb" | awk '{ print $2 }' | grep -vx root/root; then
	fail "the package ships files not owned by root (above)"
fi
for script in preinst postinst prerm postrm; do
	dpkg-deb --ctrl-tarfile "$deb" | tar -xO "./$script" >"$work/$script"
	sh -n "$work/$script" || fail "$script: not valid sh"
	head -1 "$work/$script" | grep -qx '#!/bin/sh' || fail "$script does not start with #!/bin/sh"
done
# The preinst compares the installed relay's spool with the schema this package's relay reads.
grep -q '@' "$work/preinst" && fail "preinst has a placeholder build-deb.sh did not fill in: $(grep -n '@' "$work/preinst")"
grep -qx "VERSION=$version" "$work/preinst" || fail "preinst does not name version $version"
grep -qx "SCHEMA=[0-9][0-9]*" "$work/preinst" || fail "preinst has no SCHEMA=N line"
[ "$(zcat "$work/x/usr/share/doc/georelay/changelog.gz" | dpkg-parsechangelog -l- -S Version)" = "$version" ] ||
	fail "changelog.gz's top entry is not $version"
ok "contents: 9 files, modes and owners as expected, maintainer scripts parse"

# 3. The binary: no Swift runtime outside it.
if grep -Ei 'libswift|libFoundation|lib_Foundation|libdispatch|libBlocksRuntime|not found' "$work/ldd"; then
	fail "ldd lists a Swift library or a missing one (above)"
fi
if readelf -d "$bin" | grep -E '\((RPATH|RUNPATH)\)'; then
	fail "the binary has an RPATH/RUNPATH (above)"
fi
if readelf -S "$bin" | grep -q '\.symtab'; then
	fail "the binary is not stripped"
fi
ok "ldd: $(grep -c '=>' "$work/ldd") libraries, none of Swift's; no RPATH; stripped"

# Small enough to update over a satellite link: no ICU data (34 MB that Foundation brings and the
# relay never uses: it links FoundationEssentials only), at most 8 MB to download, 25 MB installed.
if grep -q -a 'icudt[0-9]*l' "$bin"; then
	fail "the binary holds ICU data: a module of the relay imports Foundation instead of FoundationEssentials"
fi
download=$(stat -c %s "$deb")
installed=$(dpkg-deb -f "$deb" Installed-Size)
[ "$download" -le 8000000 ] || fail "the package is $download bytes to download, more than 8 MB"
[ "$installed" -le 25000 ] || fail "the package is $installed KiB installed, more than 25 MB"
ok "no ICU data; $((download / 1024)) KiB to download, $installed KiB installed"

run_bin --help >"$work/help" 2>&1 || fail "georelay --help exited $?: $(cat "$work/help")"
grep -q '^usage: georelay' "$work/help" || fail "georelay --help printed no usage: $(cat "$work/help")"
run_bin check --config "$work/x/etc/georelay/georelay.json5" >"$work/check" 2>&1 ||
	fail "georelay check on the packaged conffile exited $?: $(cat "$work/check")"
grep -q '"/var/lib/georelay/georelay.db"' "$work/check" || fail "the packaged conffile's spool is not in /var/lib/georelay"
grep -q '"/run/georelay/georelay.sock"' "$work/check" || fail "the packaged conffile's socket is not in /run/georelay"
run_bin check --schema --config "$work/x/etc/georelay/georelay.json5" >"$work/schema" 2>&1 ||
	fail "georelay check --schema exited $?: $(cat "$work/schema")"
[ "$(cut -d' ' -f2 "$work/schema")" = "$(sed -n 's/^SCHEMA=//p' "$work/preinst")" ] ||
	fail "the binary reads schema $(cut -d' ' -f2 "$work/schema") but the preinst says $(sed -n 's/^SCHEMA=//p' "$work/preinst")"
ok "georelay --help, check --config <conffile> and check --schema run with env -i LD_LIBRARY_PATH= ${runner[*]}"

unit=$work/x/usr/lib/systemd/system/georelay.service
for line in 'ExecStart=/usr/bin/georelay run --config /etc/georelay/georelay.json5' 'Type=notify' \
	'User=georelay' 'StateDirectory=georelay' 'RuntimeDirectory=georelay' 'WantedBy=multi-user.target'; do
	grep -qx "$line" "$unit" || fail "georelay.service lacks '$line'"
done
if grep -n '/usr/local' "$unit" "$work/x/etc/georelay/georelay.json5"; then
	fail "the unit or the conffile still names /usr/local (above)"
fi
ok "georelay.service: ExecStart=/usr/bin/georelay, Type=notify, User=georelay, state and runtime directories"

# 4. lintian, as the archive would run it.
lintian --fail-on error,warning --display-info --pedantic "$deb" >"$work/lintian" 2>&1 ||
	fail "lintian:"$'\n'"$(cat "$work/lintian")"
if grep -E '^[EWIP]: ' "$work/lintian"; then
	fail "lintian has tags without an override (above): fix them or override them with a reason in packaging/debian/lintian-overrides"
fi
ok "lintian --pedantic: no tag beyond the overrides"

# 5. The maintainer scripts, in a root of their own: a private mount and network namespace with
# copy-on-write overlays of this machine's /usr, /etc and dpkg database, gone when it exits.
if [ "$arch" != "$native" ]; then
	# A relay as the unit would run it, but under qemu: one position in, delivered to a fake
	# Traccar on the loopback of a network namespace of its own.
	unshare --net "$repo/Tests/Package/emulated-relay.sh" "$work/x" "$work/relay" "${runner[@]}" ||
		fail "the emulated relay failed (above)"
	ok "under ${runner[*]}: a relay on the packaged conffile's settings answered 'ok 1' and delivered the position to a fake Traccar"
elif ! unshare --mount --net true 2>/dev/null || ! grep -qw overlay /proc/filesystems; then
	echo "check-deb: SKIPPED: install/upgrade/remove/purge in a throwaway root (needs unshare --mount --net and overlayfs as root)"
else
	unshare --mount --net --propagation private "$repo/Tests/Package/throwaway-root.sh" "$deb" "$work/root" ||
		fail "the throwaway-root scenario failed (above)"
	ok "install, run as georelay, a backlog delivered across an upgrade (conffile kept), a downgrade across a schema change refused, remove, purge (throwaway root)"
fi

echo "$checks passed, $failed failed"
