"""Models used by the end-to-end evaluation and calibration (see examples/train_dit.py)."""
from .wan_dit import CONFIGS, WanDiT, WanDiTConfig, flow_matching_loss

__all__ = ["CONFIGS", "WanDiT", "WanDiTConfig", "flow_matching_loss"]
