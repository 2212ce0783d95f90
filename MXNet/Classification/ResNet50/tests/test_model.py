"""ResNet-50 v1.5 in Gluon: parameter count, shapes, v1.5 stride placement, layouts, hybridization."""

from __future__ import annotations

import mxnet as mx
import numpy as np
import pytest
from resnet50_mx.checkpoint import convert_layout
from resnet50_mx.model import build_model, count_parameters


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_parameter_count_matches_resnet50(layout):
    net = build_model(1000, layout=layout)
    net.initialize()
    assert count_parameters(net) == 25_557_032


def test_ten_classes_changes_only_the_classifier():
    net = build_model(10)
    net.initialize()
    assert count_parameters(net) == 25_557_032 - 990 * 2048 - 990


def test_forward_shape_and_hybridized_equals_imperative():
    mx.random.seed(0)
    net = build_model(10)
    net.initialize(mx.init.Xavier())
    x = mx.nd.random.uniform(shape=(2, 3, 64, 64))
    eager = net(x).asnumpy()
    assert eager.shape == (2, 10)
    net.hybridize(static_alloc=True)
    np.testing.assert_allclose(net(x).asnumpy(), eager, rtol=1e-4, atol=1e-5)


def test_stride_is_on_the_3x3_convolution():
    net = build_model(10)
    first = net.layer2[0]
    assert first.conv1._kwargs["stride"] == (1, 1)
    assert first.conv2._kwargs["stride"] == (2, 2)
    assert first.downsample[0]._kwargs["stride"] == (2, 2)


def test_nhwc_graph_shapes():
    net = build_model(10, layout="NHWC", input_layout="NHWC")
    net.initialize()
    out = net(mx.sym.var("data"))
    _, out_shapes, _ = out.infer_shape(data=(2, 224, 224, 3))
    assert out_shapes == [(2, 10)]
    assert net.conv1.weight.shape == (64, 7, 7, 3)


def test_layout_conversion_round_trip_keeps_outputs():
    """NCHW -> NHWC -> NCHW weights give the same outputs (MXNet runs NHWC convolutions on GPU only)."""
    mx.random.seed(1)
    nchw = build_model(10)
    nchw.initialize(mx.init.Xavier())
    x = mx.nd.random.uniform(shape=(2, 3, 64, 64))
    expected = nchw(x).asnumpy()
    nhwc = convert_layout(nchw, "NHWC", "NCHW", [mx.cpu()])
    assert nhwc.layer1[0].conv2.weight.shape == (64, 3, 3, 64)
    back = convert_layout(nhwc, "NCHW", "NCHW", [mx.cpu()])
    np.testing.assert_array_equal(back(x).asnumpy(), expected)


@pytest.mark.skipif(mx.context.num_gpus() == 0, reason="MXNet's NHWC convolution runs on GPU only")
def test_nhwc_network_gives_the_nchw_outputs_on_gpu():
    mx.random.seed(1)
    nchw = build_model(10)
    nchw.initialize(mx.init.Xavier(), ctx=mx.gpu(0))
    x = mx.nd.random.uniform(shape=(2, 3, 64, 64), ctx=mx.gpu(0))
    expected = nchw(x).asnumpy()
    nhwc = convert_layout(nchw, "NHWC", "NCHW", [mx.gpu(0)])
    np.testing.assert_allclose(nhwc(x).asnumpy(), expected, rtol=1e-3, atol=1e-3)


def test_bad_layout_is_refused():
    with pytest.raises(ValueError, match="layout"):
        build_model(10, layout="NCWH")
