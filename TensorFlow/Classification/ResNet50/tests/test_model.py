import numpy as np
import pytest


def test_resnet50_v15_shapes_and_parameter_count():
    from resnet50_tf.model import resnet50

    model = resnet50(1000, image_size=224)
    trainable = sum(int(np.prod(v.shape)) for v in model.trainable_variables)
    assert trainable == 25_557_032  # torchvision resnet50's parameter count
    assert model.count_params() == 25_557_032 + 53_120  # + batch-norm moving mean/variance
    assert tuple(model.output.shape) == (None, 1000)
    # v1.5: a downsampling block strides in its 3x3 convolution, not in the first 1x1
    assert model.get_layer("layer2_0_conv2").strides == (2, 2)
    assert model.get_layer("layer2_0_conv1").strides == (1, 1)
    assert model.get_layer("layer2_0_downsample_conv").strides == (2, 2)
    names = [layer.name for layer in model.layers if layer.name.endswith("_conv3")]
    assert len(names) == 16  # 3 + 4 + 6 + 3 bottlenecks


def test_forward_nhwc_any_size():
    from resnet50_tf.model import resnet50

    model = resnet50(10, image_size=None)
    for size in (32, 64):
        out = model(np.zeros((2, size, size, 3), np.float32), training=False)
        assert out.shape == (2, 10)
        assert out.dtype.name == "float32"


def test_weight_decay_skips_batch_norm_and_biases():
    from resnet50_tf.model import is_decayed, resnet50

    model = resnet50(10, image_size=32)
    decayed = [v.path for v in model.trainable_variables if is_decayed(v)]
    assert len(decayed) == 54  # 53 convolutions + the classifier kernel
    assert not any("bn" in p or p.endswith("bias") for p in decayed)


def test_bad_class_count_is_a_clear_error():
    from resnet50_tf.model import resnet50

    with pytest.raises(ValueError, match="num_classes"):
        resnet50(0)
