#!/bin/sh
# archsmith's CI checks for any CI system: one entry point, one line per job.
#
#   ci/archsmith-ci.sh extension SOURCE ARCHS   build a torch extension for exactly ARCHS and
#                                               assert the wheel carries them (build-ext + verify)
#   ci/archsmith-ci.sh env PYTHON [NAME==VER]…  verify a Python environment after an upgrade
#                                               (JUnit in $ARCHSMITH_JUNIT, default verify-env.xml)
#   ci/archsmith-ci.sh pins [PATH]              check requirement files for contradictions
#   ci/archsmith-ci.sh upgrade FROM TO [PATH]   list torch APIs the upgrade breaks
#
# archsmith is $ARCHSMITH if set, else `archsmith` on PATH (cargo install --path xtask, or its
# wheel), else `cargo xtask` inside archsmith's own repository. Extra options for verify env come
# from $ARCHSMITH_ENV_ARGS (e.g. "--expect-cuda 13.2 --expect-arch 7.5;8.9;9.0 --no-conda").
# pins and upgrade print findings as $ARCHSMITH_FORMAT: plain (file:line:col, the default), github
# (annotations on the pull request), sarif (code scanning) or table.
set -eu

if [ -n "${ARCHSMITH:-}" ]; then
  run() { "$ARCHSMITH" "$@"; }
elif command -v archsmith >/dev/null 2>&1; then
  run() { archsmith "$@"; }
else
  run() { cargo xtask "$@"; }
fi

usage() {
  sed -n '2,16p' "$0" >&2
  exit 2
}

[ $# -ge 1 ] || usage
job=$1
shift
case "$job" in
  extension)
    [ $# -eq 2 ] || usage
    out=${ARCHSMITH_OUT:-dist}
    run build-ext "$1" --arch "$2" --out "$out"
    for wheel in "$out"/*.whl; do
      run verify binary "$wheel" --expect-arch "$2" --strict
    done
    ;;
  env)
    [ $# -ge 1 ] || usage
    python=$1
    shift
    set -- "$@"
    expects=""
    for e in "$@"; do expects="$expects --expect $e"; done
    # shellcheck disable=SC2086 # word splitting of the option lists is intended
    run verify env --python "$python" $expects ${ARCHSMITH_ENV_ARGS:-} --junit "${ARCHSMITH_JUNIT:-verify-env.xml}"
    ;;
  pins)
    run verify pins --format "${ARCHSMITH_FORMAT:-plain}" "${1:-.}"
    ;;
  upgrade)
    [ $# -ge 2 ] || usage
    run audit upgrade --from "$1" --to "$2" --format "${ARCHSMITH_FORMAT:-plain}" "${3:-.}"
    ;;
  *)
    usage
    ;;
esac
