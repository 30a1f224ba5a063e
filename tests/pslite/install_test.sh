#!/usr/bin/env bash
# Install.ExternalProjectBuildsAndRuns: installs this build into PREFIX, builds tests/external_project
# against it with find_package(pstwin) and, separately, with `pkg-config pstwin`, runs both as ps-lite
# jobs (and as a module in the installed pstwin-simapp), and checks that the installed `pstwin node`
# reads its default scenario from PREFIX.
# Usage: install_test.sh BUILD_DIR SOURCE_DIR PREFIX
set -euo pipefail
build=$1 source=$2 prefix=$3
rm -rf "$prefix" "$prefix-user"
cmake --install "$build" --prefix "$prefix" > /dev/null
for f in bin/pstwin include/ps/ps.h share/pstwin/scenarios/quickstart.toml lib/cmake/pstwin/pstwinConfig.cmake \
         lib/pkgconfig/pstwin.pc; do
  [[ -e $prefix/$f ]] || { echo "install_test: $prefix/$f was not installed"; exit 1; }
done

# find_package(pstwin), in a project of its own (its own compiler settings, no pstwin source tree).
cmake -S "$source/tests/external_project" -B "$prefix-user" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" > /dev/null
cmake --build "$prefix-user" > /dev/null
python3 "$source/tests/pslite/run_job.py" --servers 2 --workers 2 -- "$prefix-user/sum_app"

# The module, inside the simulator, where this build has it (not in sanitizer builds).
if [[ -x $prefix/bin/pstwin-simapp ]]; then
  "$prefix/bin/pstwin-simapp" "$prefix/share/pstwin/scenarios/quickstart.toml" "$prefix-user/libsum_app_sim.so" \
    --set roles.servers=2 --set roles.workers=2 --out "$prefix-user/sim" > /dev/null ||
    { echo "install_test: the installed pstwin-simapp did not run the module"; exit 1; }
fi

# pkg-config, the way a Makefile would use it.
flags=$(PKG_CONFIG_PATH="$prefix/lib/pkgconfig" pkg-config --cflags --libs pstwin)
# shellcheck disable=SC2086
c++ "$source/tests/external_project/sum_app.cpp" -o "$prefix-user/sum_app_pc" $flags
python3 "$source/tests/pslite/run_job.py" --servers 1 --workers 1 -- "$prefix-user/sum_app_pc"

# The CUDA module, where this build has one: installed, and the one the installed pstwin opens on the
# device path (ld.so's record of every object each process loaded; exit 2 without a GPU).
if [[ -e $build/src/libpstwin_cuda.so ]]; then
  module=$prefix/lib/pstwin/libpstwin_cuda.so
  [[ -e $module ]] || { echo "install_test: $module was not installed"; exit 1; }
  mkdir -p "$prefix-user/ld"
  (cd / && LD_DEBUG=files LD_DEBUG_OUTPUT="$prefix-user/ld/ld" "$prefix/bin/pstwin" run -q \
     "$prefix/share/pstwin/scenarios/quickstart.toml" --set workload.device=cuda --out "$prefix-user/cuda" \
     > /dev/null 2>&1) || true
  grep -qF "file=$module [" "$prefix-user"/ld/ld.* ||
    { echo "install_test: the installed pstwin did not open $module for workload.device = \"cuda\""; exit 1; }
fi

# The installed binary's default scenario is the installed quickstart: one iteration fewer than the
# source tree's makes the difference visible in the workers' summaries.
iterations=$(sed -n 's/^iterations = \([0-9]*\)$/\1/p' "$prefix/share/pstwin/scenarios/quickstart.toml")
sed -i "s/^iterations = .*/iterations = $((iterations - 1))/" "$prefix/share/pstwin/scenarios/quickstart.toml"
out=$(cd / && python3 "$source/tests/pslite/run_job.py" --servers 2 --workers 4 --worker-ids -- \
      "$prefix/bin/pstwin" node 2>&1 || true)
grep -q "worker rank 0 (node 9): $((iterations - 1)) iterations" <<<"$out" || {
  echo "$out"
  echo "install_test: the installed pstwin node did not run the installed quickstart ($((iterations - 1)) iterations)"
  exit 1
}
# pstwin.torch, where this build has it: the installed module loads the installed libpstwin.
if compgen -G "$build/python/pstwin/_core*.so" > /dev/null; then
  site=$(compgen -G "$prefix/lib/python3*/dist-packages" | head -1)
  [[ -n $site && -e $site/pstwin/torch/__init__.py ]] || { echo "install_test: pstwin.torch was not installed"; exit 1; }
  core=$(cd / && PYTHONPATH="$site" python3 -c "import pstwin._core as c; print(c.__file__)")
  [[ $core == "$site"/* ]] || { echo "install_test: pstwin._core came from $core, not $site"; exit 1; }
  lib=$(ldd "$core" | awk '/libpstwin\.so/ {print $3}')
  [[ -n $lib && $(readlink -f "$lib") == $(readlink -f "$prefix/lib/libpstwin.so") ]] ||
    { echo "install_test: $core loads '$lib', not $prefix/lib/libpstwin.so"; exit 1; }
fi
echo "install_test: ok"
