"""Lab 03's grading evidence, rebuilt in the grader's process with the functions the notebook's cells call: the
live TinyGPT step (measured on the grading machine, as the notebook measures it on the learner's), its predicted
ledger (:mod:`infralens_lab.analysis.ledger`), the lab's tables (:mod:`infralens_lab.analysis.ledger_views`). Bank
questions name these as ``"evidence": "infralens_lab.quiz.keys.lab03:<function>"``.
"""
from __future__ import annotations

import functools

from ...analysis import ledger
from ...analysis import ledger_views as views
from ...measure.memory import compare, measure_inference, measure_training_step
from ...measure.torch_trace import quiet_profiler_chatter


@functools.lru_cache(maxsize=1)
def _step():
    t = views.live_training()
    with quiet_profiler_chatter():
        return measure_training_step(views.live_config(), batch=t.batch, seq=t.seq, precision=t.precision)


def _predicted():
    return ledger.predict_training(ledger.Model.from_gpt_config(views.live_config()), views.live_training())


def predicted():
    """The predicted ledger of the live step (ex1: the Adam states line)."""
    return _predicted()


def ledger_rows():
    """The measured ledger of the live step, ledger categories only (q2)."""
    return views.ledger_rows(_step())


def gaps():
    """Predicted vs measured for the live step, gap in % of the prediction per category (ex3)."""
    return compare(_predicted(), _step())


def moments():
    """Live bytes by moment of the live step (q3)."""
    return views.moments_table(_step())


@functools.lru_cache(maxsize=1)
def inference_predicted():
    """The predicted ledger of the live generation the notebook measures (batch 4): its KV-cache line (ex2)."""
    with quiet_profiler_chatter():
        meas = measure_inference(views.live_config(), batch=4)
    return ledger.predict_for(meas.attrs["meta"])


def scaling():
    """The scaling table (a formula) the lab shows (q5)."""
    return views.scaling()
