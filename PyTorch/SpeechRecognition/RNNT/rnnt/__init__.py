"""RNN-Transducer speech recognition (MLPerf RNN-T): LSTM encoder with time stacking, prediction and joint
networks, our own transducer loss, log-mel features on the device, greedy decoding."""

import pathlib

MODEL_DIR = pathlib.Path(__file__).resolve().parents[1]
DEFAULT_RECIPE = MODEL_DIR / "configs" / "rnnt_1gpu.yaml"
