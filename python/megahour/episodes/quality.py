"""Quality of decoded frames against their source: PSNR and SSIM (pure numpy)."""

from __future__ import annotations

import numpy as np


def psnr(reference: np.ndarray, decoded: np.ndarray) -> float:
    """Peak signal-to-noise ratio in dB over all pixels and channels (inf when identical)."""
    if reference.shape != decoded.shape:
        raise ValueError(f"shape mismatch: {reference.shape} vs {decoded.shape}")
    diff = reference.astype(np.int32) - decoded.astype(np.int32)  # int32: fast, and 255**2 cannot overflow
    mse = float(np.mean(diff * diff))
    return float("inf") if mse == 0 else float(10.0 * np.log10(255.0**2 / mse))


def luma_psnr(reference: np.ndarray, decoded: np.ndarray) -> float:
    """PSNR in dB of the BT.601 luma (the Y a JPEG stores, full range) of two RGB frames."""
    if reference.shape != decoded.shape:
        raise ValueError(f"shape mismatch: {reference.shape} vs {decoded.shape}")
    diff = _luma(reference) - _luma(decoded)
    mse = float(np.mean(diff * diff))
    return float("inf") if mse == 0 else float(10.0 * np.log10(255.0**2 / mse))


def _luma(rgb: np.ndarray) -> np.ndarray:
    rgb = rgb.astype(np.float64)
    return 0.299 * rgb[..., 0] + 0.587 * rgb[..., 1] + 0.114 * rgb[..., 2]


def _box_mean(image: np.ndarray, size: int) -> np.ndarray:
    """Mean over every size x size window ('valid' positions), by summed-area table."""
    table = np.pad(image, ((1, 0), (1, 0))).cumsum(0).cumsum(1)
    total = table[size:, size:] - table[:-size, size:] - table[size:, :-size] + table[:-size, :-size]
    return total / (size * size)


def ssim(reference: np.ndarray, decoded: np.ndarray, window: int = 8) -> float:
    """Mean SSIM of the luma planes with a uniform ``window`` x ``window`` window (Wang et al. 2004)."""
    if reference.shape != decoded.shape:
        raise ValueError(f"shape mismatch: {reference.shape} vs {decoded.shape}")
    x, y = _luma(reference), _luma(decoded)
    c1, c2 = (0.01 * 255) ** 2, (0.03 * 255) ** 2
    mx, my = _box_mean(x, window), _box_mean(y, window)
    vx = _box_mean(x * x, window) - mx * mx
    vy = _box_mean(y * y, window) - my * my
    cxy = _box_mean(x * y, window) - mx * my
    score = ((2 * mx * my + c1) * (2 * cxy + c2)) / ((mx * mx + my * my + c1) * (vx + vy + c2))
    return float(score.mean())


def mean_quality(reference: np.ndarray, decoded: np.ndarray) -> tuple[float, float]:
    """(mean PSNR, mean SSIM) over a stack of frames [N, H, W, 3]."""
    if len(reference) != len(decoded):
        raise ValueError(f"frame count mismatch: {len(reference)} vs {len(decoded)}")
    values = [(psnr(r, d), ssim(r, d)) for r, d in zip(reference, decoded, strict=True)]
    finite = [p for p, _ in values if np.isfinite(p)]
    mean_psnr = float(np.mean(finite)) if finite else float("inf")
    return mean_psnr, float(np.mean([s for _, s in values]))
