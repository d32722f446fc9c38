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
# still names PREFIX, as packagers do), --uninstall (remove what an install put there).
set -euo pipefail
cd "$(dirname "$0")/.."

prefix=/usr/local
destdir=
lib_dir=
uninstall=0
while [ $# -gt 0 ]; do
    case "$1" in
        --lib-dir) lib_dir="$2"; shift 2 ;;
        --destdir) destdir="$2"; shift 2 ;;
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

# The version is the crate's; its major is the soname's and the protocol version.
version=$(sed -n 's/^version = "\(.*\)"/\1/p' client/c/Cargo.toml | head -1)
major=${version%%.*}
protocol=$(sed -n 's/^pub const PROTOCOL_VERSION: u32 = \([0-9]*\);/\1/p' proto/src/message.rs)
if [ "$major" != "$protocol" ]; then
    echo "install-libgpud.sh: libgpud $version does not match protocol version $protocol" >&2
    exit 1
fi

lib="$destdir$prefix/lib"
include="$destdir$prefix/include"
files=(
    "$lib/libgpud.so.$version" "$lib/libgpud.so.$major" "$lib/libgpud.so" "$lib/libgpud.a"
    "$include/gpud.h" "$include/gpud.hpp" "$lib/pkgconfig/gpud.pc"
)
if [ "$uninstall" = 1 ]; then
    rm -f "${files[@]}"
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

install -d "$lib/pkgconfig" "$include"
install -m 0755 "$lib_dir/libgpud.so" "$lib/libgpud.so.$version"
ln -sfn "libgpud.so.$version" "$lib/libgpud.so.$major"
ln -sfn "libgpud.so.$major" "$lib/libgpud.so"
install -m 0644 "$lib_dir/libgpud.a" "$lib/libgpud.a"
install -m 0644 client/c/include/gpud.h client/c/include/gpud.hpp "$include/"
sed -e "s|@PREFIX@|$prefix|" -e "s|@VERSION@|$version|" -e "s|@PROTOCOL@|$protocol|" \
    -e "s|@STATIC_LIBS@|$static_libs|" client/c/gpud.pc.in > "$lib/pkgconfig/gpud.pc"
chmod 0644 "$lib/pkgconfig/gpud.pc"
echo "installed libgpud $version (protocol $protocol) under $destdir$prefix"
# The loader's cache knows the system prefixes; elsewhere, LD_LIBRARY_PATH or an rpath finds it.
case "$destdir:$prefix" in
    :/usr|:/usr/local) [ "$(id -u)" = 0 ] && command -v ldconfig >/dev/null && ldconfig || true ;;
esac
