"""The micro-batch a calibration times (adaptiveload.calibrate) and its co-runners and link
measurement train (co_runners, link): random inputs of a bucket shape and the flow-matching
loss of the Wan-style DiT on them. Below calibrate, co_runners and link, which all use it."""
import torch

from .models import wan_dit


def draw_inputs(size, device):
    """Random inputs of the tensor sizes `size`, drawn on the CPU from a generator and moved to
    `device`, as examples/train_dit.py's data (make_batch) draws a micro-batch's: this miniature's
    data loading."""
    g = torch.Generator().manual_seed(0)
    return [torch.randn(z, generator=g).to(device) for z in size]


def point_step(model, c, shape, batch, device, time_inputs: bool = False):
    """forward of `model` on random inputs of `batch` samples of (frames, height, width)
    `shape`, as a function returning the loss (for timed()). time_inputs: each call draws its
    inputs (draw_inputs), so the timing holds the data loading a training step pays with each
    micro-batch; else they are drawn once, here."""
    frames, height, width = shape
    f = 1 + (frames - 1) // 4
    size = [(batch, c.in_channels, f, height // 8, width // 8), (batch, c.text_len, c.text_dim)]
    fixed = None if time_inputs else [torch.randn(z, device=device) for z in size]
    amp = device.type == "cuda"

    def step():
        x0, ctx = fixed or draw_inputs(size, device)
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=amp):
            return wan_dit.flow_matching_loss(model, x0, ctx).mean()
    return step
