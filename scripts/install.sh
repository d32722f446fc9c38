#!/usr/bin/env bash
# Installs or uninstalls gpud as a systemd service, for hosts without the Debian package
# (README.md, sections "Install on Debian" and "Install"):
#
#   scripts/install.sh                 build release binaries, install, start gpud.socket
#   scripts/install.sh --uninstall     stop, disable, remove (config and state kept)
#   scripts/install.sh --uninstall --purge   also remove /etc/gpud and /var/lib/gpud
#
# Options: --prefix DIR (default /usr/local: binaries in DIR/bin), --destdir DIR (stage into DIR,
# as packagers do; nothing is started), --bin-dir DIR (take built binaries from DIR instead of
# building: gpud, gpudctl and gpud-cli-docs), --no-start (install only), --layout debian (the
# Debian package's paths, for debian/rules).
# The files are those of scripts/manifest (package gpud), which the Debian package installs too.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/manifest.sh

prefix=/usr/local
layout=local
destdir=
bin_dir=
start=1
uninstall=0
purge=0
while [ $# -gt 0 ]; do
    case "$1" in
        --prefix) prefix="$2"; shift 2 ;;
        --destdir) destdir="$2"; shift 2 ;;
        --bin-dir) bin_dir="$2"; shift 2 ;;
        --layout) layout="$2"; shift 2 ;;
        --no-start) start=0; shift ;;
        --uninstall) uninstall=1; shift ;;
        --purge) purge=1; shift ;;
        -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
        *) echo "install.sh: unknown option $1" >&2; exit 2 ;;
    esac
done
[ "$layout" = debian ] && [ "$prefix" = /usr/local ] && prefix=/usr
[ -n "$destdir" ] && start=0
# systemctl only where systemd runs the machine.
[ -d /run/systemd/system ] || start=0
manifest_layout "$layout" "$prefix"
docdir=${manifest_dirs[docdir]}
sysusers=${manifest_dirs[sysusersdir]}/gpud.conf
tmpfiles=${manifest_dirs[tmpfilesdir]}/gpud.conf

if [ "$uninstall" = 1 ]; then
    if [ "$start" = 1 ]; then
        systemctl disable --now gpud.socket gpud.service || true
    fi
    manifest_uninstall gpud
    rmdir "$destdir$docdir" 2>/dev/null || true
    if [ "$purge" = 1 ]; then
        rm -rf "$destdir/etc/gpud" "$destdir/var/lib/gpud"
    else
        echo "kept /etc/gpud and /var/lib/gpud (--purge removes them); groups gpud and gpud-admin are kept"
    fi
    if [ "$start" = 1 ]; then
        systemctl daemon-reload
        systemctl reload dbus 2>/dev/null || true
    fi
    echo "gpud uninstalled"
    exit 0
fi

if [ -z "$bin_dir" ]; then
    cargo build --release -p gpud -p gpud-client -p gpud-cli-docs --bins
    cargo build --release -p gpud-preload
    bin_dir="${CARGO_TARGET_DIR:-target}/release"
fi
for b in gpud gpudctl gpud-cli-docs; do
    [ -x "$bin_dir/$b" ] || { echo "install.sh: $bin_dir/$b is missing" >&2; exit 1; }
done
# The interposer (gpudctl run --enforce preload) is built beside the binaries.
lib_dir=$bin_dir
[ -f "$lib_dir/libgpud_preload.so" ] ||
    { echo "install.sh: $lib_dir/libgpud_preload.so is missing (cargo build -p gpud-preload)" >&2; exit 1; }

# Man pages and completions, rendered from the binaries' command lines; the pages name the
# documentation's installed place.
gen_dir=$(mktemp -d)
trap 'rm -rf "$gen_dir"' EXIT
"$bin_dir/gpud-cli-docs" --out "$gen_dir" --doc-dir "$docdir" >/dev/null
manifest_install gpud

if [ "$start" = 1 ]; then
    systemd-sysusers "$sysusers"
    systemd-tmpfiles --create "$tmpfiles"
    systemctl daemon-reload
    systemctl reload dbus 2>/dev/null || true
    systemctl enable --now gpud.socket
    echo "gpud installed; gpud.socket listening on /run/gpud/gpud.sock (add users to group gpud)"
else
    echo "gpud installed into ${destdir:-/} (not started)"
fi
