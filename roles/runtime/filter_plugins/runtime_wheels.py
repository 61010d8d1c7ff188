"""The runtime role's wheelhouse targets: which Python and architecture each node's wheels are built for.

A wheelhouse is built on the control node once per distinct target of the play's hosts (tasks/main.yml and
tasks/train_wheels.yml loop over ``runtime_wheel_targets``), and each host then takes the built one whose
target is its own (``runtime_wheelhouse_for``). The targets are ``megahour.deploy.wheelhouse.Target``
(the one source of the tag and of what is valid), so the filters need the megahour package on the
control node (``make venv``), as the module that builds does.

- ``runtime_wheel_target``: a host's target from its facts, ``{python: "3.13", arch: "x86_64",
  tag: "cp313-x86_64"}``.
- ``runtime_wheel_targets``: the distinct targets of a list of them (hosts that share one build once),
  ordered by Python version then architecture.
- ``runtime_wheelhouse_for``: of the build task's registered loop results, the one for a target.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ansible.errors import AnsibleFilterError


def _target_class():
    try:
        from megahour.deploy.wheelhouse import Target, WheelhouseError
    except ImportError as exc:
        raise AnsibleFilterError(
            f"the runtime wheelhouse filters need the megahour package on the control node ({exc}); "
            "run `make venv` and use .venv/bin/ansible-playbook"
        ) from exc
    return Target, WheelhouseError


def _as_dict(target) -> dict[str, str]:
    return {"python": target.python, "arch": target.arch, "tag": target.tag}


def runtime_wheel_target(facts: Mapping) -> dict[str, str]:
    """The target of a host whose ``ansible_facts`` these are: its interpreter's MAJOR.MINOR and machine."""
    target_class, error = _target_class()
    try:
        version = facts["python"]["version"]
        python, arch = f"{int(version['major'])}.{int(version['minor'])}", str(facts["architecture"])
    except (KeyError, TypeError, ValueError) as exc:
        raise AnsibleFilterError(
            f"no python version or architecture in the host's facts ({exc!r}): the runtime role needs "
            "them, so gather facts in its play (gather_facts: true, the default) or run the setup module"
        ) from exc
    try:
        return _as_dict(target_class(python, arch))
    except error as exc:
        raise AnsibleFilterError(f"the host's wheelhouse target: {exc}") from exc


def runtime_wheel_targets(targets: Iterable[Mapping]) -> list[dict[str, str]]:
    """Each distinct target once (validated again), ordered by Python version, then architecture."""
    target_class, error = _target_class()
    distinct = {}
    for target in targets:
        try:
            parsed = target_class(str(target["python"]), str(target["arch"]))
        except (KeyError, TypeError) as exc:
            raise AnsibleFilterError(f"{target!r} is not a wheelhouse target (python, arch)") from exc
        except error as exc:
            raise AnsibleFilterError(str(exc)) from exc
        distinct[parsed.tag] = parsed
    ordered = sorted(distinct.values(), key=lambda t: (tuple(map(int, t.python.split("."))), t.arch))
    return [_as_dict(target) for target in ordered]


def runtime_wheelhouse_for(results: Iterable[Mapping], target: Mapping) -> dict:
    """The result (key, wheelhouse, requirements, ...) whose ``target`` is ``target``'s tag."""
    tag = target["tag"]
    seen = []
    for result in results:
        if result.get("target") == tag and not result.get("failed") and not result.get("skipped"):
            return dict(result)
        seen.append(result.get("target") or f"skipped {(result.get('item') or {}).get('tag', '?')}")
    raise AnsibleFilterError(
        f"no wheelhouse was built for {tag} (built: {', '.join(map(str, seen)) or 'none'}): the build task "
        "loops over the targets of the play's hosts, so this host's facts changed since, or it was skipped"
    )


class FilterModule:
    def filters(self):
        return {
            "runtime_wheel_target": runtime_wheel_target,
            "runtime_wheel_targets": runtime_wheel_targets,
            "runtime_wheelhouse_for": runtime_wheelhouse_for,
        }
