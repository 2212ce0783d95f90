"""zoo.coco's scoring helpers shared by SSD and Mask R-CNN: merging the ranks' detections."""

from zoo.coco import merge_rank_detections


def det(image_id, score):
    return {"image_id": image_id, "category_id": 1, "bbox": [0, 0, 1, 1], "score": score}


def test_merged_detections_keep_each_image_from_the_first_rank_that_has_it():
    # rank 1's shard was padded with image 1 again (distributed samplers repeat images to even out shards)
    rank0 = [det(1, 0.9), det(1, 0.8), det(3, 0.7)]
    rank1 = [det(2, 0.6), det(1, 0.5)]
    merged = merge_rank_detections([rank0, rank1])
    assert [(d["image_id"], d["score"]) for d in merged] == [(1, 0.9), (1, 0.8), (3, 0.7), (2, 0.6)]


def test_one_rank_keeps_all_its_detections():
    part = [det(5, 0.4), det(5, 0.3), det(6, 0.2)]
    assert merge_rank_detections([part]) == part
