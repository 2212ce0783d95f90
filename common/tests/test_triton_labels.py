"""zoo.triton.labels: the class names an export writes beside config.pbtxt (Triton's label_filename) and
the deploy clients read back, or take from --labels."""

import pytest
from zoo.errors import UserError
from zoo.triton.labels import label_of, labelled, read_labels
from zoo.triton.repository import TensorSpec, model_config, parse_pbtxt, write_model

SYNSETS = ["n01440764", "n01443537", "n01484850"]


def classifier_config(classes: int = 3):
    return model_config(
        "classifier_python", backend="python", max_batch_size=4, instance_kind="KIND_CPU",
        inputs=[TensorSpec("images", "FP32", [3, 8, 8])], outputs=[TensorSpec("logits", "FP32", [classes])],
    )  # fmt: skip


def test_an_export_names_its_labels_and_the_client_reads_them_back(tmp_path):
    config, beside = labelled(classifier_config(), SYNSETS)
    assert beside == {"labels.txt": b"n01440764\nn01443537\nn01484850\n"}
    folder = write_model(tmp_path, config, {"model.py": b"# stub\n"}, beside_config=beside)
    assert parse_pbtxt((folder / "config.pbtxt").read_text()).output[0].label_filename == "labels.txt"
    names = read_labels(tmp_path, "classifier_python")
    assert names == SYNSETS
    assert [label_of(names, i) for i in (2, 0)] == ["n01484850", "n01440764"]
    # --labels FILE wins over the repository's
    (tmp_path / "words.txt").write_text("tench\ngoldfish\n\nwhite shark\n")
    assert read_labels(tmp_path, "classifier_python", labels_file=tmp_path / "words.txt") == [
        "tench", "goldfish", "white shark",
    ]  # fmt: skip


def test_without_names_the_indices_are_printed(tmp_path):
    config, beside = labelled(classifier_config(), None)  # a synthetic-data run has no class folders
    assert beside == {} and not config.output[0].label_filename
    write_model(tmp_path, config, {"model.py": b"# stub\n"})
    assert read_labels(tmp_path, "classifier_python") is None
    assert read_labels(tmp_path / "elsewhere", "classifier_python") is None  # --url, no local repository
    assert label_of(None, 7) == "7"


def test_an_earlier_export_s_labels_in_the_version_folder_are_read(tmp_path):
    (tmp_path / "m" / "1").mkdir(parents=True)
    (tmp_path / "m" / "1" / "labels.txt").write_text("0\n1\n")
    assert read_labels(tmp_path, "m") == ["0", "1"]


def test_bad_labels_are_one_line_errors(tmp_path):
    with pytest.raises(UserError, match="2 class names for classifier_python's 3 outputs"):
        labelled(classifier_config(), SYNSETS[:2])
    with pytest.raises(UserError, match="labels file .*missing.txt does not exist"):
        read_labels(tmp_path, "m", labels_file=tmp_path / "missing.txt")
    (tmp_path / "empty.txt").write_text("\n")
    with pytest.raises(UserError, match="is empty"):
        read_labels(tmp_path, "m", labels_file=tmp_path / "empty.txt")
    config, _ = labelled(classifier_config(), SYNSETS)
    write_model(tmp_path, config, {"model.py": b"# stub\n"})  # the file its config names left out
    with pytest.raises(UserError, match="names labels labels.txt, which .* lacks"):
        read_labels(tmp_path, "classifier_python")
    with pytest.raises(UserError, match="class 3 is outside the 3 class names"):
        label_of(SYNSETS, 3)
