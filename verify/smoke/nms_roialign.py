"""Compares an extension's NMS and ROIAlign forward with torchvision.ops on seeded random inputs.

    python nms_roialign.py --module legacy_demo._C [--roi-align-aligned-arg] [--nms-plus-one]

The module must expose `nms(dets, scores, iou_threshold)` and `roi_align_forward(input, rois,
spatial_scale, pooled_height, pooled_width, sampling_ratio[, aligned])` (rois: [K, 5] = batch
index, x1, y1, x2, y2), as maskrcnn-benchmark-style extensions do.

* NMS: the kept indices must equal torchvision.ops.nms exactly. `--nms-plus-one`: the extension
  uses the legacy pixel-inclusive areas ((x2 - x1 + 1) * (y2 - y1 + 1), maskrcnn-benchmark), which
  is the same as torchvision's NMS on boxes grown by 1 in x2 and y2; it is compared that way.
* ROIAlign: max |ext - torchvision.ops.roi_align| <= --atol, for aligned=False and, with
  `--roi-align-aligned-arg` (the extension takes the flag), aligned=True.
* The inputs must exercise the ops: some boxes suppressed and some kept, ROIAlign outputs not all
  zero; otherwise the script fails, since equality would prove nothing.
* CPU always; CUDA too when torch sees a GPU (else "CUDA ops: skipped: no GPU").

Prints one line per check and, last, `ARCHSMITH_SMOKE {json}` with the numbers. Exit 0 when every
check passed, 1 when one failed.
"""

import argparse
import importlib
import json
import sys

import torch
import torchvision


def random_boxes(gen, n, device):
    xy = torch.rand(n, 2, generator=gen) * 100
    wh = torch.rand(n, 2, generator=gen) * 49 + 1
    return torch.cat([xy, xy + wh], 1).to(device)


def check_nms(ext, device, plus_one, any_order, gen):
    cases = boxes = kept = mismatches = 0
    first_bad = None
    for n in (1, 2, 10, 100, 500, 2000):
        for thr in (0.3, 0.5, 0.7):
            dets = random_boxes(gen, n, "cpu").to(device)
            scores = torch.rand(n, generator=gen).to(device)
            got = ext.nms(dets, scores, thr).cpu()
            ref_dets = dets + torch.tensor([0.0, 0.0, 1.0, 1.0], device=device) if plus_one else dets
            want = torchvision.ops.nms(ref_dets, scores, thr).cpu()
            if any_order:
                got, want = got.sort().values, want.sort().values
            cases += 1
            boxes += n
            kept += want.numel()
            if got.dtype != torch.int64 or not torch.equal(got, want):
                mismatches += 1
                if first_bad is None:
                    first_bad = f"n={n} thr={thr}: kept {got.numel()} boxes {got[:8].tolist()}..., torchvision kept {want.numel()} {want[:8].tolist()}..."
    return {
        "cases": cases,
        "boxes": boxes,
        "kept": kept,
        "mismatches": mismatches,
        "first_mismatch": first_bad,
    }


def check_roi_align(ext, device, aligned, has_aligned_arg, atol, gen):
    cases = outputs = 0
    max_diff = 0.0
    max_abs_value = 0.0
    for n, c, h, w in ((1, 1, 10, 12), (2, 3, 24, 20)):
        x = torch.randn(n, c, h, w, generator=gen).to(device)
        for scale in (1.0, 0.5):
            for ph, pw in ((7, 7), (5, 3)):
                for sampling in (2, 0):
                    k = 30
                    # boxes in input coordinates, some reaching past the border, some tiny
                    xy = torch.rand(k, 2, generator=gen) * (torch.tensor([w, h]) / scale) - 2
                    wh = torch.rand(k, 2, generator=gen) * (torch.tensor([w, h]) / scale) * 0.7 + 0.2
                    idx = torch.randint(0, n, (k, 1), generator=gen).float()
                    rois = torch.cat([idx, xy, xy + wh], 1).to(device)
                    args = (x, rois, scale, ph, pw, sampling)
                    got = ext.roi_align_forward(*args, aligned) if has_aligned_arg else ext.roi_align_forward(*args)
                    want = torchvision.ops.roi_align(
                        x, rois, (ph, pw), spatial_scale=scale, sampling_ratio=sampling, aligned=aligned
                    )
                    if got.shape != want.shape:
                        raise SystemExit(f"roi_align_forward returned shape {tuple(got.shape)}, torchvision {tuple(want.shape)}")
                    cases += 1
                    outputs += want.numel()
                    max_diff = max(max_diff, (got - want).abs().max().item())
                    max_abs_value = max(max_abs_value, want.abs().max().item())
    return {
        "cases": cases,
        "outputs": outputs,
        "max_abs_diff": max_diff,
        "max_abs_value": max_abs_value,
        "atol": atol,
    }


def run_device(ext, device, args):
    gen = torch.Generator().manual_seed(args.seed)
    res = {"nms": check_nms(ext, device, args.nms_plus_one, args.nms_any_order, gen)}
    flags = (False, True) if args.roi_align_aligned_arg else (False,)
    for aligned in flags:
        res[f"roi_align_aligned_{str(aligned).lower()}"] = check_roi_align(
            ext, device, aligned, args.roi_align_aligned_arg, args.atol, gen
        )
    return res


def failures(device, res):
    out = []
    nms = res["nms"]
    print(f"{device} nms: {nms['cases']} cases, {nms['boxes']} boxes, {nms['kept']} kept by torchvision, {nms['mismatches']} mismatching")
    if nms["mismatches"]:
        out.append(f"{device} nms differs from torchvision.ops.nms in {nms['mismatches']} of {nms['cases']} cases; first: {nms['first_mismatch']}")
    if nms["kept"] in (0, nms["boxes"]):
        out.append(f"{device} nms: the inputs kept {nms['kept']} of {nms['boxes']} boxes, so the comparison proves nothing")
    for key, r in res.items():
        if not key.startswith("roi_align"):
            continue
        print(f"{device} {key}: {r['cases']} cases, {r['outputs']} outputs, max |diff| {r['max_abs_diff']:.3g} (atol {r['atol']:g})")
        if not r["max_abs_diff"] <= r["atol"]:
            out.append(f"{device} {key}: max |diff| vs torchvision.ops.roi_align is {r['max_abs_diff']:.3g} > {r['atol']:g}")
        if r["max_abs_value"] == 0.0:
            out.append(f"{device} {key}: every output is zero, so the comparison proves nothing")
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--module", required=True)
    p.add_argument("--roi-align-aligned-arg", action="store_true")
    p.add_argument("--nms-plus-one", action="store_true")
    p.add_argument("--nms-any-order", action="store_true")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--atol", type=float, default=1e-5)
    args = p.parse_args()

    ext = importlib.import_module(args.module)
    report = {"module": args.module, "seed": args.seed, "nms_plus_one": args.nms_plus_one, "nms_any_order": args.nms_any_order, "torch": torch.__version__, "torch_cuda": torch.version.cuda, "torchvision": torchvision.__version__}
    problems = []
    report["cpu"] = run_device(ext, "cpu", args)
    problems += failures("cpu", report["cpu"])
    if torch.cuda.is_available():
        report["cuda"] = run_device(ext, "cuda", args)
        problems += failures("cuda", report["cuda"])
    else:
        report["cuda"] = "skipped: no GPU"
        print("CUDA ops: skipped: no GPU")
    report["problems"] = problems
    report["ok"] = not problems
    for msg in problems:
        print(f"FAIL: {msg}", file=sys.stderr)
    print("ARCHSMITH_SMOKE " + json.dumps(report))
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main())
