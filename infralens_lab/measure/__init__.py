"""measure: run things and return dataclasses / DataFrames (never plots).

``timing`` (CUDA-event medians), ``torch_trace`` (torch.profiler: ops, kernels, ranges, GPU idle
gaps), ``ncu`` (Nsight Compute runner; its CSV is read by ``parse.ncu``), ``nsys`` (Nsight Systems where present),
``target`` (the workload the profilers run), ``memory`` (measured memory by category).
Nothing is imported here, so ``import infralens_lab.measure.ncu`` stays light.
"""
