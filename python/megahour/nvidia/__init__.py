"""The NVIDIA stack of a GPU node: what ``nvidia-smi -q`` reports (:mod:`.smi_report`) and whether the
driver, persistence, fabric manager, nvidia_peermem and DCGM are as the GPU profile and fabric need
(:mod:`.host_checks`), for the ``nvidia`` role's checks."""
