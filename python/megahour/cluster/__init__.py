"""The local podman cluster: megahour's embedded default deployment target.

``spec`` and ``images`` hold the pure parts (names, inventory, recipes);
``podman``, ``prereqs`` and ``lifecycle`` talk to the host.
"""
