"""``slurm_conf_for_release``: the slurm.conf settings the installed Slurm release accepts.

Nodes run whatever Slurm their image's archive ships (22.05 on Debian 12, 24.11 on Debian 13), so one
settings dict must render for each. A key newer than the release (``slurm_client_config_min_version``) is
left out, and so is a key, or one option of a comma-separated key, that a later release removed
(``slurm_client_config_removed_in``: ``Key`` or ``Key=Option`` to the first release without it). What is
left out is returned too, so slurm.conf and the play's output can say so.
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError


def release_tuple(version) -> tuple[int, ...]:
    """``"22.05.8-4+deb12u3"`` -> (22, 5); ``"24.11"`` -> (24, 11)."""
    text = str(version).split("-", 1)[0]
    try:
        parts = tuple(int(part) for part in text.split(".")[:2])
    except ValueError as exc:
        raise AnsibleFilterError(f"Slurm release {version!r} is not <major>.<minor>[...]") from exc
    if len(parts) != 2:
        raise AnsibleFilterError(f"Slurm release {version!r} is not <major>.<minor>[...]")
    return parts


def _options(value) -> list[str]:
    """A comma-separated key's options, given as a list or as slurm.conf spells them (``A,B``)."""
    if isinstance(value, (list, tuple)):
        return [str(v) for v in value]
    return [v for v in str(value).split(",") if v != ""]


def slurm_conf_for_release(config, version, min_version=None, removed_in=None):
    """``{"config": what to render, "dropped": ["Key (needs Slurm X)", "Key=Opt (removed in Y)", ...]}``."""
    if not isinstance(config, dict):
        raise AnsibleFilterError(
            f"slurm_conf_for_release: the settings must be a dict, not {type(config).__name__}"
        )
    installed = release_tuple(version)
    effective = dict(config)
    dropped: list[str] = []
    for key, first in sorted((min_version or {}).items()):
        if key in effective and installed < release_tuple(first):
            del effective[key]
            dropped.append(f"{key} (needs Slurm {first})")
    for entry, gone in sorted((removed_in or {}).items()):
        if installed < release_tuple(gone):
            continue
        key, _, option = str(entry).partition("=")
        if key not in effective:
            continue
        if not option:
            del effective[key]
            dropped.append(f"{key} (removed in Slurm {gone})")
            continue
        options = _options(effective[key])
        kept = [o for o in options if o.lower() != option.lower()]
        if len(kept) == len(options):
            continue
        dropped.append(f"{key}={option} (removed in Slurm {gone})")
        if kept:
            effective[key] = kept if isinstance(effective[key], (list, tuple)) else ",".join(kept)
        else:
            del effective[key]
    return {"config": effective, "dropped": dropped}


class FilterModule:
    def filters(self):
        return {"slurm_conf_for_release": slurm_conf_for_release, "slurm_conf_options": _options}
