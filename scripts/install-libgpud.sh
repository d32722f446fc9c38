#!/usr/bin/env bash
# Installs libgpud, the C and C++ client library (README.md, "From C and C++"):
#
#   scripts/install-libgpud.sh [PREFIX]      release build, then install under PREFIX
#                                            (default /usr/local)
#
#   PREFIX/lib/libgpud.so.1.0.0, libgpud.so.1 and libgpud.so (links), libgpud.a
#   PREFIX/include/gpud.h, PREFIX/include/gpud.hpp
#   PREFIX/lib/pkgconfig/gpud.pc             cc prog.c $(pkg-config --cflags --libs gpud)
#
# Options: --lib-dir DIR (take the built libgpud.so and libgpud.a from DIR, e.g. target/debug,
# instead of building), --destdir DIR (stage into DIR: files go to DIR/PREFIX/…, and gpud.pc
# still names PREFIX, as packagers do), --uninstall (remove what an install put there),
# --layout debian (the Debian package's paths, for debian/rules).
# The files are those of scripts/manifest (packages libgpud1 and libgpud-dev).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/manifest.sh

prefix=/usr/local
layout=local
destdir=
lib_dir=
uninstall=0
while [ $# -gt 0 ]; do
    case "$1" in
        --lib-dir) lib_dir="$2"; shift 2 ;;
        --destdir) destdir="$2"; shift 2 ;;
        --layout) layout="$2"; shift 2 ;;
        --uninstall) uninstall=1; shift ;;
        -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
        -*) echo "install-libgpud.sh: unknown option $1" >&2; exit 2 ;;
        *) prefix="$1"; shift ;;
    esac
done
case "$prefix" in
    /*) ;;
    *) echo "install-libgpud.sh: PREFIX must be an absolute path (got $prefix)" >&2; exit 2 ;;
esac
manifest_layout "$layout" "$prefix"

# The library's major version is the protocol version it speaks.
version=${manifest_dirs[libversion]}
protocol=$(sed -n 's/^pub const PROTOCOL_VERSION: u32 = \([0-9]*\);/\1/p' proto/src/message.rs)
if [ "${manifest_dirs[libmajor]}" != "$protocol" ]; then
    echo "install-libgpud.sh: libgpud $version does not match protocol version $protocol" >&2
    exit 1
fi

if [ "$uninstall" = 1 ]; then
    manifest_uninstall libgpud1 libgpud-dev
    exit 0
fi

if [ -z "$lib_dir" ]; then
    cargo build --release -p gpud-c
    lib_dir=target/release
fi
for f in libgpud.so libgpud.a; do
    [ -f "$lib_dir/$f" ] || { echo "install-libgpud.sh: $lib_dir/$f is missing (cargo build -p gpud-c)" >&2; exit 1; }
done

# What a static link needs besides libgpud.a (rustc --print native-static-libs, for glibc).
static_libs="-lgcc_s -lutil -lrt -lpthread -lm -ldl -lc"
manifest_install libgpud1 libgpud-dev
echo "installed libgpud $version (protocol $protocol) under $destdir$prefix"
# The loader's cache knows the system prefixes; elsewhere, LD_LIBRARY_PATH or an rpath finds it.
case "$destdir:$prefix" in
    :/usr|:/usr/local) [ "$(id -u)" = 0 ] && command -v ldconfig >/dev/null && ldconfig || true ;;
esac
