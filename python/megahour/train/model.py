"""The world-action model: from a window of multi-camera frames, proprio and past actions, predict the
latents of the next frames and a chunk of future actions.

Tokens (``ModelConfig.tokens`` of them a sample):

- every ``patch`` x ``patch`` patch of every camera of every context frame, embedded by one Linear on
  the flattened pixels (``patch_embed``, a 2-D matrix, so Muon's), plus learned time, camera and patch
  position embeddings (``nn.Embedding`` tables, so AdamW's);
- one proprio token (``proprio_in``) and one past-action token (``actions_in``).

A pre-norm transformer (``F.scaled_dot_product_attention``, bidirectional over the window) mixes them.
Two heads (:data:`HEADS`, AdamW's):

- ``latent_head`` maps each patch token of the last context frame to that patch's latent in each of
  the ``future_frames`` frames that follow. The targets are ``patch_embed`` of the future frames with
  gradients stopped: a JEPA-style target, so the model learns no pixel decoder.
- ``action_head`` maps the mean of all tokens to the next ``action_chunk`` actions.

Batches (the data contract): ``frames`` uint8 [B, context_frames, cameras, 3, S, S], ``future_frames``
uint8 [B, future_frames, cameras, 3, S, S], ``proprio`` float32 [B, proprio_dim], ``past_actions``
float32 [B, past_actions, action_dim], ``actions`` float32 [B, action_chunk, action_dim]. Pixels
become floats in [0, 1] inside the model, so loaders move a quarter of the bytes.

Every op here is deterministic on the CPU under ``torch.use_deterministic_algorithms(True)``: the
position tables are added as whole weights (broadcast, no index gather), so their backward is a plain
reduction.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace

import torch
import torch.nn.functional as F
from torch import nn

HEADS = ("latent_head", "action_head")


@dataclass(frozen=True)
class ModelConfig:
    """The model's shape. The defaults are the ``tiny`` preset (CI on one CPU thread)."""

    image_size: int = 32
    channels: int = 3
    cameras: int = 2
    patch: int = 8
    context_frames: int = 2
    future_frames: int = 1
    proprio_dim: int = 16
    action_dim: int = 8
    past_actions: int = 4
    action_chunk: int = 8
    width: int = 64
    depth: int = 2
    heads: int = 4
    mlp_ratio: int = 4

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if type(value) is not int or value < 1:
                raise ValueError(f"ModelConfig.{f.name} must be a positive integer, got {value!r}")
        if self.image_size % self.patch:
            raise ValueError(f"image_size {self.image_size} is not a multiple of patch {self.patch}")
        if self.width % self.heads:
            raise ValueError(f"width {self.width} is not a multiple of heads {self.heads}")

    @property
    def patches_per_frame(self) -> int:
        return (self.image_size // self.patch) ** 2

    @property
    def patch_dim(self) -> int:
        return self.channels * self.patch * self.patch

    @property
    def frame_tokens(self) -> int:
        """Patch tokens of the context window: frames x cameras x patches."""
        return self.context_frames * self.cameras * self.patches_per_frame

    @property
    def target_tokens(self) -> int:
        """Patch latents the model predicts: future frames x cameras x patches."""
        return self.future_frames * self.cameras * self.patches_per_frame

    @property
    def tokens(self) -> int:
        """The transformer's sequence length: the frame tokens, one proprio and one past-action token."""
        return self.frame_tokens + 2

    def to_dict(self) -> dict[str, int]:
        return asdict(self)

    def flops_per_sample(self) -> int:
        """Training FLOPs of one sample (forward and backward), counting every matmul and nothing else.

        With ``d`` width, ``r`` mlp_ratio, ``L`` depth, ``T`` tokens, ``P`` patch_dim, ``Nc``/``Nf`` the
        context/target patch tokens, ``n`` the patches of one frame-of-all-cameras (cameras x patches):

        - a trained matmul costs 3x its forward ``2·m·k·n`` (the input's and the weight's gradients);
        - per block, forward: ``2·T·d²·(4 + 2r)`` (qkv, output projection, MLP) plus attention's
          ``2·2·T²·d`` (``QKᵀ`` and ``PV``, model FLOPs: a kernel's recompute in backward is not counted);
        - ``latent_head`` ``2·n·d·(future·d)`` and ``action_head`` ``2·d·(chunk·a)``, both 3x;
        - the input projections (``patch_embed`` over ``Nc``, ``proprio_in``, ``actions_in``) take no
          gradient for their inputs (pixels, data), so 2x: forward and the weight gradient;
        - the stop-gradient target, ``patch_embed`` over ``Nf``, runs forward only: 1x.

        Norms, softmax, GELU, the loss and the optimizer are left out, as MFU conventionally does; they
        are well under 1% of the total at the ``small`` and ``base`` presets.
        """
        d, r, t = self.width, self.mlp_ratio, self.tokens
        n = self.cameras * self.patches_per_frame
        block = 2 * t * d * d * (4 + 2 * r) + 4 * t * t * d
        heads = 2 * n * d * self.future_frames * d + 2 * d * self.action_chunk * self.action_dim
        inputs_in = self.frame_tokens * self.patch_dim + self.proprio_dim
        inputs_in += self.past_actions * self.action_dim
        inputs = 2 * d * inputs_in
        target = 2 * self.target_tokens * self.patch_dim * d
        return 3 * (self.depth * block + heads) + 2 * inputs + target


PRESETS: dict[str, ModelConfig] = {
    # CI on one CPU thread: 66 tokens of width 64; a batch of 8 steps in tens of milliseconds.
    "tiny": ModelConfig(),
    # About 26M parameters: a single GPU or a patient CPU; 514 tokens (64 px, patch 8, 4 frames x 2 cameras).
    "small": ModelConfig(
        image_size=64, patch=8, cameras=2, context_frames=4, future_frames=2, width=512, depth=8, heads=8
    ),
    # About 300M parameters over 802 tokens (160 px, patch 16, 4 frames x 2 cameras): large enough
    # matmuls that an H100/H200 is compute-bound, so MFU measures the GPU and not launch overhead.
    "base": ModelConfig(
        image_size=160, patch=16, cameras=2, context_frames=4, future_frames=2, width=1024, depth=24, heads=16
    ),
}


def preset(name: str, **overrides: int) -> ModelConfig:
    """A preset's config, with any field replaced (``preset("small", depth=4)``)."""
    if name not in PRESETS:
        raise ValueError(f"unknown model preset {name!r}; choose one of {', '.join(PRESETS)}")
    return replace(PRESETS[name], **overrides)


def parameter_count(model_or_config: nn.Module | ModelConfig) -> int:
    """Trainable parameters of a model, or of the model a config builds (on the meta device: no memory)."""
    if isinstance(model_or_config, ModelConfig):
        with torch.device("meta"):
            model_or_config = WorldActionModel(model_or_config)
    return sum(p.numel() for p in model_or_config.parameters() if p.requires_grad)


class Block(nn.Module):
    """Pre-norm: ``x + attn(norm(x))``, then ``x + mlp(norm(x))``."""

    def __init__(self, width: int, heads: int, mlp_ratio: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.norm2 = nn.LayerNorm(width)
        self.mlp_in = nn.Linear(width, mlp_ratio * width)
        self.mlp_out = nn.Linear(mlp_ratio * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).chunk(3, dim=-1)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        attn = F.scaled_dot_product_attention(q, k, v)
        x = x + self.proj(attn.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp_out(F.gelu(self.mlp_in(self.norm2(x))))


def _pixels(frames: torch.Tensor) -> torch.Tensor:
    """uint8 pixels -> float32 in [0, 1]; floating input is taken as already scaled."""
    if frames.dtype == torch.uint8:
        return frames.to(torch.float32).div_(255.0)
    if not frames.is_floating_point():
        raise ValueError(f"frames must be uint8 (or floats in [0, 1]), got {frames.dtype}; fix the loader")
    return frames


class WorldActionModel(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = c = config
        self.patch_embed = nn.Linear(c.patch_dim, c.width)
        self.time_embed = nn.Embedding(c.context_frames, c.width)
        self.camera_embed = nn.Embedding(c.cameras, c.width)
        self.patch_pos = nn.Embedding(c.patches_per_frame, c.width)
        self.proprio_in = nn.Linear(c.proprio_dim, c.width)
        self.actions_in = nn.Linear(c.past_actions * c.action_dim, c.width)
        self.blocks = nn.ModuleList(Block(c.width, c.heads, c.mlp_ratio) for _ in range(c.depth))
        self.norm = nn.LayerNorm(c.width)
        self.latent_head = nn.Linear(c.width, c.future_frames * c.width)
        self.action_head = nn.Linear(c.width, c.action_chunk * c.action_dim)

    def patchify(self, frames: torch.Tensor) -> torch.Tensor:
        """[B, T, cameras, C, S, S] -> [B, T, cameras, patches, C·p·p] floats in [0, 1]."""
        c = self.config
        expected = (c.cameras, c.channels, c.image_size, c.image_size)
        if frames.dim() != 6 or tuple(frames.shape[2:]) != expected:
            raise ValueError(
                f"frames must be [B, T, {c.cameras}, {c.channels}, {c.image_size}, {c.image_size}] "
                f"(B, time, cameras, channels, H, W), got {list(frames.shape)}; fix the loader or the config"
            )
        b, t, k, ch = frames.shape[:4]
        p, g = c.patch, c.image_size // c.patch
        x = _pixels(frames).reshape(b, t, k, ch, g, p, g, p).permute(0, 1, 2, 4, 6, 3, 5, 7)
        return x.reshape(b, t, k, g * g, ch * p * p)

    def encode_patches(self, frames: torch.Tensor) -> torch.Tensor:
        """The frame encoder: [B, T, cameras, C, S, S] -> patch latents [B, T, cameras, patches, width]."""
        return self.patch_embed(self.patchify(frames))

    def forward(
        self, frames: torch.Tensor, proprio: torch.Tensor, past_actions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Predicted future patch latents [B, future, cameras, patches, width] and actions
        [B, chunk, action_dim]."""
        c = self.config
        if frames.shape[1] != c.context_frames:
            raise ValueError(f"frames hold {frames.shape[1]} context frames, the model {c.context_frames}")
        patches = self.encode_patches(frames)
        b = patches.shape[0]
        position = (
            self.time_embed.weight[:, None, None, :]
            + self.camera_embed.weight[None, :, None, :]
            + self.patch_pos.weight[None, None, :, :]
        )
        tokens = torch.cat(
            [
                (patches + position).reshape(b, c.frame_tokens, c.width),
                self.proprio_in(proprio).unsqueeze(1),
                self.actions_in(past_actions.flatten(1)).unsqueeze(1),
            ],
            dim=1,
        )
        for block in self.blocks:
            tokens = block(tokens)
        x = self.norm(tokens)
        per_frame = c.cameras * c.patches_per_frame
        last_frame = x[:, c.frame_tokens - per_frame : c.frame_tokens]
        latents = self.latent_head(last_frame).view(b, per_frame, c.future_frames, c.width)
        actions = self.action_head(x.mean(dim=1)).view(b, c.action_chunk, c.action_dim)
        # [B, cameras·patches, future, width] -> [B, future, cameras, patches, width], as encode_patches
        latents = latents.transpose(1, 2).reshape(b, c.future_frames, c.cameras, c.patches_per_frame, c.width)
        return latents, actions

    def loss(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Future patch-latent error plus action-chunk error (both mean squared, in fp32)."""
        latents, actions = self(batch["frames"], batch["proprio"], batch["past_actions"])
        with torch.no_grad():
            target = self.encode_patches(batch["future_frames"])
        latent_error = F.mse_loss(latents.float(), target.float())
        return latent_error + F.mse_loss(actions.float(), batch["actions"].float())
