"""Control-node tooling for the Ansible bundle (never installed onto a node's job path).

``wheelhouse`` names and builds the wheelhouses the runtime and airflow roles install from (through the
``megahour_wheelhouse`` Ansible module); ``collection_pins`` checks the Ansible collections that
``requirements.yml`` pins against what ansible loads, and installs what is missing (``make venv``).
"""
