#!/usr/bin/env bash
# One GPU check, offline: everything archsmith runs on a GPU, on a machine prepared with a Python
# that has torch (and torchvision), a system CUDA toolkit, cmake and ninja — no network.
#
#   ci/gpu-check.sh ARCHSMITH_BINARY PYTHON [OUT_DIR]
#
# Steps (each a JSON document and a log under OUT_DIR):
#   doctor       the GPU, its compute capability and the driver archsmith sees
#   kernels      archsmith's test kernels built for the GPU's arch, audited, and run against their
#                CPU references (and the binary built with no image for this GPU, which must fail
#                with the explained error)
#   legacy-demo  the legacy NMS + ROIAlign extension ported and built against PYTHON's torch,
#                audited, imported, and its smoke test: NMS and ROIAlign against torchvision on
#                CPU and, with a GPU, on the GPU
#   verify-env   `verify env --gpu-smoke` on PYTHON
# With no GPU the GPU parts say `skipped: no GPU` and the rest must pass.
# The report: OUT_DIR/gpu-check.json and OUT_DIR/gpu-check.junit.xml; exit 0 when nothing failed.
#
# Environment: CUDA_HOME (else /usr/local/cuda*, else nvcc on PATH) picks the toolkit;
# ARCHSMITH_HOME (default OUT_DIR/archsmith-home) is where builds go; GPU_CHECK_ARCH overrides the
# arch (default: the GPU's, else 7.5) and GPU_CHECK_KERNEL_ARCH the test kernels' (default: the
# same; `9.0,9.0a` also builds the Hopper-only kernel); GPU_CHECK_STEP_TIMEOUT bounds each step
# (default 480 s).
set -uo pipefail

if [ $# -lt 2 ]; then
    echo "usage: $0 ARCHSMITH_BINARY PYTHON [OUT_DIR]" >&2
    exit 2
fi
bin=$(realpath "$1")
python=$2
out=$(realpath -m "${3:-gpu-check-out}")
[ -x "$bin" ] || { echo "gpu-check: $1 is not an executable archsmith binary" >&2; exit 2; }
"$python" -c 'import torch' 2>/dev/null || { echo "gpu-check: $python cannot import torch" >&2; exit 2; }
mkdir -p "$out"

export ARCHSMITH_OFFLINE=1
export ARCHSMITH_HOME=${ARCHSMITH_HOME:-$out/archsmith-home}
export PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONUNBUFFERED=1
# The env's own tools (cmake, ninja, pip) come first, as on a host where the env is activated.
PATH="$(dirname "$python"):$PATH"
export PATH
step_timeout=${GPU_CHECK_STEP_TIMEOUT:-480}

# run NAME CMD...: stdout to OUT/NAME.json, stderr to OUT/NAME.log, status and seconds recorded.
run() {
    local name=$1
    shift
    local start=$SECONDS
    echo "gpu-check: $name: $*" >&2
    timeout "$step_timeout" "$@" >"$out/$name.json" 2>"$out/$name.log"
    local rc=$?
    echo "$name $rc $((SECONDS - start))" >>"$out/steps.txt"
    echo "gpu-check: $name: exit $rc, $((SECONDS - start)) s" >&2
}

: >"$out/steps.txt"
run doctor "$bin" doctor --json
arch=${GPU_CHECK_ARCH:-$("$python" - "$out/doctor.json" <<'EOF'
import json, sys
try:
    devices = json.load(open(sys.argv[1])).get("devices") or []
except (OSError, ValueError):
    devices = []
cc = next((d.get("cc") for d in devices if d.get("cc")), None)
if isinstance(cc, dict):
    cc = f"{cc['major']}.{cc['minor']}"
print(cc or "7.5")
EOF
)}
echo "gpu-check: arch $arch" >&2
run kernels "$bin" kernels --arch "${GPU_CHECK_KERNEL_ARCH:-$arch}" --json
run legacy-demo "$bin" port-extension legacy-demo --arch "$arch" --python "$python" --json
run verify-env "$bin" verify env --python "$python" --gpu-smoke --json --junit "$out/verify-env.junit.xml"

"$python" - "$out" "$bin" "$arch" <<'EOF'
import json, os, sys
from xml.sax.saxutils import escape, quoteattr

out, binary, arch = sys.argv[1], sys.argv[2], sys.argv[3]
steps = {}
for line in open(os.path.join(out, "steps.txt")):
    name, rc, secs = line.split()
    steps[name] = (int(rc), int(secs))

def doc(name):
    try:
        return json.load(open(os.path.join(out, name + ".json")))
    except (OSError, ValueError):
        return None

def first_error(name):
    try:
        lines = open(os.path.join(out, name + ".log"), errors="replace").read().splitlines()
    except OSError:
        return ""
    errs = [l for l in lines if l.startswith("error")]
    return (errs or lines[-1:] or [""])[0][:400]

cases = []  # (step, check, status, detail, seconds)
def case(step, check, status, detail, secs=0):
    cases.append({"step": step, "check": check, "status": status, "detail": detail, "seconds": secs})

def failed_step(name, what):
    rc, secs = steps[name]
    case(name, what, "failed", f"exit {rc}: {first_error(name)}", secs)

# doctor
d = doc("doctor")
rc, secs = steps["doctor"]
gpus = (d or {}).get("devices") or []
if rc == 0 and d is not None:
    drv = d.get("driver") or {}
    if gpus:
        case("doctor", "GPU and driver seen", "passed",
             "; ".join(f"{g.get('name')} (cc {g.get('cc')})" for g in gpus) + f", driver {drv}", secs)
    else:
        case("doctor", "GPU and driver seen", "skipped", "skipped: no GPU", secs)
else:
    failed_step("doctor", "GPU and driver seen")
has_gpu = bool(gpus)

# kernels
k = doc("kernels")
rc, secs = steps["kernels"]
if k is None or "kernels" not in k:
    failed_step("kernels", "built and audited")
else:
    built = [x for x in k["kernels"] if x.get("binary")]
    bad = [x["name"] + ": " + x["audit"] for x in built if not x.get("audit_ok")]
    case("kernels", "built and audited", "failed" if bad else "passed",
         "; ".join(bad) or f"{len(built)} kernels for {k.get('cmake_cuda_architectures')} with nvcc {k.get('nvcc_version')} ({k.get('cuda_home')})", secs)
    if not has_gpu:
        case("kernels", "run against CPU references", "skipped", "skipped: no GPU")
    else:
        ran = [x for x in built if x.get("run_result")]
        wrong = [x["name"] + ": " + x["run"] for x in ran if not x["run_result"].get("passed")]
        status = "failed" if wrong or not ran else "passed"
        case("kernels", "run against CPU references", status,
             "; ".join(wrong) or ", ".join(f"{x['name']} {x['run']}" for x in ran) or "no kernel ran")
        demo = k.get("no_image_demo")
        if demo is None:
            case("kernels", "no-image binary fails as explained", "skipped", "no arch without an image for this GPU")
        else:
            case("kernels", "no-image binary fails as explained", "passed" if demo.get("passed") else "failed", demo.get("line", ""))
    if rc != 0 and not any(c["status"] == "failed" for c in cases if c["step"] == "kernels"):
        failed_step("kernels", "verdict")

# legacy-demo port
p = doc("legacy-demo")
rc, secs = steps["legacy-demo"]
smoke = (p or {}).get("smoke") if isinstance(p, dict) else None
if rc == 0 and smoke:
    case("legacy-demo", "ported, built, audited, imported; smoke on CPU", "passed",
         f"cpu: {json.dumps(smoke.get('cpu'))[:300]}", secs)
elif rc != 0:
    failed_step("legacy-demo", "ported, built, audited, imported; smoke on CPU")
else:
    case("legacy-demo", "ported, built, audited, imported; smoke on CPU", "failed", "no smoke report", secs)
cuda = (smoke or {}).get("cuda")
if not has_gpu:
    case("legacy-demo", "smoke on GPU: NMS and ROIAlign against torchvision", "skipped", "skipped: no GPU")
elif isinstance(cuda, dict):
    ok = rc == 0 and smoke.get("ok")
    case("legacy-demo", "smoke on GPU: NMS and ROIAlign against torchvision", "passed" if ok else "failed", json.dumps(cuda)[:400])
else:
    case("legacy-demo", "smoke on GPU: NMS and ROIAlign against torchvision", "failed", str(cuda or "the port did not reach its smoke test"))

# verify env
v = doc("verify-env")
rc, secs = steps["verify-env"]
if v is None or "items" not in v:
    failed_step("verify-env", "verify env")
else:
    for item in v["items"]:
        status = {"ok": "passed", "skipped": "skipped"}.get(item["status"], "failed")
        detail = item.get("detail", "")
        if item["name"] == "gpu smoke" and not has_gpu:
            detail = "skipped: no GPU"
        case("verify-env", item["name"], status, detail, secs if item is v["items"][0] else 0)

failed = [c for c in cases if c["status"] == "failed"]
report = {
    "schema": "archsmith.gpu-check/1",
    "binary": binary,
    "binary_bytes": os.path.getsize(binary),
    "arch": arch,
    "gpu": has_gpu,
    "seconds": sum(s for _, s in steps.values()),
    "steps": {n: {"exit": rc, "seconds": s} for n, (rc, s) in steps.items()},
    "cases": cases,
    "ok": not failed,
}
json.dump(report, open(os.path.join(out, "gpu-check.json"), "w"), indent=2)

with open(os.path.join(out, "gpu-check.junit.xml"), "w") as f:
    f.write('<?xml version="1.0" encoding="UTF-8"?>\n')
    f.write(f'<testsuite name="archsmith-gpu-check" tests="{len(cases)}" failures="{len(failed)}" '
            f'skipped="{sum(c["status"] == "skipped" for c in cases)}" time="{report["seconds"]}">\n')
    for c in cases:
        f.write(f'  <testcase classname={quoteattr(c["step"])} name={quoteattr(c["check"])} time="{c["seconds"]}">')
        if c["status"] == "failed":
            f.write(f'<failure message={quoteattr(c["detail"][:200])}>{escape(c["detail"])}</failure>')
        elif c["status"] == "skipped":
            f.write(f'<skipped message={quoteattr(c["detail"])}/>')
        f.write("</testcase>\n")
    f.write("</testsuite>\n")

width = max(len(c["step"]) for c in cases)
cw = max(len(c["check"]) for c in cases)
for c in cases:
    print(f"{c['step']:<{width}}  {c['check']:<{cw}}  {c['status']:<7}  {c['detail'][:120]}")
print(f"\ngpu-check: {'ok' if not failed else f'{len(failed)} failed'}; {report['seconds']} s; "
      f"binary {report['binary_bytes'] / 1e6:.1f} MB; report {os.path.join(out, 'gpu-check.json')}")
sys.exit(1 if failed else 0)
EOF
