#!/usr/bin/env bash
# Cross-compiles georelay for arm64 (aarch64-unknown-linux-gnu) with Debian 13's own Swift
# (swiftlang 6.0.3), runs the result under qemu user-mode as a smoke test, and packages it.
#
#   packaging/arm64/build.sh              prints the path of the aarch64 georelay binary last
#   packaging/arm64/build.sh OUTPUT.deb   and makes the package (make deb ARCH=arm64)
#
# swift.org's toolchains and SDKs are not reachable from the machines this project runs on, but
# Debian's archive is, and trixie packages the same Swift for amd64 and arm64. So the build uses
# two trixie roots, kept for the machine in GEORELAY_ROOTS (default /var/cache/georelay/arm64-build):
# they hold Debian's packages, nothing built from this repository, so every clone of it reuses
# them, as it reuses what `make deps` installed (fetching them is about 2 minutes of a first run).
#   trixie-amd64-root         a real trixie system with swiftlang: the compiler, SwiftPM and lld.
#                             Its glibc is newer than the host's (Debian 12), so it runs in a
#                             chroot, not from the host. arm64 is a foreign architecture in it,
#                             with the run-time libraries the binary links installed (multiarch),
#                             so that dpkg-shlibdeps reads their symbols files for Depends, and
#                             its dpkg database says which package owns each (check-deb.sh).
#   arm64-root                arm64 packages only unpacked, never configured (so no binfmt or qemu
#                             is needed to make it): the sysroot the compiler and linker read
#                             (swiftlang:arm64's stdlib modules and static libraries, the -dev
#                             packages of the C libraries), and the root qemu-aarch64 runs the
#                             binary in (-L), with the same shared libraries it will load on a
#                             real arm64 trixie machine.
# A root is made once and kept while its stamp (.georelay-stamp, the request on the first line,
# then every package and version that went in) still matches what this script asks for; delete
# the root to make it anew.
#
# The build runs in the amd64 root with the repository and the arm64 root bind-mounted at the same
# paths, so the scratch directory (.build/arm64-scratch, separate from make's .build/release) and
# the sysroot have the same paths inside and out. One run at a time holds the roots (flock on
# their directory's .lock), so two clones never make or replace them at once. The mounts live in a private mount namespace (unshare -m)
# and go away with it, even when the build fails.
#
# Environment: DEBIAN_MIRROR (default http://deb.debian.org/debian), NICE (default 19: the build
# shares two cores with whatever else the machine is doing), SKIP_SMOKE=1 skips the qemu run,
# ROOTS_ONLY=1 makes (or checks) the two roots and stops before the build.
set -euo pipefail

die() { echo "arm64-build: $*" >&2; exit 1; }
say() { echo "arm64-build: $*" >&2; }

[ "$(id -u)" -eq 0 ] || die "must run as root (mmdebstrap, chroot and mount need it)"
[ "$(dpkg --print-architecture)" = amd64 ] || die "the toolchain root is amd64; run this on an amd64 machine"

repo=$(cd "$(dirname "$0")/../.." && pwd)
build=$repo/.build
roots=${GEORELAY_ROOTS:-/var/cache/georelay/arm64-build}
amd64_root=$roots/trixie-amd64-root
arm64_root=$roots/arm64-root
scratch=$build/arm64-scratch
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
nice_level=${NICE:-19}
suite=trixie
triple=aarch64-unknown-linux-gnu
# Debian installs the toolchain under /usr/libexec/swift, the stdlib's resource directory in it.
swift_prefix=/usr/libexec/swift

# What goes into each root. libc6-dev because SwiftPM compiles and links Package.swift for the
# machine it runs on (swiftlang only recommends it, and mmdebstrap installs no recommends).
# pkg-config lets SwiftPM read the .pc files of the system-library targets; it finds nothing for
# amd64 and that is only a warning, the headers and libraries come from the sysroot.
# dpkg-dev and binutils-aarch64-linux-gnu for dpkg-shlibdeps on an aarch64 binary; the :arm64
# libraries are the binary's NEEDED ones, whose versions trixie users have.
amd64_packages=(swiftlang libc6-dev pkg-config dpkg-dev binutils-aarch64-linux-gnu
	libc6:arm64 libcurl4t64:arm64 libsqlite3-0:arm64 libzstd1:arm64 zlib1g:arm64 libstdc++6:arm64 libgcc-s1:arm64)
# swiftlang:arm64 brings the arm64 stdlib (.swiftmodule files and lib*.a for --static-swift-stdlib)
# of exactly the compiler in the amd64 root; the package is the compiler too, unused here. The
# -dev packages are the Package.swift system libraries; libc6-dev, libgcc-14-dev (crtbegin.o,
# libgcc.a) and libstdc++-14-dev are what clang's link step needs. Their dependencies (libc6,
# libcurl4t64, libssl3t64, ...) come along, and are what the binary loads at run time.
arm64_packages=(swiftlang libsqlite3-dev libcurl4-openssl-dev libzstd-dev zlib1g-dev libc6-dev libgcc-14-dev libstdc++-14-dev)

# Times each step in whole seconds, so the figures can be quoted.
step_start=0
step() { say "$*"; step_start=$SECONDS; }
step_done() { say "  done in $((SECONDS - step_start)) s"; }

# Host tools: what a bare Debian 12 machine (or CI) lacks. qemu-user-static is only for the smoke
# run, which calls qemu-aarch64-static directly (no binfmt registration is needed).
host_tools() {
	local missing="" p
	for p in mmdebstrap qemu-user-static binutils binutils-aarch64-linux-gnu file dpkg-dev; do
		dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"
	done
	if [ -n "$missing" ]; then
		step "installing on the host:$missing"
		apt-get update -qq
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null
		step_done
	fi
}

# ensure_root ROOT REQUEST MMDEBSTRAP-ARGS...: makes ROOT with mmdebstrap unless its stamp's first
# line is already REQUEST. A root is built in ROOT.new and renamed when complete, so an
# interrupted run leaves no half-made root that a later run would take for a good one.
ensure_root() {
	local root=$1 request=$2
	shift 2
	if [ -f "$root/.georelay-stamp" ] && [ "$(head -n1 "$root/.georelay-stamp")" = "$request" ]; then
		say "reusing $root ($(grep -c . "$root/.georelay-stamp") lines in its stamp)"
		return
	fi
	step "creating $root: $request"
	# --one-file-system: should an interrupted mmdebstrap have left /proc or /dev mounted in the
	# half-made root, rm must not walk into the host's.
	rm -rf --one-file-system "$root" "$root.new"
	# mmdebstrap wants the target's parent to exist: on a clean clone .build/ does not yet.
	mkdir -p "$(dirname "$root")"
	nice -n "$nice_level" mmdebstrap --quiet "$@" "$suite" "$root.new" "$mirror"
	mv "$root.new" "$root"
	step_done
}

# The toolchain root is a configured system (variant apt), so dpkg-query can list what is in it.
make_amd64_root() {
	local request="$suite amd64 apt ${amd64_packages[*]} from $mirror"
	ensure_root "$amd64_root" "$request" \
		--variant=apt --architectures=amd64,arm64 --include="$(IFS=,; echo "${amd64_packages[*]}")" \
		--customize-hook="{ echo '$request'; chroot \"\$1\" dpkg-query -W; } > \"\$1/.georelay-stamp\""
}

# The arm64 root is only unpacked (variant extract: apt resolves the dependencies, dpkg -x unpacks
# every package); nothing in it ever runs but under qemu. There is no dpkg database to ask, so the
# stamp lists the .deb files while they are still in apt's cache. Trixie is merged-/usr, and the
# /lib -> usr/lib links that a configured system gets from its setup are made here: the linker
# follows libc.so's /lib/aarch64-linux-gnu/libc.so.6, and the binary's interpreter is
# /lib/ld-linux-aarch64.so.1.
make_arm64_root() {
	local request="$suite arm64 extract ${arm64_packages[*]} from $mirror"
	ensure_root "$arm64_root" "$request" \
		--variant=extract --architectures=arm64 --include="$(IFS=,; echo "${arm64_packages[*]}")" \
		--extract-hook="{ echo '$request'; ls \"\$1/var/cache/apt/archives\" | sed -n 's/\\.deb\$//p'; } > \"\$1/.georelay-stamp\"" \
		--extract-hook='for d in bin sbin lib; do [ -e "$1/$d" ] || ln -s "usr/$d" "$1/$d"; done'
}

# The swiftlang of both roots must be one build: the arm64 .swiftmodule files are only readable by
# the compiler that wrote them, and trixie's point releases can move the version between the day
# one root was made and the day the other was.
swiftlang_version() { grep -E "^swiftlang[[:space:]_]" "$1/.georelay-stamp" | sed -E 's/^swiftlang[[:space:]_]+([^_]+).*/\1/'; }

host_tools
mkdir -p "$roots"
# Roots made by an earlier version of this script inside the clone move to where they are kept.
for r in trixie-amd64-root arm64-root; do
	[ -e "$roots/$r" ] || [ ! -f "$build/$r/.georelay-stamp" ] || mv "$build/$r" "$roots/$r"
done
exec 9>"$roots/.lock"
flock 9
make_amd64_root
make_arm64_root
v_amd64=$(swiftlang_version "$amd64_root")
v_arm64=$(swiftlang_version "$arm64_root")
if [ "$v_amd64" != "$v_arm64" ]; then
	say "swiftlang differs between the roots (amd64 $v_amd64, arm64 $v_arm64): making both anew"
	rm -rf --one-file-system "$amd64_root" "$arm64_root"
	make_amd64_root
	make_arm64_root
	v_amd64=$(swiftlang_version "$amd64_root")
	v_arm64=$(swiftlang_version "$arm64_root")
	[ "$v_amd64" = "$v_arm64" ] || die "the archive has swiftlang $v_amd64 for amd64 but $v_arm64 for arm64"
fi
say "swiftlang $v_amd64 in both roots"
[ "${ROOTS_ONLY:-0}" != 1 ] || exit 0
output=${1:-}

# The release flags are the Makefile's RELEASE_FLAGS (keep them in step): the Swift runtime linked
# in statically, no $ORIGIN runpath, full RELRO. The cross part: the target triple, the arm64 root
# as SDK (SwiftPM 6.0 hands --sdk on to clang only, as --sysroot, so it is given to swiftc too:
# without -sdk the frontend looks for Glibc's headers in the toolchain root and fails with
# "missing required module 'SwiftGlibc'"), the arm64 package's static resource directory so that
# the frontend imports the aarch64 stdlib modules and the driver links their lib*.a (swift_static/
# holds both, and its static-stdlib-args.lnk; an explicit -resource-dir is taken as it is, so
# pointing it at lib/swift, as swiftc does for a dynamic build, leaves the link step looking for
# lib/swift/linux/static-stdlib-args.lnk), and lld, which swiftlang ships (Debian's own ld.bfd and
# gold target only amd64).
release_flags=(-c release --static-swift-stdlib --disable-local-rpath -Xlinker -z -Xlinker now)
cross_flags=(
	--triple "$triple"
	--sdk "$arm64_root"
	-Xswiftc -sdk -Xswiftc "$arm64_root"
	-Xswiftc -resource-dir -Xswiftc "$arm64_root$swift_prefix/lib/swift_static"
	-Xswiftc -use-ld=lld
)
build_cmd=(swift build "${release_flags[@]}" "${cross_flags[@]}" --product georelay --scratch-path "$scratch")

# in_toolchain COMMAND...: runs COMMAND in the amd64 root, in the repository, with /proc (the
# toolchain finds its libraries through $ORIGIN, which ld.so reads from /proc/self/exe), /dev and
# the repository mounted. The environment is reset so the host's PATH (and /opt/swift) stay out.
in_toolchain() {
	mkdir -p "$amd64_root$repo" "$amd64_root$arm64_root"
	unshare --mount --propagation private bash -euo pipefail -c '
		root=$1 repo=$2 sysroot=$3
		shift 3
		mount -t proc proc "$root/proc"
		mount --rbind /dev "$root/dev"
		mount --bind "$repo" "$root$repo"
		mount --bind "$sysroot" "$root$sysroot"
		exec chroot "$root" /usr/bin/env -i HOME=/root LANG=C.UTF-8 PATH=/usr/bin:/bin \
			/bin/sh -c "cd \"\$0\" && exec \"\$@\"" "$repo" "$@"
	' in_toolchain "$amd64_root" "$repo" "$arm64_root" "$@"
}

step "building georelay for $triple in $scratch"
in_toolchain nice -n "$nice_level" "${build_cmd[@]}"
step_done
bin_dir=$(in_toolchain "${build_cmd[@]}" --show-bin-path)
binary=$bin_dir/georelay
[ -x "$binary" ] || die "$binary: not built"

# The binary must be what a package can ship: aarch64, no runpath, and the Swift runtime inside it
# (no libswift*.so, libFoundation*.so or libdispatch.so among the NEEDED libraries).
machine=$(readelf -h "$binary" | sed -n 's/^ *Machine: *//p')
[ "$machine" = AArch64 ] || die "$binary: machine is '$machine', not AArch64"
! readelf -d "$binary" | grep -qE '\((RPATH|RUNPATH)\)' || die "$binary: has a runpath"
! readelf -d "$binary" | grep -E '\(NEEDED\)' | grep -qE 'swift|Foundation|dispatch|BlocksRuntime' ||
	die "$binary: links the Swift runtime dynamically"

if [ "${SKIP_SMOKE:-0}" != 1 ]; then
	step "smoke run under qemu-aarch64-static -L $arm64_root"
	qemu=(qemu-aarch64-static -L "$arm64_root")
	"${qemu[@]}" "$binary" --help >/dev/null
	"${qemu[@]}" "$binary" check --config "$repo/contrib/georelay.json5" >/dev/null
	step_done
fi

# What a package needs to know, on stderr; stdout is the path alone, for scripts.
file -b "$binary" >&2
say "NEEDED: $(readelf -d "$binary" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | tr '\n' ' ')"
say "newest glibc symbol version: $(aarch64-linux-gnu-objdump -T "$binary" | grep -o 'GLIBC_[0-9.]*' | sort -Vu | tail -n1)"

if [ -n "$output" ]; then
	# Depends as Debian computes it: dpkg-shlibdeps in the toolchain root, where the arm64
	# libraries are installed with their symbols files. It wants debian/control beside the tree.
	shlibdeps=$scratch/shlibdeps
	rm -rf "$shlibdeps"
	mkdir -p "$shlibdeps/debian/georelay/usr/bin"
	cp "$binary" "$shlibdeps/debian/georelay/usr/bin/georelay"
	printf 'Source: georelay\n\nPackage: georelay\nArchitecture: any\n' >"$shlibdeps/debian/control"
	# The warnings are about merged-/usr diversions of ld.so and a tree not installed yet: harmless.
	depends=$(in_toolchain sh -c 'cd "$1" && DEB_HOST_ARCH=arm64 dpkg-shlibdeps -O -edebian/georelay/usr/bin/georelay 2>/dev/null' sh "$shlibdeps" |
		sed -n 's/^shlibs:Depends=//p')
	[ -n "$depends" ] || die "dpkg-shlibdeps found no dependencies in $binary"
	say "Depends: $depends"
	DEB_ARCH=arm64 STRIP=aarch64-linux-gnu-strip BINARY_RUNNER="qemu-aarch64-static -L $arm64_root" DEB_DEPENDS="$depends" \
		"$repo/packaging/build-deb.sh" "$binary" "$output" >&2
fi
echo "$binary"
