#!/usr/bin/env python3
"""Fails when the files of a crate import each other in a circle.

Each .rs file under crates/*/src is a module (lib.rs and mod.rs are their
directory's module). A file depends on the modules it names in `use` paths
and in inline paths (`super::x::`, `crate::x::`, `self::x::`), resolved to the
deepest module file that exists; a name a lib.rs or mod.rs re-exports
(`pub use a::B`) resolves to the module that defines it. Child modules are
not dependencies of their parent (`mod x;` only declares them). Prints every
cycle found (strongly connected components of two files or more) and exits 1.
usage: scripts/check-module-cycles.py [crates/NAME ...]
"""
import re
import sys
from pathlib import Path

PATH = re.compile(r"\b(crate|super|self)((?:::[A-Za-z_][A-Za-z0-9_]*)+)")
USE_BLOCK = re.compile(r"\buse\s+((?:crate|super|self)::[^;]*);", re.S)


def modules(src):
    mods = {}
    for f in sorted(src.rglob("*.rs")):
        rel = f.relative_to(src).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] in ("lib", "mod", "main"):
            parts = parts[:-1]
        mods[tuple(parts)] = f
    return mods


def expand_use(text):
    """`a::{b, c::d}` -> ['a::b', 'a::c::d'] (one level of braces is enough here)."""
    out = []
    def rec(prefix, body):
        depth, cur, items = 0, "", []
        for ch in body:
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
            if ch == "," and depth == 0:
                items.append(cur); cur = ""
            else:
                cur += ch
        items.append(cur)
        for it in items:
            it = " ".join(it.split())
            if not it:
                continue
            if "{" in it:
                head, rest = it.split("{", 1)
                rec(prefix + head.strip().rstrip(":").rstrip(":") + "::", rest.rsplit("}", 1)[0])
            else:
                out.append(prefix + it.split(" as ")[0].strip())
    if "{" in text:
        head, rest = text.split("{", 1)
        rec(head.strip().rstrip(":").rstrip(":") + "::", rest.rsplit("}", 1)[0])
    else:
        out.append(" ".join(text.split()).split(" as ")[0])
    return out


def resolve(mod, path, mods, reexports):
    segs = path.split("::")
    base = list(mod)
    # a file's own module: `super` of a leaf file is its directory module
    i = 0
    if segs[0] == "crate":
        base, i = [], 1
    elif segs[0] == "self":
        i = 1
    while i < len(segs) and segs[i] == "super":
        base = base[:-1]
        i += 1
    rest = segs[i:]
    best = tuple(base)
    for k in range(len(rest)):
        cand = tuple(base + rest[: k + 1])
        if cand in mods:
            best = cand
        else:
            # a name re-exported by that module
            name = rest[k]
            target = reexports.get((best, name))
            if target is not None:
                best = target
            break
    return best


def check(crate):
    src = crate / "src"
    mods = modules(src)
    texts = {m: re.sub(r"//[^\n]*", "", f.read_text()) for m, f in mods.items()}
    # strip #[cfg(test)] mod tests { ... } blocks crudely: tests may use anything
    for m, t in texts.items():
        k = t.find("#[cfg(test)]\nmod tests")
        if k >= 0:
            texts[m] = t[:k]
    reexports = {}
    for m, t in texts.items():
        for u in re.finditer(r"\bpub(?:\([^)]*\))?\s+use\s+([^;]*);", t):
            for p in expand_use(u.group(1)):
                segs = p.split("::")
                if segs[0] in ("crate", "super", "self") or tuple(list(m) + segs[:1]) in mods:
                    full = p if segs[0] in ("crate", "super", "self") else "self::" + p
                    reexports[(m, segs[-1])] = resolve(m, full, mods, {})
    edges = {m: set() for m in mods}
    for m, t in texts.items():
        paths = []
        for u in USE_BLOCK.finditer(t):
            paths += expand_use(u.group(1))
        for p in PATH.finditer(t):
            paths.append(p.group(1) + p.group(2))
        for p in paths:
            d = resolve(m, p, mods, reexports)
            # not a dependency: itself, its parents (declaring it), its children
            if d == m or m[: len(d)] == d or d[: len(m)] == m:
                continue
            edges[m].add(d)
    # Tarjan
    index, low, stack, on, sccs, n = {}, {}, [], set(), [], [0]
    def strong(v):
        index[v] = low[v] = n[0]; n[0] += 1; stack.append(v); on.add(v)
        for w in edges[v]:
            if w not in index:
                strong(w); low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop(); on.discard(w); comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                sccs.append(comp)
    sys.setrecursionlimit(10000)
    for v in mods:
        if v not in index:
            strong(v)
    for comp in sccs:
        names = sorted("::".join(c) or "(crate root)" for c in comp)
        print(f"{crate.name}: files that import each other in a circle: {', '.join(names)}")
    return not sccs


def main():
    root = Path(__file__).resolve().parent.parent
    crates = [Path(a) for a in sys.argv[1:]] or sorted(p.parent for p in (root / "crates").glob("*/Cargo.toml"))
    ok = all([check(c) for c in crates])
    print("module cycles: none" if ok else "module cycles found (above)")
    sys.exit(0 if ok else 1)


main()
