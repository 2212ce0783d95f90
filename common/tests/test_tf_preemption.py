"""zoo.tf.preemption: the TensorFlow models' worker processes agree, through the run's strategy, on the
step after which a SIGTERM to any one of them stops them all.

TensorFlow is in the TensorFlow venv only (`.venv/tensorflow/bin/python -m pytest common/tests/test_tf_preemption.py`);
ResNet-50's suite runs two MultiWorkerMirroredStrategy workers through it (tests/test_multiworker.py), and
its and BERT's suites stop and resume their training loops this way (zoo.testing.sigterm_at_step).
"""

from __future__ import annotations

import os

import pytest

tf = pytest.importorskip("tensorflow", reason="TensorFlow is installed in the TensorFlow venv only")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def test_one_process_reads_its_own_flag_through_the_strategy():
    from zoo.tf import Runtime, any_flag, preemption

    runtime = Runtime(tf.distribute.get_strategy(), 0, 1, "default")
    agree = any_flag(runtime)
    assert agree(True) and not agree(False) and agree(True)
    with preemption(runtime) as preempted:
        assert not preempted.requested(10)
        preempted.signalled = True
        assert preempted.requested(1)  # one process: every step, no collective
