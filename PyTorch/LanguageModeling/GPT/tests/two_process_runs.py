"""Run under torchrun with 2 processes by test_parallel.py: gpt.train with FSDP2 over the two (data parallel
2, tensor parallel 1), then with tensor parallelism over them (tensor parallel 2, data parallel 1).

    python -m torch.distributed.run --nproc_per_node 2 tests/two_process_runs.py DATA FSDP_RESULTS TP_RESULTS
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gpt.train import main  # noqa: E402
from gpt_testutil import PARALLEL_RUN, train_args  # noqa: E402

data, fsdp_results, tp_results = sys.argv[1:4]
main(train_args(data, fsdp_results, *PARALLEL_RUN, "--batch-size", "4"))
main(train_args(data, tp_results, *PARALLEL_RUN, "--batch-size", "8", "--set", "parallel.tensor=2"))
