"""What the judge refuses in a candidate's CUDA C or C++ text before any compiler or interpreter reads it: whatever
would let the text read one way to the judge and another to a compiler, or read a host file into what the
candidate sees (red team 16). Used by the judge's load_inline fast path (rewards/inline) and by load_cuda.
"""
from __future__ import annotations

import re


class SourceRefused(ValueError):
    """A source the judge will not compile, and why (names the construct and the fix)."""


def splice_lines(src: str) -> str:
    """C++'s translation phase 2, before comments are read: a backslash at a line's end joins it to the next (a
    `// ... \\` comment runs on over the next line; `/* ... *\\` then `/` on the next line closes a comment). The
    joined line keeps its place and the lines it took follow it empty, so later lines keep their numbers (red team
    16: comments stripped without it left the judge's program and the compiler's apart, a copy kernel launched
    where C++ launched a zeros kernel)."""
    if "\\" not in src:
        return src
    lines = src.replace("\r\n", "\n").split("\n")
    out, i = [], 0
    while i < len(lines):
        line, k = lines[i], i
        while line.endswith("\\") and k + 1 < len(lines):
            k += 1
            line = line[:-1] + lines[k]
        out.append(line)
        out.extend([""] * (k - i))
        i = k + 1
    return "\n".join(out)


# what the judge's reading of a source does not follow C++ in, refused before anything reads it (red team 16)
_RAW_STRING = re.compile(r'(?<![\w"])(?:u8|u|U|L)?R"')
_DIGRAPH = re.compile(r"%:|<%|%>|<:(?!:[^:>])|:>")
_INCLUDE = re.compile(r"^[ \t]*#[ \t]*include(?:_next)?\b[ \t]*(.*)$", re.M)
_HEADER_NAME = re.compile(r'(?:<([\w][\w./+-]*)>|"([\w][\w./+-]*)")\s*$')
_OTHER_DIRECTIVES = re.compile(r"^[ \t]*#[ \t]*(line|embed|import)\b", re.M)


def source_rules(src: str) -> None:
    """Refuse (SourceRefused) what would let a source's text read one way to the judge and another to a compiler, or
    read a host file into what the candidate sees: raw string literals (the comment stripper does not read them),
    digraphs (`%:include`, `<%` for a brace), `_Pragma`, `__has_include`, `#line`/`#embed`, and an `#include` of
    anything but a header's plain name (`<cuda_bf16.h>`, `"my.h"`: no absolute path, no `..`, no macro). NVRTC reads
    any file an include names, and a stringized `#include "/etc/passwd"` came back in the compile error (red team
    16). `src`: comments stripped, lines spliced."""
    text = _blank_literals(src)
    for m in _INCLUDE.finditer(text):
        what = src[m.start(1):m.end(1)].strip()
        h = _HEADER_NAME.match(what)
        name = h and (h.group(1) or h.group(2))
        if not name or ".." in name.split("/"):
            raise SourceRefused(f"#include {what[:80]}: include a header by its plain name (<cuda_bf16.h>), "
                                "not a path or a macro")
    for rx, what in ((_RAW_STRING, "raw string literals"), (_DIGRAPH, "digraphs (%:, <%, %>, <:, :>)"),
                     (re.compile(r"\b(_Pragma|__pragma|__has_include(?:_next)?)\b"), "_Pragma and __has_include"),
                     (_OTHER_DIRECTIVES, "#line, #embed and #import")):
        m = rx.search(src if rx is _RAW_STRING else text)
        if m:
            raise SourceRefused(f"{what} in the source ({m.group(0).strip()!r}): the judge reads the source as a "
                                "compiler does only without them")


def _blank_literals(src: str) -> str:
    """String and character literals blanked (their quotes kept), so rules on the code do not read their text."""
    out, i, n = [], 0, len(src)
    while i < n:
        c = src[i]
        if c == '"' or c == "'":
            j = i + 1
            while j < n and src[j] != c and src[j] != "\n":
                j += 2 if src[j] == "\\" else 1
            out.append(c + " " * (min(j, n) - i - 1) + (c if j < n and src[j] == c else ""))
            i = j + 1 if j < n and src[j] == c else j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def strip_comments(src: str) -> str:
    """Comments become spaces (newlines kept, so line numbers hold); strings are left alone."""
    out, i, n = [], 0, len(src)
    while i < n:
        c = src[i]
        if c == '"' or c == "'":
            j = i + 1
            while j < n and src[j] != c:
                j += 2 if src[j] == "\\" else 1
            out.append(src[i:j + 1])
            i = j + 1
        elif src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif src.startswith("/*", i):
            j = src.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("".join(ch if ch == "\n" else " " for ch in src[i:j]))
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


# NVRTC options a candidate's load_cuda may pass: code generation and macros, never a path to read
CANDIDATE_OPTIONS = re.compile(r"^(?:--?use_fast_math|--?ftz=\w+|--?prec-div=\w+|--?prec-sqrt=\w+|--?fmad=\w+|"
                               r"-D\w+(?:=[\w.+-]*)?|-U\w+|-lineinfo|--generate-line-info|--?std=c\+\+1[47]|"
                               r"--?std=c\+\+17|--?maxrregcount=\d+|--restrict|--extra-device-vectorization|-w|"
                               r"--disable-warnings|--?dopt=on|--?dopt=off)$")


def check_cuda_source(source: str, options=()) -> None:
    """A candidate's CUDA C for load_cuda: source_rules on its text as a compiler reads it, and options from
    CANDIDATE_OPTIONS only (an include path or a pre-included file would read host files)."""
    for o in options:
        if not isinstance(o, str) or not CANDIDATE_OPTIONS.match(o):
            raise SourceRefused(f"the NVRTC option {str(o)[:80]!r}: a kernel may pass code-generation options "
                                "(--use_fast_math, -DNAME=VALUE, -lineinfo...), not paths")
    source_rules(strip_comments(splice_lines(source)))
