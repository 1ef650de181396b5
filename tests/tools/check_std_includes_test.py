#!/usr/bin/env python3
"""Tests of tools/check_std_includes.py on small files written to a temporary folder."""
import os
import subprocess
import sys
import tempfile
import textwrap
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
TOOL = os.path.join(HERE, "..", "..", "tools", "check_std_includes.py")
sys.dont_write_bytecode = True  # leave no __pycache__ in tools/
sys.path.insert(0, os.path.dirname(TOOL))
import check_std_includes as csi  # noqa: E402


class CheckStdIncludes(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)

    def write(self, rel, text):
        path = os.path.join(self.tmp.name, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(textwrap.dedent(text))
        return path

    def test_a_name_without_its_header_is_reported_with_line_and_header(self):
        path = self.write("src/a.hpp", """\
            #pragma once
            #include <vector>

            inline std::string name(const std::vector<int>& v) { return std::to_string(v.size()); }
            """)
        problems = csi.check_file(path)
        self.assertEqual(len(problems), 1, problems)  # std::string and std::to_string: one header
        self.assertIn("a.hpp:4: uses std::string but does not include <string>", problems[0])

    def test_comments_and_string_literals_are_not_uses(self):
        path = self.write("src/b.cpp", """\
            // std::cout would need <iostream>
            /* std::map too */
            const char* s = "std::vector";
            const char* r = R"(std::set)";
            """)
        self.assertEqual(csi.check_file(path), [])

    def test_a_cpp_may_rely_on_its_own_header(self):
        self.write("src/layer/c.hpp", "#pragma once\n#include <string>\n")
        path = self.write("src/layer/c.cpp", '#include "layer/c.hpp"\nstd::string f();\n')
        self.assertEqual(csi.check_file(path), [])
        other = self.write("src/layer/d.cpp", '#include "layer/c.hpp"\nstd::string f();\n')
        self.assertEqual(len(csi.check_file(other)), 1)

    def test_a_backend_file_may_rely_on_the_interface_it_implements(self):
        self.write("src/backends/e.hpp", "#pragma once\n#include <memory>\n")
        path = self.write("src/backends/host/e.cpp",
                          '#include "backends/e.hpp"\nstd::unique_ptr<int> p;\n')
        self.assertEqual(csi.check_file(path), [])

    def test_global_c_math_calls_and_macros_need_their_headers(self):
        path = self.write("src/f.hpp", """\
            #pragma once
            inline float g(float x) { return x > 0 ? ::expf(x) : NAN; }
            inline double top() { return DBL_MAX; }
            """)
        text = "\n".join(csi.check_file(path))
        self.assertIn("::expf but does not include <cmath>", text)
        self.assertIn("DBL_MAX but does not include <cfloat>", text)
        macro_only = self.write("src/f2.hpp", "#pragma once\nconst float nothing = NAN;\n")
        self.assertIn("NAN but does not include <cmath>", "".join(csi.check_file(macro_only)))

    def test_an_unknown_standard_name_is_an_error(self):
        path = self.write("src/g.cpp", "std::frobnicator<int> x;\n")
        problems = csi.check_file(path)
        self.assertEqual(len(problems), 1)
        self.assertIn("std::frobnicator is not in", problems[0])

    def test_fix_adds_sorted_includes_into_the_standard_block(self):
        path = self.write("src/h.cpp", """\
            #include "h.hpp"

            #include <algorithm>
            #include <vector>

            #include "core/x.hpp"

            std::string s; std::map<int, int> m; std::vector<int> v; int y = std::max(1, 2);
            """)
        self.write("src/h.hpp", "#pragma once\n")
        csi.add_includes(path, [h for _, h in csi.find_missing(path)])
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
        self.assertEqual(lines[2:7], ["#include <algorithm>", "#include <map>",
                                      "#include <string>", "#include <vector>", ""])
        self.assertEqual(csi.check_file(path), [])

    def test_fix_starts_a_block_before_the_project_includes_when_there_is_none(self):
        path = self.write("src/k.hpp", """\
            #pragma once
            #include "core/x.hpp"

            inline std::size_t n() { return 0; }
            """)
        csi.add_includes(path, [h for _, h in csi.find_missing(path)])
        with open(path, encoding="utf-8") as f:
            self.assertEqual(f.read().splitlines()[:4],
                             ["#pragma once", "#include <cstddef>", "", '#include "core/x.hpp"'])

    def test_the_command_fails_on_a_missing_include_and_passes_on_a_clean_tree(self):
        bad = self.write("src/m.hpp", "#pragma once\nstd::vector<int> v;\n")
        run = subprocess.run([sys.executable, TOOL, bad], capture_output=True, text=True)
        self.assertEqual(run.returncode, 1, run.stdout)
        self.assertIn("1 missing standard includes", run.stdout)
        good = self.write("src/n.hpp", "#pragma once\n#include <vector>\nstd::vector<int> v;\n")
        run = subprocess.run([sys.executable, TOOL, good], capture_output=True, text=True)
        self.assertEqual(run.returncode, 0, run.stdout)


if __name__ == "__main__":
    unittest.main()
