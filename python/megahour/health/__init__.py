"""GPU and host health gates.

Pure parts: ``verdict`` (the contract), ``smi`` and ``kernel_log`` (parsers),
``xid_catalog`` (versioned data), ``checks`` (rules). Adapters: ``probes``
(nvidia-smi, kernel log, statvfs, each with a timeout) and ``gate`` (the Prolog,
HealthCheckProgram and Epilog entry points).
"""
