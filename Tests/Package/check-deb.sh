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
arch=$(dpkg --print-architecture)

# 1. Control data.
field() { dpkg-deb --field "$deb" "$1"; }
[ "$(field Package)" = georelay ] || fail "Package is '$(field Package)', not georelay"
[ "$(field Version)" = "$version" ] || fail "Version is '$(field Version)', VERSION says $version"
[ "$(field Architecture)" = "$arch" ] || fail "Architecture is '$(field Architecture)', this machine is $arch"
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
		dpkg -S "$candidate" 2>/dev/null | sed -n '1s/:.*//p' | grep . && return 0
	done
	return 1
}
needed=$(readelf -d "$bin" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
[ -n "$needed" ] || fail "readelf finds no NEEDED library in $bin"
env -i LD_LIBRARY_PATH= ldd "$bin" >"$work/ldd"
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
for package in libcurl4 libsqlite3-0 libzstd1 zlib1g; do
	grep -qx "$package" <<<"$depends" || fail "Depends lacks $package"
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

env -i LD_LIBRARY_PATH= "$bin" --help >"$work/help" 2>&1 || fail "georelay --help exited $?: $(cat "$work/help")"
grep -q '^usage: georelay' "$work/help" || fail "georelay --help printed no usage: $(cat "$work/help")"
env -i LD_LIBRARY_PATH= "$bin" check --config "$work/x/etc/georelay/georelay.json5" >"$work/check" 2>&1 ||
	fail "georelay check on the packaged conffile exited $?: $(cat "$work/check")"
grep -q '"/var/lib/georelay/georelay.db"' "$work/check" || fail "the packaged conffile's spool is not in /var/lib/georelay"
grep -q '"/run/georelay/georelay.sock"' "$work/check" || fail "the packaged conffile's socket is not in /run/georelay"
env -i LD_LIBRARY_PATH= "$bin" check --schema --config "$work/x/etc/georelay/georelay.json5" >"$work/schema" 2>&1 ||
	fail "georelay check --schema exited $?: $(cat "$work/schema")"
[ "$(cut -d' ' -f2 "$work/schema")" = "$(sed -n 's/^SCHEMA=//p' "$work/preinst")" ] ||
	fail "the binary reads schema $(cut -d' ' -f2 "$work/schema") but the preinst says $(sed -n 's/^SCHEMA=//p' "$work/preinst")"
ok "georelay --help, check --config <conffile> and check --schema run with env -i LD_LIBRARY_PATH="

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
if ! unshare --mount --net true 2>/dev/null || ! grep -qw overlay /proc/filesystems; then
	echo "check-deb: SKIPPED: install/upgrade/remove/purge in a throwaway root (needs unshare --mount --net and overlayfs as root)"
else
	unshare --mount --net --propagation private "$repo/Tests/Package/throwaway-root.sh" "$deb" "$work/root" ||
		fail "the throwaway-root scenario failed (above)"
	ok "install, run as georelay, a backlog delivered across an upgrade (conffile kept), a downgrade across a schema change refused, remove, purge (throwaway root)"
fi

echo "$checks passed, $failed failed"
