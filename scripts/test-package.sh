#!/usr/bin/env bash
# Tests the Debian packages on this host (Debian 12, as root; systemd need not be running):
# builds gpud, libgpud1 and libgpud-dev from binaries built already, installs them with
# dpkg -i, checks their files, units, man pages and completions, serves and queries gpud
# through socket activation, runs lintian, then removes and purges them and checks that only
# what Debian keeps stays behind. scripts/test.sh runs it after the tests; on its own:
#
#   scripts/test-package.sh [BIN_DIR]     BIN_DIR: gpud, gpudctl, gpud-cli-docs, libgpud.so and
#                                         libgpud.a (default target/debug)
#
# It installs packages on the host and purges them at the end (also when a check fails), so it
# refuses to run where gpud is installed already.
set -euo pipefail
cd "$(dirname "$0")/.."

bin_dir=$(realpath "${1:-target/debug}")
out=$PWD/target/debian
packages=(gpud libgpud1 libgpud-dev)

fail() {
    echo "test-package: FAILED: $*" >&2
    exit 1
}
started=$SECONDS
step() { echo "== test-package: $* (at $((SECONDS - started)) s)"; }

[ "$(id -u)" = 0 ] || fail "run as root (it installs packages)"
for tool in dpkg-buildpackage dh lintian man systemd-analyze systemd-socket-activate python3; do
    command -v "$tool" >/dev/null ||
        fail "$tool is missing (apt-get install dpkg-dev debhelper lintian man-db systemd python3)"
done
for f in gpud gpudctl gpud-cli-docs libgpud.so libgpud.a libgpud_preload.so; do
    [ -e "$bin_dir/$f" ] || fail "$bin_dir/$f is missing (cargo build --workspace --all-targets)"
done
for p in "${packages[@]}"; do
    if dpkg-query -W -f '${Status}' "$p" 2>/dev/null | grep -q 'ok installed'; then
        fail "$p is installed on this host; this test installs and purges it: remove it first"
    fi
done

# What the host has before the install, to compare with after the purge (taken just before
# dpkg -i, so that other programs have little time to change the host meanwhile). Package
# databases, caches and logs change with any install; so do the backups and lock of the group
# files when the groups are made (they stay with the groups). The rest must come back as it was.
snapshot() {
    # A file that vanishes while find reads (another program's) is no finding.
    { find /etc /usr /var /opt -xdev \
        \( -path /var/lib/dpkg -o -path /var/cache -o -path /var/log -o -path /var/tmp \
        -o -path /var/lib/apt -o -path /var/backups \) -prune -o -print 2>/dev/null || true; } |
        grep -vxE '/etc/(group-|gshadow-|\.pwd\.lock)' | sort
}
tmp=$(mktemp -d)
activator=
installed=0
cleanup() {
    [ -n "$activator" ] && kill "$activator" 2>/dev/null && wait "$activator" 2>/dev/null
    if [ "$installed" = 1 ]; then
        echo "test-package: purging the packages after a failure" >&2
        dpkg -P "${packages[@]}" >/dev/null 2>&1 || true
    fi
    rm -rf "$tmp"
}
trap cleanup EXIT

step "build the packages from $bin_dir"
version=$(sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"/\1/p' Cargo.toml)
changelog_version=$(dpkg-parsechangelog -S Version)
[ "$version" = "$changelog_version" ] ||
    fail "debian/changelog is at $changelog_version, the workspace at $version: add a changelog entry"
arch=$(dpkg --print-architecture)
debs=()
for p in "${packages[@]}"; do debs+=("${p}_${version}_${arch}.deb"); done
artifacts=("${debs[@]}" "gpud_${version}_${arch}.buildinfo" "gpud_${version}_${arch}.changes")
# dpkg-buildpackage writes its results beside the source tree; they are moved into target/.
(cd .. && rm -f "${artifacts[@]}")
GPUD_BIN_DIR=$bin_dir DEB_BUILD_OPTIONS=noddebs dpkg-buildpackage -b -us -uc > "$tmp/build.log" 2>&1 ||
    { tail -40 "$tmp/build.log" >&2; fail "dpkg-buildpackage"; }
rm -rf "$out" && mkdir -p "$out"
(cd .. && mv "${artifacts[@]}" "$out/")
debian/rules clean >/dev/null 2>&1

step "lintian"
# Errors and warnings fail; README.md ("Install on Debian") lists the informational tags and why.
lintian --fail-on error,warning --display-info "$out/gpud_${version}_${arch}.changes" 2>&1 |
    { grep -v '^running with root privileges' || true; } ||
    fail "lintian (above)"

step "dpkg -i"
snapshot > "$tmp/before"
cp /etc/group "$tmp/group.before"
installed=1
(cd "$out" && dpkg -i "${debs[@]}") > "$tmp/install.log" 2>&1 ||
    { cat "$tmp/install.log" >&2; fail "dpkg -i"; }

step "every packaged file is in place"
for p in "${packages[@]}"; do
    count=0
    while read -r path; do
        [ -e "$path" ] || [ -L "$path" ] || fail "$p lists $path, which is not on the host"
        count=$((count + 1))
    done < <(dpkg -L "$p")
    echo "$p: $count paths, all present"
done
# And each file of scripts/manifest is in its package (man pages compressed by dh_compress).
(
    source scripts/manifest.sh
    manifest_layout debian /usr
    while read -r package kind mode source dest; do
        listed=$(dpkg -L "$package")
        if [[ "$source" == *'*'* ]]; then
            grep -q "^${dest}[^/]*$" <<< "$listed" || fail "$package ships nothing in $dest"
        else
            grep -qx -e "$dest" -e "$dest.gz" <<< "$listed" || fail "$package lacks $dest"
        fi
    done < <(manifest_lines "${packages[@]}")
) || exit 1
[ -f /etc/gpud/gpud.toml ] && dpkg-query -W -f '${Conffiles}' gpud | grep -q ' /etc/gpud/gpud.toml ' ||
    fail "/etc/gpud/gpud.toml is not a conffile of gpud"
getent group gpud >/dev/null && getent group gpud-admin >/dev/null ||
    fail "postinst did not create the groups gpud and gpud-admin"
[ -d /var/lib/gpud ] && [ -d /run/gpud ] || fail "postinst did not create /var/lib/gpud and /run/gpud"
[ -L /etc/systemd/system/sockets.target.wants/gpud.socket ] || fail "gpud.socket is not enabled"
[ ! -e /etc/systemd/system/multi-user.target.wants/gpud.service ] ||
    fail "gpud.service is enabled (only its socket should be)"
echo "groups, directories, conffile and the enabled socket are in place"

step "systemd-analyze verify and security on the installed units"
units=(/lib/systemd/system/gpud.service /lib/systemd/system/gpud.socket)
verify=$(systemd-analyze verify "${units[@]}" 2>&1) || { echo "$verify" >&2; fail "systemd-analyze verify"; }
# verify exits 0 on some findings; any line about the units is one (man:gpud(8) included).
if grep -i gpud <<< "$verify"; then fail "systemd-analyze verify has findings"; fi
security=$(systemd-analyze security --offline=yes "${units[0]}" 2>&1) ||
    { echo "$security" >&2; fail "systemd-analyze security"; }
exposure=$(sed -n 's/.*Overall exposure level for gpud.service: \([0-9.]*\).*/\1/p' <<< "$security")
[ -n "$exposure" ] || { echo "$security" >&2; fail "no exposure level"; }
python3 -c "import sys; sys.exit(0 if float('$exposure') <= 2.5 else 1)" ||
    { echo "$security" >&2; fail "exposure $exposure > 2.5"; }
echo "verify: no findings; security --offline=yes: exposure $exposure"

step "the installed gpud, socket-activated, queried by the installed gpudctl"
socket=$tmp/gpud.sock
# As gpud.socket would start it: the config and state directory the package installed.
systemd-socket-activate --listen "$socket" --fdname=gpud \
    /usr/bin/gpud --config /etc/gpud/gpud.toml --simulate 2x16GiB --dbus none \
    2> "$tmp/gpud.log" &
activator=$!
for _ in $(seq 100); do [ -S "$socket" ] && break; sleep 0.1; done
[ -S "$socket" ] || { cat "$tmp/gpud.log" >&2; fail "systemd-socket-activate made no socket"; }
status=$(/usr/bin/gpudctl --socket "$socket" status --json) ||
    { cat "$tmp/gpud.log" >&2; fail "gpudctl status"; }
devices=$(python3 -c 'import json, sys; print(len(json.load(sys.stdin)["devices"]))' <<< "$status")
[ "$devices" = 2 ] || fail "gpudctl status shows $devices devices, not the 2 simulated"
/usr/bin/gpudctl --socket "$socket" run --vram 1GiB -- /bin/true ||
    { cat "$tmp/gpud.log" >&2; fail "gpudctl run"; }
# The installed gpudctl finds the installed interposer (in ../lib/gpud from it).
preloaded=$(/usr/bin/gpudctl --socket "$socket" run --enforce preload --vram 1GiB -- \
    /bin/sh -c 'echo "$LD_PRELOAD"') || fail "gpudctl run --enforce preload"
[ "$preloaded" = /usr/lib/gpud/libgpud_preload.so ] ||
    fail "gpudctl run --enforce preload preloads '$preloaded', not /usr/lib/gpud/libgpud_preload.so"
pid=$(python3 -c 'import json, sys; print(json.load(sys.stdin)["daemon"]["pid"])' <<< "$status")
[ "$pid" = "$activator" ] || fail "gpud (pid $pid) does not run in the activated process ($activator)"
[ -n "$(ls -A /var/lib/gpud)" ] || fail "gpud wrote no journal into /var/lib/gpud"
kill -TERM "$activator"
wait "$activator" || fail "gpud did not exit 0 on SIGTERM"
activator=
echo "gpud served 2 simulated devices on the passed socket; gpudctl status and run worked"

step "man pages and completions"
page=$(MANWIDTH=80 MANPAGER=cat man gpudctl 2>&1) || { echo "$page" >&2; fail "man gpudctl"; }
grep -q 'gpudctl - ' <<< "$page" && grep -q 'SUBCOMMANDS' <<< "$page" ||
    { echo "$page" >&2; fail "man gpudctl did not render the page"; }
for page in "8 gpud" "1 gpudctl-run"; do
    # shellcheck disable=SC2086 # section and name
    MANWIDTH=80 MANPAGER=cat man $page >/dev/null || fail "man $page"
done
# The package's bash completion, sourced as bash-completion would.
complete=$(bash -c 'source /usr/share/bash-completion/completions/gpudctl && complete -p gpudctl') ||
    fail "the bash completion of gpudctl does not load"
echo "man gpudctl renders; bash: $complete"
for shell in zsh fish; do
    if command -v "$shell" >/dev/null; then
        file=$(dpkg -L gpud | grep -E "/(_gpudctl|gpudctl\.fish)$" | grep "$shell")
        "$shell" -n "$file" || fail "$shell cannot parse $file"
    fi
done

step "dpkg -r keeps the configuration, dpkg -P removes the rest"
dpkg -r "${packages[@]}" > "$tmp/remove.log" 2>&1 || { cat "$tmp/remove.log" >&2; fail "dpkg -r"; }
[ ! -e /usr/bin/gpud ] && [ ! -e /usr/bin/gpudctl ] || fail "dpkg -r left the programs"
[ -f /etc/gpud/gpud.toml ] || fail "dpkg -r removed the conffile (only a purge may)"
dpkg -P "${packages[@]}" > "$tmp/purge.log" 2>&1 || { cat "$tmp/purge.log" >&2; fail "dpkg -P"; }
installed=0
snapshot > "$tmp/after"
comm -13 "$tmp/before" "$tmp/after" > "$tmp/left"
if [ -s "$tmp/left" ]; then
    cat "$tmp/left" >&2
    fail "the purge left these paths, which were not there before the install"
fi
# The purge may take gpud's state that was there before (a journal, say), nothing else.
comm -23 "$tmp/before" "$tmp/after" | grep -v gpud > "$tmp/taken" || true
if [ -s "$tmp/taken" ]; then
    cat "$tmp/taken" >&2
    fail "the install and purge took these paths, which are not gpud's"
fi
# Debian keeps system groups on purge: files elsewhere may still belong to them.
if ! diff <(grep -vE '^gpud(-admin)?:' "$tmp/group.before") <(grep -vE '^gpud(-admin)?:' /etc/group); then
    fail "/etc/group changed beyond the groups gpud and gpud-admin"
fi
[ ! -e /run/gpud ] || fail "the purge left /run/gpud"
echo "after the purge only the groups gpud and gpud-admin remain, as Debian keeps system groups"
echo "test-package: all checks passed in $((SECONDS - started)) s"
