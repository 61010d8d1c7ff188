"""The inventory contract: GPU model profiles and validation of a vendor's inventory.

Everything except ``source`` is pure. ``validate`` runs the same way from the
`megahour inventory validate` CLI and from playbooks/validate.yml (through the
``megahour_inventory_check`` Ansible module), so there is one set of rules.
"""
