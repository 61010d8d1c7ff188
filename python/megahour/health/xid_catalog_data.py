"""NVIDIA's Xid catalog, every code, as versioned data. Generated: do not edit by hand.

``ENTRIES`` holds each code of NVIDIA's published Xid catalog ("Analyzing Xid Errors with the Xid
Catalog", sheet "Xids" of its Xid-Catalog.xlsx; 172 codes, 1-172) as (mnemonic,
resolution bucket, description). The bucket is the catalog's "Resolution Bucket (Immediate Action)"
under megahour's name for it. Mnemonics are verbatim; descriptions are verbatim with line breaks
folded into spaces.

Where from: the catalog page (SOURCE) as machine-read from its spreadsheet by leptonai/gpud's
gen-catalog/gen.py into ``components/accelerator/nvidia/xid/catalog_generated.go`` (its header:
"Generated at 2025-10-29T00:35:32Z"), read at gpud commit 4a8de33a3f02 (file blob 3952a5a0df55). The
rows are the same in every gpud version of that file (2025-10-29 to 2025-11-12). A stored copy of the
NVIDIA page was compared with them row by row: same 172 codes, same Immediate Action buckets.

Bucket names are the source's own except: UPDATE_SWFW -> UPDATE_FW (78); WORKFLOW_NVLINK_ERR (74) and
WORKFLOW_NVLINK5_ERR (144-150) -> WORKFLOW_NVLINK; CHECK_UVM (159: "If UVM/vGPU is being utilized,
RESET_GPU; otherwise IGNORE") -> WORKFLOW, as a person or a rule must decide; an empty Immediate Action
cell (162-172) -> UNKNOWN. A comment above each renamed entry gives the source's spelling. The catalog
has no column saying that user applications can cause a code (some rows say so in their "Trigger
Conditions" prose), so this module has no APP_CAUSED set.

To regenerate: fetch leptonai/gpud and take ``components/accelerator/nvidia/xid/catalog_generated.go``
at its newest commit (or run gpud's gen.py on a fresh Xid-Catalog.xlsx from the page); parse each
``catalogEntries`` row (Code, Mnemonic, Description, ImmediateResolution) with a throwaway script; fold
whitespace in the texts and rename the buckets as above; write this module sorted by code and
tests/health/fixtures/nvidia-xid-catalog/codes.tsv (code, bucket verbatim) from the same rows; update
SOURCE, SOURCE_DATE and that folder's SOURCES.md; run ruff format. tests/health/test_xid_catalog.py
checks that the module and codes.tsv agree.
"""

from __future__ import annotations

SOURCE = (
    "https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html (Xid-Catalog.xlsx), "
    "as machine-read in https://github.com/leptonai/gpud/blob/"
    "4a8de33a3f02e207f39e9023d67125592d599731/components/accelerator/nvidia/xid/catalog_generated.go"
    " (blob 3952a5a0df55809cb1d38cbd7e1bac8af7751c9c, generated 2025-10-29T00:35:32Z)"
)
SOURCE_DATE = "2025-10-29"

# code: (mnemonic, resolution bucket, description)
ENTRIES: dict[int, tuple[str, str, str]] = {
    1: ("ROBUST_CHANNEL_FIFO_ERROR_FIFO_METHOD", "CONTACT_SUPPORT", "Unused"),
    2: ("ROBUST_CHANNEL_FIFO_ERROR_SW_METHOD", "CONTACT_SUPPORT", "Unused"),
    3: ("ROBUST_CHANNEL_FIFO_ERROR_UNK_METHOD", "CONTACT_SUPPORT", "Unused"),
    4: ("ROBUST_CHANNEL_FIFO_ERROR_CHANNEL_BUSY", "CONTACT_SUPPORT", "Unused"),
    5: ("ROBUST_CHANNEL_FIFO_ERROR_RUNOUT_OVERFLOW", "CONTACT_SUPPORT", "Unused"),
    6: ("ROBUST_CHANNEL_FIFO_ERROR_PARSE_ERR", "CONTACT_SUPPORT", "Unused"),
    7: ("ROBUST_CHANNEL_FIFO_ERROR_PTE_ERR", "CONTACT_SUPPORT", "Unused"),
    8: ("ROBUST_CHANNEL_FIFO_ERROR_IDLE_TIMEOUT", "RESTART_APP", "GPU stopped processing"),
    9: ("ROBUST_CHANNEL_GR_ERROR_INSTANCE", "CONTACT_SUPPORT", "Unused"),
    10: ("ROBUST_CHANNEL_GR_ERROR_SINGLE_STEP", "CONTACT_SUPPORT", "Unused"),
    11: ("ROBUST_CHANNEL_GR_ERROR_MISSING_HW", "RESTART_APP", "Invalid or corrupted push buffer stream"),
    12: ("ROBUST_CHANNEL_GR_ERROR_SW_METHOD", "CONTACT_SUPPORT", "Unused"),
    13: (
        "ROBUST_CHANNEL_GR_EXCEPTION / ROBUST_CHANNEL_GR_ERROR_SW_NOTIFY",
        "RESTART_APP",
        "Graphics Engine Exception",
    ),
    14: ("ROBUST_CHANNEL_FAKE_ERROR", "IGNORE", "Unused"),
    15: ("ROBUST_CHANNEL_SCANLINE_TIMEOUT", "CONTACT_SUPPORT", "Unused"),
    16: ("ROBUST_CHANNEL_VBLANK_CALLBACK_TIMEOUT", "CONTACT_SUPPORT", "Unused"),
    17: ("ROBUST_CHANNEL_PARAMETER_ERROR", "CONTACT_SUPPORT", "Unused"),
    18: ("ROBUST_CHANNEL_BUS_MASTER_TIMEOUT_ERROR", "CONTACT_SUPPORT", "Unused"),
    19: ("ROBUST_CHANNEL_DISP_MISSED_NOTIFIER", "CONTACT_SUPPORT", "Unused"),
    20: ("ROBUST_CHANNEL_MPEG_ERROR_SW_METHOD", "CONTACT_SUPPORT", "Unused"),
    21: ("ROBUST_CHANNEL_ME_ERROR_SW_METHOD", "CONTACT_SUPPORT", "Unused"),
    22: ("ROBUST_CHANNEL_VP_ERROR_SW_METHOD", "CONTACT_SUPPORT", "Unused"),
    23: ("ROBUST_CHANNEL_RC_LOGGING_ENABLED", "CONTACT_SUPPORT", "Unused"),
    24: ("ROBUST_CHANNEL_GR_SEMAPHORE_TIMEOUT", "CONTACT_SUPPORT", "Unused"),
    25: ("ROBUST_CHANNEL_GR_ILLEGAL_NOTIFY", "RESTART_APP", "Invalid or illegal push buffer stream"),
    26: ("ROBUST_CHANNEL_FIFO_ERROR_FBISTATE_TIMEOUT", "CONTACT_SUPPORT", "Unused"),
    27: ("ROBUST_CHANNEL_VP_ERROR", "CONTACT_SUPPORT", "Unused"),
    28: ("ROBUST_CHANNEL_VP2_ERROR", "CONTACT_SUPPORT", "Unused"),
    29: ("ROBUST_CHANNEL_BSP_ERROR", "CONTACT_SUPPORT", "Unused"),
    30: ("ROBUST_CHANNEL_BAD_ADDR_ACCESS", "CONTACT_SUPPORT", "Unused"),
    31: ("ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT", "RESTART_APP", "GPU memory page fault"),
    32: ("ROBUST_CHANNEL_PBDMA_ERROR", "RESTART_APP", "Invalid or corrupted push buffer stream"),
    33: ("ROBUST_CHANNEL_SEC_ERROR", "CONTACT_SUPPORT", "Unused"),
    34: ("ROBUST_CHANNEL_MSVLD_ERROR", "CONTACT_SUPPORT", "Unused"),
    35: ("ROBUST_CHANNEL_MSPDEC_ERROR", "CONTACT_SUPPORT", "Unused"),
    36: ("ROBUST_CHANNEL_MSPPP_ERROR", "CONTACT_SUPPORT", "Unused"),
    37: ("ROBUST_CHANNEL_FECS_ERR_UNIMP_FIRMWARE_METHOD", "IGNORE", "Driver firmware error"),
    38: ("ROBUST_CHANNEL_FECS_ERR_WATCHDOG_TIMEOUT", "IGNORE", "Driver firmware error"),
    39: ("ROBUST_CHANNEL_CE0_ERROR", "RESTART_APP", "Copy Engine Exception"),
    40: ("ROBUST_CHANNEL_CE1_ERROR", "RESTART_APP", "Copy Engine Exception"),
    41: ("ROBUST_CHANNEL_CE2_ERROR", "RESTART_APP", "Copy Engine Exception"),
    42: ("ROBUST_CHANNEL_VIC_ERROR", "CONTACT_SUPPORT", "Unused"),
    43: ("ROBUST_CHANNEL_RESETCHANNEL_VERIF_ERROR", "IGNORE", "GPU stopped processing"),
    44: ("ROBUST_CHANNEL_GR_FAULT_DURING_CTXSW", "IGNORE", "Graphics Engine fault during context switch"),
    45: (
        "ROBUST_CHANNEL_PREEMPTIVE_REMOVAL",
        "WORKFLOW_XID_45",
        (
            "Preemptive cleanup, due to previous errors -- Most likely to see when running multiple cuda "
            "applications and hitting a DBE"
        ),
    ),
    46: ("ROBUST_CHANNEL_GPU_TIMEOUT_ERROR", "RESET_GPU", "GPU stopped processing"),
    47: ("ROBUST_CHANNEL_NVENC0_ERROR", "CONTACT_SUPPORT", "Unused"),
    48: ("ROBUST_CHANNEL_GPU_ECC_DBE", "WORKFLOW_XID_48", "Double Bit ECC Error"),
    49: ("SILENT_RUNNING_CONSTANT_LEVEL_SET_BY_REGISTRY", "CONTACT_SUPPORT", "Unused"),
    50: ("SILENT_RUNNING_LEVEL_TRANSITION_DUE_TO_RC_ERROR", "CONTACT_SUPPORT", "Unused"),
    51: ("SILENT_RUNNING_STRESS_TEST_FAILURE", "CONTACT_SUPPORT", "Unused"),
    52: ("SILENT_RUNNING_LEVEL_TRANS_DUE_TO_TEMP_RISE", "CONTACT_SUPPORT", "Unused"),
    53: ("SILENT_RUNNING_TEMP_REDUCED_CLOCKING", "CONTACT_SUPPORT", "Unused"),
    54: (
        "SILENT_RUNNING_PWR_REDUCED_CLOCKING",
        "CHECK_MECHANICALS",
        "Auxiliary power is not connected to the GPU board",
    ),
    55: ("SILENT_RUNNING_TEMPERATURE_READ_ERROR", "CONTACT_SUPPORT", "Unused"),
    56: ("DISPLAY_CHANNEL_EXCEPTION", "CONTACT_SUPPORT", "Unused"),
    57: ("FB_LINK_TRAINING_FAILURE_ERROR", "CONTACT_SUPPORT", "Unused"),
    58: ("FB_MEMORY_ERROR", "CONTACT_SUPPORT", "Unused"),
    59: ("PMU_ERROR", "CONTACT_SUPPORT", "Unused"),
    60: ("ROBUST_CHANNEL_SEC2_ERROR", "RESTART_APP", "Video processor exception"),
    61: ("PMU_BREAKPOINT", "CONTACT_SUPPORT", "Unused"),
    62: ("PMU_HALT_ERROR", "RESET_GPU", "Internal micro-controller halt (newer drivers)"),
    63: ("INFOROM_DRAM_RETIREMENT_EVENT", "IGNORE", "GPU memory remapping event"),
    64: ("INFOROM_DRAM_RETIREMENT_FAILURE", "RESET_GPU", "GPU memory remapping failure"),
    65: ("ROBUST_CHANNEL_NVENC1_ERROR", "CONTACT_SUPPORT", "Unused"),
    66: ("ROBUST_CHANNEL_FECS_ERR_REG_ACCESS_VIOLATION", "IGNORE", "Illegal access by driver"),
    67: ("ROBUST_CHANNEL_FECS_ERR_VERIF_VIOLATION", "IGNORE", "Illegal access by driver"),
    68: ("ROBUST_CHANNEL_NVDEC0_ERROR", "RESTART_APP", "NVDEC0 Exception"),
    69: ("ROBUST_CHANNEL_GR_CLASS_ERROR", "RESTART_APP", "Graphics Engine class error"),
    70: ("ROBUST_CHANNEL_CE3_ERROR", "RESTART_APP", "CE3: Unknown Error"),
    71: ("ROBUST_CHANNEL_CE4_ERROR", "RESTART_APP", "CE4: Unknown Error"),
    72: ("ROBUST_CHANNEL_CE5_ERROR", "RESTART_APP", "CE5: Unknown Error"),
    73: ("ROBUST_CHANNEL_NVENC2_ERROR", "CONTACT_SUPPORT", "Unused"),
    # 74: source: WORKFLOW_NVLINK_ERR
    74: ("NVLINK_ERROR", "WORKFLOW_NVLINK", "NVLINK Error"),
    75: ("ROBUST_CHANNEL_CE6_ERROR", "RESTART_APP", "CE6: Unknown Error"),
    76: ("ROBUST_CHANNEL_CE7_ERROR", "RESTART_APP", "CE7: Unknown Error"),
    77: ("ROBUST_CHANNEL_CE8_ERROR", "RESTART_APP", "CE8: Unknown Error"),
    # 78: source: UPDATE_SWFW
    78: ("VGPU_START_ERROR", "UPDATE_FW", "vGPU Start Error"),
    79: ("ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS", "RESTART_BM", "GPU has fallen off the bus"),
    80: ("PBDMA_PUSHBUFFER_CRC_MISMATCH", "RESTART_APP", "Corrupted data sent to GPU"),
    81: ("ROBUST_CHANNEL_VGA_SUBSYSTEM_ERROR", "CONTACT_SUPPORT", "Unused"),
    82: ("ROBUST_CHANNEL_NVJPG0_ERROR", "RESTART_APP", "NVJPG0 Error"),
    83: ("ROBUST_CHANNEL_NVDEC1_ERROR", "RESTART_APP", "NVDEC1 Error"),
    84: ("ROBUST_CHANNEL_NVDEC2_ERROR", "RESTART_APP", "NVDEC2 Error"),
    85: ("ROBUST_CHANNEL_CE9_ERROR", "RESTART_APP", "CE9: Unknown Error"),
    86: ("ROBUST_CHANNEL_OFA0_ERROR", "RESTART_APP", "OFA Exception"),
    87: ("NVTELEMETRY_DRIVER_REPORT", "CONTACT_SUPPORT", "Unused"),
    88: ("ROBUST_CHANNEL_NVDEC3_ERROR", "RESTART_APP", "NVDEC3 Error"),
    89: ("ROBUST_CHANNEL_NVDEC4_ERROR", "RESTART_APP", "NVDEC4 Error"),
    90: ("LTC_ERROR", "CONTACT_SUPPORT", "Unused"),
    91: ("RESERVED_XID", "CONTACT_SUPPORT", "Unused"),
    92: ("EXCESSIVE_SBE_INTERRUPTS", "IGNORE", "High single-bit ECC error rate"),
    93: ("INFOROM_ERASE_LIMIT_EXCEEDED", "IGNORE", "Non-fatal violation of provisioned InfoROM wear limit"),
    94: ("ROBUST_CHANNEL_CONTAINED_ERROR", "RESTART_APP", "Contained memory error"),
    95: ("ROBUST_CHANNEL_UNCONTAINED_ERROR", "RESET_GPU", "Uncontained memory error"),
    96: ("ROBUST_CHANNEL_NVDEC5_ERROR", "RESTART_APP", "NVDEC5 Error"),
    97: ("ROBUST_CHANNEL_NVDEC6_ERROR", "RESTART_APP", "NVDEC6 Error"),
    98: ("ROBUST_CHANNEL_NVDEC7_ERROR", "RESTART_APP", "NVDEC7 Error"),
    99: ("ROBUST_CHANNEL_NVJPG1_ERROR", "RESTART_APP", "NVJPG1 Error"),
    100: ("ROBUST_CHANNEL_NVJPG2_ERROR", "RESTART_APP", "NVJPG2 Error"),
    101: ("ROBUST_CHANNEL_NVJPG3_ERROR", "RESTART_APP", "NVJPG3 Error"),
    102: ("ROBUST_CHANNEL_NVJPG4_ERROR", "RESTART_APP", "NVJPG4 Error"),
    103: ("ROBUST_CHANNEL_NVJPG5_ERROR", "RESTART_APP", "NVJPG5 Error"),
    104: ("ROBUST_CHANNEL_NVJPG6_ERROR", "RESTART_APP", "NVJPG6 Error"),
    105: ("ROBUST_CHANNEL_NVJPG7_ERROR", "RESTART_APP", "NVJPG7 Error"),
    106: ("SMBPBI_TEST_MESSAGE", "IGNORE", "SMBPBI Test Message"),
    107: ("SMBPBI_TEST_MESSAGE_SILENT", "IGNORE", "SMBPBI Test Message Silent"),
    108: ("NVLINK_REMOTE_TRANSLATION_ERROR", "IGNORE", "Unused"),
    109: ("ROBUST_CHANNEL_CTXSW_TIMEOUT_ERROR", "RESET_GPU", "Context Switch Timeout Error"),
    110: ("SEC_FAULT_ERROR", "RESET_GPU", "Security Fault Error"),
    111: ("BUNDLE_ERROR_EVENT", "CONTACT_SUPPORT", "Unused"),
    112: ("DISP_SUPERVISOR_ERROR", "CONTACT_SUPPORT", "Unused"),
    113: ("DP_LT_FAILURE", "CONTACT_SUPPORT", "Unused"),
    114: ("HEAD_RG_UNDERFLOW", "CONTACT_SUPPORT", "Unused"),
    115: ("CORE_CHANNEL_REGS", "CONTACT_SUPPORT", "Unused"),
    116: ("WINDOW_CHANNEL_REGS", "CONTACT_SUPPORT", "Unused"),
    117: ("CURSOR_CHANNEL_REGS", "CONTACT_SUPPORT", "Unused"),
    118: ("HEAD_REGS", "CONTACT_SUPPORT", "Unused"),
    119: ("GSP_RPC_TIMEOUT", "RESET_GPU", "GSP RPC Timeout"),
    120: ("GSP_ERROR", "RESET_GPU", "GSP Error"),
    121: ("C2C_ERROR", "IGNORE", "C2C Error"),
    122: ("SPI_PMU_RPC_READ_FAIL", "CONTACT_SUPPORT", "Unused"),
    123: ("SPI_PMU_RPC_WRITE_FAIL", "CONTACT_SUPPORT", "Unused"),
    124: ("SPI_PMU_RPC_ERASE_FAIL", "CONTACT_SUPPORT", "Unused"),
    125: ("INFOROM_FS_ERROR", "CONTACT_SUPPORT", "Unused"),
    126: ("ROBUST_CHANNEL_CE10_ERROR", "RESTART_APP", "CE10: Unknown Error"),
    127: ("ROBUST_CHANNEL_CE11_ERROR", "RESTART_APP", "CE11: Unknown Error"),
    128: ("ROBUST_CHANNEL_CE12_ERROR", "RESTART_APP", "CE12: Unknown Error"),
    129: ("ROBUST_CHANNEL_CE13_ERROR", "RESTART_APP", "CE13: Unknown Error"),
    130: ("ROBUST_CHANNEL_CE14_ERROR", "RESTART_APP", "CE14: Unknown Error"),
    131: ("ROBUST_CHANNEL_CE15_ERROR", "RESTART_APP", "CE15: Unknown Error"),
    132: ("ROBUST_CHANNEL_CE16_ERROR", "RESTART_APP", "CE16: Unknown Error"),
    133: ("ROBUST_CHANNEL_CE17_ERROR", "RESTART_APP", "CE17: Unknown Error"),
    134: ("ROBUST_CHANNEL_CE18_ERROR", "RESTART_APP", "CE18: Unknown Error"),
    135: ("ROBUST_CHANNEL_CE19_ERROR", "RESTART_APP", "CE19: Unknown Error"),
    136: ("ALI_TRAINING_FAIL", "RESET_GPU", "Link Training Failed"),
    137: ("NVLINK_PRIV_ERR", "IGNORE", "NVLink Privilege Error"),
    138: ("ROBUST_CHANNEL_DLA_ERROR", "CONTACT_SUPPORT", "Unused"),
    139: ("ROBUST_CHANNEL_OFA1_ERROR", "RESTART_APP", "OFA1 Error"),
    140: ("UNRECOVERABLE_ECC_ERROR_ESCAPE", "RESET_GPU", "ECC Unrecovered Error"),
    141: ("ROBUST_CHANNEL_FAST_PATH_ERROR", "IGNORE", "CUDA Fast Path Error"),
    142: ("ROBUST_CHANNEL_NVENC3_ERROR", "CONTACT_SUPPORT", "NVENC3 Error"),
    143: ("GPU_INIT_ERROR", "RESET_GPU", "GPU Initialization Error"),
    # 144-150: source: WORKFLOW_NVLINK5_ERR
    144: ("NVLINK_SAW_ERROR", "WORKFLOW_NVLINK", "NVLINK: SAW Error"),
    145: ("NVLINK_RLW_ERROR", "WORKFLOW_NVLINK", "NVLINK: RLW Error"),
    146: ("NVLINK_TLW_ERROR", "WORKFLOW_NVLINK", "NVLINK: TLW Error"),
    147: ("NVLINK_TREX_ERROR", "WORKFLOW_NVLINK", "NVLINK: TREX Error"),
    148: ("NVLINK_NVLPW_CTRL_ERROR", "WORKFLOW_NVLINK", "NVLINK: NVLPW_CTRL Error"),
    149: ("NVLINK_NETIR_ERROR", "WORKFLOW_NVLINK", "NVLINK: NETIR Error"),
    150: ("NVLINK_MSE_ERROR", "WORKFLOW_NVLINK", "NVLINK: MSE Error"),
    151: ("ROBUST_CHANNEL_KEY_ROTATION_ERROR", "RESTART_VM", "Key rotation Error"),
    152: ("ROBUST_CHANNEL_DLA_SMMU_ERROR", "IGNORE", "DLA SMMU Error"),
    153: ("ROBUST_CHANNEL_DLA_TIMEOUT", "IGNORE", "DLA timeout Error"),
    154: ("GPU_RECOVERY_ACTION_CHANGED", "XID_154", "GPU Recovery Action Changed"),
    155: ("NVLINK_SW_DEFINED_ERROR", "RESET_GPU", "NVLINK: SW Defined Error"),
    156: ("RESOURCE_RETIREMENT_EVENT", "RESET_GPU", "Resource Retirement Event"),
    157: ("RESOURCE_RETIREMENT_FAILURE", "IGNORE", "Resource Retirement Failure"),
    158: ("GPU_FATAL_TIMEOUT", "RESET_GPU", "GPU Fatal Timeout"),
    # 159: source: CHECK_UVM ('If UVM/vGPU is being utilized, RESET_GPU; otherwise IGNORE')
    159: ("ROBUST_CHANNEL_CHI_NON_DATA_ERROR", "WORKFLOW", "CHI Non-Data Error"),
    160: ("CHANNEL_RETIREMENT_EVENT", "IGNORE", "Channel Retirement Event"),
    161: ("CHANNEL_RETIREMENT_FAILURE", "IGNORE", "Channel Retirement Failure"),
    # 162-172: source: no Immediate Action bucket (empty cell)
    162: ("PSHC_REENGAGED", "UNKNOWN", "Power Smoothing HW Circuitry capability reengaged"),
    163: ("PSHC_DISENGAGED", "UNKNOWN", "Power Smoothing HW Circuitry capability disengaged"),
    164: ("PSHC_LOW_LIFETIME", "UNKNOWN", "Power Smoothing HW Circuitry low lifetime reached"),
    165: ("PSHC_ZERO_LIFETIME", "UNKNOWN", "Power Smoothing HW Circuitry lifetime exhausted"),
    166: (
        "NVLINK_SECURE_CRYPTO_ERR",
        "UNKNOWN",
        "CC traffic seen prior to link properly being configured for encrypted traffic",
    ),
    167: ("PCIE_FATAL_TIMEOUT", "UNKNOWN", "PCIE_FATAL_TIMEOUT"),
    168: ("REDUCED_GPU_MEMORY_CAPACITY", "UNKNOWN", "Errors found in WPR (write protected region)"),
    169: ("SEC2_HALT_ERROR", "UNKNOWN", "Internal micro-controller halt"),
    170: ("NVLINK_SECURE_OTHER", "UNKNOWN", "Interrupt seen in CC mode"),
    171: (
        "UNCORRECTABLE_DRAM_ERROR",
        "UNKNOWN",
        "Additional to Xid 48 providing more details on particulars of fault to differentiate DRAM/SRAM",
    ),
    172: (
        "UNCORRECTABLE_SRAM_ERROR",
        "UNKNOWN",
        "Additional to Xid 48 providing more details on particulars of fault to differentiate DRAM/SRAM",
    ),
}
