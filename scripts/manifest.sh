# Installs the files of scripts/manifest: sourced by scripts/install.sh and
# scripts/install-libgpud.sh (which debian/rules runs), so that a local install and the Debian
# package put the same files in place from the same list.
#
# The caller sets, then calls manifest_layout, then manifest_install or manifest_uninstall:
#   destdir   prefix of every destination ("" for the host); {package} in it is replaced by
#             each line's package (debian/rules stages each package into debian/PACKAGE)
#   bin_dir   built programs (bin lines), lib_dir built libraries (lib lines)
#   gen_dir   gpud-cli-docs output (gen lines)
#   protocol, static_libs   what the pkg-config file says (pc lines; install-libgpud.sh sets them)

manifest_file="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/manifest"
declare -A manifest_dirs

# manifest_layout LAYOUT PREFIX: where each {placeholder} points.
#   local   PREFIX for programs, libraries and docs; /etc for what systemd and D-Bus read, as
#           an administrator's own files go there
#   debian  /usr, the multiarch library directory, and the package locations (/lib/systemd,
#           /usr/lib/sysusers.d, /usr/share/dbus-1) of Debian 12
manifest_layout() {
    local layout=$1 prefix=$2
    local version major
    # libgpud's version is its crate's; the major is the soname's.
    version=$(sed -n 's/^version = "\(.*\)"/\1/p' "$(dirname "$manifest_file")/../client/c/Cargo.toml" | head -1)
    major=${version%%.*}
    manifest_dirs=(
        [bindir]="$prefix/bin"
        [libdir]="$prefix/lib"
        # Libraries of gpud's own that no program links: gpudctl finds them in ../lib/gpud.
        [pkglibdir]="$prefix/lib/gpud"
        [includedir]="$prefix/include"
        [mandir]="$prefix/share/man"
        [docdir]="$prefix/share/doc/gpud"
        [datadir]="$prefix/share/gpud"
        [bashcompdir]="$prefix/share/bash-completion/completions"
        [zshcompdir]="$prefix/share/zsh/site-functions"
        [fishcompdir]="$prefix/share/fish/vendor_completions.d"
        [unitdir]=/etc/systemd/system
        [sysusersdir]=/etc/sysusers.d
        [tmpfilesdir]=/etc/tmpfiles.d
        [dbuspolicydir]=/etc/dbus-1/system.d
        [sysconfdir]=/etc
        [libversion]="$version"
        [libmajor]="$major"
        [prefix]="$prefix"
    )
    case "$layout" in
        local) ;;
        debian)
            if [ "$prefix" != /usr ]; then
                echo "manifest: the debian layout is for prefix /usr (got $prefix)" >&2
                return 2
            fi
            manifest_dirs[libdir]="/usr/lib/$(dpkg-architecture -qDEB_HOST_MULTIARCH)"
            manifest_dirs[zshcompdir]=/usr/share/zsh/vendor-completions
            manifest_dirs[unitdir]=/lib/systemd/system
            manifest_dirs[sysusersdir]=/usr/lib/sysusers.d
            manifest_dirs[tmpfilesdir]=/usr/lib/tmpfiles.d
            manifest_dirs[dbuspolicydir]=/usr/share/dbus-1/system.d
            ;;
        *) echo "manifest: unknown layout $layout (local or debian)" >&2; return 2 ;;
    esac
}

# manifest_expand TEXT: TEXT with each {placeholder} replaced; an unknown one is an error.
manifest_expand() {
    local text=$1 key
    for key in "${!manifest_dirs[@]}"; do
        text=${text//\{$key\}/${manifest_dirs[$key]}}
    done
    if [[ "$text" == *\{*\}* ]]; then
        echo "manifest: unknown placeholder in $1" >&2
        return 1
    fi
    printf '%s\n' "$text"
}

# manifest_lines PACKAGE...: "package kind mode source destination" of those packages, expanded.
manifest_lines() {
    local package kind mode source dest wanted
    while read -r package kind mode source dest; do
        case "$package" in ''|'#'*) continue ;; esac
        for wanted in "$@"; do
            if [ "$package" = "$wanted" ]; then
                printf '%s %s %s %s %s\n' "$package" "$kind" "$mode" \
                    "$(manifest_expand "$source")" "$(manifest_expand "$dest")"
            fi
        done
    done < "$manifest_file"
}

# manifest_source_dir KIND: where a line's source is read from.
manifest_source_dir() {
    case "$1" in
        bin) printf '%s\n' "$bin_dir" ;;
        lib) printf '%s\n' "$lib_dir" ;;
        gen) printf '%s\n' "$gen_dir" ;;
        *) printf '%s\n' "$(dirname "$manifest_file")/.." ;;
    esac
}

# manifest_install PACKAGE...: installs every line of those packages.
manifest_install() {
    local package kind mode source dest root from matches f
    while read -r package kind mode source dest; do
        root=${destdir//\{package\}/$package}
        from="$(manifest_source_dir "$kind")/$source"
        if [ "$kind" = link ]; then
            install -d "$root$(dirname "$dest")"
            ln -sfn "$source" "$root$dest"
            continue
        fi
        if [[ "$source" == *'*'* ]]; then
            # shellcheck disable=SC2206 # the glob is the point
            matches=($from)
            if [ ! -e "${matches[0]}" ]; then
                echo "manifest: nothing matches $from" >&2
                return 1
            fi
            install -d "$root$dest"
            for f in "${matches[@]}"; do
                install -m "$mode" "$f" "$root$dest"
            done
            continue
        fi
        if [ ! -f "$from" ]; then
            echo "manifest: $from is missing" >&2
            return 1
        fi
        install -d "$root$(dirname "$dest")"
        case "$kind" in
            unit)
                # The units name /usr/local (the local layout's default prefix).
                sed "s#/usr/local#${manifest_dirs[prefix]}#g" "$from" > "$root$dest"
                chmod "$mode" "$root$dest"
                ;;
            pc)
                sed -e "s|@PREFIX@|${manifest_dirs[prefix]}|" -e "s|@LIBDIR@|${manifest_dirs[libdir]}|" \
                    -e "s|@INCLUDEDIR@|${manifest_dirs[includedir]}|" \
                    -e "s|@VERSION@|${manifest_dirs[libversion]}|" -e "s|@PROTOCOL@|$protocol|" \
                    -e "s|@STATIC_LIBS@|$static_libs|" "$from" > "$root$dest"
                chmod "$mode" "$root$dest"
                ;;
            config)
                if [ -e "$root$dest" ]; then
                    install -m "$mode" "$from" "$root$dest.new"
                    echo "kept the existing $dest; the example is $dest.new"
                else
                    install -m "$mode" "$from" "$root$dest"
                fi
                ;;
            *) install -m "$mode" "$from" "$root$dest" ;;
        esac
    done < <(manifest_lines "$@")
}

# manifest_uninstall PACKAGE...: removes what manifest_install put there, configs excepted;
# a glob line removes the matches of its file pattern in the destination directory.
manifest_uninstall() {
    local package kind mode source dest root pattern
    while read -r package kind mode source dest; do
        root=${destdir//\{package\}/$package}
        case "$kind" in
            config) continue ;;
        esac
        if [[ "$source" == *'*'* ]]; then
            pattern=$(basename "$source")
            # shellcheck disable=SC2086 # the glob is the point
            rm -f "$root$dest"$pattern
            rmdir "$root$dest" 2>/dev/null || true
        else
            rm -f "$root$dest"
        fi
    done < <(manifest_lines "$@")
}
