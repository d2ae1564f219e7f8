"""The compiled scanner's field rules come from their one home, frexport/decode/fields.py: its header
_scan_fields.h is what scripts/gen_scan_fields.py writes from fields.py, _scan.c keeps no copy of its
own, and the built extension reports the constants it was compiled with (scanned.py refuses to use
one built from other rules)."""

import importlib.util
import re

import pytest

from frexport.decode import fields, scanned
from tests.support.paths import ROOT

SCAN_C = ROOT / "frexport" / "decode" / "_scan.c"
HEADER = ROOT / "frexport" / "decode" / "_scan_fields.h"


def _generator():
    spec = importlib.util.spec_from_file_location("gen_scan_fields", ROOT / "scripts" / "gen_scan_fields.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_checked_in_header_is_the_generated_one():
    assert HEADER.read_text() == _generator().header(), \
        "fields.py changed: run scripts/gen_scan_fields.py and rebuild the extension"


def test_header_changes_with_fields(monkeypatch):
    gen = _generator()
    before = gen.header()
    monkeypatch.setattr(fields, "MAX_FRAMES", 256)
    assert "#define MAX_FRAMES 256\n" in gen.header() and gen.header() != before
    monkeypatch.setattr(fields, "V210_KEYS", (*fields.V210_KEYS, "new_key"))
    with pytest.raises(SystemExit, match="no C name for \\['new_key'\\]"):
        gen.header()


def test_header_holds_every_rule_the_scanner_uses():
    text = HEADER.read_text()
    for name in ("MAX_ENTRIES", "MAX_FRAMES", "MAX_SIZE_ELEMENTS", "MAX_DTYPES", "MAX_DTYPE_LEN"):
        assert f"#define {name} {getattr(fields, name)}\n" in text
    assert f"#define MAX_DURATION_MS {fields.MAX_DURATION_MS!r}\n" in text
    names = re.search(r"FIELD_NAMES\[N_FIELDS\] = \{(.*?)\};", text, re.S)[1]
    assert re.findall(r'"(\w+)"', names) == [*fields.V210_KEYS, *fields.OPTIONAL_KEYS]
    assert f"N_REQUIRED = {len(fields.V210_KEYS)}," in text


def test_scan_c_keeps_no_copy_of_the_rules():
    code = re.sub(r"/\*.*?\*/", "", SCAN_C.read_text(), flags=re.S)  # the code, not its comments
    assert '#include "_scan_fields.h"' in code
    for name in ("MAX_ENTRIES", "MAX_FRAMES", "MAX_SIZE_ELEMENTS", "MAX_DTYPES", "MAX_DTYPE_LEN", "MAX_DURATION_MS",
                 "N_REQUIRED", "FIELD_NAMES"):
        assert not re.search(rf"#define\s+{name}\b|\b{name}\s*=|\b{name}\[\w*\]\s*=", code), name
    for key in (*fields.V210_KEYS, *fields.OPTIONAL_KEYS, *fields.FRAME_KEYS, fields.ENTRIES_KEY):
        assert f'"{key}"' not in code, key
    setup = (ROOT / "setup.py").read_text()
    manifest = (ROOT / "MANIFEST.in").read_text()
    assert "frexport/decode/_scan_fields.h" in setup and "frexport/decode/_scan_fields.h" in manifest


@pytest.mark.skipif(not scanned.available(), reason="the compiled scanner is not built")
def test_built_extension_was_compiled_with_fields_rules():
    from frexport.decode import _scan

    assert _scan.FIELDS == scanned.expected_fields()


def test_an_extension_of_other_rules_is_not_used(monkeypatch):
    class Stale:
        FIELDS = {**scanned.expected_fields(), "MAX_FRAMES": 1}

        @staticmethod
        def scan(data):
            raise AssertionError("must not be used")

    monkeypatch.setitem(__import__("sys").modules, "frexport.decode._scan", Stale)
    scan, why = scanned._load()
    assert scan is None and "other field rules" in why
