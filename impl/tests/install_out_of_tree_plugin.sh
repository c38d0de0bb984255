#!/usr/bin/env bash
# CTest install_out_of_tree_plugin (impl/CMakeLists.txt): the installed package as a plugin author
# meets it.
#
#   impl/tests/install_out_of_tree_plugin.sh BUILD_DIR
#
# 1. cmake --install BUILD_DIR into a fresh temporary prefix P; its layout is checked.
# 2. impl/plugins/example/ is configured with -DCMAKE_PREFIX_PATH=P alone (the package finds LibTorch
#    through the hint it recorded) and built twice: as is, and with -DEXAMPLE_PLUGIN_PLANT_BUG=ON
#    (the exact erf GELU in its GeGLU).
# 3. P is moved elsewhere, so the installed CLI can only find its data beside itself; there
#    bin/gemma4-conform conform --backend-lib must pass the example in f32 and bf16 (exit 0) and
#    fail the planted bug in f32 (exit 1), in the golden and op_sweep categories.
# 4. Where strace works, the f32 run is traced: it reads golden/ and reference/ data from the moved
#    prefix and nothing from the source or build tree.
# Uses $CMAKE (default cmake) and honours CMAKE_GENERATOR; OMP_NUM_THREADS=1 is CTest's setting.
set -euo pipefail
usage() { sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; }
[ "${1:-}" = --help ] && { usage; exit 0; }
[ $# -eq 1 ] || { usage >&2; exit 2; }
build=$(cd "$1" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
source_dir=$(cd "$here/../.." && pwd)
cmake=${CMAKE:-cmake}
work=$(mktemp -d "${TMPDIR:-/tmp}/gemma4_install_XXXXXX")
trap 'rm -rf "$work"' EXIT
cd "$work"  # (CTest starts it in the build tree, which the installed CLI must not touch)
say() { echo "[install] $*"; }
fail() { echo "[install] FAIL: $*" >&2; exit 1; }

say "cmake --install $build --prefix $work/P"
"$cmake" --install "$build" --prefix "$work/P" >"$work/install.log"
for f in include/gemma4_conformance/impl/plugin_abi.h include/gemma4_conformance/reference/layer_ops.h \
         lib/libgemma4_reference.a lib/cmake/gemma4_conformance/gemma4_conformanceConfig.cmake \
         lib/cmake/gemma4_conformance/gemma4_conformanceConfigVersion.cmake bin/gemma4-conform \
         share/gemma4_conformance/golden/reference/op share/gemma4_conformance/golden/transformers \
         share/gemma4_conformance/golden/FORMAT.md share/gemma4_conformance/reference/configs \
         share/gemma4_conformance/reference/GEMMA4.md; do
  [ -e "$work/P/$f" ] || fail "the install has no $f"
done

build_example() {  # build_example DIR [cmake options...]
  local dir=$1; shift
  say "building impl/plugins/example against P $*"
  "$cmake" -S "$source_dir/impl/plugins/example" -B "$dir" -DCMAKE_PREFIX_PATH="$work/P" "$@" >"$dir.log" 2>&1 ||
    { cat "$dir.log"; fail "configuring the example against the installed package"; }
  "$cmake" --build "$dir" >>"$dir.log" 2>&1 || { cat "$dir.log"; fail "building the example"; }
}
build_example "$work/example"
build_example "$work/example_bug" -DEXAMPLE_PLUGIN_PLANT_BUG=ON
plugin=$work/example/libgemma4_example_plugin.so
bug=$work/example_bug/libgemma4_example_plugin.so

mv "$work/P" "$work/moved"
cli=$work/moved/bin/gemma4-conform
conform() {  # conform EXPECTED_EXIT PLUGIN DTYPE [wrapper...]: runs the moved CLI, checks its exit
  local want=$1 lib=$2 dtype=$3 rc=0 start=$SECONDS; shift 3
  "$@" "$cli" conform --backend-lib "$lib" --dtype "$dtype" --report "$work/report.json" >"$work/conform.log" 2>&1 || rc=$?
  say "conform $(basename "$(dirname "$lib")") $dtype: exit $rc in $((SECONDS - start)) s"
  [ "$rc" -eq "$want" ] || { tail -40 "$work/conform.log"; fail "expected exit $want"; }
}
if strace -f -qq --seccomp-bpf -e trace=%file -o /dev/null true 2>/dev/null; then
  conform 0 "$plugin" f32 strace -f -qq --seccomp-bpf -e trace=%file -o "$work/trace"
  grep -q "$work/moved/bin/../share/gemma4_conformance/golden/reference/op/" "$work/trace" ||
    fail "the installed CLI did not read its installed goldens"
  if grep -E "\"($source_dir/(golden|reference)|$build)/" "$work/trace"; then
    fail "the installed CLI touched the source or build tree (above)"
  fi
else
  say "no working strace: the file-access check is skipped"
  conform 0 "$plugin" f32
fi
conform 0 "$plugin" bf16
conform 1 "$bug" f32
# The planted bug must fail where it lives, not merely make the run exit 1.
for category in golden op_sweep; do
  grep -Eq "^  $category +[0-9]+ / [1-9][0-9]* / " "$work/conform.log" ||
    { cat "$work/conform.log"; fail "the planted bug did not fail in $category"; }
done
say "PASS"
