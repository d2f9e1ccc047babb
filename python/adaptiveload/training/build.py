"""The models the training harness (train_dit) trains: wan-dit, the project's Wan-style DiT
(adaptiveload.models.wan_dit), and diffusers-wan, diffusers' WanTransformer3DModel built with
the same dimensions and random weights, called as WanDiT is (diffusers, an optional dependency,
is imported only when that model is built)."""
import torch

from ..models import wan_dit

MODELS = ["wan-dit", "diffusers-wan"]


def diffusers_wan_config(c: wan_dit.WanDiTConfig) -> dict:
    """WanTransformer3DModel's config with c's dimensions: for wan2.1-1.3b, the config of
    Wan 2.1 T2V 1.3B (12 heads of 128, ffn 8960, umT5 text 4096 wide, cross-attention norm)."""
    return dict(patch_size=tuple(c.patch), num_attention_heads=c.heads, attention_head_dim=c.dim // c.heads,
                in_channels=c.in_channels, out_channels=c.in_channels, text_dim=c.text_dim, freq_dim=c.freq_dim,
                ffn_dim=c.ffn_dim, num_layers=c.layers, cross_attn_norm=True, qk_norm="rms_norm_across_heads",
                eps=c.eps, rope_max_seq_len=1024)


def _adaptiveload_diffusers():
    """adaptiveload.diffusers, loaded when a diffusers model is built (diffusers is optional)."""
    from .. import diffusers as al_diffusers

    return al_diffusers


class DiffusersWan(torch.nn.Module):
    """diffusers' WanTransformer3DModel (random weights) called as WanDiT is: (x [B, C, f, h, w]
    latents, t [B] in [0, 1000), context [B, L, text_dim]) -> [B, C, f, h, w]."""

    def __init__(self, c: wan_dit.WanDiTConfig, fused_adaln: bool = False, checkpointing: bool = False):
        super().__init__()
        from diffusers import WanTransformer3DModel

        self.c = c  # the patch a pack is made with (wan_dit_packed.flow_matching_loss_packed reads model.c)
        self.inner = WanTransformer3DModel(**diffusers_wan_config(c))
        if checkpointing:
            self.inner.enable_gradient_checkpointing()
        if fused_adaln:
            _adaptiveload_diffusers().use_fused_adaln(self.inner)

    def forward(self, x, t, context):
        return self.inner(x, t, context, return_dict=False)[0]


def build_model(name: str, c: wan_dit.WanDiTConfig, fused: bool, checkpointing: bool) -> torch.nn.Module:
    if name == "diffusers-wan":
        return DiffusersWan(c, fused_adaln=fused, checkpointing=checkpointing)
    return wan_dit.WanDiT(c, fused_adaln=fused, checkpointing=checkpointing)
