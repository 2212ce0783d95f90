"""What the detection and segmentation models (SSD, Mask R-CNN, and the next detector) share beyond
COCO's data (zoo.data.coco), so that each model keeps only what differs. Each part is a module of its
own; their names are imported here, so ``zoo.coco.NAME`` reaches all of them:

- zoo.coco.scoring: every rank's detections merged into one list (merge_rank_detections),
  pycocotools' box and mask AP under the metric names of zoo.metrics (coco_scores: ``map``,
  ``mask_map``), in a background process while training goes on (AsyncScorer), and a run's
  evaluations (Evaluation: which epochs are scored, the scores logged to metrics.jsonl and MLPerf,
  the targets checked);
- zoo.coco.training, a detector's train.py: its flags beside zoo.cli's (add_training_args,
  parse_training_args), the recipe with its run: section checked for a run counted in epochs
  (training_recipe), the global batch and the learning rate scaled to it (global_batch,
  learning_rate), the COCO folders (data_root, split_paths), backbone weights (load_backbone), the
  MLPerf log's start (open_mlperf_log) and a training checkpoint loaded back into its parts
  (restore_training_state);
- zoo.coco.sampling (imported by its own name: it imports torch): a training epoch's batches from the
  step a resumed run starts at (EpochSampler, epoch_batches);
- zoo.coco.shapes: the generated shapes set (make_shapes_coco, shapes_main);
- zoo.coco.tools, the scripts beside training: the download command (download_main), drawing colours
  and image reading (PALETTE, read_image), evaluate.py's flags, split and scores (add_evaluate_args,
  evaluation_split, detect_and_score, write_json), a detector's models put into a Triton repository
  (add_repository_args, write_repository_models) and a benchmark's report (report_benchmark).
"""

from zoo.coco.scoring import (
    METRIC_OF,
    MLPERF_KEY_OF,
    SUMMARY_SUFFIXES,
    AsyncScorer,
    Evaluation,
    coco_scores,
    merge_rank_detections,
)
from zoo.coco.shapes import (
    SHAPE_CLASSES,
    SHAPE_COLOURS,
    make_shapes_coco,
    shapes_main,
)
from zoo.coco.tools import (
    PALETTE,
    add_evaluate_args,
    add_repository_args,
    detect_and_score,
    download_main,
    evaluation_split,
    read_image,
    report_benchmark,
    write_json,
    write_repository_models,
)
from zoo.coco.training import (
    RENAMED_FLAGS,
    add_training_args,
    data_root,
    global_batch,
    learning_rate,
    load_backbone,
    open_mlperf_log,
    parse_training_args,
    restore_training_state,
    split_paths,
    training_recipe,
)

__all__ = [
    "merge_rank_detections",
    "AsyncScorer",
    "SUMMARY_SUFFIXES",
    "METRIC_OF",
    "MLPERF_KEY_OF",
    "coco_scores",
    "Evaluation",
    "RENAMED_FLAGS",
    "add_training_args",
    "parse_training_args",
    "training_recipe",
    "global_batch",
    "learning_rate",
    "data_root",
    "split_paths",
    "load_backbone",
    "open_mlperf_log",
    "restore_training_state",
    "SHAPE_CLASSES",
    "SHAPE_COLOURS",
    "make_shapes_coco",
    "shapes_main",
    "download_main",
    "PALETTE",
    "read_image",
    "add_repository_args",
    "report_benchmark",
    "add_evaluate_args",
    "evaluation_split",
    "detect_and_score",
    "write_json",
    "write_repository_models",
]
