"""The world-action model: presets, the batch contract, parameter routing, determinism and the FLOP count."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from megahour.train.model import HEADS, PRESETS, ModelConfig, WorldActionModel, parameter_count, preset
from megahour.train.muon import route_parameters

TINY = preset("tiny")


def make_batch(config: ModelConfig, batch: int, seed: int = 0) -> dict[str, torch.Tensor]:
    """A batch in the loaders' contract: uint8 frames, float32 the rest."""
    g = torch.Generator().manual_seed(seed)
    s, k = config.image_size, config.cameras

    def frames(t: int) -> torch.Tensor:
        return torch.randint(0, 256, (batch, t, k, config.channels, s, s), dtype=torch.uint8, generator=g)

    return {
        "frames": frames(config.context_frames),
        "future_frames": frames(config.future_frames),
        "proprio": torch.randn(batch, config.proprio_dim, generator=g),
        "past_actions": torch.randn(batch, config.past_actions, config.action_dim, generator=g),
        "actions": torch.randn(batch, config.action_chunk, config.action_dim, generator=g),
    }


@pytest.fixture
def deterministic():
    before = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    yield
    torch.use_deterministic_algorithms(before)


def test_presets_have_the_advertised_sizes() -> None:
    assert set(PRESETS) == {"tiny", "small", "base"}
    assert ModelConfig() == TINY  # the default stays the CI model
    assert parameter_count(TINY) < 1_000_000
    assert 20e6 <= parameter_count(preset("small")) <= 40e6
    assert 200e6 <= parameter_count(preset("base")) <= 500e6
    assert parameter_count(TINY) == parameter_count(WorldActionModel(TINY))


def test_preset_overrides_and_unknown_names() -> None:
    assert preset("small", depth=2).depth == 2
    assert preset("small", depth=2).width == PRESETS["small"].width
    with pytest.raises(ValueError, match="tiny, small, base"):
        preset("huge")


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"width": 66}, "multiple of heads"),
        ({"image_size": 30}, "multiple of patch"),
        ({"cameras": 0}, "cameras must be a positive integer"),
        ({"depth": True}, "depth must be a positive integer"),
        ({"mlp_ratio": 2.5}, "mlp_ratio must be a positive integer"),
    ],
)
def test_config_refuses_bad_shapes(overrides, message) -> None:
    with pytest.raises(ValueError, match=message):
        dataclasses.replace(TINY, **overrides)


def test_forward_shapes_and_a_finite_loss() -> None:
    torch.manual_seed(0)
    model = WorldActionModel(TINY)
    batch = make_batch(TINY, 3)
    latents, actions = model(batch["frames"], batch["proprio"], batch["past_actions"])
    c = TINY
    assert latents.shape == (3, c.future_frames, c.cameras, c.patches_per_frame, c.width)
    assert actions.shape == (3, c.action_chunk, c.action_dim)
    assert model.encode_patches(batch["future_frames"]).shape == latents.shape
    loss = model.loss(batch)
    assert loss.ndim == 0 and torch.isfinite(loss)


def test_uint8_pixels_are_scaled_inside_the_model() -> None:
    torch.manual_seed(0)
    model = WorldActionModel(TINY)
    batch = make_batch(TINY, 2)
    scaled = {k: batch[k].float() / 255 for k in ("frames", "future_frames")}
    as_float = {**batch, **scaled}
    assert torch.equal(model.loss(batch), model.loss(as_float))


def test_a_batch_of_the_wrong_shape_names_the_contract() -> None:
    model = WorldActionModel(TINY)
    batch = make_batch(TINY, 2)
    without_cameras = batch["frames"][:, :, 0]
    with pytest.raises(ValueError, match=r"\(B, time, cameras, channels, H, W\)"):
        model(without_cameras, batch["proprio"], batch["past_actions"])
    with pytest.raises(ValueError, match="context frames"):
        model(batch["frames"][:, :1], batch["proprio"], batch["past_actions"])
    with pytest.raises(ValueError, match="must be uint8"):
        model(batch["frames"].to(torch.int32), batch["proprio"], batch["past_actions"])


def test_routing_sends_hidden_matrices_to_muon_and_tables_and_heads_to_adamw() -> None:
    model = WorldActionModel(TINY)
    muon, adamw = route_parameters(model, HEADS)
    muon_names = {n for n, _ in muon}
    adamw_names = {n for n, _ in adamw}
    assert {"patch_embed.weight", "proprio_in.weight", "actions_in.weight"} <= muon_names
    for i in range(TINY.depth):
        for layer in ("qkv", "proj", "mlp_in", "mlp_out"):
            assert f"blocks.{i}.{layer}.weight" in muon_names
    for name in ("time_embed.weight", "camera_embed.weight", "patch_pos.weight", "latent_head.weight",
                 "action_head.weight", "norm.weight", "patch_embed.bias"):  # fmt: skip
        assert name in adamw_names
    assert all(p.ndim == 2 for _, p in muon)


def test_every_parameter_gets_a_gradient() -> None:
    model = WorldActionModel(TINY)
    model.loss(make_batch(TINY, 2)).backward()
    missing = [n for n, p in model.named_parameters() if p.grad is None or not p.grad.abs().sum() > 0]
    assert missing == []


def test_two_runs_are_bit_identical_under_deterministic_algorithms(deterministic) -> None:
    def grads() -> list[torch.Tensor]:
        torch.manual_seed(7)
        model = WorldActionModel(TINY)
        model.loss(make_batch(TINY, 4)).backward()
        return [p.grad.clone() for p in model.parameters()]

    first, second = grads(), grads()
    assert all(torch.equal(a, b) for a, b in zip(first, second, strict=True))


def test_a_few_adamw_steps_lower_the_loss_on_a_fixed_batch() -> None:
    torch.manual_seed(0)
    model = WorldActionModel(TINY)
    batch = make_batch(TINY, 8)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(15):
        optimizer.zero_grad()
        loss = model.loss(batch)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.8 * losses[0]


def test_flops_per_sample_matches_torchs_flop_counter() -> None:
    """torch's counter sees every matmul (mm, addmm, bmm). Under the math SDPA backend attention is two
    bmm forward and four backward, which is exactly the formula's model FLOPs: the gap is 0. (The CPU's
    fused flash kernel has no FLOP formula in torch, so it would count attention as 0, and the fused
    GPU kernels' formulas add the recomputed scores in backward: 3.5x attention's forward, not 3x.)"""
    for config in (TINY, preset("tiny", cameras=1, future_frames=2, mlp_ratio=2, context_frames=3)):
        model = WorldActionModel(config)
        batch = make_batch(config, 2)
        counter = FlopCounterMode(display=False)
        with counter, sdpa_kernel(SDPBackend.MATH):
            model.loss(batch).backward()
        counted = counter.get_total_flops() / 2
        assert abs(counted - config.flops_per_sample()) / counted < 0.01, (counted, config.flops_per_sample())


def test_flops_grow_with_the_presets() -> None:
    flops = [preset(n).flops_per_sample() for n in ("tiny", "small", "base")]
    assert flops == sorted(flops)
    base = preset("base")
    # dominated by the transformer: 6 · (matmul parameters of the blocks) · tokens, within 25% (attention)
    blocks = 6 * base.depth * base.width**2 * (4 + 2 * base.mlp_ratio) * base.tokens
    assert 1.0 < base.flops_per_sample() / blocks < 1.25
