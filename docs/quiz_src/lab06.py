"""Plain source of infralens_lab/quiz/banks/lab06.json (seal with
``python -m infralens_lab.quiz encode docs/quiz_src/lab06.py -o infralens_lab/quiz/banks/lab06.json``)."""

BANK = {"lab": "lab06", "questions": [
    {"id": "lab06.q1", "kind": "choice", "points": 1,
     "prompt": "Predict: in one DDP training step, when does the first gradient all-reduce start?",
     "options": {
         "A": "When optimizer.step() runs: all gradients are reduced together just before the update",
         "B": "During backward, once every gradient in the first bucket has been computed",
         "C": "At the end of forward, so that the exchange can overlap with computing the loss",
         "D": "When loss.backward() is called, before the first gradient has been computed"},
     "answer": "B",
     "hint": "DDP registers a hook on every parameter's gradient accumulation. What can a hook do the moment its "
             "bucket has no missing gradient left?",
     "explanation": "Each parameter's post-accumulate hook marks its gradient ready and copies it into its bucket; "
                    "the bucket's all-reduce is launched asynchronously when its last gradient arrives, while "
                    "autograd carries on with earlier layers. That is the only overlap DDP has.",
     "feedback": {
         "A": "That is a plain all-reduce loop after backward; DDP launches from gradient hooks so the "
              "exchange can run while backward still computes.",
         "C": "Forward produces no gradients: there is nothing to reduce yet.",
         "D": "No gradient exists when backward starts; the first bucket fills as the last layers' gradients arrive."}},
    {"id": "lab06.q2", "kind": "number", "points": 2,
     "prompt": "From your own computation above: what fraction of rank 0's all-reduce time (summed over the profiled "
               "steps, cap 1 MiB) ran while rank 0's backward was computing? A fraction between 0 and 1.",
     "unit": "fraction of all-reduce time",
     "hint": "Sum hidden_us and comm_us over the steps of rank 0, then divide.",
     "derive": "value", "derive_args": {"column": "hidden_fraction", "where": {"rank": 0}},
     "tolerance": {"abs": 0.02},
     "explanation": "hidden = |all-reduce ∩ backward compute| over |all-reduce|, both as merged intervals: the same "
                    "definition HTA uses for its comm/comp overlap (which counts any compute, not only backward).",
     "feedback": {"high": "Too high: only the part of each all-reduce interval that lies inside a backward op counts.",
                  "low": "Too low: use merged intervals for both sides and divide by the all-reduce time, not the step."}},
    {"id": "lab06.q3", "kind": "number", "points": 1,
     "prompt": "Predict: the model has 8 Linear layers, each with a 1 MiB weight gradient and a 2 KiB bias gradient "
               "(fp32). With bucket_cap_mb=1, how many all-reduce calls will DDP issue per step?",
     "unit": "all-reduce calls per step",
     "hint": "DDP never splits a tensor across buckets, and a bucket is closed as soon as it holds at least the cap.",
     "derive": "value", "derive_args": {"column": "calls_per_step", "where": {"config": "cap 1 MiB"}},
     "tolerance": {"abs": 0},
     "explanation": "One weight (1 MiB) plus one bias already reaches the 1 MiB cap, so each layer closes its own "
                    "bucket: 8 buckets, 8 all-reduces. Dividing the bytes by the cap (the ledger's count) gives 9, "
                    "because bytes can't tell where tensor boundaries fall.",
     "feedback": {"low": "Too few: a bucket closes once it reaches the cap; count the layers.",
                  "high": "Too many: a weight and its bias land in the same bucket before it closes."}},
    {"id": "lab06.q4", "kind": "choice", "points": 1,
     "prompt": "With bucket_cap_mb=25 this model's 8 MiB of gradients went out in one all-reduce, and almost none of "
               "it ran under backward compute. Why?",
     "options": {
         "A": "gloo cannot communicate while autograd computes, so any bucket waits for backward",
         "B": "A 25 MiB bucket exceeds gloo's buffer, so DDP falls back to a blocking call at the end",
         "C": "DDP switches overlap off whenever all of the gradients fit into a single bucket",
         "D": "The one bucket completes with the first layer's gradient: at the end of backward"},
     "answer": "D",
     "hint": "A bucket's all-reduce can start only when its last gradient is ready. Which gradient comes last?",
     "explanation": "Gradients arrive from the last layer to the first; a bucket holding all of them is complete only "
                    "when backward is over, so nothing is left to overlap with. Smaller buckets launch earlier, at "
                    "the price of more calls, each paying latency.",
     "feedback": {
         "A": "With cap 1 MiB the same gloo run hid a good part of its all-reduces under backward.",
         "B": "There is no such fallback; the 25 MiB bucket is reduced asynchronously like any other.",
         "C": "DDP has no such switch; the single bucket simply completes too late."}},
    {"id": "lab06.q5", "kind": "number", "points": 1,
     "prompt": "Predict: an optimizer step accumulates 4 micro-batches. How many times more all-reduce calls does "
               "plain accumulation make than accumulation with no_sync() on the first 3 micro-batches?",
     "unit": "× (plain / no_sync)",
     "hint": "Under no_sync DDP's hooks only accumulate into .grad; the next synchronised backward reduces the sum.",
     "derive": "ratio", "derive_args": {
         "num": {"column": "allreduce_calls_per_optimizer_step", "where": {"accumulation": "plain"}},
         "den": {"column": "allreduce_calls_per_optimizer_step", "where": {"accumulation": "no_sync"}}},
     "tolerance": {"abs": 0.01},
     "explanation": "Plain accumulation reduces every bucket on every micro-batch; no_sync reduces once per optimizer "
                    "step: communication per step falls by the accumulation factor, and the result is the same.",
     "feedback": {"low": "Each plain micro-batch's backward reduces all buckets.",
                  "high": "no_sync still reduces every bucket once, on the last micro-batch."}},
    {"id": "lab06.q6", "kind": "number", "points": 2,
     "prompt": "From the scaling table: if the exposed-communication fraction f of the 2-rank step could not be "
               "removed, what is the most speedup 2 ranks could give over one? (Amdahl: n·(1 − f))",
     "unit": "× speedup bound",
     "hint": "Use exposed_fraction from the table with n = 2.",
     "derive": "value", "derive_args": {"column": "amdahl_bound"},
     "tolerance": {"rel": 0.02},
     "explanation": "Exposed communication is serial time every rank pays; with it a fraction f of the step, n ranks "
                    "deliver at most n(1 − f) times one rank's throughput, before any other overhead.",
     "feedback": {"high": "Subtract the exposed fraction first: 2 × (1 − f).",
                  "low": "The bound is 2 × (1 − f), not 1 − f."}},
    {"id": "lab06.q7", "kind": "choice", "points": 2,
     "prompt": "Practice project: the mystery run carries a planted cause of poor DDP scaling; the reference run "
               "trains the same model. From your trace numbers, what was planted?",
     "options": {
         "A": "Buckets far too small: each layer's gradients travel in their own all-reduce",
         "B": "A host synchronisation inside backward that stalls each gradient hook in turn",
         "C": "A model too small per rank, so there is no backward compute to hide anything under",
         "D": "The link is saturated: the mystery run moves many more gradient bytes in each step"},
     "answer": "A",
     "hint": "Compare all-reduce calls per step and bytes per call between the two runs; both use the same model.",
     "explanation": "Same bytes per step, many times more calls: each all-reduce pays a fixed latency, and the calls "
                    "queue behind each other. The fix is a larger bucket_cap_mb (the reference uses the default 25).",
     "feedback": {
         "B": "A host sync shows up as aten::item / synchronize calls inside backward, and it would not change the "
              "number of all-reduces.",
         "C": "Both runs use the same model; the reference is fast with it.",
         "D": "Both runs reduce exactly the same gradient bytes per step; only the number of calls differs."}},
    {"id": "lab06.q8", "kind": "choice", "points": 1,
     "prompt": "In the multi-node bandwidth model, efficiency drops sharply between 8 and 64 GPUs. Which term of the "
               "model causes most of it?",
     "options": {
         "A": "The ring factor 2(n−1)/n, which grows from 1.75 at n = 8 to almost 2 at n = 64",
         "B": "The per-hop latency term 2(n−1)·α, which grows linearly with the number of GPUs",
         "C": "The ring crosses the network, whose per-GPU bandwidth is far below NVLink's",
         "D": "Each GPU's compute per step shrinks, so less of the all-reduce can be hidden"},
     "answer": "C",
     "hint": "Compare the bus bandwidth column at 8 and 64 GPUs with the change in the ring factor.",
     "explanation": "A ring is as fast as its slowest link. Past one node it runs at the NIC's rate (50 GB/s for "
                    "400 Gb/s NDR) instead of NVLink's 450 GB/s per direction: ~9x more time for the same bytes. "
                    "Hierarchical all-reduce, gradient compression or sharding (FSDP/ZeRO) are the usual answers.",
     "feedback": {
         "A": "2(n−1)/n changes by about 14 %; the step time grows far more than that.",
         "B": "At 10 µs per hop, 126 hops are about 1 ms: small next to the bandwidth term.",
         "D": "The model is weak scaling: every GPU keeps its batch and its compute time."}},
    {"id": "lab06.q9", "kind": "choice", "points": 1,
     "prompt": "Both ranks' timelines use the same host clock, and no all-reduce ends on one rank before the other "
               "rank started it. What can this alignment still NOT tell you?",
     "options": {
         "A": "Which of the two ranks handed each bucket to its all-reduce first",
         "B": "Whether a long all-reduce was moving bytes or waiting for its peer",
         "C": "How many all-reduce calls each rank issued during the profiled step",
         "D": "Whether rank 1's backward pass began only after its own forward had ended"},
     "answer": "B",
     "hint": "An all-reduce range opens when the rank enters it and closes when the exchange completes. What sits "
             "between those two moments?",
     "explanation": "A collective's range covers waiting for the peer plus the transfer; the profiler cannot split the "
                    "two. NCCL's own timing or a barrier before the collective separates skew from transfer.",
     "feedback": {
         "A": "Start times on one clock answer that directly.",
         "C": "Counting ranges per step is exactly what the traces give.",
         "D": "Within one rank the order is on one clock; no alignment needed."}},
]}
