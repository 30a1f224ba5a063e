#!/usr/bin/env bash
# Fails, listing the files, when a tracked C++ file differs from what clang-format makes of it
# (.clang-format at the top). Fix with: clang-format -i $(git ls-files '*.cpp' '*.hpp')
set -euo pipefail
cd "${1:-$(dirname "$0")/..}"
if ! command -v clang-format > /dev/null; then
  echo "check_format: clang-format is not installed (bash .ci/setup installs it)" >&2
  exit 1
fi
mapfile -t files < <(git ls-files --cached --others --exclude-standard '*.cpp' '*.hpp' 2> /dev/null || find src sim realnet tests bench -name '*.[ch]pp')
bad=()
for f in "${files[@]}"; do
  clang-format --dry-run --Werror "$f" > /dev/null 2>&1 || bad+=("$f")
done
echo "format: ${#files[@]} files checked, ${#bad[@]} not formatted"
if ((${#bad[@]})); then
  printf '  %s\n' "${bad[@]}"
  echo "fix with: clang-format -i ${bad[*]}"
  exit 1
fi
