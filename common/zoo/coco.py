"""What the detection and segmentation models (SSD, Mask R-CNN) share beyond COCO's data
(zoo.data.coco): every rank's detections merged into one list, and pycocotools scoring in a background
process so that training goes on while it scores.
"""

from __future__ import annotations

import concurrent.futures
import multiprocessing


def merge_rank_detections(parts: list[list[dict]]) -> list[dict]:
    """One list of COCO detection results from every rank's: a distributed sampler pads the last
    shard with repeated images, so each image's results are kept from the first rank that has them."""
    merged, seen = [], set()
    for part in parts:
        ids = {r["image_id"] for r in part}
        merged += [r for r in part if r["image_id"] not in seen]
        seen |= ids
    return merged


class AsyncScorer:
    """Runs ``score(annotation_file, results, image_ids)`` (a module-level function, e.g. a model's
    pycocotools mAP) in a background process, so training goes on while it scores."""

    def __init__(self, score) -> None:
        self._score = score
        self._pool = concurrent.futures.ProcessPoolExecutor(
            1, mp_context=multiprocessing.get_context("spawn")
        )
        self._pending: list[tuple[int, concurrent.futures.Future]] = []

    def submit(self, epoch: int, annotation_file: str, results: list[dict], image_ids=None) -> None:
        self._pending.append((epoch, self._pool.submit(self._score, annotation_file, results, image_ids)))

    def done(self, wait: bool = False) -> list[tuple[int, dict]]:
        """Finished scores as (epoch, stats), oldest first; ``wait`` blocks for all pending ones."""
        out, still = [], []
        for epoch, fut in self._pending:
            if wait or fut.done():
                out.append((epoch, fut.result()))
            else:
                still.append((epoch, fut))
        self._pending = still
        return out

    def close(self) -> None:
        self._pool.shutdown(wait=True)
