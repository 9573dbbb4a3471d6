"""A ported maskrcnn-benchmark on the current torch: the import sweep of the package and a CPU
forward pass through its `_C` (default config, and optionally a config file such as
configs/e2e_mask_rcnn_R_50_FPN_1x.yaml). Random weights and one random 3x224x224 image in eval
mode: this proves the model is built and runs, not its accuracy.

    python maskrcnn_forward.py [--config FILE] [--state FILE] [--dump FILE]

Prints one JSON line: modules imported, failures, and per config the boxes, fields and seconds.
To compare two builds (an ordinary and a stable port, two torch releases): `--state FILE` saves
each config's random weights and image there on the first run and loads them on the next (the
same model whatever each torch's random generator does), and `--dump FILE` saves the detections
(boxes, scores, labels, masks) for `compare`:

    python maskrcnn_forward.py compare A.pt B.pt
"""
import importlib
import json
import os
import pkgutil
import sys
import time

import torch


def flag(name):
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else None


def compare(a_path, b_path):
    """Per config and field: equal shapes, and the largest absolute difference."""
    a, b = torch.load(a_path), torch.load(b_path)
    out = {}
    for config in a:
        out[config] = {}
        for field, x in a[config].items():
            y = b[config].get(field)
            if y is None or x.shape != y.shape:
                out[config][field] = "shape %s vs %s" % (tuple(x.shape), None if y is None else tuple(y.shape))
            elif x.numel() == 0:
                out[config][field] = "both empty"
            else:
                out[config][field] = float((x.double() - y.double()).abs().max())
    print(json.dumps(out))


if len(sys.argv) == 4 and sys.argv[1] == "compare":
    compare(sys.argv[2], sys.argv[3])
    sys.exit(0)

import maskrcnn_benchmark  # noqa: E402

report = {"torch": torch.__version__, "imported": 0, "failures": {}, "forward": []}
for m in pkgutil.walk_packages(maskrcnn_benchmark.__path__, "maskrcnn_benchmark."):
    try:
        importlib.import_module(m.name)
        report["imported"] += 1
    except BaseException as e:  # one module's failure must not end the sweep
        report["failures"][m.name] = "%s: %s" % (type(e).__name__, e)

from maskrcnn_benchmark.config import cfg  # noqa: E402
from maskrcnn_benchmark.modeling.detector import build_detection_model  # noqa: E402
from maskrcnn_benchmark.structures.image_list import to_image_list  # noqa: E402

configs = [None]
if "--config" in sys.argv:
    configs.append(flag("--config"))
state_path, dump_path = flag("--state"), flag("--dump")
state = torch.load(state_path) if state_path and os.path.exists(state_path) else {}
dump = {}
for path in configs:
    c = cfg.clone()
    c.defrost()
    if path:
        c.merge_from_file(path)
        c.MODEL.WEIGHT = ""
        c.MODEL.ROI_HEADS.SCORE_THRESH = 0.0
    c.MODEL.DEVICE = "cpu"
    c.freeze()
    torch.manual_seed(0)
    model = build_detection_model(c).eval()
    image = torch.rand(3, 224, 224)
    key = path or "default"
    if key in state:
        model.load_state_dict(state[key]["model"])
        image = state[key]["image"]
    else:
        state[key] = {"model": model.state_dict(), "image": image}
    images = to_image_list([image], c.DATALOADER.SIZE_DIVISIBILITY)
    start = time.time()
    with torch.no_grad():
        out = model(images)
    dump[key] = {"boxes": out[0].bbox}
    dump[key].update({f: out[0].get_field(f) for f in out[0].fields()})
    report["forward"].append({
        "config": path or "default",
        "backbone": c.MODEL.BACKBONE.CONV_BODY,
        "mask_on": c.MODEL.MASK_ON,
        "boxes": len(out[0]),
        "fields": out[0].fields(),
        "seconds": round(time.time() - start, 2),
    })
if state_path and not os.path.exists(state_path):
    torch.save(state, state_path)
if dump_path:
    torch.save(dump, dump_path)
print(json.dumps(report))
