from legacy_demo import _C

nms = _C.nms
roi_align_forward = _C.roi_align_forward

__all__ = ["nms", "roi_align_forward"]
