"""A hostile class for the grader (issue 28): three honest students and the nine attacks, on lab 00.

``build(subs, banks, scores, delay_s)`` writes one sub-folder per student under ``subs`` (made from the
committed ``labs/00_start_here.ipynb``, outputs cleared), and under ``banks`` a copy of lab 00's bank with
one exercise added, ``lab00.ex9`` (the masked lanes of the last program, computed by code: graded from the
value ``check`` records), to be found through ``$INFRALENS_QUIZ_BANKS``. ``EXPECTED`` says what each
student's final answers earn, and ``FLAGS`` the flags each must carry (in a ``RUN=1`` and a ``RUN=0`` run).

Students: alice (all right), bob (one wrong), carol (blank); the attacks: 1 dan (q3 as an 891-term sum),
2 eve (kills its parent process), 3 fay (``os._exit(0)``), 4 gus (a detached process that, ``delay_s`` later,
waits for the grader's score file and rewrites it), 5 zed (appends a judge that says "correct" to ``quiz/check.py``), 6 ida (``%%time``
answer cell), 7 hal (``ＡＮＳＷＥＲ_Q1``), 8 jon (metadata names lab99), 9 kim and lea (the same file).

Run by hand (the real scenario: a minute's wait): ``python tests/hostile_class.py OUT --delay 20``, then
``INFRALENS_QUIZ_BANKS=OUT/banks make grade SUBMISSIONS=OUT/class SCORES=OUT/scores.csv`` (see the note
it prints).
"""  # noqa: RUF002 (attack 7 is a fullwidth ANSWER_Q1)
from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
LAB00 = ROOT / "labs" / "00_start_here.ipynb"
EX = "lab00.ex9"
EX_CODE = ("# Exercise 9: the lanes masked off in the last program of the vector_add launch.\n"
           "ANSWER_EX9 = -(-n // intro.BLOCK_SIZE) * intro.BLOCK_SIZE - n\n"
           f"check({EX!r}, ANSWER_EX9, evidence=add_ev)")
EX_BLANK = EX_CODE.replace("-(-n // intro.BLOCK_SIZE) * intro.BLOCK_SIZE - n", "...  # your code")
EXERCISE = {"id": EX, "kind": "number", "points": 1, "unit": "lanes", "tolerance": {"abs": 0},
            "prompt": "Compute, with code, how many lanes of the last program are masked off.",
            "hint": "Round n up to whole programs of BLOCK_SIZE, then subtract n.",
            "explanation": "ceil(n / B) * B - n lanes load and store nothing.",
            "derive": "masked_lanes", "evidence": "infralens_lab.quiz.keys.lab00:vector_add"}


# a conftest.py that, were pytest to import it, would mark every question right
PLANTED_CONFTEST = ("import pytest\n\n@pytest.hookimpl(hookwrapper=True)\ndef pytest_runtest_makereport(item, call):\n"
                    "    out = yield\n    out.get_result().outcome = 'passed'\n"
                    "from infralens_lab.quiz import check\ncheck._judge = lambda q, a, e: ('correct', '')\n")
# a cell finds the grading process in /proc: its submissions folder, score path and working folder. It walks up
# from its own process (kernel, runner, grader), so another grading run on the same machine is never the one hit
FIND_GRADER = ("import os, glob, json, shutil\nsubs = scores = cwd = None\npid = os.getppid()\n"
               "while pid > 1 and subs is None:\n"
               "    argv = open(f'/proc/{pid}/cmdline', 'rb').read().decode().split('\\0')\n"
               "    hits = [a.split('=', 1)[1] for a in argv if a.startswith('--infralens-submissions=')]\n"
               "    if hits and '--infralens-score-csv' in argv:\n"
               "        subs, scores = hits[0], argv[argv.index('--infralens-score-csv') + 1]\n"
               "        cwd = os.readlink(f'/proc/{pid}/cwd')\n"
               "    pid = int(open(f'/proc/{pid}/stat').read().rsplit(')', 1)[1].split()[1])\n")
PLANT_YAN = ("def overwrite(dst, src):\n    st = os.stat(dst)\n    os.chmod(os.path.dirname(dst), 0o755)\n"
             "    os.chmod(dst, 0o644)\n    shutil.copyfile(src, dst)\n    os.utime(dst, (st.st_atime, st.st_mtime))\n"
             "overwrite(os.path.join(subs, 'yan', '00_start_here.ipynb'), os.path.join(subs, 'alice', '00_start_here.ipynb'))\n"
             "overwrite(os.path.join(subs, 'bob', '00_start_here.ipynb'), os.path.join(subs, 'carol', '00_start_here.ipynb'))\n"
             "os.chmod(subs, 0o755)\nopen(os.path.join(subs, 'conftest.py'), 'w').write('import os\\nos._exit(3)\\n')\n"
             "os.makedirs(os.path.join(os.path.dirname(os.path.abspath(scores)), os.path.basename(scores)))\n")


def _bank():
    from infralens_lab.quiz.bank import BANKS_DIR, decode_bank, encode_bank

    plain = decode_bank(json.loads((BANKS_DIR / "lab00.json").read_text()))
    plain["questions"] = [q for q in plain["questions"] if q["id"] != EX] + [EXERCISE]
    return encode_bank(plain)


def right_answers() -> dict[str, str]:
    """Source of the right final answers of lab 00's questions (q1, q2, q3), from the bank and grader."""
    from infralens_lab.quiz import question
    from infralens_lab.quiz.grader import expected_for_grading

    q2 = expected_for_grading(question("lab00.q2"))
    return {"ANSWER_Q1": repr(question("lab00.q1").answer), "ANSWER_Q2": repr(q2[0] if isinstance(q2, tuple) else q2),
            "ANSWER_Q3": str(int(expected_for_grading(question("lab00.q3"))))}


def template(slim: bool = False):
    """Lab 00 as handed out, outputs cleared, with the exercise cell after the q3 answer cell; ``slim``: only its
    answer cells (a student whose exercise is blank scores the same, and its run, with ``RUN=1``, takes a
    fraction of the time: no torch, no kernels)."""
    nb = nbformat.read(LAB00, as_version=4)
    if slim:
        nb.cells = [c for c in nb.cells if c.cell_type != "code" or "ANSWER_" in c.source]
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    at = _cell_index(nb, "ANSWER_Q3")
    nb.cells.insert(at + 1, nbformat.v4.new_code_cell(EX_BLANK, metadata={"tags": ["exercise"],
                                                                          "infralens": {"question": EX}}))
    return nb


def _cell_index(nb, var: str) -> int:
    hits = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and re.search(rf"^{var} = ", c.source, re.M)]
    assert len(hits) == 1, f"expected one code cell setting {var} in lab 00, found {len(hits)}"
    return hits[0]


def answer(nb, var: str, src: str, whole_line: str | None = None):
    """Set ``var``'s line in its answer cell to ``var = src`` (or to ``whole_line``), keeping the rest."""
    cell = nb.cells[_cell_index(nb, var)]
    cell.source = re.sub(rf"^{var} = .*$", (whole_line or f"{var} = {src}").replace("\\", r"\\"), cell.source,
                         count=1, flags=re.M)
    return nb


def exercise(nb, saved_value: float | None = None):
    """Write the exercise's code; with ``saved_value``, also the output ``check`` leaves when the student
    ran it (the record the grader reads in RUN=0), made by ``quiz.check.answer_record``."""
    from infralens_lab.quiz.check import ANSWER_MIME, answer_record

    cell = nb.cells[_cell_index(nb, "ANSWER_EX9")]
    cell.source = EX_CODE
    if saved_value is not None:
        cell.outputs = [nbformat.v4.new_output("display_data", data={ANSWER_MIME: answer_record(EX, saved_value),
                                                                     "text/plain": ""})]
    return nb


def after(nb, var: str, source: str):
    nb.cells.insert(_cell_index(nb, var) + 1, nbformat.v4.new_code_cell(source))
    return nb


def detached_pid_file(scores: Path) -> Path:
    """Where attack 4's notebook writes the process id of the detached process it starts."""
    return Path(str(scores) + ".detached.pid")


def build(subs: Path, banks: Path, scores: Path, delay_s: float = 20.0) -> None:
    """Write the class folder (one sub-folder per student) and the bank folder; see the module doc."""
    from infralens_lab.quiz import question

    banks.mkdir(parents=True, exist_ok=True)
    (banks / "lab00.json").write_text(json.dumps(_bank(), indent=1))
    right = right_answers()
    lanes = float(right["ANSWER_Q3"])
    wrong_q1 = repr(next(k for k in question("lab00.q1").options if k != question("lab00.q1").answer))

    def put(who, nb, name="00_start_here.ipynb"):
        (subs / who).mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, subs / who / name)

    def all_right(nb):
        for var, src in right.items():
            answer(nb, var, src)
        return exercise(nb, lanes)

    put("alice", all_right(template()))
    put("bob", answer(all_right(template()), "ANSWER_Q1", wrong_q1))
    put("carol", template(slim=True))
    put("dan", answer(all_right(template()), "ANSWER_Q3", " + ".join(["1"] * int(lanes))))        # attack 1
    eve = exercise(answer(template(slim=True), "ANSWER_Q1", right["ANSWER_Q1"]), lanes)                       # attack 2
    put("eve", after(eve, "ANSWER_Q1", "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)"))
    fay = answer(answer(template(slim=True), "ANSWER_Q1", right["ANSWER_Q1"]), "ANSWER_Q3", "5")              # attack 3
    put("fay", after(fay, "ANSWER_Q1", "import os\nos._exit(0)"))
    gus = answer(template(slim=True), "ANSWER_Q1", wrong_q1)                                                   # attack 4
    # waits delay_s, then for the grader's score file, then rewrites it (giving up after 10 minutes)
    rewrite = (f"import os, time\ntime.sleep({delay_s})\nend = time.time() + 600\n"
               f"while time.time() < end and not (os.path.exists({str(scores)!r}) and "
               f"open({str(scores)!r}).read().startswith('notebook,lab,question')):\n    time.sleep(0.1)\n"
               f"open({str(scores)!r}, 'w').write('notebook,lab,question,status,points\\ngus,lab00,lab00.q1,correct,100\\n')\n"
               f"open({str(scores) + '.rewritten'!r}, 'w').write('the detached process ran')\n")
    # the kernel writes the process id next to the score file, so a test can see when the grader ended it
    put("gus", after(gus, "ANSWER_Q1", "import subprocess, sys\n"
                                       f"p = subprocess.Popen([sys.executable, '-c', {rewrite!r}], start_new_session=True,\n"
                                       "                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
                                       f"open({str(detached_pid_file(scores))!r}, 'w').write(str(p.pid))"))
    zed = answer(template(slim=True), "ANSWER_Q1", "'D'" if wrong_q1 != "'D'" else "'A'")                     # attack 5
    patch = '\\n\\ndef _judge(q, answer, expected):  # appended by a submission\\n    return "correct", ""\\n'
    put("zed", after(zed, "ANSWER_Q1", "import importlib\n"
                                       "path = importlib.import_module('infralens_lab.quiz.check').__file__\n"
                                       f"with open(path, 'a') as f:\n    f.write('{patch}')"))
    ida = all_right(template())                                                                       # attack 6
    ida.cells[_cell_index(ida, "ANSWER_Q1")].source = f"%%time\nANSWER_Q1 = {right['ANSWER_Q1']}\n" \
        + "\n".join(ln for ln in ida.cells[_cell_index(ida, "ANSWER_Q1")].source.splitlines()
                    if not ln.startswith("ANSWER_Q1"))
    put("ida", ida)
    hal = all_right(template())                                                                       # attack 7
    answer(hal, "ANSWER_Q1", "", whole_line=f"ＡＮＳＷＥＲ_Q1 = {right['ANSWER_Q1']}")  # noqa: RUF001 (fullwidth: the attack)
    put("hal", hal)
    jon = answer(answer(template(slim=True), "ANSWER_Q1", right["ANSWER_Q1"]), "ANSWER_Q3", right["ANSWER_Q3"])  # attack 8
    jon.metadata["infralens"]["lab"] = "lab99"
    put("jon", jon)
    twin = answer(answer(template(slim=True), "ANSWER_Q1", wrong_q1), "ANSWER_Q3", right["ANSWER_Q3"])        # attack 9
    answer(twin, "ANSWER_Q2", "'recorded'")
    put("kim", twin)
    put("lea", twin)
    # round 3 (issue 44). 10 ned: a blank notebook beside a conftest.py and a test file that would mark it right
    put("ned", template(slim=True))
    (subs / "ned" / "conftest.py").write_text(PLANTED_CONFTEST)
    (subs / "ned" / "test_ned.py").write_text(f"open({str(scores) + '.imported'!r}, 'w').write('test file ran')\n")
    # 11 pia: links named like notebooks (to alice's, to nowhere, to /dev/zero, to /etc/passwd) and a FIFO
    (subs / "pia").mkdir()
    for name, target in (("00_start_here.ipynb", "../alice/00_start_here.ipynb"), ("01_gone.ipynb", "/no/such"),
                         ("02_zero.ipynb", "/dev/zero"), ("03_passwd.ipynb", "/etc/passwd")):
        (subs / "pia" / name).symlink_to(target)
    os.mkfifo(subs / "pia" / "04_fifo.ipynb")
    # 12 quin: formula answers, a 4,000-digit integer, a 5,000-character answer, and a formula file name
    quin = answer(answer(template(slim=True), "ANSWER_Q1", repr('=HYPERLINK("http://x","y")')), "ANSWER_Q3", "7" * 4000)
    put("quin", answer(quin, "ANSWER_Q2", repr("@SUM(1)" + "x" * 5000)))
    (subs / "quin" / '=1+2+cmd|" calc"!A0.ipynb').write_text("{")
    # 13 rex: lab 00 handed in twice (the second is not counted); 14 sam: rex's answers with comments added
    def q1_to_q3(nb):  # the three questions right, the exercise blank
        for var in ("ANSWER_Q1", "ANSWER_Q2", "ANSWER_Q3"):
            answer(nb, var, right[var])
        return nb

    put("rex", q1_to_q3(template(slim=True)))
    put("rex", q1_to_q3(template(slim=True)), "00_start_here_again.ipynb")   # sorts after the first: not counted
    sam = q1_to_q3(template(slim=True))                                      # rex's answers, comments added
    for cell in sam.cells:
        if cell.cell_type == "code" and "ANSWER_" in cell.source:
            cell.source = "# my own work, honestly\n" + cell.source.replace("\n", "  # mine\n", 1)
    put("sam", sam)
    # 15 a folder named with U+202E (shows as "h_right" unescaped): a blank notebook
    put(BIDI, template(slim=True))
    # 16 yan (RUN=1): finds the grader in /proc, then rewrites its own file (right answers, date kept), empties a
    # classmate's (bob), drops a conftest.py into the submissions folder and turns the score path into a folder
    yan = answer(answer(template(slim=True), "ANSWER_Q1", wrong_q1), "ANSWER_Q3", "5")
    put("yan", after(yan, "ANSWER_Q1", FIND_GRADER + PLANT_YAN))
    # 17 zed (attack 5) also drops a conftest.py into the grader's working folder
    zed_cell = zed.cells[_cell_index(zed, "ANSWER_Q1") + 1]
    zed_cell.source += "\n" + FIND_GRADER + f"open(os.path.join(cwd, 'conftest.py'), 'w').write({PLANTED_CONFTEST!r})\n"
    put("zed", zed)


def expected(bank_ids: list[str]) -> dict[tuple[str, str], tuple[str, float]]:
    """``{(student, question): (status, points)}``: what each student's final answers earn (every run)."""
    right = {"lab00.q1": ("correct", 1), "lab00.q2": ("correct", 1), "lab00.q3": ("correct", 1), EX: ("correct", 1)}
    blank = {q: ("unanswered", 0) for q in bank_ids}
    rows = {
        "alice": right, "dan": right, "hal": right, "ida": right,
        "bob": {**right, "lab00.q1": ("wrong", 0)},
        "carol": {},
        "eve": {"lab00.q1": ("correct", 1), EX: ("correct", 1)},
        "fay": {"lab00.q1": ("correct", 1), "lab00.q3": ("wrong", 0)},
        "gus": {"lab00.q1": ("wrong", 0)},
        "zed": {"lab00.q1": ("wrong", 0)},
        "jon": {"lab00.q1": ("correct", 1), "lab00.q3": ("correct", 1)},
        "kim": {"lab00.q1": ("wrong", 0), "lab00.q2": ("wrong", 0), "lab00.q3": ("correct", 1)},
    }
    rows["lea"] = rows["kim"]
    rows.update({"ned": {}, BIDI_SHOWN: {}, "yan": {"lab00.q1": ("wrong", 0), "lab00.q3": ("wrong", 0)}, "sam": {**right, EX: ("unanswered", 0)},
                 "quin": {"lab00.q1": QUIN_Q1, "lab00.q2": QUIN_Q2, "lab00.q3": ("invalid", 0)}})
    out = {(who, q): {**blank, **got}.get(q, ("unanswered", 0)) for who, got in rows.items() for q in bank_ids}
    # rex's second lab 00 is not counted: right, 0 points (keyed by file name: both are rex's)
    out.update({("rex", q): out[("sam", q)] for q in bank_ids})
    out.update({("rex/00_start_here_again", q): (out[("sam", q)][0], 0) for q in bank_ids})
    # the paths that are listed, not graded (one row each; keyed by student and file)
    for who, name in NOT_GRADED:
        out[(f"{who}/{name}", "")] = ("not graded", 0)
    out[("quin/=1+2+cmd|\" calc\"!A0", "")] = ("unreadable", 0)   # no NN_ prefix: one row, no lab
    return out


BIDI = "\u202ethgir_h"          # a folder name that shows as "h_right" where U+202E is not escaped
BIDI_SHOWN = "\\u202ethgir_h"   # how scores.csv and the report show it
QUIN_Q1, QUIN_Q2 = ("wrong", 0), ("wrong", 0)
NOT_GRADED = [("ned", "conftest"), ("ned", "test_ned"), ("pia", "00_start_here"), ("pia", "01_gone"),
              ("pia", "02_zero"), ("pia", "03_passwd"), ("pia", "04_fifo")]


# the flags each student's rows carry: (RUN=1, RUN=0)
FLAGS = {"eve": ({"runner killed"}, set()), "fay": ({"kernel died"}, set()),
         "zed": ({"changed grader files"}, set()), "jon": ({"unknown lab in metadata"},) * 2,
         "kim": ({"duplicate"},) * 2, "lea": ({"duplicate"},) * 2,
         # hal's answer cells are alice's written in fullwidth letters: the same cells once read as Python does
         "alice": ({"duplicate"},) * 2, "hal": ({"duplicate"},) * 2,
         "ned": ({"not graded"},) * 2, "pia": ({"not graded"},) * 2, "quin": ({"unreadable"},) * 2,
         "rex": ({"duplicate", "second notebook of a lab"},) * 2, "sam": ({"duplicate"},) * 2,
         BIDI_SHOWN: ({"not run"}, set()), "yan": ({"changed submissions"}, set()),
         "bob": ({"changed during grading"}, set())}


if __name__ == "__main__":
    out = Path(sys.argv[1]).resolve()
    delay = float(sys.argv[sys.argv.index("--delay") + 1]) if "--delay" in sys.argv else 20.0
    build(out / "class", out / "banks", out / "scores.csv", delay)
    print(f"wrote {out / 'class'} and {out / 'banks'}; grade with\n  INFRALENS_QUIZ_BANKS={out / 'banks'} make grade "
          f"SUBMISSIONS={out / 'class'} SCORES={out / 'scores.csv'}\nNote: zed's notebook appends to the package's "
          "quiz/check.py (restore it with git checkout afterwards, or grade a copy of the repository).")
