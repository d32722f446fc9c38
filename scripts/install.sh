#!/usr/bin/env bash
# Installs or uninstalls gpud as a systemd service (README.md, section "Install").
#
#   scripts/install.sh                 build release binaries, install, start gpud.socket
#   scripts/install.sh --uninstall     stop, disable, remove (config and state kept)
#   scripts/install.sh --uninstall --purge   also remove /etc/gpud and /var/lib/gpud
#
# Options: --prefix DIR (default /usr/local: binaries in DIR/bin), --destdir DIR (stage into DIR,
# as packagers do; nothing is started), --bin-dir DIR (take built binaries from DIR instead of
# building), --no-start (install only).
set -euo pipefail
cd "$(dirname "$0")/.."

prefix=/usr/local
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
        --no-start) start=0; shift ;;
        --uninstall) uninstall=1; shift ;;
        --purge) purge=1; shift ;;
        -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
        *) echo "install.sh: unknown option $1" >&2; exit 2 ;;
    esac
done
[ -n "$destdir" ] && start=0
# systemctl only where systemd runs the machine.
[ -d /run/systemd/system ] || start=0

# Where each file goes. /etc paths are the administrator's (packages would use /usr/lib).
files=(
    "$prefix/bin/gpud"
    "$prefix/bin/gpudctl"
    "/etc/systemd/system/gpud.service"
    "/etc/systemd/system/gpud.socket"
    "/etc/dbus-1/system.d/org.gpud.Manager1.conf"
    "/etc/sysusers.d/gpud.conf"
    "/etc/tmpfiles.d/gpud.conf"
    "$prefix/share/doc/gpud/README.md"
)

if [ "$uninstall" = 1 ]; then
    if [ "$start" = 1 ]; then
        systemctl disable --now gpud.socket gpud.service || true
    fi
    for f in "${files[@]}"; do
        rm -f "$destdir$f"
    done
    rmdir "$destdir$prefix/share/doc/gpud" 2>/dev/null || true
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
    cargo build --release -p gpud -p gpud-client --bins
    bin_dir="${CARGO_TARGET_DIR:-target}/release"
fi
for b in gpud gpudctl; do
    [ -x "$bin_dir/$b" ] || { echo "install.sh: $bin_dir/$b is missing" >&2; exit 1; }
done

install -Dm755 "$bin_dir/gpud" "$destdir$prefix/bin/gpud"
install -Dm755 "$bin_dir/gpudctl" "$destdir$prefix/bin/gpudctl"
# The units name /usr/local; follow --prefix.
for unit in gpud.service gpud.socket; do
    install -d "$destdir/etc/systemd/system"
    sed "s#/usr/local#$prefix#g" "systemd/$unit" > "$destdir/etc/systemd/system/$unit"
    chmod 644 "$destdir/etc/systemd/system/$unit"
done
install -Dm644 systemd/org.gpud.Manager1.conf "$destdir/etc/dbus-1/system.d/org.gpud.Manager1.conf"
install -Dm644 systemd/gpud.sysusers "$destdir/etc/sysusers.d/gpud.conf"
install -Dm644 systemd/gpud.tmpfiles "$destdir/etc/tmpfiles.d/gpud.conf"
install -Dm644 README.md "$destdir$prefix/share/doc/gpud/README.md"
if [ -e "$destdir/etc/gpud/gpud.toml" ]; then
    install -Dm644 systemd/gpud.toml "$destdir/etc/gpud/gpud.toml.new"
    echo "kept the existing /etc/gpud/gpud.toml; the example is gpud.toml.new"
else
    install -Dm644 systemd/gpud.toml "$destdir/etc/gpud/gpud.toml"
fi

if [ "$start" = 1 ]; then
    systemd-sysusers /etc/sysusers.d/gpud.conf
    systemd-tmpfiles --create /etc/tmpfiles.d/gpud.conf
    systemctl daemon-reload
    systemctl reload dbus 2>/dev/null || true
    systemctl enable --now gpud.socket
    echo "gpud installed; gpud.socket listening on /run/gpud/gpud.sock (add users to group gpud)"
else
    echo "gpud installed into ${destdir:-/} (not started)"
fi
