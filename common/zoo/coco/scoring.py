"""Detections scored: every rank's detections merged, pycocotools' box and mask AP under the metric
names of zoo.metrics, in a background process while training goes on, and a run's evaluations (which
epochs are scored, the scores logged to metrics.jsonl and MLPerf, the targets checked)."""

import concurrent.futures
import functools
import multiprocessing
import os
import signal
import sys


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
    pycocotools mAP) in a background process, so training goes on while it scores. The process ends
    with training however training ends, SIGKILL included (zoo.dist.end_with_parent), and with it
    multiprocessing's resource tracker (it stops once no process holds its pipe)."""

    def __init__(self, score) -> None:
        from zoo.dist import end_with_parent

        self._score = score
        self._pool = concurrent.futures.ProcessPoolExecutor(
            1,
            mp_context=multiprocessing.get_context("spawn"),
            initializer=functools.partial(end_with_parent, signal.SIGKILL, os.getpid()),
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


# ------------------------------------------------------------------------------------- scoring
# pycocotools' six AP summary numbers (AP@[.5:.95], AP50, AP75, small, medium, large) under the names of
# metrics.jsonl and --target-<metric>: the metric of the IoU type with these suffixes, all fractions.
SUMMARY_SUFFIXES = ("", "_50", "_75", "_small", "_medium", "_large")
# COCOeval's iouType -> the zoo.metrics name of its AP@[.5:.95], and the key of MLPerf's maskrcnn log.
METRIC_OF = {"bbox": "map", "segm": "mask_map"}
MLPERF_KEY_OF = {"bbox": "BBOX", "segm": "SEGM"}


def coco_scores(annotation_file, results: list[dict], image_ids=None, *, iou_types=("bbox",)) -> dict:
    """pycocotools' COCOeval of ``results`` (COCO result dicts) against ``annotation_file``, for each of
    ``iou_types``: ``map`` (bbox) and ``mask_map`` (segm), AP@[.5:.95] as a fraction, and the other
    summary numbers (``map_50``, ``map_75``, ``map_small``, ..., ``mask_map_50``, ...). ``image_ids``
    scores only those images. A module-level function: AsyncScorer runs it in another process."""
    import contextlib
    import io
    import json
    from pathlib import Path

    from zoo.errors import UserError

    try:
        from pycocotools.coco import COCO
        from pycocotools.cocoeval import COCOeval
    except ImportError:
        raise UserError("COCO evaluation needs pycocotools (pip install -r requirements.txt)") from None
    if not results:
        return {METRIC_OF[kind] + suffix: 0.0 for kind in iou_types for suffix in SUMMARY_SUFFIXES}
    scores = {}
    with contextlib.redirect_stdout(io.StringIO()):
        truth = COCO()
        truth.dataset = json.loads(Path(annotation_file).read_text())
        truth.dataset.setdefault(
            "info", {}
        )  # loadRes copies it; COCO-format files made by hand often lack it
        truth.createIndex()
        for kind in iou_types:
            found = truth.loadRes([dict(r) for r in results])  # loadRes adds keys to the dicts it gets
            evaluation = COCOeval(truth, found, iouType=kind)
            if image_ids is not None:
                evaluation.params.imgIds = sorted(set(image_ids))
            evaluation.evaluate()
            evaluation.accumulate()
            evaluation.summarize()
            numbers = zip(SUMMARY_SUFFIXES, evaluation.stats, strict=False)
            scores.update({METRIC_OF[kind] + suffix: float(value) for suffix, value in numbers})
    return scores


class Evaluation:
    """The COCO evaluations of one training run: which epochs are scored, every rank's detections
    merged and scored with pycocotools on rank 0 (at once, or in a background process while training
    goes on), each score logged (metrics.jsonl's ``eval`` phase, MLPerf's ``eval_accuracy``) and the
    run's targets checked. Every rank makes one and calls each method (they gather and broadcast)::

        evaluation = Evaluation(run, recipe["eval"]["epochs"], annotation_file, ...)
        for epoch in range(start, stop):
            ...                                        # train one epoch, save the checkpoint
            if evaluation.due(epoch + 1):
                evaluate(...)                          # start(epoch), detections, score(epoch, step, results)
            if evaluation.reached(epoch + 1):
                break
        evaluation.finish()                            # background scores collected; MLPerf run_stop

    ``epochs``: the epochs scored among those ``run.eval_every`` makes due (None: all of them; ``[]``:
    none). ``annotation_file`` None (no validation set): nothing is ever due. ``targets``: {metric:
    value or None} in zoo.metrics' units; the run stops once every one given is reached. ``checkpoint``
    (RESULTS_DIR/checkpoint.pt; the model calls :meth:`saved` after writing it): a score that beats the
    earlier ones on ``run.target.metric`` copies the checkpoint of its epoch to best.pt (zoo.retention),
    where that checkpoint is still there (a background score arrives later: keep it with
    ``run.keep_checkpoints`` of 2 or more).
    """

    def __init__(
        self,
        run,
        epochs,
        annotation_file,
        *,
        iou_types=("bbox",),
        targets: dict,
        logger,
        mlperf,
        env,
        device,
        asynchronous: bool = False,
        checkpoint=None,
    ) -> None:
        import functools

        self.run, self.epochs, self.annotation_file = run, epochs, annotation_file
        self.iou_types, self.targets = tuple(iou_types), targets
        self.logger, self.mlperf, self.env, self.device = logger, mlperf, env, device
        self.scores: dict[int, dict] = {}  # epoch -> coco_scores' numbers, on rank 0
        self._score = functools.partial(coco_scores, iou_types=self.iou_types)
        self._background = AsyncScorer(self._score) if asynchronous and env.is_primary else None
        self._steps: dict[int, int] = {}  # epoch -> the step its background score is logged at
        self._reached = False
        self.checkpoint, self._saved_epoch, self._best = checkpoint, None, None

    def due(self, epoch: int) -> bool:
        """Whether the model is scored after ``epoch`` (1-based): due by ``run.eval_every`` (null: the
        run's last epoch) and listed in ``epochs``."""
        if self.annotation_file is None:
            return False
        every = self.run.eval_every
        due = every.due(epoch, 0) if every is not None else epoch == self.run.epochs
        return due and (self.epochs is None or epoch in self.epochs)

    def saved(self, epoch: int) -> None:
        """The checkpoint now holds the weights after ``epoch`` (rank 0 calls it after each save)."""
        self._saved_epoch = epoch

    def start(self, epoch: int) -> None:
        self.mlperf.eval_start(epoch)

    def score(self, epoch: int, step: int, results: list[dict]) -> dict | None:
        """A collective: this rank's detections of ``epoch``, merged with every other rank's and scored.
        Returns the scores on rank 0 when scored at once; None on other ranks and while the background
        process has them (:meth:`reached` logs them when they arrive)."""
        from zoo.torch import gather_objects

        merged = merge_rank_detections(gather_objects(results, self.env.world_size))
        if not self.env.is_primary:
            return None
        if self._background is not None:
            self._background.submit(epoch, self.annotation_file, merged)
            self._steps[epoch] = step
            self.mlperf.eval_stop(epoch)  # detections done; the score is logged when it arrives
            return None
        scores = self._score(self.annotation_file, merged)
        self.mlperf.eval_stop(epoch)
        self._record(epoch, step, scores)
        return scores

    def reached(self, epoch: int | None = None, *, wait: bool = False) -> bool:
        """A collective: log the scores the background process has finished (all of them with
        ``wait``), then whether the targets are reached, on every rank (rank 0's answer)."""
        from zoo.torch import broadcast_flag

        if self._background is not None:
            for scored, scores in self._background.done(wait=wait):
                self._record(scored, self._steps.pop(scored), scores)
        reached = broadcast_flag(self._reached, self.env.world_size, self.device)
        if reached and epoch is not None and self.env.is_primary:
            wanted = ", ".join(f"{k} {v}" for k, v in self.targets.items() if v is not None)
            print(f"target {wanted} reached after epoch {epoch}", file=sys.stderr)
        return reached

    def finish(self) -> bool:
        """After the last epoch: every background score logged, the background process ended, MLPerf's
        ``run_stop`` (``success`` once the targets were reached). Returns whether they were."""
        reached = self.reached(wait=True)
        if self._background is not None:
            self._background.close()
        self.mlperf.run_stop("success" if reached else "aborted")
        return reached

    def _record(self, epoch: int, step: int, scores: dict) -> None:
        from zoo.metrics import reached

        self.scores[epoch] = scores
        metrics = [METRIC_OF[kind] for kind in self.iou_types]
        self.logger.log(step, {name: scores[name] for name in metrics}, phase="eval")
        if len(metrics) == 1:
            self.mlperf.eval_accuracy(scores[metrics[0]], epoch)
        else:
            self.mlperf.eval_accuracy({MLPERF_KEY_OF[k]: scores[METRIC_OF[k]] for k in self.iou_types}, epoch)
        wanted = {name: value for name, value in self.targets.items() if value is not None}
        if wanted and all(reached(name, scores[name], value) for name, value in wanted.items()):
            self._reached = True
        if self.checkpoint is not None:
            self._keep_best(epoch, step, scores.get(self.run.target.metric))

    def _keep_best(self, epoch: int, step: int, value) -> None:
        """best.pt: the checkpoint of ``epoch`` when its score beats every earlier one (zoo.retention)."""
        import pathlib

        from zoo.retention import improves, mark_best, numbered_name

        if not improves(self.run.target.metric, value, self._best):
            return
        self._best = value
        checkpoint = pathlib.Path(self.checkpoint)
        source = checkpoint if self._saved_epoch == epoch else numbered_name(checkpoint, step)
        if source.is_file():
            mark_best(source)
