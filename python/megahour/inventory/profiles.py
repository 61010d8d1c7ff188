"""GPU model profiles: what an inventory may declare and what the health gate expects.

The key is the inventory value of ``megahour_gpu.model``. ``product_names`` are shell-style patterns
(``fnmatch``) matched against what ``nvidia-smi --query-gpu=name`` prints; ``gres_type`` is the Slurm
GRES type (``Gres=gpu:<gres_type>:<count>``); ``min_driver_branch`` is the oldest NVIDIA driver branch
that supports the GPU (``570`` for ``570.124.06``).

Built-in profiles cover the GPUs labs rent; where each value comes from is in docs/onboarding.md.
An inventory defines new profiles, or overrides fields of a built-in one, in ``megahour_gpu_profiles``
(group_vars), without editing code: ``merged_profiles`` combines the two, and validation, the Slurm
roles and the health gate all read that merged set.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields, replace
from fnmatch import fnmatchcase
from typing import Any

VARIABLE = "megahour_gpu_profiles"
HOST_ARCHES = ("x86_64", "aarch64")
# Slurm GRES type names: letters, digits and underscores keep slurm.conf and --gres unambiguous.
GRES_TYPE_RE = re.compile(r"^[a-z0-9_]+$")
MODEL_RE = re.compile(r"^[a-z0-9][a-z0-9_-]*$")


@dataclass(frozen=True)
class GpuProfile:
    model: str
    product_names: tuple[str, ...]  # fnmatch patterns over nvidia-smi's `name`
    memory_gb: int  # nominal memory per GPU, as sold
    counts_per_node: tuple[int, ...]  # node shapes this model is sold in
    nvswitch: bool  # the full-node board (HGX/NVL) joins the GPUs through NVSwitch
    min_driver_branch: int
    gres_type: str
    architecture: str
    host_arch: str = "x86_64"  # the CPU of the hosts it comes in

    def matches(self, product_name: str) -> bool:
        """Whether ``product_name`` (as nvidia-smi prints it) is this model."""
        return any(fnmatchcase(product_name.strip(), pattern) for pattern in self.product_names)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["product_names"] = list(self.product_names)
        out["counts_per_node"] = list(self.counts_per_node)
        return out


_ANY_SHAPE = (1, 2, 4, 8)

# Sources for every value (real nvidia-smi output, NVIDIA's notes): docs/onboarding.md, "GPU profiles".
# A minimum driver branch NVIDIA's supported-product notes did not give is the architecture's floor: the
# driver of the first CUDA toolkit for its compute capability (520 Hopper and Ada, 570 Blackwell,
# 575 SM 10.3).
BUILTIN: dict[str, GpuProfile] = {
    p.model: p
    for p in (
        GpuProfile(
            model="a100",
            product_names=(
                "NVIDIA A100-SXM4-80GB",
                "NVIDIA A100-SXM4-40GB",
                "NVIDIA A100-PCIE-40GB",
                "NVIDIA A100 80GB PCIe",
            ),
            memory_gb=80,
            counts_per_node=_ANY_SHAPE,
            nvswitch=True,
            min_driver_branch=450,
            gres_type="a100",
            architecture="ampere",
        ),
        GpuProfile(
            model="h100",
            product_names=("NVIDIA H100 80GB HBM3", "NVIDIA H100 PCIe", "NVIDIA H100 NVL"),
            memory_gb=80,
            counts_per_node=_ANY_SHAPE,
            nvswitch=True,
            min_driver_branch=525,
            gres_type="h100",
            architecture="hopper",
        ),
        GpuProfile(
            model="h200",
            product_names=("NVIDIA H200", "NVIDIA H200 NVL"),
            memory_gb=141,
            counts_per_node=_ANY_SHAPE,
            nvswitch=True,
            min_driver_branch=520,
            gres_type="h200",
            architecture="hopper",
        ),
        GpuProfile(
            model="h20",
            product_names=("NVIDIA H20",),
            memory_gb=96,
            counts_per_node=(8,),
            nvswitch=True,
            min_driver_branch=520,
            gres_type="h20",
            architecture="hopper",
        ),
        GpuProfile(
            model="b200",
            product_names=("NVIDIA B200",),
            memory_gb=180,
            counts_per_node=_ANY_SHAPE,
            nvswitch=True,
            min_driver_branch=570,
            gres_type="b200",
            architecture="blackwell",
        ),
        GpuProfile(
            model="b300",
            product_names=("NVIDIA B300 SXM6 AC", "NVIDIA B300*"),
            memory_gb=288,
            counts_per_node=(8,),
            nvswitch=True,
            min_driver_branch=575,
            gres_type="b300",
            architecture="blackwell",
        ),
        GpuProfile(
            model="gb200",
            product_names=("NVIDIA GB200",),
            memory_gb=186,
            counts_per_node=(4,),
            nvswitch=True,
            min_driver_branch=570,
            gres_type="gb200",
            architecture="blackwell",
            host_arch="aarch64",
        ),
        GpuProfile(
            model="l40s",
            product_names=("NVIDIA L40S",),
            memory_gb=48,
            counts_per_node=_ANY_SHAPE,
            nvswitch=False,
            min_driver_branch=520,
            gres_type="l40s",
            architecture="ada",
        ),
        GpuProfile(
            model="rtx-pro-6000",
            product_names=(
                "NVIDIA RTX PRO 6000 Blackwell Server Edition",
                "NVIDIA RTX PRO 6000 Blackwell Workstation Edition",
            ),
            memory_gb=96,
            counts_per_node=_ANY_SHAPE,
            nvswitch=False,
            min_driver_branch=575,
            gres_type="rtx_pro_6000",
            architecture="blackwell",
        ),
    )
}


class ProfileError(ValueError):
    """An inventory profile that cannot be used; ``variable`` names the setting, ``fix`` what to do."""

    def __init__(self, variable: str, message: str, fix: str):
        super().__init__(f"{variable}: {message}. Fix: {fix}")
        self.variable = variable
        self.message = message
        self.fix = fix


_FIELD_NAMES = tuple(f.name for f in fields(GpuProfile) if f.name != "model")
# What a new profile (one no built-in has) must give; the rest have defaults.
_REQUIRED_NEW = ("product_names", "counts_per_node", "min_driver_branch")
_NEW_DEFAULTS = {"memory_gb": 0, "nvswitch": False, "architecture": "unknown", "host_arch": "x86_64"}
_EXAMPLE = (
    f"{VARIABLE}: {{mygpu: {{product_names: ['NVIDIA MyGPU*'], counts_per_node: [8], "
    "min_driver_branch: 570}}}}"
)


def _str_list(value: Any) -> tuple[str, ...] | None:
    if isinstance(value, str):
        value = [value]
    if isinstance(value, list | tuple) and value and all(isinstance(v, str) and v.strip() for v in value):
        return tuple(v.strip() for v in value)
    return None


def _int_list(value: Any) -> tuple[int, ...] | None:
    if isinstance(value, int) and not isinstance(value, bool):
        value = [value]
    if (
        isinstance(value, list | tuple)
        and value
        and all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value)
    ):
        return tuple(sorted(set(value)))
    return None


def _positive_int(value: Any, allow_zero: bool = False) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value.strip())
    if isinstance(value, int) and (value > 0 or (allow_zero and value == 0)):
        return value
    return None


def _coerce(model: str, name: str, value: Any) -> Any:
    where = f"{VARIABLE}.{model}.{name}"
    if name == "product_names":
        out = _str_list(value)
        fix = "list the names nvidia-smi --query-gpu=name prints, shell patterns allowed ('NVIDIA B200*')"
    elif name == "counts_per_node":
        out = _int_list(value)
        fix = "list the GPUs per node this model comes in, for example [4, 8]"
    elif name == "min_driver_branch":
        out = _positive_int(value)
        fix = "set the oldest supported driver branch as a number, for example 570"
    elif name == "memory_gb":
        out = _positive_int(value, allow_zero=True)
        fix = "set the memory per GPU in GB as a whole number, for example 180"
    elif name == "nvswitch":
        out = value if isinstance(value, bool) else None
        fix = "set true when the node's GPUs are joined by NVSwitch, else false"
    elif name == "gres_type":
        out = value.lower() if isinstance(value, str) and GRES_TYPE_RE.match(value.lower()) else None
        fix = "use lower-case letters, digits and underscores (the Slurm GRES type, for example b200)"
    elif name == "architecture":
        out = value.strip().lower() if isinstance(value, str) and value.strip() else None
        fix = "name the GPU architecture, for example blackwell"
    elif name == "host_arch":
        out = value if value in HOST_ARCHES else None
        fix = f"use one of {', '.join(HOST_ARCHES)}"
    else:  # pragma: no cover - callers pass only field names
        raise AssertionError(name)
    if out is None:
        raise ProfileError(where, f"{value!r} is not valid", fix)
    return out


def _profile(model: str, spec: Any, base: GpuProfile | None) -> GpuProfile:
    if not MODEL_RE.match(model):
        raise ProfileError(
            f"{VARIABLE}.{model}",
            "is not a usable model name",
            "name profiles in lower case with letters, digits, '-' and '_', for example b200",
        )
    if not isinstance(spec, Mapping):
        raise ProfileError(
            f"{VARIABLE}.{model}", f"must be a mapping of profile fields (got {spec!r})", _EXAMPLE
        )
    unknown = sorted(set(spec) - set(_FIELD_NAMES))
    if unknown:
        raise ProfileError(
            f"{VARIABLE}.{model}.{unknown[0]}",
            "is not a profile field",
            f"use only {', '.join(_FIELD_NAMES)}",
        )
    values = {name: _coerce(model, name, value) for name, value in spec.items()}
    if base is not None:
        return replace(base, **values)
    missing = [name for name in _REQUIRED_NEW if name not in values]
    if missing:
        raise ProfileError(
            f"{VARIABLE}.{model}.{missing[0]}",
            f"a new profile (no built-in is called {model!r}) needs {', '.join(_REQUIRED_NEW)}",
            _EXAMPLE,
        )
    defaults = {**_NEW_DEFAULTS, "gres_type": model.replace("-", "_")}
    return GpuProfile(model=model, **{**defaults, **values})


def merged_profiles(overrides: Mapping[str, Any] | None = None) -> dict[str, GpuProfile]:
    """The built-in profiles with ``megahour_gpu_profiles`` on top: a built-in model's fields are
    replaced one by one, a new model is added. Raises ``ProfileError`` on the first unusable entry."""
    merged = dict(BUILTIN)
    if overrides is None:
        return merged
    if not isinstance(overrides, Mapping):
        raise ProfileError(
            VARIABLE, f"must be a mapping of model name to profile (got {overrides!r})", _EXAMPLE
        )
    for raw_model, spec in overrides.items():
        model = str(raw_model).strip().lower()
        merged[model] = _profile(model, spec, BUILTIN.get(model))
    return merged


def profile_for(model: Any, overrides: Mapping[str, Any] | None = None) -> GpuProfile | None:
    """The merged profile of inventory model ``model`` (any case), or None when there is none."""
    if model is None:
        return None
    return merged_profiles(overrides).get(str(model).strip().lower())


def known_models(overrides: Mapping[str, Any] | None = None) -> list[str]:
    return sorted(merged_profiles(overrides))
