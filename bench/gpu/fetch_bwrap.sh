#!/usr/bin/env bash
# Put Debian 12's bubblewrap, with the libraries it links (libcap2, libselinux1, libpcre2-8-0),
# into .bwrap/ (ignored by git), for a GPU machine that has no bubblewrap package and no
# network. .bwrap/bwrap runs it through the host's dynamic loader with those libraries, so
# nothing of the host's /lib is replaced and the sandboxed process inherits no
# LD_LIBRARY_PATH.
#
#   bench/gpu/fetch_bwrap.sh             # then carry .bwrap and pass --bwrap .bwrap/bwrap
set -euo pipefail
cd "$(dirname "$0")/../.."
grep -qx '/.bwrap/' .git/info/exclude 2>/dev/null || echo '/.bwrap/' >> .git/info/exclude
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$work" && apt-get download bubblewrap libcap2 libselinux1 libpcre2-8-0 >/dev/null 2>&1)
for deb in "$work"/*.deb; do dpkg -x "$deb" "$work/root"; done
rm -rf .bwrap && mkdir -p .bwrap/lib
cp "$work/root/usr/bin/bwrap" .bwrap/bwrap.bin
cp -L "$work"/root/lib/x86_64-linux-gnu/*.so* "$work"/root/usr/lib/x86_64-linux-gnu/*.so* .bwrap/lib/ 2>/dev/null || true
cat > .bwrap/bwrap <<'WRAPPER'
#!/bin/sh
d=$(dirname "$(readlink -f "$0")")
exec /lib64/ld-linux-x86-64.so.2 --library-path "$d/lib" "$d/bwrap.bin" "$@"
WRAPPER
chmod +x .bwrap/bwrap
.bwrap/bwrap --version
