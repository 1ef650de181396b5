#!/usr/bin/env python3
"""Checks that every C++ file includes the standard header of each standard name it uses
(include what you use), instead of getting it through Kokkos or another header by accident.

Kokkos 4.2 stopped including <iostream> and other standard headers from its own, so code that
compiled against Kokkos 3.4 only because Kokkos_Core.hpp happened to bring in <string> or
<iostream> breaks against a newer Kokkos. This finds those uses without a newer Kokkos at hand:
for each `std::name` (and `::expf(`-style C math calls, and macros such as NAN or SIGINT) it asks
for one of the headers that declare it among the file's own #include lines. A `foo.cpp` may rely
on what its own `foo.hpp` includes. A standard name missing from the table below is an error
too, so that a new one gets its header written down rather than skipped.

  python3 tools/check_std_includes.py            # src/ tests/ perf/ examples/ of this repository
  python3 tools/check_std_includes.py FILE|DIR…
  python3 tools/check_std_includes.py --fix …    # also adds the first header listed for each

Exit status 0 when nothing is missing; otherwise one line per file and name, and status 1
(with --fix: the lines that were added, and status 0 unless a name is not in the table).
"""
import os
import re
import sys

IOS = ("ios", "iostream", "istream", "ostream", "sstream", "fstream")
SIZE_T = ("cstddef", "cstdio", "cstring", "cstdlib", "ctime", "cwchar")

# header(s) that declare each name; a tuple lists every header that is enough on its own.
_TABLE = {
    "iostream": "cout cerr clog cin",
    ("ostream", "iostream", "sstream", "fstream", "iosfwd"): "ostream",
    ("istream", "iostream", "sstream", "fstream", "iosfwd"): "istream",
    ("ostream", "iostream", "sstream", "fstream"): "endl flush",
    IOS: "ios ios_base streamsize fixed scientific defaultfloat hex dec boolalpha",
    "sstream": "ostringstream istringstream stringstream",
    "fstream": "ofstream ifstream fstream",
    "iomanip": "setw setprecision setfill put_time get_time quoted",
    "iterator": "istreambuf_iterator ostreambuf_iterator istream_iterator ostream_iterator "
                "back_inserter inserter next prev distance advance iterator_traits",
    "string": "string to_string stoi stol stoll stoul stoull stof stod",
    ("string", "istream", "iostream", "sstream", "fstream"): "getline",
    "string_view": "string_view",
    "vector": "vector",
    "array": "array",
    "deque": "deque",
    "list": "list",
    "map": "map multimap",
    "set": "set multiset",
    "unordered_map": "unordered_map",
    "unordered_set": "unordered_set",
    "queue": "queue priority_queue",
    "stack": "stack",
    "bitset": "bitset",
    "functional": "function hash plus minus multiplies less greater equal_to invoke ref cref "
                  "reference_wrapper bind mem_fn",
    "memory": "unique_ptr make_unique shared_ptr make_shared weak_ptr addressof allocator",
    "optional": "optional nullopt make_optional nullopt_t",
    "variant": "variant visit get_if holds_alternative monostate",
    "any": "any any_cast",
    "tuple": "tuple make_tuple tie tuple_size tuple_element forward_as_tuple apply",
    "utility": "pair make_pair forward exchange declval index_sequence make_index_sequence "
               "integer_sequence",
    ("utility", "algorithm"): "move swap",
    "algorithm": "min max minmax clamp sort stable_sort partial_sort nth_element fill fill_n "
                 "copy copy_n copy_if find find_if find_if_not any_of all_of none_of count "
                 "count_if max_element min_element minmax_element reverse transform equal is_sorted "
                 "lower_bound upper_bound binary_search unique remove_if for_each mismatch "
                 "shuffle rotate",
    ("algorithm", "cstdio"): "remove",
    "numeric": "accumulate iota inner_product partial_sum reduce exclusive_scan inclusive_scan "
               "gcd lcm",
    "limits": "numeric_limits",
    "cstdint": "int8_t int16_t int32_t int64_t uint8_t uint16_t uint32_t uint64_t intptr_t "
               "uintptr_t intmax_t uintmax_t",
    SIZE_T: "size_t",
    "cstddef": "ptrdiff_t nullptr_t byte max_align_t",
    "cstring": "memcpy memmove memset memcmp strlen strcmp strncmp strchr strrchr strstr "
               "strerror strncpy",
    "cstdio": "printf fprintf snprintf sprintf puts fputs fputc fopen fclose fread fwrite "
              "fflush perror rename FILE",
    "cstdlib": "getenv atoi atol atof strtol strtoll strtoul strtoull strtod strtof exit _Exit abort "
               "malloc free system quick_exit",
    ("cmath", "cstdlib"): "abs",
    "cmath": "sqrt exp exp2 expm1 log log2 log10 log1p pow fabs floor ceil round lround llround "
             "trunc fmod fmin fmax fma isfinite isnan isinf signbit copysign nextafter ldexp "
             "frexp sin cos tan tanh atan atan2 hypot erf lgamma nan nanf cbrt",
    "cctype": "isspace isdigit isalpha isalnum isupper islower tolower toupper",
    "ctime": "time time_t tm localtime gmtime strftime clock mktime",
    "csignal": "signal raise sig_atomic_t",
    "chrono": "chrono",
    ("ratio", "chrono"): "ratio milli micro nano kilo",
    "filesystem": "filesystem",
    "thread": "thread this_thread",
    "mutex": "mutex lock_guard unique_lock scoped_lock",
    "condition_variable": "condition_variable",
    "atomic": "atomic atomic_thread_fence memory_order memory_order_relaxed memory_order_acquire "
              "memory_order_release memory_order_acq_rel memory_order_seq_cst",
    "stdexcept": "runtime_error logic_error invalid_argument out_of_range domain_error "
                 "range_error overflow_error length_error",
    ("exception", "stdexcept"): "exception exception_ptr current_exception rethrow_exception "
                                "terminate",
    "system_error": "error_code errc system_error generic_category make_error_code",
    "new": "bad_alloc nothrow",
    "charconv": "to_chars from_chars",
    "random": "mt19937 mt19937_64 random_device seed_seq uniform_real_distribution "
              "uniform_int_distribution normal_distribution lognormal_distribution "
              "bernoulli_distribution discrete_distribution exponential_distribution",
    "type_traits": "is_same is_same_v conditional conditional_t enable_if enable_if_t decay_t "
                   "remove_cv_t remove_reference_t remove_const_t is_const_v is_integral_v "
                   "is_floating_point_v is_signed_v is_arithmetic_v is_trivially_copyable is_trivially_copyable_v "
                   "integral_constant bool_constant true_type false_type underlying_type_t void_t "
                   "invoke_result_t is_base_of_v",
    ("initializer_list", "vector", "string", "map", "set", "array", "deque", "list", "utility",
     "unordered_map", "unordered_set", "algorithm", "random"): "initializer_list",
}
STD = {}
for headers, names in _TABLE.items():
    for name in names.split():
        STD[name] = (headers,) if isinstance(headers, str) else headers

# C names written ::expf(…) or bare macros: their C++ header.
GLOBAL_CALLS = {name: ("cmath",) for name in (
    "expf exp logf log sqrtf sqrt fabsf fabs powf pow floorf floor ceilf ceil fminf fmin fmaxf "
    "fmax cosf cos sinf sin tanhf tanh log1pf log1p expm1f expm1 roundf round").split()}
MACROS = {
    "NAN": ("cmath",), "INFINITY": ("cmath",), "HUGE_VAL": ("cmath",), "HUGE_VALF": ("cmath",),
    "FLT_MAX": ("cfloat",), "DBL_MAX": ("cfloat",), "FLT_MIN": ("cfloat",),
    "DBL_MIN": ("cfloat",), "FLT_EPSILON": ("cfloat",), "DBL_EPSILON": ("cfloat",),
    "INT_MAX": ("climits",), "INT_MIN": ("climits",), "CHAR_BIT": ("climits",),
    "INT64_MAX": ("cstdint",), "UINT64_MAX": ("cstdint",), "SIZE_MAX": ("cstdint",),
    "SIGINT": ("csignal",), "SIGTERM": ("csignal",),
    "EXIT_SUCCESS": ("cstdlib",), "EXIT_FAILURE": ("cstdlib",),
    "errno": ("cerrno",), "assert": ("cassert",),
}

EXTENSIONS = (".hpp", ".cpp", ".h", ".cc")
DEFAULT_ROOTS = ("src", "tests", "perf", "examples")

_CODE_TOKENS = re.compile(
    r'//[^\n]*|/\*.*?\*/|R"([^(\s]*)\(.*?\)\1"|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'',
    re.S)
_INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]', re.M)
_STD_NAME = re.compile(r'(?<![\w:])(?:::)?std::([A-Za-z_]\w*)')
_GLOBAL_CALL = re.compile(r'(?<![\w:>.])::([a-z]\w*)\s*\(')
_MACRO = re.compile(r'(?<![\w.])(' + "|".join(MACROS) + r')\b')


def strip_comments_and_strings(text):
    def blank(m):
        # keep line breaks so that reported line numbers stay right
        return "".join("\n" if c == "\n" else " " for c in m.group(0))
    return _CODE_TOKENS.sub(blank, text)


def own_header(path):
    """foo.hpp beside foo.cpp; for a backend's backends/<backend>/foo.cpp, backends/foo.hpp,
    the interface it implements."""
    stem, ext = os.path.splitext(path)
    if ext not in (".cpp", ".cc"):
        return None
    folder, name = os.path.split(stem)
    for base in (stem, os.path.join(os.path.dirname(folder), name)):
        if os.path.isfile(base + ".hpp"):
            return base + ".hpp"
    return None


def includes_of(path):
    with open(path, encoding="utf-8") as f:
        return set(_INCLUDE.findall(f.read()))


def check_file(path):
    """Returns a list of 'path:line: message' problems for one file."""
    return [p for p, _ in find_missing(path)]


def find_missing(path):
    """Returns (message, header to add or None) for each missing include of one file."""
    with open(path, encoding="utf-8") as f:
        raw = f.read()
    included = set(_INCLUDE.findall(raw))
    header = own_header(path)
    if header:
        included |= includes_of(header)
    code = strip_comments_and_strings(raw)
    # preprocessor lines name headers, not uses
    code = re.sub(r'^\s*#\s*include[^\n]*', "", code, flags=re.M)

    uses = []  # (line, shown name, acceptable headers or None when unknown)
    for m in _STD_NAME.finditer(code):
        name = m.group(1)
        uses.append((m.start(), "std::" + name, STD.get(name)))
    for m in _GLOBAL_CALL.finditer(code):
        name = m.group(1)
        if name in GLOBAL_CALLS:
            uses.append((m.start(), "::" + name, GLOBAL_CALLS[name]))
    for m in _MACRO.finditer(code):
        uses.append((m.start(), m.group(1), MACROS[m.group(1)]))

    problems, reported = [], set()
    for pos, shown, headers in uses:
        key = headers if headers else shown  # one line per missing header, at its first use
        if key in reported:
            continue
        line = code.count("\n", 0, pos) + 1
        if headers is None:
            reported.add(key)
            problems.append((f"{path}:{line}: {shown} is not in tools/check_std_includes.py's "
                             f"table; add it with the header that declares it", None))
        elif not included.intersection(headers):
            reported.add(key)
            want = " or ".join(f"<{h}>" for h in headers)
            problems.append((f"{path}:{line}: uses {shown} but does not include {want}",
                             headers[0]))
    return problems


_STD_HEADER_LINE = re.compile(r'#include <[a-z_]+>$')


def add_includes(path, headers):
    """Adds `#include <h>` lines: into the file's first block of standard headers, in sorted
    order; without one, as a block of their own before the project's "…" includes."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    new = [f"#include <{h}>" for h in sorted(set(headers))]
    block = [i for i, l in enumerate(lines) if _STD_HEADER_LINE.match(l)]
    if block:
        start = end = block[0]
        while end + 1 < len(lines) and lines[end + 1].startswith("#include <"):
            end += 1
        for inc in new:
            at = next((i for i in range(start, end + 1) if lines[i] > inc), end + 1)
            lines.insert(at, inc)
            end += 1
    else:
        own = own_header(path)
        own_name = None
        if own:
            own_name = os.path.relpath(own, _source_root(path)) if _source_root(path) else None
        quoted = [i for i, l in enumerate(lines)
                  if l.startswith('#include "') and not (own_name and l == f'#include "{own_name}"')]
        if quoted:
            at = quoted[0]
            lines[at:at] = new + [""]
        else:
            anchors = [i for i, l in enumerate(lines) if l.startswith(("#include", "#pragma once"))]
            at = anchors[-1] + 1 if anchors else 0
            lines[at:at] = ([""] if lines[at - 1].startswith("#include") else []) + new
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines))


def _source_root(path):
    """src/ for files under it (their includes are relative to it), else the file's folder."""
    parts = os.path.abspath(path).split(os.sep)
    if "src" in parts:
        return os.sep.join(parts[:len(parts) - parts[::-1].index("src")])
    return os.path.dirname(os.path.abspath(path))


def files_under(paths):
    for p in paths:
        if os.path.isdir(p):
            for root, dirs, names in os.walk(p):
                dirs.sort()
                for n in sorted(names):
                    if n.endswith(EXTENSIONS):
                        yield os.path.join(root, n)
        elif os.path.isfile(p):
            yield p
        else:
            raise SystemExit(f"check_std_includes: no such file or directory: {p}")


def main(argv):
    fix = "--fix" in argv
    argv = [a for a in argv if a != "--fix"]
    if argv:
        paths = argv
    else:
        repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        paths = [os.path.join(repo, d) for d in DEFAULT_ROOTS]
    files = list(files_under(paths))
    problems, unknown = [], 0
    for f in files:
        missing = find_missing(f)
        problems += [m for m, _ in missing]
        unknown += sum(1 for _, h in missing if h is None)
        if fix and any(h for _, h in missing):
            add_includes(f, [h for _, h in missing if h])
    for p in problems:
        print(p)
    if fix:
        print(f"check_std_includes: {len(files)} files, {len(problems) - unknown} includes added, "
              f"{unknown} names not in the table")
        return 1 if unknown else 0
    print(f"check_std_includes: {len(files)} files, {len(problems)} missing standard includes")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
