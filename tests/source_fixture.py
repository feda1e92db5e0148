"""SYNTHETIC ncu Source-page CSV (``ncu --import R.ncu-rep --csv --page source --print-source sass``), made by
hand to mirror the documented layout: a ``"Kernel Name",...`` row, a header row (no units row) whose columns
are Address, Source, "Warp Stall Sampling (All Samples)", "Warp Stall Sampling (Not-issued Samples)",
"Instructions Executed" (printed twice by ncu), ..., one ``stall_<label>`` column per reason and the same again
with " (Not Issued)"; then one row per SASS instruction. NOT a measurement: the numbers are invented so the
parser and the attribution have something with a known answer. Replace with the recorded file's own test once
``ncu_copies_source.csv`` exists."""
from __future__ import annotations

import csv
import io

from infralens_lab.parse import ncu

LABELS = ["barrier", "branch_resolving", "dispatch", "drain", "imc", "lg", "long_sb", "math", "membar", "mio",
          "misc", "no_inst", "not_selected", "selected", "short_sb", "sleep", "tex", "wait"]
HEADER = (["Address", "Source", "Warp Stall Sampling (All Samples)", "Warp Stall Sampling (Not-issued Samples)",
           "Instructions Executed", "# Samples", "Instructions Executed", "Thread Instructions Executed",
           "Address Space", "L2 Theoretical Sectors Global Excessive"]
          + [f"stall_{x}" for x in LABELS] + [f"stall_{x} (Not Issued)" for x in LABELS])

# (sass, executed, {label: samples}) of a strided copy: S2R feeds the index math, LDG feeds STG, then EXIT
STRIDED = [
    ("S2R R0, SR_TID.X", 1000, {"mio": 40, "selected": 2}),
    ("S2UR UR4, SR_CTAID.X", 1000, {"mio": 10}),
    ("IMAD.SHL.U32 R0, R0, 0x4, RZ", 1000, {"short_sb": 120, "selected": 1}),
    ("LOP3.LUT R0, R0, 0xffc, RZ, 0xc0, !PT", 1000, {"wait": 3}),
    ("IMAD.WIDE R2, R0, 0x20, R2", 1000, {"wait": 2}),
    ("@!P0 LDG.E R4, desc[UR6][R2.64]", 4000, {"lg": 30, "selected": 4}),
    ("STG.E.128 desc[UR6][R6.64], R4", 1000, {"long_sb": 400, "selected": 1}),
    ("EXIT", 1000, {"drain": 200}),
    ("BRA 0x180", 0, {}),
]
COALESCED = [
    ("S2R R0, SR_TID.X", 1000, {"selected": 2}),
    ("IMAD.SHL.U32 R0, R0, 0x4, RZ", 1000, {"short_sb": 5}),
    ("IMAD.WIDE R2, R0, 0x4, R2", 1000, {"wait": 4}),
    ("LDG.E.128 R4, desc[UR6][R2.64]", 1000, {"selected": 2}),
    ("STG.E.128 desc[UR6][R6.64], R4", 1000, {"long_sb": 600}),
    ("EXIT", 1000, {"drain": 10}),
]


def page(kernel: str, rows, base: int = 0x7F0000001000) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, quoting=csv.QUOTE_ALL, lineterminator="\n")
    w.writerow(["Kernel Name", kernel])
    w.writerow(HEADER)
    for k, (sass, ex, st) in enumerate(rows):
        total = sum(st.values())
        not_issued = total - st.get("selected", 0)
        vals = [str(st.get(x, 0)) for x in LABELS]
        w.writerow([hex(base + 16 * k), f"      {sass} ", str(total), str(not_issued), f"{ex:,}", str(total), f"{ex:,}",
                    str(32 * ex), "global" if "G." in sass else "-", "0"] + vals
                   + [v if x != "selected" else "0" for x, v in zip(LABELS, vals, strict=True)])
    return buf.getvalue()


def recorded_text() -> str:
    """Two blocks in the recorder's format (``==INFRALENS== config:`` lines), coalesced then stride 8."""
    return (ncu.config_block("copy n=67108864 fp32", "ncu --import ... --page source", page("copy_coalesced", COALESCED))
            + ncu.config_block("copy_strided stride=8 n=67108864 fp32", "ncu --import ... --page source",
                             page("copy_strided", STRIDED)))
