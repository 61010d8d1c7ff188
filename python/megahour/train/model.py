"""A small world-action model: from a window of frames, proprio and past actions, predict the latents of
the next frames and a chunk of future actions.

Frames are cut into patches and embedded; each frame becomes one token (the mean of its patch
embeddings, projected). Proprio and the past actions become one token each. A few pre-norm transformer
blocks mix the tokens; a pooled summary feeds two heads: ``latent_head`` (the encoder's latents of the
``future_frames`` frames that follow the window) and ``action_head`` (the next ``action_chunk``
actions). The latent targets come from the same frame encoder with gradients stopped, as in JEPA-style
world models, so the model learns no pixel decoder.

Parameter routing for Muon (``muon.route_parameters``): the hidden matrices (patch embedding, frame
projection, attention and MLP weights, input projections) go to Muon; the position embedding, norms,
biases and the two heads (:data:`HEADS`) go to AdamW.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn

HEADS = ("latent_head", "action_head")


@dataclass(frozen=True)
class ModelConfig:
    image_size: int = 32
    channels: int = 3
    patch: int = 8
    context_frames: int = 4
    future_frames: int = 2
    proprio_dim: int = 16
    action_dim: int = 8
    past_actions: int = 4
    action_chunk: int = 8
    width: int = 64
    depth: int = 2
    heads: int = 4

    def __post_init__(self) -> None:
        if self.image_size % self.patch:
            raise ValueError(f"image_size {self.image_size} is not a multiple of patch {self.patch}")
        if self.width % self.heads:
            raise ValueError(f"width {self.width} is not a multiple of heads {self.heads}")

    @property
    def tokens(self) -> int:
        return self.context_frames + 2

    def to_dict(self) -> dict[str, int]:
        return asdict(self)


class Block(nn.Module):
    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.norm2 = nn.LayerNorm(width)
        self.mlp_in = nn.Linear(width, 4 * width)
        self.mlp_out = nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).chunk(3, dim=-1)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        attn = F.scaled_dot_product_attention(q, k, v)
        x = x + self.proj(attn.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp_out(F.gelu(self.mlp_in(self.norm2(x))))


class WorldActionModel(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        c = config
        self.patch_embed = nn.Linear(c.channels * c.patch * c.patch, c.width)
        self.frame_proj = nn.Linear(c.width, c.width)
        self.proprio_in = nn.Linear(c.proprio_dim, c.width)
        self.actions_in = nn.Linear(c.past_actions * c.action_dim, c.width)
        self.position = nn.Embedding(c.tokens, c.width)
        self.blocks = nn.ModuleList(Block(c.width, c.heads) for _ in range(c.depth))
        self.norm = nn.LayerNorm(c.width)
        self.latent_head = nn.Linear(c.width, c.future_frames * c.width)
        self.action_head = nn.Linear(c.width, c.action_chunk * c.action_dim)

    def encode_frames(self, frames: torch.Tensor) -> torch.Tensor:
        """[B, T, C, H, W] floats in [0, 1] -> [B, T, width] frame latents."""
        b, t, ch, h, w = frames.shape
        p = self.config.patch
        patches = frames.reshape(b * t, ch, h // p, p, w // p, p).permute(0, 2, 4, 1, 3, 5)
        patches = patches.reshape(b * t, (h // p) * (w // p), ch * p * p)
        latent = self.frame_proj(self.patch_embed(patches).mean(dim=1))
        return latent.view(b, t, -1)

    def forward(
        self, frames: torch.Tensor, proprio: torch.Tensor, past_actions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Predicted future latents [B, future, width] and actions [B, chunk, action_dim]."""
        c = self.config
        tokens = torch.cat(
            [
                self.encode_frames(frames),
                self.proprio_in(proprio).unsqueeze(1),
                self.actions_in(past_actions.flatten(1)).unsqueeze(1),
            ],
            dim=1,
        )
        x = tokens + self.position.weight.unsqueeze(0)
        for block in self.blocks:
            x = block(x)
        summary = self.norm(x).mean(dim=1)
        latents = self.latent_head(summary).view(-1, c.future_frames, c.width)
        actions = self.action_head(summary).view(-1, c.action_chunk, c.action_dim)
        return latents, actions

    def loss(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Latent prediction error plus action error (both mean squared)."""
        latents, actions = self(batch["frames"], batch["proprio"], batch["past_actions"])
        with torch.no_grad():
            target = self.encode_frames(batch["future_frames"])
        return F.mse_loss(latents, target) + F.mse_loss(actions, batch["actions"])
