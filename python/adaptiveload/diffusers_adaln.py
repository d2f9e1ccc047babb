"""adaptiveload.fused_adaln in a diffusers `WanTransformer3DModel` (use_fused_adaln), and the
recognition of the model that it and the packed forward (diffusers_packed.py) run on: the
installed diffusers' Wan code checked against KNOWN_SOURCES. Users import both through
adaptiveload.diffusers; this module is the layer below diffusers_packed.

Sites, per WanTransformerBlock (diffusers 0.42.1, transformer_wan.py):
  norm1 (self-attention) and norm3 (feed-forward):
      (normN(x.float()) * (1 + scale) + shift).type_as(x), normN an FP32LayerNorm without
      affine, shift/scale fp32 [B, 1, D] (Wan 2.1, temb [B, 6, D]) or [B, L, D]
      (Wan 2.2 TI2V, temb [B, L, 6, D])  ->  fused_adaln(x, shift, scale, eps=normN.eps);
  norm2 (cross-attention, cross_attn_norm=True): norm2(x.float()).type_as(x), an affine
      FP32LayerNorm with no modulation  ->  fused_adaln with its weight and bias and zero
      shift/scale (the same arithmetic; `cross_attn_norm=False` leaves it eager);
and the model's output norm, the same computation as norm1 with shift/scale from temb
(fp32, or in temb's dtype where diffusers computes them in it: then `1 + scale` is rounded to
that dtype first, as diffusers does, so the result is the same).

The patch sets an instance-level `forward` on every block and on the model: no parameter,
buffer or state_dict key changes, so checkpoints load either way, and `restore_eager_adaln`
removes it. The block forward is diffusers 0.42.1's with those lines changed; the model
forward is diffusers 0.42.1's (Apache-2.0, The Wan Team and The HuggingFace Team) with the
output norm changed. Both are used only when the installed diffusers' source of the same
methods hashes to a version listed in KNOWN_SOURCES and the modules have the expected types
and shapes; anything else raises UnrecognisedWanModelError and changes nothing.
"""
import functools
import hashlib
import inspect
import textwrap
import types
from typing import Any, Dict, List, Optional

import diffusers
import torch
from diffusers.models.modeling_outputs import Transformer2DModelOutput
from diffusers.models.normalization import FP32LayerNorm
from diffusers.models.transformers.transformer_wan import WanTransformer3DModel, WanTransformerBlock
from diffusers.utils import apply_lora_scale
from torch import nn

from .ops import fused_adaln

__all__ = ["use_fused_adaln", "restore_eager_adaln", "is_fused", "UnrecognisedWanModelError",
           "UnsupportedWanModelError", "KNOWN_SOURCES"]

# sha256 (first 16 hex digits) of inspect.getsource of each method, dedented -> the diffusers
# versions whose source it is. A version is added here after its tests pass against it.
KNOWN_SOURCES: Dict[str, Dict[str, str]] = {
    "WanTransformerBlock.forward": {"e3f915b69532cdf6": "0.42.1"},
    "WanTransformer3DModel.forward": {"63d2ad3896ba5f5b": "0.42.1"},
    "FP32LayerNorm.forward": {"eeccdd19b7e90032": "0.42.1"},
    # what packed_forward (diffusers_packed.py) also reproduces or relies on
    "WanAttnProcessor.__call__": {"6bfcee2af4a77d09": "0.42.1"},
    "WanAttention.forward": {"a8981ab4ef376ff2": "0.42.1"},
    "WanTimeTextImageEmbedding.forward": {"4e1287c165e31a70": "0.42.1"},
    "WanRotaryPosEmbed.forward": {"a088608f1576237e": "0.42.1"},
    "transformer_wan._get_qkv_projections": {"657bbdb508a6c612": "0.42.1"},
}


class UnrecognisedWanModelError(RuntimeError):
    """The model or the installed diffusers is not one whose adaLN sites this module knows."""


class UnsupportedWanModelError(UnrecognisedWanModelError):
    """A Wan model this module knows, with a feature packed_forward does not support (image
    conditioning, hooks on the modules it does not call, ...)."""


@functools.lru_cache(maxsize=None)  # per function object: packed_forward checks on every call
def _source_hash(fn) -> Optional[str]:
    try:
        src = textwrap.dedent(inspect.getsource(fn))
    except (OSError, TypeError):
        return None
    return hashlib.sha256(src.encode()).hexdigest()[:16]


# Per public function, what a refusal says: what it recognises, and what to do instead.
_REFUSALS = {
    "use_fused_adaln": ("whose adaLN sites adaptiveload recognises", "so patching could compute something else; "
                        "nothing was changed. Use the diffusers version in requirements/python.txt, or leave the "
                        "model unpatched."),
    "packed_forward": ("whose computation adaptiveload's packed forward reproduces", "so a packed forward could "
                       "compute something else; nothing was run or changed. Use the diffusers version in "
                       "requirements/python.txt, or run the model's own forward sample by sample."),
}


def _refuse(where: str, what: str, api: str) -> UnrecognisedWanModelError:
    known = sorted({v for hashes in KNOWN_SOURCES.values() for v in hashes.values()})
    recognised, tail = _REFUSALS[api]
    return UnrecognisedWanModelError(
        f"adaptiveload.diffusers.{api}: {where}: {what}. With diffusers {diffusers.__version__} installed, this "
        f"is not a Wan model {recognised} (recognised: diffusers {', '.join(known)}, WanTransformer3DModel as it "
        f"defines it), {tail}")


def _type_name(cls) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _check_source(fn, name: str, key: str, where: str, api: str) -> None:
    # fn's source must hash to one of KNOWN_SOURCES[key]; name says which function fn is
    digest = _source_hash(fn)
    if digest not in KNOWN_SOURCES[key]:
        raise _refuse(where, f"{name} (from module {getattr(fn, '__module__', '?')}) has source sha256 {digest}, "
                      f"not a known {key} ({', '.join(sorted(KNOWN_SOURCES[key]))})", api)


def _check_method(cls, key: str, where: str, api: str) -> None:
    # key "Class.method" in KNOWN_SOURCES; cls the instance's type (may be a subclass)
    fn = getattr(cls, key.split(".")[1])
    _check_source(fn, f"{_type_name(cls)}.{fn.__name__}", key, where, api)


def _check_plain_norm(norm: Any, dim: int, affine: bool, where: str, api: str) -> None:
    if not isinstance(norm, FP32LayerNorm):
        raise _refuse(where, f"expected diffusers FP32LayerNorm, got {_type_name(type(norm))}", api)
    _check_method(type(norm), "FP32LayerNorm.forward", where, api)
    if tuple(norm.normalized_shape) != (dim,):
        raise _refuse(where, f"normalized_shape is {tuple(norm.normalized_shape)}, expected ({dim},)", api)
    has_affine = norm.weight is not None
    if has_affine != affine or (not affine and norm.bias is not None):
        raise _refuse(where, f"elementwise affine weight {'present' if has_affine else 'absent'}, bias "
                      f"{'present' if norm.bias is not None else 'absent'}; expected "
                      f"{'a weight' if affine else 'neither'}", api)
    if not (0 <= norm.eps < 1e30):
        raise _refuse(where, f"eps {norm.eps!r} outside fused_adaln's range [0, 1e30)", api)


def _check_table(table: Any, rows: int, dim: int, where: str, api: str) -> None:
    if not isinstance(table, torch.Tensor) or tuple(table.shape) != (1, rows, dim):
        shape = tuple(table.shape) if isinstance(table, torch.Tensor) else type(table).__name__
        raise _refuse(where, f"scale_shift_table is {shape}, expected (1, {rows}, {dim})", api)


def _patched_by_us(module: nn.Module, fn) -> bool:
    f = module.__dict__.get("forward")
    return f is not None and getattr(f, "__func__", None) is fn


def _check_instance_forward(module: nn.Module, fn, where: str, api: str) -> None:
    if "forward" in module.__dict__ and not _patched_by_us(module, fn):
        raise _refuse(where, f"the instance has its own forward ({module.__dict__['forward']!r}), set by something "
                      "other than adaptiveload", api)


def _check_model(model: Any, api: str) -> None:
    if not isinstance(model, WanTransformer3DModel):
        raise _refuse("model", f"expected diffusers WanTransformer3DModel, got {_type_name(type(model))}", api)
    _check_method(type(model), "WanTransformer3DModel.forward", "model", api)
    _check_instance_forward(model, _model_forward, "model", api)
    dim = model.config.num_attention_heads * model.config.attention_head_dim
    _check_plain_norm(model.norm_out, dim, affine=False, where="model.norm_out", api=api)
    _check_table(model.scale_shift_table, 2, dim, "model", api)
    for i, block in enumerate(model.blocks):
        where = f"model.blocks[{i}]"
        if not isinstance(block, WanTransformerBlock):
            raise _refuse(where, f"expected diffusers WanTransformerBlock, got {_type_name(type(block))}", api)
        _check_method(type(block), "WanTransformerBlock.forward", where, api)
        _check_instance_forward(block, _block_forward, where, api)
        _check_plain_norm(block.norm1, dim, affine=False, where=where + ".norm1", api=api)
        _check_plain_norm(block.norm3, dim, affine=False, where=where + ".norm3", api=api)
        if not isinstance(block.norm2, nn.Identity):
            _check_plain_norm(block.norm2, dim, affine=True, where=where + ".norm2", api=api)
        _check_table(block.scale_shift_table, 6, dim, where, api)


def use_fused_adaln(model: WanTransformer3DModel, *, cross_attn_norm: bool = True) -> WanTransformer3DModel:
    """Make `model`'s adaLN sites (every block's norm1 and norm3, the output norm, and with
    `cross_attn_norm` the blocks' affine cross-attention norm2) run adaptiveload.fused_adaln.

    Same outputs and gradients as the unpatched model up to floating-point rounding (fp32
    statistics either way); per-sample (timestep [B]) and per-token (timestep [B, L])
    modulation. Call it before torch.compile and before DDP / FSDP wrapping. Calling it
    again re-applies the setting. Raises UnrecognisedWanModelError, changing nothing, when
    the model or the installed diffusers' Wan code is not a version this module knows.
    Returns the model.
    """
    if not isinstance(cross_attn_norm, bool):
        raise TypeError(f"use_fused_adaln: cross_attn_norm must be a bool, got {type(cross_attn_norm).__name__}")
    _check_model(model, "use_fused_adaln")
    model.forward = types.MethodType(_model_forward, model)
    for block in model.blocks:
        block._adaptiveload_fuse_norm2 = cross_attn_norm and isinstance(block.norm2, FP32LayerNorm)
        block.forward = types.MethodType(_block_forward, block)
    return model


def restore_eager_adaln(model: WanTransformer3DModel) -> WanTransformer3DModel:
    """Undo use_fused_adaln: the model and its blocks run diffusers' own forward again."""
    modules: List[nn.Module] = [model, *getattr(model, "blocks", [])]
    for m in modules:
        if _patched_by_us(m, _model_forward) or _patched_by_us(m, _block_forward):
            del m.__dict__["forward"]
        m.__dict__.pop("_adaptiveload_fuse_norm2", None)
    return model


def is_fused(model: nn.Module) -> bool:
    """Whether use_fused_adaln is in effect on `model`."""
    return _patched_by_us(model, _model_forward)


def _fp32_modulation(shift: torch.Tensor, scale: torch.Tensor):
    """diffusers computes norm(x).float() * (1 + scale) + shift: `1 + scale` is rounded in
    scale's dtype, the rest is fp32. The fp32 pair (shift, (1 + scale) - 1) gives the op the
    same values (the subtraction is exact)."""
    if scale.dtype != torch.float32:
        scale = (1 + scale).float() - 1
    return shift.float(), scale


def _per_batch(t: torch.Tensor, batch: int) -> torch.Tensor:
    # diffusers broadcasts a modulation of batch 1 over the batch; the op wants B rows.
    return t if t.shape[0] == batch else t.expand(batch, *t.shape[1:])


def _adaln(x: torch.Tensor, shift: torch.Tensor, scale: torch.Tensor, eps: float) -> torch.Tensor:
    # x [B, L, D] (bf16 / fp16 / fp32); shift, scale [B or 1, 1 or L, D] -> y [B, L, D] in x's dtype.
    shift, scale = _fp32_modulation(shift, scale)
    return fused_adaln(x, _per_batch(shift, x.shape[0]), _per_batch(scale, x.shape[0]), eps=eps)


def _block_forward(
    self: WanTransformerBlock,
    hidden_states: torch.Tensor,
    encoder_hidden_states: torch.Tensor,
    temb: torch.Tensor,
    rotary_emb: torch.Tensor,
) -> torch.Tensor:
    # WanTransformerBlock.forward of diffusers 0.42.1 with its adaLN sites fused.
    if temb.ndim == 4:
        # temb: batch_size, seq_len, 6, inner_dim (wan2.2 ti2v)
        shift_msa, scale_msa, gate_msa, c_shift_msa, c_scale_msa, c_gate_msa = (
            self.scale_shift_table.unsqueeze(0) + temb.float()
        ).chunk(6, dim=2)
        shift_msa = shift_msa.squeeze(2)
        scale_msa = scale_msa.squeeze(2)
        gate_msa = gate_msa.squeeze(2)
        c_shift_msa = c_shift_msa.squeeze(2)
        c_scale_msa = c_scale_msa.squeeze(2)
        c_gate_msa = c_gate_msa.squeeze(2)
    else:
        # temb: batch_size, 6, inner_dim (wan2.1/wan2.2 14B)
        shift_msa, scale_msa, gate_msa, c_shift_msa, c_scale_msa, c_gate_msa = (
            self.scale_shift_table + temb.float()
        ).chunk(6, dim=1)

    # 1. Self-attention
    norm_hidden_states = _adaln(hidden_states, shift_msa, scale_msa, self.norm1.eps)
    attn_output = self.attn1(norm_hidden_states, None, None, rotary_emb)
    hidden_states = (hidden_states.float() + attn_output * gate_msa).type_as(hidden_states)

    # 2. Cross-attention
    if self._adaptiveload_fuse_norm2:
        zero = hidden_states.new_zeros((hidden_states.shape[0], hidden_states.shape[-1]), dtype=torch.float32)
        norm_hidden_states = fused_adaln(hidden_states, zero, zero, self.norm2.weight, self.norm2.bias,
                                         eps=self.norm2.eps)
    else:
        norm_hidden_states = self.norm2(hidden_states.float()).type_as(hidden_states)
    attn_output = self.attn2(norm_hidden_states, encoder_hidden_states, None, None)
    hidden_states = hidden_states + attn_output

    # 3. Feed-forward
    norm_hidden_states = _adaln(hidden_states, c_shift_msa, c_scale_msa, self.norm3.eps)
    ff_output = self.ffn(norm_hidden_states)
    hidden_states = (hidden_states.float() + ff_output.float() * c_gate_msa).type_as(hidden_states)

    return hidden_states


@apply_lora_scale("attention_kwargs")
def _model_forward(
    self: WanTransformer3DModel,
    hidden_states: torch.Tensor,
    timestep: torch.LongTensor,
    encoder_hidden_states: torch.Tensor,
    encoder_hidden_states_image: Optional[torch.Tensor] = None,
    return_dict: bool = True,
    attention_kwargs: Optional[Dict[str, Any]] = None,
):
    # WanTransformer3DModel.forward of diffusers 0.42.1 with the output norm fused.
    batch_size, num_channels, num_frames, height, width = hidden_states.shape
    p_t, p_h, p_w = self.config.patch_size
    post_patch_num_frames = num_frames // p_t
    post_patch_height = height // p_h
    post_patch_width = width // p_w

    rotary_emb = self.rope(hidden_states)

    hidden_states = self.patch_embedding(hidden_states)
    hidden_states = hidden_states.flatten(2).transpose(1, 2)
    hidden_states = hidden_states.contiguous()

    # timestep shape: batch_size, or batch_size, seq_len (wan 2.2 ti2v)
    if timestep.ndim == 2:
        ts_seq_len = timestep.shape[1]
        timestep = timestep.flatten()  # batch_size * seq_len
    else:
        ts_seq_len = None

    temb, timestep_proj, encoder_hidden_states, encoder_hidden_states_image = self.condition_embedder(
        timestep, encoder_hidden_states, encoder_hidden_states_image, timestep_seq_len=ts_seq_len
    )
    if ts_seq_len is not None:
        timestep_proj = timestep_proj.unflatten(2, (6, -1))  # batch_size, seq_len, 6, inner_dim
    else:
        timestep_proj = timestep_proj.unflatten(1, (6, -1))  # batch_size, 6, inner_dim

    if encoder_hidden_states_image is not None:
        encoder_hidden_states = torch.concat([encoder_hidden_states_image, encoder_hidden_states], dim=1)

    if torch.is_grad_enabled() and self.gradient_checkpointing:
        for block in self.blocks:
            hidden_states = self._gradient_checkpointing_func(
                block, hidden_states, encoder_hidden_states, timestep_proj, rotary_emb
            )
    else:
        for block in self.blocks:
            hidden_states = block(hidden_states, encoder_hidden_states, timestep_proj, rotary_emb)

    if temb.ndim == 3:
        # batch_size, seq_len, inner_dim (wan 2.2 ti2v)
        shift, scale = (self.scale_shift_table.unsqueeze(0).to(temb.device) + temb.unsqueeze(2)).chunk(2, dim=2)
        shift = shift.squeeze(2)
        scale = scale.squeeze(2)
    else:
        # batch_size, inner_dim
        shift, scale = (self.scale_shift_table.to(temb.device) + temb.unsqueeze(1)).chunk(2, dim=1)

    shift = shift.to(hidden_states.device)
    scale = scale.to(hidden_states.device)

    hidden_states = _adaln(hidden_states, shift, scale, self.norm_out.eps)
    hidden_states = self.proj_out(hidden_states)

    hidden_states = hidden_states.reshape(
        batch_size, post_patch_num_frames, post_patch_height, post_patch_width, p_t, p_h, p_w, -1
    )
    hidden_states = hidden_states.permute(0, 7, 1, 4, 2, 5, 3, 6)
    output = hidden_states.flatten(6, 7).flatten(4, 5).flatten(2, 3)

    if not return_dict:
        return (output,)

    return Transformer2DModelOutput(sample=output)
