"""3D U-Net (MLPerf Training's image_segmentation benchmark) for kidney and tumour segmentation on KiTS19."""

import pathlib

MODEL_DIR = pathlib.Path(__file__).resolve().parent.parent
DEFAULT_RECIPE = MODEL_DIR / "configs" / "unet3d_kits19_1gpu.yaml"
