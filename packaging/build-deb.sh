#!/usr/bin/env bash
# Assembles georelay_<version>_<arch>.deb from a release binary built with --static-swift-stdlib.
#
#   packaging/build-deb.sh BINARY OUTPUT.deb
#
# No debhelper: the tree is laid out by hand, the maintainer scripts are in packaging/debian/,
# and dpkg-deb builds it with every file owned by root (--root-owner-group, so no fakeroot).
# The version is the top-level VERSION file; packaging/debian/changelog must start with it.
# The architecture is dpkg's (DEB_ARCH overrides it, for a binary cross-compiled elsewhere);
# the binary's ELF machine must match it. Depends is what dpkg-shlibdeps finds in the binary's
# DT_NEEDED libraries, plus adduser for the postinst; Tests/Package/check-deb.sh checks it
# against ldd.
#
# Environment: DEB_ARCH (default: dpkg --print-architecture), STRIP (default: strip; a
# cross-compiled binary wants its target's strip, e.g. aarch64-linux-gnu-strip), BINARY_RUNNER
# (how this machine runs the binary, which the build asks its spool schema: nothing for a native
# one, e.g. `qemu-aarch64-static -L ROOT` for arm64),
# DEB_DEPENDS (the libraries' part of Depends, as dpkg-shlibdeps prints it: required for a
# binary of another architecture, whose libraries this machine's dpkg does not know; see
# packaging/arm64/build.sh), DEB_COMPRESSION (dpkg-deb -Z: xz, the default, or gzip, zstd, none).
set -euo pipefail

die() { echo "build-deb: $*" >&2; exit 1; }

[ $# -eq 2 ] || die "usage: packaging/build-deb.sh BINARY OUTPUT.deb"
binary=$1
output=$2
repo=$(cd "$(dirname "$0")/.." && pwd)
debian=$repo/packaging/debian

[ -x "$binary" ] || die "$binary: no such executable (build it with make build)"
for tool in dpkg-deb dpkg-shlibdeps dpkg-parsechangelog readelf; do
	command -v "$tool" >/dev/null || die "$tool not found (apt-get install dpkg-dev binutils, or make deps)"
done

version=$(tr -d '[:space:]' <"$repo/VERSION")
[[ $version =~ ^[0-9][A-Za-z0-9.+~]*$ ]] || die "VERSION: '$version' is not a Debian native version (digits first, then [A-Za-z0-9.+~])"
changelog_version=$(dpkg-parsechangelog -l "$debian/changelog" -S Version)
[ "$changelog_version" = "$version" ] ||
	die "packaging/debian/changelog: top entry is $changelog_version but VERSION says $version (add an entry)"

arch=${DEB_ARCH:-$(dpkg --print-architecture)}
machine=$(readelf -h "$binary" | sed -n 's/^ *Machine: *//p')
case $arch in
	amd64) expected="Advanced Micro Devices X86-64" ;;
	arm64) expected="AArch64" ;;
	armhf) expected="ARM" ;;
	*) die "DEB_ARCH=$arch: only amd64, arm64 and armhf are known here" ;;
esac
[ "$machine" = "$expected" ] || die "$binary is built for '$machine', not for $arch ('$expected')"

# A binary linked against the toolchain's shared Swift runtime would not run without it.
if readelf -d "$binary" | grep -Eq 'NEEDED.*\[lib(swift|Foundation|dispatch|BlocksRuntime|_Foundation)'; then
	die "$binary links the Swift runtime dynamically: build it with --static-swift-stdlib (make build does)"
fi
if readelf -d "$binary" | grep -Eq '\((RPATH|RUNPATH)\)'; then
	die "$binary has an RPATH/RUNPATH: build it with --disable-local-rpath (make build does)"
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/georelay-deb.XXXXXX")
trap 'rm -rf "$work"' EXIT
# dpkg-shlibdeps wants debian/control beside the package's tree, debian/<package>/.
mkdir -p "$work/debian"
root=$work/debian/georelay
printf 'Source: georelay\n\nPackage: georelay\nArchitecture: any\n' >"$work/debian/control"

install -d -m 0755 "$root/usr/bin" "$root/usr/lib/systemd/system" "$root/etc/georelay" \
	"$root/usr/share/doc/georelay" "$root/usr/share/man/man1" "$root/usr/share/lintian/overrides" \
	"$root/DEBIAN"

# The symbols are a third of the binary; Debian ships them (if at all) in a -dbgsym package.
"${STRIP:-strip}" --strip-unneeded --remove-section=.comment --remove-section=.note \
	-o "$root/usr/bin/georelay" "$binary"
chmod 0755 "$root/usr/bin/georelay"

# The same unit as `make install`, with the package's paths.
sed -e 's|/usr/local/|/usr/|g' -e 's|`make install` puts it in $(PREFIX)/lib/systemd/system.|The Debian package installs it in /usr/lib/systemd/system.|' \
	-e '/^# Then: useradd/d' \
	"$repo/contrib/georelay.service" >"$root/usr/lib/systemd/system/georelay.service"
chmod 0644 "$root/usr/lib/systemd/system/georelay.service"

# root:root here; the postinst gives it to group georelay (the relay must read it, others not).
sed -e 's|/usr/local/share/doc/|/usr/share/doc/|g' "$repo/contrib/georelay.json5" >"$root/etc/georelay/georelay.json5"
chmod 0640 "$root/etc/georelay/georelay.json5"
echo /etc/georelay/georelay.json5 >"$root/DEBIAN/conffiles"

doc=$root/usr/share/doc/georelay
install -m 0644 "$repo/README.md" "$doc/README.md"
# The manual README links to, in the same place relative to it (docs/; the screenshots stay out).
install -d -m 0755 "$doc/docs"
install -m 0644 "$repo"/docs/*.md "$doc/docs/"
install -m 0644 "$repo/config/georelay.json5" "$doc/georelay.json5"
install -m 0644 "$debian/copyright" "$doc/copyright"
# A native package (no Debian revision): policy names its changelog changelog.gz.
gzip -9n <"$debian/changelog" >"$doc/changelog.gz"
gzip -9n <"$debian/georelay.1" >"$root/usr/share/man/man1/georelay.1.gz"
install -m 0644 "$debian/lintian-overrides" "$root/usr/share/lintian/overrides/georelay"
chmod 0644 "$doc/changelog.gz" "$root/usr/share/man/man1/georelay.1.gz"

for script in postinst prerm postrm; do
	install -m 0755 "$debian/$script" "$root/DEBIAN/$script"
done
# The preinst refuses a downgrade across a schema change: it needs the newest spool schema this
# binary reads, which the binary itself says (`check --schema` on a spool that does not exist).
printf '{ spool: { path: "%s/none.db" } }\n' "$work" >"$work/schema.json5"
schema=$(${BINARY_RUNNER:-} "$binary" check --schema --config "$work/schema.json5") ||
	die "$binary check --schema failed (a binary for another architecture needs BINARY_RUNNER, e.g. qemu-aarch64-static -L ROOT)"
schema=$(echo "$schema" | cut -d' ' -f2)
[[ $schema =~ ^[0-9]+$ ]] || die "$binary check --schema printed no schema version"
sed -e "s/@VERSION@/$version/" -e "s/@SCHEMA@/$schema/" "$debian/preinst" >"$root/DEBIAN/preinst"
chmod 0755 "$root/DEBIAN/preinst"

native=$(dpkg --print-architecture)
if [ -n "${DEB_DEPENDS:-}" ]; then
	depends=$DEB_DEPENDS
elif [ "$arch" = "$native" ]; then
	depends=$(cd "$work" && dpkg-shlibdeps -O -e"$root/usr/bin/georelay" | sed -n 's/^shlibs:Depends=//p')
	[ -n "$depends" ] || die "dpkg-shlibdeps found no dependencies in $binary"
else
	# A guessed list would be wrong somewhere: trixie renamed libcurl4 to libcurl4t64, and the
	# minimum glibc is whatever the build's headers asked for.
	die "$arch is not this machine's $native: give DEB_DEPENDS from dpkg-shlibdeps against $arch's libraries (packaging/arm64/build.sh does)"
fi

installed_size=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
cat >"$root/DEBIAN/control" <<EOF
Package: georelay
Version: $version
Architecture: $arch
Maintainer: georelay maintainers <maintainers@users.noreply.a-seed-615a21f5.example>
Installed-Size: $installed_size
Depends: adduser, $depends
Section: net
Priority: optional
Description: offline-first store-and-forward relay for GPS positions
 Collectors on the local machine write positions into a Unix socket; the
 relay stores each one durably in a write-ahead SQLite spool, then forwards
 them to a Traccar server (OsmAnd over pipelined HTTP, or its Teltonika
 port) or a token-authenticated tracking-push gateway, with per-destination
 backoff, connectivity probing and replay of everything spooled after an
 outage. Made for vessels and remote sites: several GPS units behind one
 intermittent, often metered uplink.
 .
 The package runs it as the systemd service georelay.service, as user
 georelay, on /etc/georelay/georelay.json5.
EOF

(cd "$root" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' | sort -z | xargs -0 md5sum) >"$root/DEBIAN/md5sums"
chmod 0644 "$root/DEBIAN/control" "$root/DEBIAN/conffiles" "$root/DEBIAN/md5sums"

mkdir -p "$(dirname "$output")"
dpkg-deb --build --root-owner-group -Z"${DEB_COMPRESSION:-xz}" "$root" "$output" >/dev/null
echo "build-deb: $output ($version, $arch, $(du -k "$output" | cut -f1) KiB)"
