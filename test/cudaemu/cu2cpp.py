#!/usr/bin/env python3
"""cu2cpp.py - turns a CUDA source of lib/nn/cuda into C++ for the host emulator.

    python3 test/cudaemu/cu2cpp.py IN.cu OUT.cpp [HEADER.cuh ...]

The only CUDA syntax the preprocessor cannot handle is the launch, `k<<<cfg>>>(args)`, so that is
all this rewrites: into `emu_launch(emu_cfg(cfg), BARRIERS, "k", k)(args)`. cfg stays as written
(a macro such as LAUNCH_1D(n) expands to the four launch arguments inside emu_cfg's call), and
newlines are kept, so with the leading #line every diagnostic and __FILE__/__LINE__ names the .cu.

BARRIERS is true when the kernel, or a function it calls (in the .cu or the headers given), uses
__syncthreads or a warp shuffle: the runtime then runs each block's threads as fibers that meet at
the barriers; every other kernel runs its threads as a plain loop (fast). The call graph is an
over-approximation by names (any identifier of a barrier function in a body counts), which can
only make a kernel slower, never wrong; the runtime reports a barrier met in loop mode.
"""
import re
import sys

SEEDS = re.compile(r"\b(__syncthreads|__shfl_\w*sync)\b")
IDENT = re.compile(r"[A-Za-z_]\w*")


def strip(src):
    """The source with comments and string/char literals blanked (same length, same lines)."""
    out, i, n = [], 0, len(src)
    while i < n:
        c = src[i]
        if src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif src.startswith("/*", i):
            j = src.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", src[i:j]))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and src[j] != c:
                j += 2 if src[j] == "\\" else 1
            out.append(c + " " * (j - i - 1) + c)
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def functions(code):
    """{name: body} for the top-level brace blocks whose header ends in a parameter list."""
    funcs, depth, start, head = {}, 0, 0, 0
    for i, c in enumerate(code):
        if c == "{":
            if depth == 0:
                start = i
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                header = code[head:start]
                head = i + 1
                name = header_name(header)
                if name:
                    funcs[name] = funcs.get(name, "") + code[start:i + 1]
        elif c == ";" and depth == 0:
            head = i + 1
    return funcs


def header_name(header):
    """The function name of `... name(params) [const]`, or None (struct, namespace, ...)."""
    close = header.rfind(")")
    if close < 0:
        return None
    depth = 0
    for k in range(close, -1, -1):
        if header[k] == ")":
            depth += 1
        elif header[k] == "(":
            depth -= 1
            if depth == 0:
                m = re.search(r"([A-Za-z_]\w*)\s*$", header[:k])
                return m.group(1) if m else None
    return None


def barrier_functions(code):
    funcs = functions(code)
    names = {n for n, body in funcs.items() if SEEDS.search(body)}
    grew = True
    while grew:
        grew = False
        for n, body in funcs.items():
            if n not in names and names & set(IDENT.findall(body)):
                names.add(n)
                grew = True
    return names


def kernel_name(src, j):
    """The start of `name` or `name<T...>` that ends just before src[j] ('<<<')."""
    k = j
    if src[k - 1] == ">":
        depth = 0
        while True:
            k -= 1
            if src[k] == ">":
                depth += 1
            elif src[k] == "<":
                depth -= 1
                if depth == 0:
                    break
    while k > 0 and (src[k - 1].isalnum() or src[k - 1] == "_"):
        k -= 1
    return k


def main():
    if len(sys.argv) < 3:
        sys.exit("usage: cu2cpp.py IN.cu OUT.cpp [HEADER.cuh ...]")
    path, out_path = sys.argv[1], sys.argv[2]
    src = open(path).read()
    code = strip(src)
    for h in sys.argv[3:]:
        code += "\n" + strip(open(h).read())
    barriers = barrier_functions(code)
    scode = strip(src)
    out, i = ['#line 1 "%s"\n' % path], 0
    while True:
        j = scode.find("<<<", i)
        if j < 0:
            out.append(src[i:])
            break
        e = scode.find(">>>", j)
        if e < 0:
            sys.exit("%s: a '<<<' without '>>>'" % path)
        k = kernel_name(src, j)
        full = src[k:j]
        base = re.match(r"\w+", full)
        if not base:
            sys.exit("%s:%d: no kernel name before '<<<'" % (path, src.count("\n", 0, j) + 1))
        base = base.group(0)
        out.append(src[i:k])
        out.append('emu_launch(emu_cfg(%s), %s, "%s", %s)' % (
            src[j + 3:e], "true" if base in barriers else "false", base, full))
        i = e + 3
    open(out_path, "w").write("".join(out))


if __name__ == "__main__":
    main()
