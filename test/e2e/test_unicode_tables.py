"""src/tokenizer/unicode_tables.c is what scripts/gen-unicode-tables writes (when this Python's
Unicode version is the one the committed file was made from)."""
import os
import re
import subprocess
import sys
import unicodedata
import unittest

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")


class UnicodeTables(unittest.TestCase):
    def test_generated_file_is_current(self):
        path = os.path.join(ROOT, "src", "tokenizer", "unicode_tables.c")
        with open(path) as f:
            committed = f.read()
        version = re.search(r'ucp_unicode_version\[\] = "([^"]+)"', committed).group(1)
        if version != unicodedata.unidata_version:
            self.skipTest("committed tables are Unicode %s, this Python has %s"
                          % (version, unicodedata.unidata_version))
        r = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "gen-unicode-tables")],
                           capture_output=True, text=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, committed, "re-run scripts/gen-unicode-tables and commit")


if __name__ == "__main__":
    unittest.main()
