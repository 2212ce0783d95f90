"""The MLPerf subset of OpenImages v6: the 264 classes MLCommons' RetinaNet reference trains on, its
selection (every image of a split with at least one box of those classes, only those classes' boxes,
OpenImages' IsGroupOf as COCO's iscrowd) and the conversion to COCO-format json.

Sources, the files the reference's FiftyOne download reads: the box annotations and class names from
storage.googleapis.com/openimages, the images from the open-images-dataset bucket on S3. Every file
is fetched with zoo.io.download (a ``.part`` file resumed with HTTP Range, then renamed into place);
OpenImages publishes no digests of these files, so each is checked by its content instead: a csv
file by its header row, an image by the JPEG signature and by being readable.

Result: ``<data-dir>/{train,validation}/<ImageID>.jpg`` and
``<data-dir>/annotations/instances_{train,validation}.json``.
"""

from __future__ import annotations

import csv
import functools
import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from zoo.errors import UserError
from zoo.io import atomic_write, download

CSV_BASE = "https://storage.googleapis.com/openimages"
IMAGE_BASE = "https://s3.amazonaws.com/open-images-dataset"
# Path of each file under CSV_BASE, and the header row it must start with.
CLASS_NAMES = "v5/class-descriptions-boxable.csv"
BOXES = {"train": "v6/oidv6-train-annotations-bbox.csv", "validation": "v5/validation-annotations-bbox.csv"}
BOX_HEADER = "ImageID,Source,LabelName,Confidence,XMin,XMax,YMin,YMax,IsOccluded,IsTruncated,IsGroupOf"
# MLCommons' list (training/single_stage_detector/scripts/download_openimages_mlperf.sh); category ids
# 1..264 in this order.
# fmt: off
MLPERF_CLASSES = (
    "Airplane", "Antelope", "Apple", "Backpack", "Balloon", "Banana", "Barrel", "Baseball bat",
    "Baseball glove", "Bee", "Beer", "Bench", "Bicycle", "Bicycle helmet", "Bicycle wheel", "Billboard",
    "Book", "Bookcase", "Boot", "Bottle", "Bowl", "Bowling equipment", "Box", "Boy", "Brassiere", "Bread",
    "Broccoli", "Bronze sculpture", "Bull", "Bus", "Bust", "Butterfly", "Cabinetry", "Cake", "Camel",
    "Camera", "Candle", "Candy", "Cannon", "Canoe", "Carrot", "Cart", "Castle", "Cat", "Cattle", "Cello",
    "Chair", "Cheese", "Chest of drawers", "Chicken", "Christmas tree", "Coat", "Cocktail", "Coffee",
    "Coffee cup", "Coffee table", "Coin", "Common sunflower", "Computer keyboard", "Computer monitor",
    "Convenience store", "Cookie", "Countertop", "Cowboy hat", "Crab", "Crocodile", "Cucumber", "Cupboard",
    "Curtain", "Deer", "Desk", "Dinosaur", "Dog", "Doll", "Dolphin", "Door", "Dragonfly", "Drawer", "Dress",
    "Drum", "Duck", "Eagle", "Earrings", "Egg (Food)", "Elephant", "Falcon", "Fedora", "Flag", "Flowerpot",
    "Football", "Football helmet", "Fork", "Fountain", "French fries", "French horn", "Frog", "Giraffe",
    "Girl", "Glasses", "Goat", "Goggles", "Goldfish", "Gondola", "Goose", "Grape", "Grapefruit", "Guitar",
    "Hamburger", "Handbag", "Harbor seal", "Headphones", "Helicopter", "High heels", "Hiking equipment",
    "Horse", "House", "Houseplant", "Human arm", "Human beard", "Human body", "Human ear", "Human eye",
    "Human face", "Human foot", "Human hair", "Human hand", "Human head", "Human leg", "Human mouth",
    "Human nose", "Ice cream", "Jacket", "Jeans", "Jellyfish", "Juice", "Kitchen & dining room table", "Kite",
    "Lamp", "Lantern", "Laptop", "Lavender (Plant)", "Lemon", "Light bulb", "Lighthouse", "Lily", "Lion",
    "Lipstick", "Lizard", "Man", "Maple", "Microphone", "Mirror", "Mixing bowl", "Mobile phone", "Monkey",
    "Motorcycle", "Muffin", "Mug", "Mule", "Mushroom", "Musical keyboard", "Necklace", "Nightstand",
    "Office building", "Orange", "Owl", "Oyster", "Paddle", "Palm tree", "Parachute", "Parrot", "Pen",
    "Penguin", "Personal flotation device", "Piano", "Picture frame", "Pig", "Pillow", "Pizza", "Plate",
    "Platter", "Porch", "Poster", "Pumpkin", "Rabbit", "Rifle", "Roller skates", "Rose", "Salad", "Sandal",
    "Saucer", "Saxophone", "Scarf", "Sea lion", "Sea turtle", "Sheep", "Shelf", "Shirt", "Shorts", "Shrimp",
    "Sink", "Skateboard", "Ski", "Skull", "Skyscraper", "Snake", "Sock", "Sofa bed", "Sparrow", "Spider",
    "Spoon", "Sports uniform", "Squirrel", "Stairs", "Stool", "Strawberry", "Street light", "Studio couch",
    "Suit", "Sun hat", "Sunglasses", "Surfboard", "Sushi", "Swan", "Swimming pool", "Swimwear", "Tank", "Tap",
    "Taxi", "Tea", "Teddy bear", "Television", "Tent", "Tie", "Tiger", "Tin can", "Tire", "Toilet", "Tomato",
    "Tortoise", "Tower", "Traffic light", "Train", "Tripod", "Truck", "Trumpet", "Umbrella", "Van", "Vase",
    "Vehicle registration plate", "Violin", "Wall clock", "Waste container", "Watch", "Whale", "Wheel",
    "Wheelchair", "Whiteboard", "Window", "Wine", "Wine glass", "Woman", "Zebra", "Zucchini",
)
# fmt: on


def fetch_csv(path: str, dest: Path, base: str, header: str | None = None) -> Path:
    """``base``/``path`` into ``dest`` (resumed); a UserError where its first line is not ``header``."""
    out = download(f"{base}/{path}", dest=dest / Path(path).name)
    if header is not None:
        with out.open(encoding="utf-8", errors="replace") as f:
            first = f.readline().strip()
        if not first.startswith(header):
            out.unlink()
            raise UserError(f"{base}/{path} is not OpenImages' box file (first line {first[:60]!r}); removed")
    return out


def read_class_ids(path: Path) -> dict[str, str]:
    """OpenImages' MID of each MLPerf class name; a UserError naming a class the file lacks."""
    with path.open(encoding="utf-8") as f:
        mid_of = {row[1]: row[0] for row in csv.reader(f) if len(row) == 2}
    missing = [name for name in MLPERF_CLASSES if name not in mid_of]
    if missing:
        raise UserError(f"{path} names no class {missing[:3]} (not class-descriptions-boxable.csv)")
    return {mid_of[name]: name for name in MLPERF_CLASSES}


def select_boxes(path: Path, classes: dict[str, str], max_images: int | None = None) -> dict[str, list[dict]]:
    """{ImageID: its rows of the MLPerf classes}, images in file order (the first ``max_images``)."""
    chosen: dict[str, list[dict]] = {}
    with path.open(encoding="utf-8") as f:
        for row in csv.DictReader(f):
            if row["LabelName"] not in classes:
                continue
            if row["ImageID"] not in chosen and max_images is not None and len(chosen) >= max_images:
                continue
            chosen.setdefault(row["ImageID"], []).append(row)
    return chosen


def fetch_image(image_id: str, split: str, folder: Path, base: str) -> tuple[int, int]:
    """One image (resumed, skipped where already whole); its (width, height)."""
    from PIL import Image, UnidentifiedImageError

    dest = folder / f"{image_id}.jpg"
    if not dest.is_file():
        download(f"{base}/{split}/{image_id}.jpg", dest=dest, progress=False)
    try:
        with dest.open("rb") as f:
            if f.read(3) != b"\xff\xd8\xff":
                raise UnidentifiedImageError("no JPEG signature")
        with Image.open(dest) as im:
            return im.size
    except (UnidentifiedImageError, OSError) as e:
        dest.unlink(missing_ok=True)  # the next run fetches it again
        raise UserError(
            f"{base}/{split}/{image_id}.jpg is not a JPEG image ({e}); removed, run again"
        ) from None


def to_coco(
    chosen: dict[str, list[dict]], sizes: dict[str, tuple[int, int]], classes: dict[str, str]
) -> dict:
    """COCO-format json of the selection: boxes from OpenImages' normalised corners to pixels."""
    category_of = {mid: i + 1 for i, mid in enumerate(classes)}
    images, annotations = [], []
    for number, (image_id, rows) in enumerate(chosen.items(), start=1):
        width, height = sizes[image_id]
        images.append({"id": number, "file_name": f"{image_id}.jpg", "width": width, "height": height})
        for row in rows:
            x1, x2 = float(row["XMin"]) * width, float(row["XMax"]) * width
            y1, y2 = float(row["YMin"]) * height, float(row["YMax"]) * height
            annotations.append({
                "id": len(annotations) + 1, "image_id": number, "category_id": category_of[row["LabelName"]],
                "bbox": [x1, y1, x2 - x1, y2 - y1], "area": (x2 - x1) * (y2 - y1),
                "iscrowd": int(row["IsGroupOf"] == "1"),
            })  # fmt: skip
    categories = [{"id": category_of[mid], "name": name} for mid, name in classes.items()]
    return {"images": images, "annotations": annotations, "categories": categories}


def prepare_openimages(data_dir, splits=("train", "validation"), *, csv_base: str = CSV_BASE,
                       image_base: str = IMAGE_BASE, max_images: int | None = None, workers: int = 16) -> Path:  # fmt: skip
    """Download and convert the MLPerf subset of ``splits`` into ``data_dir`` (module docstring)."""
    root = Path(data_dir)
    meta = root / "openimages_csv"
    classes = read_class_ids(fetch_csv(CLASS_NAMES, meta, csv_base))
    for split in splits:
        if split not in BOXES:
            raise UserError(f"split {split!r} is not one of {', '.join(BOXES)}")
        chosen = select_boxes(fetch_csv(BOXES[split], meta, csv_base, BOX_HEADER), classes, max_images)
        folder = root / split
        folder.mkdir(parents=True, exist_ok=True)
        with ThreadPoolExecutor(workers) as pool:
            fetch = functools.partial(fetch_image, split=split, folder=folder, base=image_base)
            found = pool.map(fetch, chosen)
            sizes = dict(zip(chosen, found, strict=True))
        with atomic_write(root / "annotations" / f"instances_{split}.json") as tmp:
            tmp.write_text(json.dumps(to_coco(chosen, sizes, classes)))
        print(f"{split}: {len(chosen)} images of the MLPerf classes", flush=True)
    return root
