"""RNN-Transducer speech recognition (MLPerf RNN-T): LSTM encoder with time stacking, prediction and joint
networks, our own transducer loss, log-mel features on the device, greedy decoding."""
