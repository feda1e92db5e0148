"""Readers of recorded files: chrome traces (:mod:`.trace`), Nsight Compute CSVs (:mod:`.ncu`) and the
recorder's run labels (:mod:`.runs`). Everything here turns a file (or its text) into DataFrames and
dataclasses and runs nothing: :mod:`infralens_lab.measure` runs the profilers and hands their output here,
and :mod:`infralens_lab.analysis` reads through this layer, never through ``measure``.

Nothing is imported here, so ``import infralens_lab.parse.ncu`` stays light.
"""
