"""Control-node tooling for the Ansible bundle (never installed onto a node's job path).

``collection_pins`` checks the Ansible collections that ``requirements.yml`` pins against what ansible
loads, and installs what is missing (``make venv``).
"""
