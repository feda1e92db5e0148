"""Evidence records, the recorded store and its validation (infralens_lab.evidence)."""
from __future__ import annotations

import hashlib
import json
import re
from dataclasses import asdict, fields, replace

import numpy as np
import pandas as pd
import pytest

from infralens_lab import device, evidence
from infralens_lab.evidence import EvidenceError, EvidenceWriter, Provenance, RecordedStore

PROV = Provenance(source="recorded", gpu="NVIDIA H200", gpu_slug="nvidia-h200", driver="580.159", cuda="13.0",
                  torch="2.11.0+cu130", triton="3.6.0", ncu="2025.3.1", date_utc="2026-11-22T10:15:00Z",
                  command="python -m infralens_lab record --out data/recorded/nvidia-h200",
                  package_version="0.1.0", mode="gpu")
ROWS = [{"kernel": "copy_strided", "stride": 8, "gbps": np.float64(800.5), "bytes": np.int64(2**26)},
        {"kernel": "copy_coalesced", "stride": 1, "gbps": float("nan"), "bytes": 2**26}]
CSV = '"Kernel Name","dram__bytes_read.sum"\n"","byte"\n"copy_strided","538,968,064"\n'


def _record(folder, prov=PROV):
    w = EvidenceWriter(folder, command=prov.command, provenance=prov)
    w.write("bench", {"rows": ROWS, "peak": {"gbps": 4210.0}}, units={"gbps": "GB/s", "bytes": "B"}, notes="median of 50")
    w.write("device", {"name": prov.gpu, "sm_count": 132})
    w.write_text("ncu_copies.csv", CSV)
    w.close()
    return folder


@pytest.fixture
def store_dir(tmp_path):
    return _record(tmp_path / "nvidia-h200")


def _rewrite(folder, filename, text):
    """Change a recorded file *and* fix its manifest checksum, as a careless hand edit with tools would."""
    (folder / filename).write_text(text)
    m = json.loads((folder / "manifest.json").read_text())
    m["files"][filename]["sha256"] = hashlib.sha256(text.encode()).hexdigest()
    (folder / "manifest.json").write_text(json.dumps(m))


def test_round_trip(store_dir):
    store = RecordedStore(store_dir)
    store.verify()
    assert store.names() == ["bench", "device"]
    assert store.files() == ["bench.json", "device.json", "ncu_copies.csv"]
    assert store.gpu == "NVIDIA H200" and store.provenance == PROV
    ev = store.load("bench")
    assert ev.name == "bench" and ev.source == "recorded" and ev.provenance == PROV
    assert ev.units == {"gbps": "GB/s", "bytes": "B"} and ev.notes == "median of 50"
    # numpy scalars became plain numbers, NaN became null
    assert ev.values["rows"][0] == {"kernel": "copy_strided", "stride": 8, "gbps": 800.5, "bytes": 2**26}
    assert ev.values["rows"][1]["gbps"] is None
    df = ev.frame()
    assert list(df.columns) == ["kernel", "stride", "gbps", "bytes"] and len(df) == 2
    assert ev.frame("rows").equals(df)
    assert store.text("ncu_copies.csv") == CSV
    assert store.path("ncu_copies.csv") == store_dir / "ncu_copies.csv"


def test_writer_forces_recorded_source(tmp_path):
    w = EvidenceWriter(tmp_path, command="x", provenance=replace(PROV, source="live"))
    assert w.provenance.source == "recorded"


def test_provenance_fields_and_caption(store_dir):
    ev = RecordedStore(store_dir).load("device")
    on_disk = json.loads((store_dir / "device.json").read_text())
    assert on_disk["schema"] == evidence.EVIDENCE_SCHEMA
    assert set(on_disk["provenance"]) == {f.name for f in fields(Provenance)}
    cap = ev.caption()
    assert cap == evidence.caption(ev) == ev.provenance.caption()
    assert cap == ("Evidence: recorded · NVIDIA H200 · driver 580.159 · CUDA 13.0 · torch 2.11.0+cu130 · "
                   "triton 3.6.0 · ncu 2025.3.1 · 2026-11-22 UTC · "
                   "`python -m infralens_lab record --out data/recorded/nvidia-h200` · infralens_lab 0.1.0")


def test_caption_leaves_out_what_is_unknown():
    p = replace(PROV, source="live", driver=None, cuda=None, ncu=None)
    assert p.caption() == ("Evidence: live · NVIDIA H200 · torch 2.11.0+cu130 · triton 3.6.0 · 2026-11-22 UTC · "
                           "`python -m infralens_lab record --out data/recorded/nvidia-h200` · infralens_lab 0.1.0")


def test_tampered_file_is_rejected(store_dir):
    p = store_dir / "bench.json"
    p.write_text(p.read_text().replace("800.5", "900.5"))
    store = RecordedStore(store_dir)
    with pytest.raises(EvidenceError, match=r"bench.json: checksum .* does not match the manifest's .*changed after recording"):
        store.load("bench")
    with pytest.raises(EvidenceError, match="does not match"):
        store.verify()
    assert store.load("device").name == "device"  # other files stay usable


def test_a_file_is_hashed_once_while_unchanged_and_still_checked(store_dir, monkeypatch):
    """Loads are cached per file (path, inode, size, mtime, ctime): an unchanged file is hashed and parsed
    once per process, every load gets its own copy, and a file changed afterwards is hashed again and refused."""
    import time

    monkeypatch.setattr(evidence, "_VERIFIED", {})
    monkeypatch.setattr(evidence, "_SETTLED_NS", 0)  # the files were just written: cache them anyway
    hashed = []
    real = evidence._hashed_content
    monkeypatch.setattr(evidence, "_hashed_content", lambda p: hashed.append(p.name) or real(p))
    first = RecordedStore(store_dir).load("bench")
    first.values["rows"][0]["gbps"] = -1.0  # a caller changing what it got changes nobody else's
    again = RecordedStore(store_dir).load("bench")
    assert again.values["rows"][0]["gbps"] == 800.5 and hashed == ["bench.json"]
    time.sleep(0.05)  # a later timestamp than the write above, on a filesystem with coarse ones
    p = store_dir / "bench.json"
    p.write_text(p.read_text().replace("800.5", "900.5"))
    with pytest.raises(EvidenceError, match="does not match the manifest's"):
        RecordedStore(store_dir).load("bench")
    assert hashed == ["bench.json", "bench.json"]


def test_a_file_written_just_now_is_not_cached(store_dir, monkeypatch):
    monkeypatch.setattr(evidence, "_VERIFIED", {})
    RecordedStore(store_dir).load("bench")
    assert evidence._VERIFIED == {}  # within _SETTLED_NS of its write: a same-size rewrite could keep its key


def test_tampered_csv_is_rejected(store_dir):
    (store_dir / "ncu_copies.csv").write_text(CSV.replace("538", "138"))
    with pytest.raises(EvidenceError, match=re.escape("ncu_copies.csv: checksum")):
        RecordedStore(store_dir).text("ncu_copies.csv")


def test_unknown_and_missing_files(store_dir):
    store = RecordedStore(store_dir)
    with pytest.raises(EvidenceError, match=r"'trace_bubble.json' is not listed in manifest.json; known files: \['bench.json'"):
        store.load("trace_bubble")
    (store_dir / "extra.json").write_text("{}")
    with pytest.raises(EvidenceError, match=r"files not in manifest.json: \['extra.json'\]"):
        store.verify()
    (store_dir / "device.json").unlink()
    with pytest.raises(EvidenceError, match=re.escape("device.json: listed in manifest.json but missing on disk")):
        store.load("device")
    with pytest.raises(EvidenceError, match="is not allowed"):
        store.load("../bench")


def test_bad_schema(store_dir):
    doc = json.loads((store_dir / "bench.json").read_text())
    _rewrite(store_dir, "bench.json", json.dumps({**doc, "schema": "infralens.evidence/0"}))
    with pytest.raises(EvidenceError, match=re.escape("schema is 'infralens.evidence/0', expected 'infralens.evidence/1'")):
        RecordedStore(store_dir).load("bench")


def test_missing_provenance_field(store_dir):
    doc = json.loads((store_dir / "bench.json").read_text())
    del doc["provenance"]["ncu"]
    _rewrite(store_dir, "bench.json", json.dumps(doc))
    with pytest.raises(EvidenceError, match=r"provenance lacks \['ncu'\]; expected the fields"):
        RecordedStore(store_dir).load("bench")


@pytest.mark.parametrize("change, match", [
    (lambda d: d["provenance"].update(gpu=7), "provenance.gpu is 7, expected a string"),
    (lambda d: d["provenance"].update(colour="red"), r"provenance has unknown fields \['colour'\]"),
    (lambda d: d["provenance"].update(source="live"), "provenance source is 'live', expected 'recorded'"),
    (lambda d: d["provenance"].update(source="guessed"), "provenance source 'guessed' is not one of"),
    (lambda d: d.update(provenance=[1]), "provenance is list, expected an object"),
    (lambda d: d.update(name="device"), "holds evidence 'device', expected 'bench'"),
    (lambda d: d.pop("values"), "no 'values'"),
    (lambda d: d.update(units=[]), "'units' is \\[\\], expected dict"),
])
def test_other_malformed_records(store_dir, change, match):
    doc = json.loads((store_dir / "bench.json").read_text())
    change(doc)
    _rewrite(store_dir, "bench.json", json.dumps(doc))
    with pytest.raises(EvidenceError, match=match):
        RecordedStore(store_dir).load("bench")


def test_non_json_record(store_dir):
    _rewrite(store_dir, "bench.json", "this is not JSON {")
    with pytest.raises(EvidenceError, match=re.escape("bench.json: not valid JSON")):
        RecordedStore(store_dir).load("bench")


def test_bad_manifest(tmp_path, store_dir):
    with pytest.raises(EvidenceError, match=r"not a recorded set \(there is no such folder\).*record --out"):
        RecordedStore(tmp_path / "empty")
    m = store_dir / "manifest.json"
    good = m.read_text()
    m.write_text("[")
    with pytest.raises(EvidenceError, match=re.escape("manifest.json: not valid JSON")):
        RecordedStore(store_dir)
    m.write_text(json.dumps({**json.loads(good), "schema": "x"}))
    with pytest.raises(EvidenceError, match=re.escape("schema is 'x', expected 'infralens.manifest/1'")):
        RecordedStore(store_dir)
    m.write_text(json.dumps({**json.loads(good), "files": []}))
    with pytest.raises(EvidenceError, match="'files' is missing or not an object"):
        RecordedStore(store_dir)


def test_writer_rejects_bad_names_and_values(tmp_path):
    w = EvidenceWriter(tmp_path, command="x", provenance=PROV)
    with pytest.raises(EvidenceError, match="evidence name 'Bad Name' is not allowed"):
        w.write("Bad Name", {})
    with pytest.raises(EvidenceError, match="must end in one of"):
        w.write_text("trace.pkl", "x")
    with pytest.raises(EvidenceError, match="is not allowed"):
        w.write_text("../escape.csv", "x")
    with pytest.raises(TypeError, match="cannot store a object as evidence"):
        w.write("odd", {"x": object()})


def test_frame_needs_rows():
    ev = evidence.live("scalar", {"gbps": 3.0}, command="t")
    with pytest.raises(TypeError, match="evidence 'scalar' is dict, expected a list of rows"):
        ev.frame()
    assert evidence.live("rows", [{"a": 1}], command="t").frame().equals(pd.DataFrame([{"a": 1}]))


# ---------------------------------------------------------------- reference selection
@pytest.fixture
def root(tmp_path, monkeypatch):
    monkeypatch.delenv(evidence.REFERENCE_ENV, raising=False)
    r = tmp_path / "recorded"
    _record(r / "nvidia-h200")
    _record(r / "nvidia-h100-80gb-hbm3", replace(PROV, gpu="NVIDIA H100 80GB HBM3", gpu_slug="nvidia-h100-80gb-hbm3"))
    (r / "not-a-set").mkdir()
    (r / evidence.DEFAULT_FILE).write_text("nvidia-h100-80gb-hbm3\n")
    return r


def test_reference_selection(root, monkeypatch):
    assert evidence.recordings(root) == ["nvidia-h100-80gb-hbm3", "nvidia-h200"]
    assert evidence.reference(root=root).gpu == "NVIDIA H100 80GB HBM3"  # the committed default
    assert evidence.reference("nvidia-h200", root=root).gpu == "NVIDIA H200"
    monkeypatch.setenv(evidence.REFERENCE_ENV, "nvidia-h200")
    assert evidence.reference(root=root).gpu == "NVIDIA H200"
    with pytest.raises(EvidenceError, match=r"no recorded set for GPU 'nvidia-a100'.*recorded sets: \['nvidia-h100-80gb-hbm3', 'nvidia-h200'\]"):
        evidence.reference("nvidia-a100", root=root)


def test_reference_without_recordings(tmp_path, monkeypatch):
    monkeypatch.delenv(evidence.REFERENCE_ENV, raising=False)
    assert evidence.recordings(tmp_path / "missing") == []
    with pytest.raises(EvidenceError, match=r"no recorded evidence under .*python -m infralens_lab record"):
        evidence.reference(root=tmp_path)


def test_data_root_env_and_load(root, monkeypatch):
    monkeypatch.setenv(evidence.DATA_ROOT_ENV, str(root))
    assert evidence.data_root() == root
    assert evidence.load("device", gpu="nvidia-h200").values["name"] == "NVIDIA H200"


def test_get_falls_back_to_recorded_in_interpreter_mode(root, monkeypatch):
    monkeypatch.setenv(evidence.DATA_ROOT_ENV, str(root))
    monkeypatch.setattr(device, "is_gpu", lambda: False)
    calls = []
    ev = evidence.get("bench", live=lambda: calls.append(1) or {"rows": []})
    assert calls == [] and ev.source == "recorded" and ev.provenance.gpu == "NVIDIA H100 80GB HBM3"
    assert evidence.get("bench").source == "recorded"


def test_get_measures_live_on_a_gpu(root, monkeypatch):
    monkeypatch.setenv(evidence.DATA_ROOT_ENV, str(root))
    monkeypatch.setattr(device, "is_gpu", lambda: True)
    ev = evidence.get("bench", live=lambda: {"rows": [{"gbps": np.float32(1.5)}]}, units={"gbps": "GB/s"})
    assert ev.source == "live" and ev.values == {"rows": [{"gbps": 1.5}]} and ev.units == {"gbps": "GB/s"}
    assert ev.provenance.command == "infralens_lab live: bench"
    assert ev.caption().startswith("Evidence: live · ")


def test_live_wraps_values_with_current_provenance():
    ev = evidence.live("check", {"rows": [{"n": np.int64(5)}]}, command="labs/00: check", units={"n": "elements"})
    p = asdict(ev.provenance)
    assert ev.source == "live" and ev.values == {"rows": [{"n": 5}]}
    assert p["gpu"] == device.facts().name and p["mode"] == device.mode() and p["command"] == "labs/00: check"
    assert len(p["date_utc"]) == 20 and p["date_utc"].endswith("Z")
    assert "`labs/00: check`" in ev.caption()


# ---------------------------------------------------------------- which set is the reference
def _two_sets(tmp_path):
    for slug in ("nvidia-a", "nvidia-b"):
        w = evidence.EvidenceWriter(tmp_path / slug, command="test")
        w.write("device", {"name": slug})
        w.close()
    return tmp_path


def test_default_reference_is_the_committed_choice_not_the_first_by_name(tmp_path, monkeypatch):
    monkeypatch.delenv(evidence.REFERENCE_ENV, raising=False)
    root = _two_sets(tmp_path)
    (root / evidence.DEFAULT_FILE).write_text("nvidia-b\n")
    slug, why = evidence.default_reference(root)
    assert slug == "nvidia-b" and "committed default" in why
    assert evidence.reference(root=root).folder.name == "nvidia-b"
    monkeypatch.setenv(evidence.REFERENCE_ENV, "nvidia-a")
    assert evidence.reference(root=root).folder.name == "nvidia-a"
    assert evidence.REFERENCE_ENV in evidence.default_reference(root)[1]


def test_in_gpu_mode_the_reference_is_this_gpu_s_own_set_when_there_is_one(tmp_path, monkeypatch):
    """One statement, one GPU: a live H200 reads the H200 recording as its reference, not the committed default;
    a GPU without a set here falls back to the default; the environment variable still wins."""
    from types import SimpleNamespace

    from infralens_lab import device
    monkeypatch.delenv(evidence.REFERENCE_ENV, raising=False)
    root = _two_sets(tmp_path)
    (root / evidence.DEFAULT_FILE).write_text("nvidia-b\n")
    monkeypatch.setattr(device, "is_gpu", lambda: True)
    monkeypatch.setattr(device, "slug", lambda name: name.lower())
    monkeypatch.setattr(device, "facts", lambda: SimpleNamespace(name="NVIDIA-A"))
    slug, why = evidence.default_reference(root)
    assert slug == "nvidia-a" and "this GPU's own recorded set" in why
    monkeypatch.setattr(device, "facts", lambda: SimpleNamespace(name="NVIDIA-C"))  # no set for this GPU
    assert evidence.default_reference(root)[0] == "nvidia-b"
    monkeypatch.setattr(device, "facts", lambda: SimpleNamespace(name="NVIDIA-A"))
    monkeypatch.setenv(evidence.REFERENCE_ENV, "nvidia-b")
    assert evidence.default_reference(root)[0] == "nvidia-b"
    monkeypatch.setattr(device, "is_gpu", lambda: False)  # interpreter mode: the committed default
    monkeypatch.delenv(evidence.REFERENCE_ENV)
    assert evidence.default_reference(root)[0] == "nvidia-b"


def test_two_sets_and_no_default_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.delenv(evidence.REFERENCE_ENV, raising=False)
    root = _two_sets(tmp_path)
    with pytest.raises(evidence.EvidenceError, match="DEFAULT"):
        evidence.reference(root=root)
    (root / evidence.DEFAULT_FILE).write_text("nvidia-zz")
    with pytest.raises(evidence.EvidenceError, match="nvidia-zz"):
        evidence.reference(root=root)


def test_the_committed_default_names_a_committed_set():
    slug, why = evidence.default_reference(evidence.data_root())
    assert slug in evidence.recordings(), (slug, why)


def test_large_records_are_written_compact_and_read_back_the_same(tmp_path):
    """A record over COMPACT_ABOVE bytes (a set of traces) is written without indentation, a small one indented;
    both load back equal and the manifest's checksums hold for both."""
    w = EvidenceWriter(tmp_path / "set", command="x", provenance=PROV)
    big = {"xs": [{"ts": i + 0.125, "name": f"k{i % 7}"} for i in range(evidence.COMPACT_ABOVE // 20)]}
    w.write("big", big)
    w.write("small", {"a": 1})
    w.close()
    big_text = evidence.gzip.decompress((tmp_path / "set" / "big.json.gz").read_bytes()).decode()  # and compressed
    small_text = (tmp_path / "set" / "small.json").read_text()
    assert len(big_text) > evidence.COMPACT_ABOVE and big_text.count("\n") == 1 and ", " not in big_text
    assert small_text.count("\n") > 3
    store = RecordedStore(tmp_path / "set")
    assert store.load("big").values == big and store.load("small").values == {"a": 1}


def test_load_all_keeps_the_default_where_two_sets_are_of_one_gpu(root):
    """A `2x-` set of the same card sorts before the one-GPU set; the default reference's record still wins."""
    h100 = replace(PROV, gpu="NVIDIA H100 80GB HBM3", gpu_slug="nvidia-h100-80gb-hbm3",
                   command="python -m infralens_lab record --out data/recorded/2x-nvidia-h100-80gb-hbm3")
    _record(root / "2x-nvidia-h100-80gb-hbm3", h100)
    got = evidence.load_all("device", root=root)
    assert list(got) == ["NVIDIA H100 80GB HBM3", "NVIDIA H200"]
    assert "2x-" not in got["NVIDIA H100 80GB HBM3"].provenance.command  # the committed default's, not the 2x set's


# ---------------------------------------------------------------- sets stored compressed (issue 39, item 4)
REAL_SET = evidence.data_root() / "nvidia-h200"  # a one-GPU set committed uncompressed: its traces are real


def test_a_large_record_is_stored_compressed_with_the_checksum_of_its_json(tmp_path):
    """Over COMPRESS_ABOVE bytes the recorder writes <name>.json.gz; the manifest lists <name>.json with the sha256
    and size of the JSON itself, and loading gives back the values."""
    w = EvidenceWriter(tmp_path / "set", command="x", provenance=PROV)
    big = {"xs": [{"ts": i + 0.125, "name": f"k{i % 7}"} for i in range(evidence.COMPRESS_ABOVE // 20)]}
    w.write("big", big)
    w.write("small", {"a": 1})
    m = json.loads(w.close().read_text())
    folder = tmp_path / "set"
    assert sorted(p.name for p in folder.iterdir()) == ["big.json.gz", "manifest.json", "small.json"]
    content = evidence.gzip.decompress((folder / "big.json.gz").read_bytes())
    assert m["files"]["big.json"]["sha256"] == hashlib.sha256(content).hexdigest()
    assert m["files"]["big.json"]["bytes"] == len(content) > evidence.COMPRESS_ABOVE
    assert m["files"]["big.json"]["stored"] == "gzip" and "stored" not in m["files"]["small.json"]
    assert "decompressed content" in m["storage"]
    store = RecordedStore(folder)
    store.verify()
    assert store.load("big").values == big and store.names() == ["big", "small"]
    assert store.path("big.json") == folder / "big.json.gz"


def test_a_compressed_file_whose_content_changed_is_refused(tmp_path):
    w = EvidenceWriter(tmp_path / "set", command="x", provenance=PROV)
    w.write("big", {"xs": list(range(evidence.COMPRESS_ABOVE // 4))})
    w.close()
    gz = tmp_path / "set" / "big.json.gz"
    text = evidence.gzip.decompress(gz.read_bytes()).decode()
    gz.write_bytes(evidence.gzip_bytes(text.replace("[0,1,2,", "[0,1,7,").encode()))
    with pytest.raises(EvidenceError, match=r"big.json.gz: checksum .* of its decompressed content does not match"):
        RecordedStore(tmp_path / "set").load("big")
    gz.write_bytes(gz.read_bytes()[:1000])  # cut short: not a gzip stream that ends
    with pytest.raises(EvidenceError, match="a gzip file that does not decompress"):
        RecordedStore(tmp_path / "set").load("big")


def test_a_file_stored_both_ways_is_refused(store_dir):
    (store_dir / "bench.json.gz").write_bytes(evidence.gzip_bytes((store_dir / "bench.json").read_bytes()))
    with pytest.raises(EvidenceError, match=r"both bench.json and bench.json.gz are there"):
        RecordedStore(store_dir).load("bench")


@pytest.fixture(scope="module")
def compressed_copy(tmp_path_factory):
    """A copy of a real recorded set with its JSON records over 500 kB compressed by the package command."""
    import shutil

    dst = tmp_path_factory.mktemp("compressed") / REAL_SET.name
    shutil.copytree(REAL_SET, dst)
    assert evidence.main(["compress", str(dst), "--above", "500000"]) == 0
    return dst


def test_a_compressed_real_set_loads_the_same_as_the_recorded_one(compressed_copy):
    plain, packed = RecordedStore(REAL_SET), RecordedStore(compressed_copy)
    packed.verify()
    gz = sorted(p.name for p in compressed_copy.glob("*.gz"))
    assert gz == sorted(f"{f}.gz" for f in plain.files() if f.endswith(".json") and
                        (REAL_SET / f).stat().st_size > 500_000) and len(gz) >= 4
    m_plain, m_packed = plain.manifest, packed.manifest
    for f, entry in m_plain["files"].items():  # the recorder's checksums and sizes are kept as written
        assert {k: m_packed["files"][f][k] for k in entry} == entry
    assert m_packed["provenance"] == m_plain["provenance"] and "compress" in m_packed["storage"]
    for name in plain.names():
        assert packed.load(name).values == plain.load(name).values, name
    for f in plain.files():
        if f.endswith(".csv"):
            assert packed.text(f) == plain.text(f)
    assert evidence.compress_set(compressed_copy, above=500_000) == []  # nothing left to do: left as it is


def test_readers_by_path_read_a_compressed_record(compressed_copy):
    """`analyze` and parse.trace read a recorded trace stored as .json.gz as the plain file, and the report's
    sha256 is the manifest's (that of the JSON)."""
    from infralens_lab.analyze import analyze
    from infralens_lab.parse.trace import load_trace

    packed = RecordedStore(compressed_copy)
    path = packed.path("trace_fixed.json")
    assert path.name == "trace_fixed.json.gz"
    assert load_trace(path).events.equals(load_trace(REAL_SET / "trace_fixed.json").events)
    a, b = analyze(path), analyze(REAL_SET / "trace_fixed.json")
    assert list(a.tables) == list(b.tables)
    for name in a.tables:
        pd.testing.assert_frame_equal(a.tables[name], b.tables[name])
    assert f"sha256 {packed.manifest['files']['trace_fixed.json']['sha256'][:12]}" in a.provenance


def test_the_committed_multi_gpu_sets_are_stored_compressed_and_verify():
    """Every set with per-rank traces keeps them as .json.gz (a GPU machine carries at most 64 MiB of tree)."""
    sets = [s for s in evidence.load_all_sets() if "ddp_meta" in s.names()]
    assert len(sets) >= 2
    for st in sets:
        st.verify()
        ranks = [f for f in st.files() if f.startswith("ddp_rank")]
        assert ranks and all(st.path(f).name == f + ".gz" for f in ranks), st.folder
        assert all(st.manifest["files"][f]["stored"] == "gzip" for f in ranks)
        assert sum(p.stat().st_size for p in st.folder.iterdir()) < 8e6, st.folder


def test_the_command_line_verifies_and_names_a_bad_file(store_dir, capsys):
    assert evidence.main(["verify", str(store_dir)]) == 0
    assert "every file matches manifest.json" in capsys.readouterr().out
    (store_dir / "ncu_copies.csv").write_text(CSV.replace("538", "138"))
    assert evidence.main(["verify", str(store_dir)]) == 1
    assert "ncu_copies.csv: checksum" in capsys.readouterr().err
    assert evidence.main(["compress", str(store_dir)]) == 1  # a set that does not verify is not compressed
    assert not list(store_dir.glob("*.gz"))
