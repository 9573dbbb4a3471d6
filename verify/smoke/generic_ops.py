"""The smoke test of a recipe-less port: what can be checked of an extension nobody described.

usage: generic_ops.py --module PKG._C [--module ...]

For each module: import it; list the functions it defines (pybind11 or the CPython API) and the
torch operators its import registered with the dispatcher (TORCH_LIBRARY); then call, on small CPU
inputs, every one whose argument types are known:
  * an operator that has a CPU kernel (the dispatcher says so), with inputs made from its schema;
  * a pybind11 function whose signature names only tensors, floats, ints and bools, unless its
    module is named for CUDA (`hash_cuda`): legacy CUDA functions seldom check the device.
A call that raises is reported, not failed: a generic input cannot know the shapes an op needs, and
the message shows the op ran its own checks; one that raises because it wants a CUDA tensor
(`CHECK_CUDA`) is a CUDA op, skipped without a GPU. Each call runs in a forked child, so a crash (a
segfault in the extension's CPU code on a shape it never checks) is contained and reported as
`crashed` with its signal: legacy ops seldom check shapes, and whether reading past a wrongly
shaped tensor faults depends on the heap's layout (DCNv2's and chamferdist's backward passes raised
on one host and crashed on another), so a crash on a guessed input says nothing of the op on its
real inputs and is a warning, not a failure. Without a GPU (a port's build host seldom has one),
a CUDA module's functions are skipped ("CUDA ops: skipped: no GPU"); with one, they are called on
CUDA tensors. The parent never initializes CUDA (torch's NVML-based availability check), so a
forked child still can.

Prints one line per module and, last, `ARCHSMITH_SMOKE {json}`; exit 0 when every module imports.
"""

import argparse
import importlib
import inspect
import json
import os
import re
import signal
import sys

# Ask NVML, not the CUDA driver, whether a GPU is there: a parent that initialized the driver
# could not fork children that use CUDA.
os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")

import torch  # noqa: E402

GPU = torch.cuda.is_available()
NO_GPU = "CUDA ops: skipped: no GPU"
from archsmith_no_gpu import NO_GPU as NO_GPU_ERROR, WANTS_CUDA  # noqa: E402  (beside this script)

# Modules named for CUDA (`hash_cuda`, `nms_gpu`): their functions are not called on CPU inputs.
CUDA_MODULE = re.compile(r"(^|_)(cuda|gpu)($|_)", re.IGNORECASE)

# pybind11 docstring signatures: `name(arg0: torch.Tensor, arg1: float) -> torch.Tensor`.
PYBIND_SIG = re.compile(r"^\s*(?:\d+\.\s*)?(\w+)\((.*)\)\s*->\s*(.+)$")


def value_for(type_name):
    """A small CPU value of a type named by a schema or a pybind11 signature; None if unknown."""
    t = type_name.strip().replace("torch.", "").replace("at::", "")
    # pybind11 ≥ 2.12 writes the types a C++ double or int accepts as unions of protocols.
    if "|" in t:
        for part in t.split("|"):
            v = value_for(part)
            if v is not None:
                return v
        return None
    t = {"typing.SupportsFloat": "float", "typing.SupportsIndex": "int", "typing.SupportsInt": "int"}.get(t, t)
    if t.endswith("?") or t.startswith("Optional["):
        return ("none", None)
    if t in ("Tensor", "Tensor(a)", "Tensor(a!)"):
        return ("tensor", SHAPE)
    if t in ("float", "double", "SymFloat"):
        return ("float", 0.5)
    if t in ("int", "SymInt"):
        return ("int", 2)
    if t == "bool":
        return ("bool", False)
    if t in ("Tensor[]", "List[Tensor]", "list[torch.Tensor]"):
        return ("tensors", [SHAPE, SHAPE])
    if t in ("int[]", "SymInt[]", "List[int]", "list[int]"):
        return ("ints", [2, 2])
    return None


# Stands for "a tensor" in an argument list until a call fills in one of SHAPES.
SHAPE = object()
# Tensor shapes tried in turn (the same for every tensor argument): a matrix, an NCHW batch, a
# vector. Ops check ranks first, so a wrong rank raises before any kernel runs.
SHAPES = [(4, 4), (2, 3, 8, 8), (8,)]


def fill(args, shape, device="cpu"):
    def one(a):
        if a is SHAPE:
            return torch.rand(*shape, device=device)
        if isinstance(a, list):
            return [one(x) for x in a]
        return a

    return [one(a) for a in args]


def call(label, fn, args, device="cpu"):
    tries = SHAPES if any(a is SHAPE or isinstance(a, list) and SHAPE in a for a in args) else [None]
    first = None
    for shape in tries:
        print(f"smoke: calling {label} with {shape or 'no'} tensors", file=sys.stderr, flush=True)
        outcome = in_child(fn, fill(args, shape, device))
        if outcome["kind"] == "crashed":
            return {"name": label, "status": "crashed",
                    "detail": f"{outcome['detail']} on {list(shape) if shape else 'its'} "
                              "tensors: the op does not check its inputs' shapes"}
        if outcome["kind"] == "raised":  # the op's own checks: reported, not a failure
            wants = WANTS_CUDA.search(outcome["detail"]) or NO_GPU_ERROR.search(outcome["detail"])
            if device == "cpu" and not GPU and wants:
                return {"name": label, "status": "skipped", "detail": f"{NO_GPU} (it said: {outcome['detail']})"}
            first = first or outcome["detail"]
            continue
        given = f"{list(shape)} tensors" if shape else "its arguments"
        return {"name": label, "status": "ran", "detail": f"on {given}, returned {outcome['detail']}"}
    return {"name": label, "status": "raised", "detail": first}


def in_child(fn, args):
    """Run fn(*args) in a forked child: {kind: ran|raised|crashed, detail}."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report on the pipe, never return into the parent's code
        os.close(read)
        try:
            out = fn(*args)
            got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
            msg = {"kind": "ran", "detail": str(got)}
        except Exception as e:
            text = str(e).splitlines()[0][:200] if str(e) else ""
            msg = {"kind": "raised", "detail": f"{type(e).__name__}: {text}"}
        os.write(write, json.dumps(msg).encode())
        os._exit(0)
    os.close(write)
    data = b""
    while chunk := os.read(read, 65536):
        data += chunk
    os.close(read)
    _, status = os.waitpid(pid, 0)
    if data:
        return json.loads(data)
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        name = signal.Signals(number).name if number in signal.valid_signals() else f"signal {number}"
        return {"kind": "crashed", "detail": f"crashed ({name})"}
    return {"kind": "crashed", "detail": f"exited with {os.waitstatus_to_exitcode(status)} before returning"}


def pybind_calls(mod):
    """The module's own functions and a call of each one whose signature is typed."""
    functions, calls = [], []
    for name, obj in sorted(vars(mod).items()):
        if name.startswith("_") or not callable(obj) or inspect.isclass(obj):
            continue
        if getattr(obj, "__module__", mod.__name__) not in (None, mod.__name__):
            continue
        functions.append(name)
        cuda_module = bool(CUDA_MODULE.search(mod.__name__.rsplit(".", 1)[-1]))
        if cuda_module and not GPU:
            # Legacy CUDA modules seldom check the device: given CPU tensors they launch kernels
            # on host pointers and crash. Without a GPU there is nothing to call them with.
            calls.append({"name": name, "status": "skipped", "detail": NO_GPU})
            continue
        doc = (getattr(obj, "__doc__", None) or "").strip().splitlines()
        m = PYBIND_SIG.match(doc[0]) if doc else None
        if not m:
            calls.append({"name": name, "status": "skipped", "detail": "no typed signature"})
            continue
        params = [p for p in m.group(2).split(",") if p.strip()]
        args = []
        for p in params:
            _, _, t = p.partition(":")
            v = value_for(t.split("=")[0])
            if v is None:
                break
            args.append(v[1])
        else:
            calls.append(call(f"{mod.__name__}.{name}", obj, args, "cuda" if cuda_module else "cpu"))
            continue
        calls.append({"name": name, "status": "skipped", "detail": f"argument types not generic: {m.group(2)}"})
    return functions, calls


def operator_calls(names):
    calls = []
    for qualname in names:
        ns, _, rest = qualname.partition("::")
        op_name, _, overload = rest.partition(".")
        has_cpu = any(
            torch._C._dispatch_has_kernel_for_dispatch_key(qualname, key)
            for key in ("CPU", "CompositeImplicitAutograd", "CompositeExplicitAutograd")
        )
        if not has_cpu:
            calls.append({"name": qualname, "status": "skipped", "detail": "no CPU kernel"})
            continue
        packet = getattr(getattr(torch.ops, ns), op_name)
        fn = getattr(packet, overload or "default")
        args = []
        for a in fn._schema.arguments:
            if a.kwarg_only:
                continue
            v = value_for(str(a.type))
            if v is None:
                break
            args.append(v[1])
        else:
            calls.append(call(qualname, fn, args))
            continue
        calls.append({"name": qualname, "status": "skipped", "detail": f"argument types not generic: {fn._schema}"})
    return calls


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--module", action="append", required=True)
    a = ap.parse_args()
    report = {"ok": True, "problems": [], "modules": {}}
    for name in a.module:
        before = set(torch._C._dispatch_get_all_op_names())
        try:
            mod = importlib.import_module(name)
        except Exception as e:
            report["ok"] = False
            report["problems"].append(f"{name} does not import: {type(e).__name__}: {e}")
            continue
        ops = sorted(set(torch._C._dispatch_get_all_op_names()) - before)
        functions, calls = pybind_calls(mod)
        calls += operator_calls(ops)
        ran = sum(c["status"] == "ran" for c in calls)
        raised = sum(c["status"] == "raised" for c in calls)
        crashed = sum(c["status"] == "crashed" for c in calls)
        print(
            f"{name}: {len(functions)} function(s), {len(ops)} operator(s); "
            f"{ran} ran on CPU inputs, {raised} raised, {crashed} crashed on guessed inputs, "
            f"{len(calls) - ran - raised - crashed} skipped"
        )
        for c in calls:
            print(f"  {c['name']}: {c['status']} ({c['detail']})")
        report["modules"][name] = {"functions": functions, "operators": ops, "calls": calls}
    print("ARCHSMITH_SMOKE " + json.dumps(report))
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
