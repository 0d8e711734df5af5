#!/bin/sh
# Verify a paretune artifact file offline with standard tools only: grep, head, tail, cut,
# sed, sha256sum, base64 and openssl 3 (see docs/artifacts.md).
#   usage: sh verify-artifact.sh ARTIFACT.json PUBLIC_KEY.pem
# The file is canonical JSON, so the signed document bytes appear in it verbatim: between
# '{"document":' (the first 12 bytes) and the last ',"sha256":"'.
set -eu
file=$1
key=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

end=$(grep -abo ',"sha256":"' "$file" | tail -n 1 | cut -d: -f1)
head -c "$end" "$file" | tail -c +13 > "$work/document.json"
recorded=$(tail -c +"$((end + 12))" "$file" | cut -c1-64)
actual=$(sha256sum "$work/document.json" | cut -d' ' -f1)
if [ "$actual" != "$recorded" ]; then
    echo "sha256 mismatch: the document hashes to $actual, the file records $recorded" >&2
    exit 1
fi
echo "sha256 OK: $actual"
# the signature is the file's last "value" (greedy match)
sed -n 's/.*"value":"\([A-Za-z0-9+/=]*\)".*/\1/p' "$file" | base64 -d > "$work/signature.bin"
openssl pkeyutl -verify -pubin -inkey "$key" -rawin -in "$work/document.json" -sigfile "$work/signature.bin"
