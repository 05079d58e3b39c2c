#!/usr/bin/env bash
# long-files.sh: fail, naming each, when a production .go file is longer
# than MAX_FILE_LINES lines (default 600): a file a newcomer cannot hold in
# mind is split by subject, in place (same package, new files). Test files
# (_test.go), generated files (a "// Code generated … DO NOT EDIT." line)
# and the tools/ module are not counted. Files listed in the allow-list
# (hack/long-files.txt, or $1: one path per line, # comments) are let
# through while they are being split; a listed file that is no longer long
# is named too (a note, not a failure: it was split on another branch),
# for its line to go. Run by `make lint`.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
max=${MAX_FILE_LINES:-600}
allow=${1:-hack/long-files.txt}
declare -A allowed=()
if [[ -f $allow ]]; then
	while IFS= read -r line; do
		line=${line%%#*}
		line=${line//[[:space:]]/}
		[[ -n $line ]] && allowed[$line]=1
	done <"$allow"
fi
status=0
while IFS= read -r f; do
	case $f in
	*_test.go | tools/*) continue ;;
	esac
	[[ -f $f ]] || continue
	grep -qE '^// Code generated .* DO NOT EDIT\.$' "$f" && continue
	n=$(wc -l <"$f")
	if ((n > max)); then
		if [[ -n ${allowed[$f]:-} ]]; then
			unset "allowed[$f]"
			continue
		fi
		echo "$f: $n lines, more than $max (MAX_FILE_LINES): split it by subject"
		status=1
	fi
done < <(git ls-files '*.go')
for f in "${!allowed[@]}"; do
	echo "note: $allow lists $f, which is not a production .go file over $max lines: remove its line" >&2
done
exit $status
