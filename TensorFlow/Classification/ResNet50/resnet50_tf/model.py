"""ResNet-50 v1.5 as a Keras functional model, NHWC.

v1.5 differs from v1 (He et al. 2015, and keras.applications.ResNet50) in the bottleneck blocks that
downsample: the stride of 2 sits in the 3x3 convolution, not in the first 1x1. Convolutions have no
bias (each is followed by batch norm), so the model has 25,557,032 trainable parameters for 1,000
classes, the same count as torchvision's resnet50.
"""

from __future__ import annotations

import keras
from keras import layers

STAGES = ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2))  # (bottleneck width, blocks, first stride)
EXPANSION = 4
BN_MOMENTUM = 0.9  # Keras momentum = 1 - PyTorch momentum (0.1)
BN_EPSILON = 1e-5


def _conv(filters: int, kernel: int, stride: int, name: str) -> layers.Conv2D:
    return layers.Conv2D(
        filters,
        kernel,
        strides=stride,
        padding="same" if stride == 1 else "valid",
        use_bias=False,
        kernel_initializer=keras.initializers.VarianceScaling(
            2.0, mode="fan_out", distribution="untruncated_normal"
        ),
        name=name,
    )


def _bn(name: str, zero_init: bool = False) -> layers.BatchNormalization:
    return layers.BatchNormalization(
        axis=-1,
        momentum=BN_MOMENTUM,
        epsilon=BN_EPSILON,
        gamma_initializer="zeros" if zero_init else "ones",
        name=name,
    )


def _strided_conv(x, filters: int, kernel: int, stride: int, name: str):
    """A convolution with PyTorch's symmetric padding (kernel // 2) when it downsamples.

    "same" padding in TF pads asymmetrically for even inputs with stride 2; explicit padding keeps the
    arithmetic identical to the reference layout, which matters for loading weights across frameworks.
    """
    if stride > 1 and kernel > 1:
        x = layers.ZeroPadding2D(kernel // 2, name=f"{name}_pad")(x)
    return _conv(filters, kernel, stride, name)(x)


def bottleneck(x, width: int, stride: int, name: str, zero_init_residual: bool, stride_in_3x3: bool = True):
    shortcut = x
    out_channels = width * EXPANSION
    if stride != 1 or x.shape[-1] != out_channels:
        shortcut = _conv(out_channels, 1, stride, f"{name}_downsample_conv")(x)
        shortcut = _bn(f"{name}_downsample_bn")(shortcut)
    y = _conv(width, 1, 1 if stride_in_3x3 else stride, f"{name}_conv1")(x)
    y = _bn(f"{name}_bn1")(y)
    y = layers.ReLU(name=f"{name}_relu1")(y)
    y = _strided_conv(y, width, 3, stride if stride_in_3x3 else 1, f"{name}_conv2")  # v1.5: stride here
    y = _bn(f"{name}_bn2")(y)
    y = layers.ReLU(name=f"{name}_relu2")(y)
    y = _conv(out_channels, 1, 1, f"{name}_conv3")(y)
    y = _bn(f"{name}_bn3", zero_init=zero_init_residual)(y)
    y = layers.Add(name=f"{name}_add")([y, shortcut])
    return layers.ReLU(name=f"{name}_out")(y)


def resnet50(
    num_classes: int = 1000,
    image_size: int | None = 224,
    zero_init_residual: bool = False,
    variant: str = "v1.5",
    input_mode: str = "normalized",
    name: str | None = None,
) -> keras.Model:
    """ResNet-50 v1.5. Input: normalised float images, NHWC [batch, size, size, 3]. Output: float32 logits.

    image_size=None builds a model that accepts any spatial size. Under a mixed-precision policy the
    body computes in float16/bfloat16 and the classifier returns float32 logits.
    variant="v1" puts the stride in the first 1x1 convolution (He et al.; Keras Applications), and
    input_mode="caffe" adds the conversion from our normalised RGB input to the BGR, mean-subtracted
    input that Keras Applications' ResNet-50 weights expect: together they run those weights as is.
    """
    if num_classes < 1:
        raise ValueError(f"num_classes must be >= 1, got {num_classes}")
    if variant not in ("v1.5", "v1"):
        raise ValueError(f"variant must be 'v1.5' or 'v1', got {variant!r}")
    if input_mode not in ("normalized", "caffe"):
        raise ValueError(f"input_mode must be 'normalized' or 'caffe', got {input_mode!r}")
    inputs = keras.Input((image_size, image_size, 3), name="images")
    x = CaffeInput(name="caffe_input")(inputs) if input_mode == "caffe" else inputs
    x = _strided_conv(x, 64, 7, 2, "stem_conv")
    x = _bn("stem_bn")(x)
    x = layers.ReLU(name="stem_relu")(x)
    x = layers.ZeroPadding2D(1, name="stem_pool_pad")(x)
    x = layers.MaxPooling2D(3, strides=2, name="stem_pool")(x)
    for stage, (width, blocks, stride) in enumerate(STAGES, start=1):
        for block in range(blocks):
            first_stride = stride if block == 0 else 1
            x = bottleneck(
                x,
                width,
                first_stride,
                f"layer{stage}_{block}",
                zero_init_residual,
                stride_in_3x3=variant == "v1.5",
            )
    x = layers.GlobalAveragePooling2D(name="avgpool")(x)
    logits = layers.Dense(
        num_classes,
        kernel_initializer=keras.initializers.RandomNormal(stddev=0.01),
        dtype="float32",  # logits and softmax in float32 whatever the policy
        name="fc",
    )(x)
    return keras.Model(inputs, logits, name=name or f"resnet50_{variant.replace('.', '_')}")


class CaffeInput(layers.Layer):
    """Normalised RGB (our input) -> BGR minus the Caffe/ImageNet mean on the 0..255 scale."""

    CAFFE_MEAN_BGR = (103.939, 116.779, 123.68)

    def call(self, x):
        from keras import ops

        from resnet50_tf import IMAGENET_MEAN, IMAGENET_STD

        rgb = x * ops.convert_to_tensor(IMAGENET_STD, x.dtype) + ops.convert_to_tensor(IMAGENET_MEAN, x.dtype)
        return ops.flip(rgb, axis=-1) - ops.convert_to_tensor(self.CAFFE_MEAN_BGR, x.dtype)


def is_decayed(variable) -> bool:
    """Weight decay applies to convolution and dense kernels only, not to batch-norm parameters or biases."""
    return variable.path.endswith("kernel")
