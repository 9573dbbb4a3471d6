"""A ported maskrcnn-benchmark on the current torch: the import sweep of the package and a CPU
forward pass through its `_C` (default config, and optionally a config file such as
configs/e2e_mask_rcnn_R_50_FPN_1x.yaml). Random weights and one random 3x224x224 image in eval
mode: this proves the model is built and runs, not its accuracy.

    python maskrcnn_forward.py [--config FILE]

Prints one JSON line: modules imported, failures, and per config the boxes, fields and seconds.
"""
import importlib
import json
import pkgutil
import sys
import time

import torch

import maskrcnn_benchmark

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
    configs.append(sys.argv[sys.argv.index("--config") + 1])
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
    images = to_image_list([torch.rand(3, 224, 224)], c.DATALOADER.SIZE_DIVISIBILITY)
    start = time.time()
    with torch.no_grad():
        out = model(images)
    report["forward"].append({
        "config": path or "default",
        "backbone": c.MODEL.BACKBONE.CONV_BODY,
        "mask_on": c.MODEL.MASK_ON,
        "boxes": len(out[0]),
        "fields": out[0].fields(),
        "seconds": round(time.time() - start, 2),
    })
print(json.dumps(report))
