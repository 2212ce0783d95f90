"""Triton Inference Server for every model: import from the module that does the job.

- ``zoo.triton.repository``: TensorSpec, model_config, config_to_pbtxt / parse_pbtxt (checked against
  Triton's ModelConfig protobuf), write_model and build_models (a model the repository holds is replaced
  only with ``force``, whole), refuse_existing_models, validate_repository, single_model_repository,
  ONNX_PYTHON_MODEL
- ``zoo.triton.server``: TritonServer (the nvidia-pytriton wheel's server, stopped on every exit path),
  exit_on_termination_signals
- ``zoo.triton.client``: TritonClient, infer, model_io, and serve_or_connect (start tritonserver on a
  repository, or use ``--url``) that every deploy script uses
- ``zoo.triton.labels``: labelled (an export's class names as labels.txt, the output's label_filename),
  read_labels / label_of (the deploy clients' class names, or ``--labels FILE``)
- ``zoo.triton.load``: load_test, add_load_args, run_load_mode, load_table (``--concurrency 1,4,16``)
- ``zoo.triton.processes``: tritonserver and stub processes from /proc, for tests of deploy scripts
- ``zoo.triton.onnx_model``: the python-backend model file that serves an ONNX file with onnxruntime
- ``python -m zoo.triton {serve,validate}`` (``__main__``)
"""
